"""Writes BENCH_DIR/learning.md and learning.png from the sweeps tools/bench_learning.sh
ran: per benchmark and setting, mean +- std over the seeds (and the median) beside the
published figures."""
import csv
import json
import os
import statistics
import sys

bench = sys.argv[1]
# Published figures (at 5M frames for MinAtar: Young & Tian 2019, read off their curves).
MINATAR = {  # game: (DQN, AC(lambda))
    "breakout": (10, 17.5), "asterix": (17, 19), "freeway": (50, 47.5),
    "seaquest": (20, 15), "space_invaders": (43, 185)}
CLEANRL_CARTPOLE_FRAMES = 270000   # CleanRL PPO: frames to 475
CLEANRL_ACROBOT = -85  # CleanRL PPO (and A2C): about -85 at 0.5M frames


def runs(sweep):
    path = os.path.join(bench, sweep, "sweep.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        try:
            with open(os.path.join(r["run_dir"], "summary.json")) as s:
                r["summary"] = json.load(s)
        except (OSError, ValueError):
            r["summary"] = {}
    return rows


def num(x):
    try:
        v = float(x)
        return None if v != v else v
    except (TypeError, ValueError):
        return None


def stats(values):
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):.1f} +- {sd:.1f} (median {statistics.median(v):.1f}, n={len(v)})"


def reached_target(rows):
    """(stats of the frames to the target over the seeds that reached it, how many did)."""
    ftt = [num(r["summary"].get("frames_to_target")) for r in rows]
    hit = [x for x in ftt if x and x > 0]
    return stats(hit), len(hit)


def curve(run_dir):
    xs, ys = [], []
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as m:
            for line in m:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("returns_counted", 0) >= 100:
                    xs.append(row["env_frames"])
                    ys.append(row["mean_return_100"])
    except OSError:
        pass
    return xs, ys


lines = [f"# Learning benchmarks ({bench})", "",
         "100-episode mean return at the end of each run; mean +- std over seeds.", ""]
curves = []
lines += ["## MinAtar (C++ games, 5M frames in the paper)", "",
          "| game | replay fraction | final | best | DQN (paper) | AC(lambda) (paper) | frames/s |",
          "|---|---|---|---|---|---|---|"]
for game, (dqn, ac) in MINATAR.items():
    rows = runs(f"minatar-{game}")
    for frac in sorted({r.get("learner.replay.fraction", "0") for r in rows}):
        sel = [r for r in rows if r.get("learner.replay.fraction", "0") == frac]
        lines.append(f"| {game} | {frac} | {stats([num(r['final_return_100']) for r in sel])} | "
                     f"{stats([num(r['best_return_100']) for r in sel])} | {dqn} | {ac} | "
                     f"{stats([num(r['frames_per_s']) for r in sel])} |")
        for r in sel:
            curves.append((f"minatar {game}", f"replay {frac}", curve(r["run_dir"]), [dqn, ac]))
rows = runs("cartpole")
if rows:
    frames, reached = reached_target(rows)
    lines += ["", "## CartPole-v1", "",
              f"Frames to a 100-episode mean of 475: {frames}, "
              f"reached in {reached} of {len(rows)} seeds; CleanRL PPO: {CLEANRL_CARTPOLE_FRAMES}."]
    for r in rows:
        curves.append(("cartpole", "shipped", curve(r["run_dir"]), [475]))
rows = runs("acrobot")
if rows:
    frames, reached = reached_target(rows)
    lines += ["", "## Acrobot-v1", "",
              f"Final (0.5M frames): {stats([num(r['final_return_100']) for r in rows])}; frames to -100: "
              f"{frames}, reached in {reached} of {len(rows)} seeds; "
              f"CleanRL PPO: about {CLEANRL_ACROBOT} at 0.5M."]
    for r in rows:
        curves.append(("acrobot", "shipped", curve(r["run_dir"]), [CLEANRL_ACROBOT]))
# Atari, the standard protocol (sticky actions 0.25, full episodes): each development
# game's threshold, its published anchor and the frames that anchor counts.
ATARI = {  # game: (threshold, random, human, anchor)
    "Pong": (18, -20.7, 14.6, "CleanRL PPO about 18 at 13M frames (NoFrameskip-v4: no sticky actions)"),
    "Breakout": (40, 1.7, 30.5, "PPO 275-430 at 40M frames (10M agent steps)"),
    "SpaceInvaders": (500, 148.0, 1668.7, ""),
    "Seaquest": (None, 68.4, 42054.7, ""),
}
for game, (target, rnd, human, anchor) in ATARI.items():
    rows = runs(f"atari-{game}")
    if not rows:
        continue
    lines += ["", f"## Atari {game} (preset and recipe, sticky actions 0.25)", "",
              f"| seed | final | HNS % | best | frames | frames to {target} | minutes to {target} | frames/s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s_ = r["summary"]
        ftt, sec = s_.get("frames_to_target", -1), s_.get("seconds_to_target", -1)
        final = num(r["final_return_100"])
        hns = f"{100 * (final - rnd) / (human - rnd):.1f}" if final is not None else "-"
        reached = target is not None and ftt and ftt > 0
        lines.append(f"| {r.get('seed', '')} | {r['final_return_100']} | {hns} | {r['best_return_100']} | "
                     f"{r['env_frames']} | {ftt if reached else ('not reached' if target else '-')} | "
                     f"{f'{sec / 60:.0f}' if reached else '-'} | {r.get('frames_per_s', '')} |")
        curves.append((f"atari {game}", "recipe", curve(r["run_dir"]), [target] if target else []))
    if target is not None:
        frames, reached = reached_target(rows)
        lines += ["", f"Frames to {target}: {frames}, reached in {reached} of {len(rows)} seeds."]
    if anchor:
        lines += ["", f"Anchor: {anchor}."]
for env, target in (("acrobot", -120), ("cartpole", 475)):
    rows = runs(f"defaults-{env}")
    if not rows:
        continue
    lines += ["", f"## {env}, a config of only the env (1M frames): PopArt off and on", "",
              f"| learner.popart | final | frames to {target} | reached |", "|---|---|---|---|"]
    for setting in ("false", "true"):
        sel = [r for r in rows if r.get("learner.popart") == setting]
        if sel:
            frames, reached = reached_target(sel)
            lines.append(f"| {setting} | {stats([num(r['final_return_100']) for r in sel])} | {frames} | "
                         f"{reached} of {len(sel)} |")
            for r in sel:
                curves.append((f"{env} (env only)", f"popart {setting}", curve(r["run_dir"]), [target]))
with open(os.path.join(bench, "learning.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("bench_learning_report: no matplotlib, no learning.png")
    sys.exit(0)
panels = sorted({c[0] for c in curves})
if panels:
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        labelled = set()
        for name, label, (xs, ys), refs in curves:
            if name != panel:
                continue
            ax.plot(xs, ys, label=None if label in labelled else label, alpha=0.8)
            labelled.add(label)
            for ref in refs:
                ax.axhline(ref, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(panel)
        ax.set_xlabel("env frames")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("mean return (100 episodes)")
    fig.tight_layout()
    fig.savefig(os.path.join(bench, "learning.png"), dpi=90)
