#!/usr/bin/env bash
# Learning benchmarks (long; not CI): return per env frame against the published agents.
#   - MinAtar's five games (the C++ games, configs/minatar/<game>.textproto), BENCH_FRAMES
#     frames each (5M), BENCH_SEEDS seeds (3), with replay off and with
#     learner.replay.fraction BENCH_REPLAY (0.5);
#   - CartPole (configs/cartpole.textproto): frames to 475, 5 seeds;
#   - Acrobot (configs/acrobot.textproto): 0.5M frames, frames to -100, 3 seeds;
#   - Atari (`atari`): the development games ATARI_GAMES (Pong, Breakout, SpaceInvaders,
#     Seaquest), each configs/atari_breakout.textproto with only env.atari.game changed
#     (the preset and the recipe), ATARI_FRAMES (10M) frames, ATARI_SEEDS (3) seeds, frames
#     and wall-clock seconds to each game's threshold (Pong 18, Breakout 40, SpaceInvaders
#     500; Seaquest none);
#   - Atari-5 (`atari5`): `stampede suite configs/atari5.textproto` to ATARI5_FRAMES (5M)
#     frames per game, and Phoenix alone at the same frames per game;
#   - defaults: configs of only an env (Acrobot-v1 to -120, CartPole-v1 to 475, 1M frames,
#     3 seeds) with learner.popart off and on (the library's default now).
# Each part is a `stampede sweep` under BENCH_DIR (runs/bench-learning-<time>); then
# tools/bench_learning_report.py writes BENCH_DIR/learning.md (mean +- std beside the
# MinAtar paper's DQN and AC(lambda) at 5M frames, CleanRL's PPO on CartPole and Pong) and
# learning.png (the curves, the published figures as reference lines).
#   tools/bench_learning.sh [minatar] [cartpole] [acrobot] [atari] [atari5] [defaults]
# (default: all). BENCH_GAMES limits MinAtar to some games ("breakout seaquest"). About 20
# hours here, the Atari games' 12 runs of 10M frames about 6 of them, Atari-5 2.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_DIR=${BENCH_DIR:-runs/bench-learning-$(date +%Y%m%d-%H%M%S)}
BENCH_FRAMES=${BENCH_FRAMES:-5000000}
BENCH_SEEDS=${BENCH_SEEDS:-3}
BENCH_REPLAY=${BENCH_REPLAY:-0.5}
BENCH_GAMES=${BENCH_GAMES:-breakout asterix freeway seaquest space_invaders}
ATARI_GAMES=${ATARI_GAMES:-Pong Breakout SpaceInvaders Seaquest}
ATARI_FRAMES=${ATARI_FRAMES:-10000000}
ATARI_SEEDS=${ATARI_SEEDS:-3}
ATARI5_FRAMES=${ATARI5_FRAMES:-5000000}
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(minatar cartpole acrobot atari atari5 defaults)
bin=build/tools/stampede
[ -x "$bin" ] || tools/build.sh
mkdir -p "$BENCH_DIR"
echo "bench_learning: ${parts[*]} into $BENCH_DIR"
for part in "${parts[@]}"; do
  case "$part" in
    minatar)
      for g in $BENCH_GAMES; do
        "$bin" sweep "configs/minatar/$g.textproto" --grid "learner.replay.fraction=0,$BENCH_REPLAY" \
          --seeds "$BENCH_SEEDS" --set "stop.total_env_frames=$BENCH_FRAMES" --dir "$BENCH_DIR/minatar-$g" || true
      done ;;
    cartpole)
      "$bin" sweep configs/cartpole.textproto --seeds 5 --set stop.total_env_frames=1000000 \
        --dir "$BENCH_DIR/cartpole" || true ;;
    acrobot)
      "$bin" sweep configs/acrobot.textproto --seeds 3 --target -100 --dir "$BENCH_DIR/acrobot" || true ;;
    atari)
      for g in $ATARI_GAMES; do
        case "$g" in Pong) t=(--target 18) ;; Breakout) t=(--target 40) ;; SpaceInvaders) t=(--target 500) ;; *) t=() ;; esac
        "$bin" sweep configs/atari_breakout.textproto --seeds "$ATARI_SEEDS" --set "env.atari.game=$g" \
          --set "stop.total_env_frames=$ATARI_FRAMES" "${t[@]}" --dir "$BENCH_DIR/atari-$g" || true
      done ;;
    atari5)
      "$bin" suite configs/atari5.textproto --set "stop.total_env_frames=$((5 * ATARI5_FRAMES))" \
        --run-dir "$BENCH_DIR/atari5" || true
      "$bin" run configs/atari_breakout.textproto --set env.atari.game=Phoenix --set "stop.total_env_frames=$ATARI5_FRAMES" \
        --run-dir "$BENCH_DIR/atari5-phoenix-alone" || true
      "$bin" report "$BENCH_DIR/atari5-phoenix-alone" || true ;;
    defaults)
      mkdir -p "$BENCH_DIR/configs"
      printf 'env { gym_id: "Acrobot-v1" }\nstop { total_env_frames: 1000000 target_return: -120 }\n' \
        > "$BENCH_DIR/configs/acrobot_only.textproto"
      printf 'env { name: "CartPole-v1" }\nstop { total_env_frames: 1000000 target_return: 475 }\n' \
        > "$BENCH_DIR/configs/cartpole_only.textproto"
      for env in acrobot cartpole; do
        "$bin" sweep "$BENCH_DIR/configs/${env}_only.textproto" --grid learner.popart=false,true --seeds 3 \
          --dir "$BENCH_DIR/defaults-$env" || true
      done ;;
    *) echo "bench_learning: unknown part $part (minatar, cartpole, acrobot, atari, atari5, defaults)" >&2; exit 2 ;;
  esac
done
py=.venv/bin/python
[ -x "$py" ] || py=python3
"$py" tools/bench_learning_report.py "$BENCH_DIR"
