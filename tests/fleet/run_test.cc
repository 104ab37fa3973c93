// Fleet tests, one run at a time: a small fleet learns Catch, and what the coordinator
// does with its processes (restarts, Ctrl-C, preflight, lag bounds, traces).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/fleet/harness.h"

namespace fs = std::filesystem;
using namespace stampede::fleet;

TEST_CASE("fleet: 2 actors, 1 learner and 2 PS shards learn Catch", "[fleet]") {
  const std::string run_dir = FreshRunDir("catch");
  // With evaluation during training: an evaluator runs the newest policy on Catch envs of
  // its own every 100k frames. Rows every 0.5 s: the run lasts about 4 s, and with the
  // default 2 s a loaded CI machine once wrote a single row, at the budget, where the
  // linear schedule has brought the learning rate (and so the update) to zero.
  // 1.5M frames: over ipc the shipped 500k took 1.3 s, and the evaluator finished one round.
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set", "evaluation.interval_frames=100000",
                  "--set", "evaluation.episodes=20", "--set", "coordinator.progress_interval_s=0.5", "--set",
                  "stop.total_env_frames=1500000"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(110));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["mean_return_100"].get<double>() >= 0.9);
  CHECK(summary["env_frames"].get<long long>() >= 500000);
  CHECK(summary["actor_restarts"].get<int>() == 0);
  const auto rows = Metrics(run_dir);
  const auto spawned = Spawned(rows);
  std::map<std::string, int> roles;
  for (const auto& [pid, who] : spawned) {
    CHECK(pid != p.pid);
    ++roles[who.substr(0, who.find(' '))];
  }
  CHECK(roles["actor"] == 2);
  CHECK(roles["learner"] == 1);
  CHECK(roles["ps"] == 2);
  CHECK(roles["evaluator"] == 1);
  // On one machine the roles listen on ipc:// sockets in a private directory that goes
  // with the run; every process got in (each ZAP handler found its identity from its
  // credentials).
  const std::string resolved = Slurp(run_dir + "/config.textproto");
  CHECK_THAT(resolved, Catch::Contains("ps: \"ipc:///") && Catch::Contains("coordinator: \"ipc:///") &&
                           Catch::Contains("learner: \"ipc:///") && !Catch::Contains("tcp://"));
  if (const size_t at = resolved.find("ps: \"ipc://"); at != std::string::npos) {
    const std::string path = resolved.substr(at + 11, resolved.find('"', at + 11) - at - 11);
    INFO(path);
    CHECK_FALSE(fs::exists(fs::path(path).parent_path()));
  }
  CHECK((!summary.contains("refused") || summary["refused"].empty()));
  // Evaluation: a round per 100k frames and a final one, in order, each of 20 episodes of
  // the newest parameters; the last one scores what a trained Catch policy scores. At
  // 150k frames/s rounds come due every 0.7 s: one asked for while the evaluator still had
  // the one before is folded into the next (it runs the newest request), so rounds only
  // increase.
  std::vector<json> evals;
  for (const auto& r : rows) {
    if (r.value("event", "") == "evaluation") evals.push_back(r);
  }
  REQUIRE(evals.size() >= 2);
  for (size_t i = 0; i < evals.size(); ++i) {
    INFO(evals[i].dump());
    if (i > 0) CHECK(evals[i]["round"].get<long long>() > evals[i - 1]["round"].get<long long>());
    CHECK(evals[i]["episodes"] == 20);
    CHECK(evals[i]["tasks"]["Catch"]["episodes"] == 20);
    CHECK(evals[i]["eval_return_mean"].get<double>() >= -1.0);
    CHECK(evals[i]["eval_return_mean"].get<double>() <= 1.0);
    if (i > 0) CHECK(evals[i]["env_frames"].get<long long>() > evals[i - 1]["env_frames"].get<long long>());
    if (i > 0) CHECK(evals[i]["policy_version"].get<long long>() >= evals[i - 1]["policy_version"].get<long long>());
  }
  // The final round: on the parameters at the budget.
  CHECK(evals.back()["env_frames"].get<long long>() >= 500000);
  CHECK(evals.back()["eval_return_mean"].get<double>() >= 0.8);
  CHECK(summary["evaluation"]["round"] == evals.back()["round"]);
  // Every row carries wall time, frames and learner step.
  int progress_rows = 0;
  for (const auto& r : rows) {
    CHECK(r.contains("wall_time"));
    CHECK(r.contains("env_frames"));
    CHECK(r.contains("learner_step"));
    progress_rows += r.contains("mean_return_100") && !r.contains("event");
  }
  CHECK(progress_rows >= 1);
  // The learning diagnostics, in every progress row once the learner trains: finite,
  // in their ranges, and saying that the value learns Catch.
  double best_ev = -1e9, best_update = 0;
  for (const auto& r : rows) {
    if (r.contains("event") || !r.contains("learner_step") || r["learner_step"].get<long long>() == 0) continue;
    for (const char* key : {"explained_variance", "approx_kl", "rho_clip_fraction", "update_to_param_ratio",
                            "grad_clip_factor"}) {
      INFO(key << " in " << r.dump());
      REQUIRE(r.contains(key));
      CHECK(std::isfinite(r[key].get<double>()));
    }
    CHECK(r["explained_variance"].get<double>() <= 1.0);
    CHECK(r["approx_kl"].get<double>() >= 0.0);
    CHECK(r["rho_clip_fraction"].get<double>() >= 0.0);
    CHECK(r["rho_clip_fraction"].get<double>() <= 1.0);
    CHECK(r["grad_clip_factor"].get<double>() > 0.0);
    CHECK(r["grad_clip_factor"].get<double>() <= 1.0);
    best_ev = std::max(best_ev, r["explained_variance"].get<double>());
    best_update = std::max(best_update, r["update_to_param_ratio"].get<double>());
  }
  // The value function learns: its explained variance rises well above a fresh network's
  // (about 0 or below). The run stops at its target about a second in, so a row or two
  // show it, and under load the best of them read 0.29 once; 0.15 still says it learns.
  CHECK(best_ev > 0.15);
  CHECK(best_update > 0.0);
  // Per actor, in every progress row after the first trajectories and in the summary:
  // its version, heard-of version and lag, none frozen, none reset, nothing stale.
  const json& last = [&]() -> const json& {
    for (auto r = rows.rbegin(); r != rows.rend(); ++r) {
      if (r->contains("actors") && !r->contains("event")) return *r;
    }
    return rows.back();
  }();
  REQUIRE(last.contains("actors"));
  CHECK(last["actors"].size() == 2);
  for (const auto& [index, a] : summary["actors"].items()) {
    INFO("actor " << index << ": " << a.dump());
    CHECK(a["policy_version"].get<long long>() > 0);
    CHECK(a["lag"].get<long long>() >= 0);
    // The largest lag is one unlucky moment: an actor descheduled for 0.15 s on a loaded
    // machine while the learner steps 1500 times a second comes back 226 versions behind
    // (seen in CI). Only the stale bound that the actor watch enforces bounds it.
    CHECK(a["lag_max"].get<long long>() < 1000);
    // A reset is the fetcher starting afresh after hearing of versions 50 newer than it
    // could assemble (actors.max_policy_lag): on a loaded machine, with the learner taking
    // 1500 steps a second, a descheduled actor does that now and then (3 and 14 in runs
    // beside a CI build, before and after this check was written). One per ten
    // trajectories would be a fetcher that keeps failing.
    CHECK(a["fetcher_resets"].get<long long>() * 10 <= a["trajectories"].get<long long>());
    CHECK(a["trajectories"].get<long long>() > 100);
    // Its parameters follow what its fetcher heard of (nothing frozen) ...
    CHECK(a["newest_heard_version"].get<long long>() - a["policy_version"].get<long long>() < 100);
    // ... and stay within the stale bound of the learner's last step. The learner goes on
    // training the queued trajectories after the actors stop, so this gap grows with the
    // queue and the machine's load (117 once on a loaded CI machine): only the bound that
    // the actor watch enforces is a property of the run.
    CHECK(summary["learner_steps"].get<long long>() - a["policy_version"].get<long long>() < 1000);
  }
  CHECK(summary["actors"].size() == 2);
  // The typical lag is small: per actor, the median over progress rows of the rows' mean
  // lag on arrival stays well under the stale bound (about 5-10 here, loaded or not).
  for (const std::string index : {"0", "1"}) {
    std::vector<double> means;
    for (const auto& r : rows) {
      if (r.contains("actors") && !r.contains("event") && r["actors"].contains(index) &&
          r["actors"][index].contains("lag_mean") && r["actors"][index]["trajectories"].get<long long>() > 0) {
        means.push_back(r["actors"][index]["lag_mean"].get<double>());
      }
    }
    INFO("actor " << index << ": " << means.size() << " rows");
    REQUIRE(!means.empty());
    std::nth_element(means.begin(), means.begin() + means.size() / 2, means.end());
    CHECK(means[means.size() / 2] < 100);
  }
  CHECK(last["worst_actor_lag"].get<long long>() >= 0);
  CHECK(last.value("dropped_trajectories", 0) == 0);
  CHECK_THAT(Slurp(p.output_path), Catch::Contains("(worst actor "));
  for (const auto& r : rows) CHECK(r.value("event", "") != "actor_params_stale");
  CHECK(fs::exists(run_dir + "/checkpoint.bin"));
  CheckNoneLeft(spawned);

  // The trained policy, evaluated greedily without learning, catches at least 9 in 10.
  Proc eval = Start({"eval", run_dir + "/checkpoint.bin", "--greedy", "--episodes", "100"}, run_dir + ".eval.out");
  CHECK(Wait(eval, std::chrono::seconds(60)) == 0);
  const std::string evaluated = Slurp(eval.output_path);
  INFO(evaluated);
  const size_t at = evaluated.find("\nCatch ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(evaluated.substr(at + 7)) >= 0.9);
  CHECK_THAT(evaluated, Catch::Contains("(100 episodes)"));
  // Export: every tensor of the layout in an .npz (numpy reads it: tests/suite_test.cc).
  Proc exported = Start({"export", run_dir + "/checkpoint.bin", run_dir + "/net.npz"}, run_dir + ".export.out");
  CHECK(Wait(exported, std::chrono::seconds(20)) == 0);
  CHECK(fs::file_size(run_dir + "/net.npz") > 4 * 50 * 64);
  // TensorBoard events next to the metrics.
  bool events = false;
  for (const auto& e : fs::directory_iterator(run_dir + "/tb")) events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  CHECK(events);

  // The same run directory is not reused: its metrics would mix two runs.
  Proc again = Start({"run", "configs/catch.textproto", "--run-dir", run_dir}, run_dir + ".again.out");
  CHECK(Wait(again, std::chrono::seconds(20)) == 2);
  CHECK_THAT(Slurp(again.output_path), Catch::Contains("already holds a run"));
}

TEST_CASE("fleet: tight policy-lag bounds drop stale trajectories and reset fetchers, counted and said once", "[fleet]") {
  // Bounds that a healthy run here crosses all the time (learner 2, actor 1): the learner
  // drops what is older by reason "stale", each actor resets its fetcher and says so
  // once, and the run still learns and ends well.
  const std::string run_dir = FreshRunDir("lag_bounds");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set", "learner.max_policy_lag=2", "--set",
                  "actors.max_policy_lag=1", "--set", "stop.total_env_frames=300000"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(110));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["mean_return_100"].get<double>() >= 0.8);
  int64_t stale = 0;
  std::set<int> reset_events;
  for (const auto& r : Metrics(run_dir)) {
    if (r.contains("dropped_by_reason")) stale = r["dropped_by_reason"].value("stale", int64_t(0));
    if (r.value("event", "") == "actor_fetcher_reset") reset_events.insert(r["actor"].get<int>());
  }
  CHECK(stale > 0);
  CHECK(reset_events == std::set<int>{0, 1});  // one event per actor, from the coordinator
  for (int a = 0; a < 2; ++a) {
    const json& view = summary["actors"][std::to_string(a)];
    INFO("actor " << a << ": " << view.dump());
    CHECK(view["fetcher_resets"].get<long long>() > 0);
    const std::string log = Slurp(run_dir + "/logs/actor-" + std::to_string(a) + ".log");
    size_t said = 0;
    for (size_t at = log.find("fetcher reset"); at != std::string::npos; at = log.find("fetcher reset", at + 1)) ++said;
    CHECK(said == 1);
    CHECK_THAT(log, Catch::Contains("actors.max_policy_lag = 1"));
  }
  CHECK_THAT(Slurp(run_dir + "/logs/learner-0.log"), Catch::Contains("(stale)") && Catch::Contains("learner.max_policy_lag = 2"));
}

TEST_CASE("fleet: one agent learns Catch and CartPole together, each past its own target", "[fleet][suite]") {
  const std::string run_dir = FreshRunDir("suite");
  Proc p = Start({"suite", "configs/catch_cartpole.textproto", "--run-dir", run_dir}, run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(150));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  // Exit 0, or 1 where only the curves could not be drawn (no venv here).
  REQUIRE((code == 0 || (code == 1 && out.find("no curves") != std::string::npos)));
  CHECK_THAT(out, Catch::Contains("task catch: mean return(100) reached its target 0.8 at"));
  CHECK_THAT(out, Catch::Contains("task cartpole: mean return(100) reached its target 200 at"));
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  INFO(summary.dump(2));
  CHECK(summary["stop_reason"] == "target return reached");
  CHECK(summary["tasks"]["catch"]["frames_to_target"].get<long long>() > 0);
  CHECK(summary["tasks"]["cartpole"]["frames_to_target"].get<long long>() > 0);
  CHECK(summary["tasks"]["catch"]["episodes"].get<long long>() > 100);
  CHECK(summary["tasks"]["cartpole"]["episodes"].get<long long>() > 100);
  CHECK(summary.contains("mean_normalised_score"));
  CHECK_FALSE(summary.contains("mean_return_100"));  // a mix of scales
  // Per-task rows in metrics.jsonl; the learner dropped nothing (an action outside a
  // task's own set would be dropped as out_of_range).
  int rows_with_tasks = 0;
  for (const auto& r : Metrics(run_dir)) {
    if (r.contains("event")) continue;
    CHECK(r["dropped_trajectories"].get<long long>() == 0);
    if (!r.contains("tasks") || !r["tasks"].contains("catch") || !r["tasks"].contains("cartpole")) continue;
    ++rows_with_tasks;
    for (const char* t : {"catch", "cartpole"}) {
      for (const char* field : {"mean_return_100", "episodes", "env_frames", "policy_lag_mean", "popart_scale"}) {
        CHECK(r["tasks"][t].contains(field));
      }
    }
  }
  CHECK(rows_with_tasks >= 1);
  // Each task reached its own target (the learner's window, counted per task; progress
  // rows are 2 s apart and may miss the moment).
  bool catch_reached = false, cartpole_reached = false;
  for (const auto& r : Metrics(run_dir)) {
    if (r.value("event", "") != "task_target_reached") continue;
    catch_reached = catch_reached || r["task"] == "catch";
    cartpole_reached = cartpole_reached || r["task"] == "cartpole";
  }
  CHECK(catch_reached);
  CHECK(cartpole_reached);
  CHECK(fs::exists(run_dir + "/report.md"));
  CHECK(fs::exists(run_dir + "/report.csv"));
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: --trace writes one Perfetto timeline with every process's spans", "[fleet][trace]") {
  const std::string run_dir = FreshRunDir("trace");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--trace", "--set",
                  "stop.total_env_frames=150000"},
                 run_dir + ".out");
  REQUIRE(Wait(p, std::chrono::seconds(60)) == 0);
  const json trace = json::parse(Slurp(run_dir + "/trace.json"));  // one JSON array
  REQUIRE(trace.is_array());
  std::map<int, std::string> process;  // pid -> "actor 0"
  std::map<std::string, std::map<std::string, int>> spans;  // role -> name -> count
  std::map<std::pair<int, long>, std::vector<std::pair<long long, long long>>> unrolls;  // (pid, tid) -> [start, end]
  for (const auto& e : trace) {
    if (e["ph"] == "M") process[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  CHECK(process.size() == 5);
  std::vector<json> infers;
  for (const auto& e : trace) {
    if (e["ph"] != "X") continue;
    REQUIRE(process.count(e["pid"].get<int>()) == 1);
    const std::string who = process[e["pid"].get<int>()];
    CHECK(e["dur"].get<long long>() >= 0);
    ++spans[who.substr(0, who.find(' '))][e["name"].get<std::string>()];
    const auto key = std::make_pair(e["pid"].get<int>(), e["tid"].get<long>());
    const long long ts = e["ts"].get<long long>(), end = ts + e["dur"].get<long long>();
    if (e["name"] == "unroll") unrolls[key].push_back({ts, end});
    if (e["name"] == "infer") infers.push_back(e);
  }
  for (const char* name : {"unroll", "infer", "env_step", "send", "fetch_params"}) CHECK(spans["actor"][name] > 0);
  for (const char* name : {"receive", "assemble", "forward", "vtrace", "backward", "apply", "publish"}) {
    CHECK(spans["learner"][name] > 0);
  }
  // One forward, V-trace, backward and apply per learner step.
  CHECK(spans["learner"]["forward"] == spans["learner"]["backward"]);
  CHECK(spans["learner"]["backward"] == spans["learner"]["apply"]);
  CHECK(spans["ps"]["get"] > 0);
  CHECK(spans["ps"]["put"] > 0);
  // Every inference step lies inside an unroll of the same thread.
  int nested = 0;
  for (const auto& e : infers) {
    const auto& list = unrolls[{e["pid"].get<int>(), e["tid"].get<long>()}];
    const long long ts = e["ts"].get<long long>(), end = ts + e["dur"].get<long long>();
    for (const auto& [a, b] : list) {
      if (a <= ts && end <= b) {
        ++nested;
        break;
      }
    }
  }
  CHECK(nested == int(infers.size()));
}

TEST_CASE("fleet: `stampede help` lists the subcommands, and an unknown one says which exist", "[fleet]") {
  const std::string dir = FreshRunDir("help");
  Proc help = Start({"help"}, dir + ".help.out");
  CHECK(Wait(help, std::chrono::seconds(10)) == 0);
  const std::string listed = Slurp(dir + ".help.out");
  for (const char* sub : {"run", "suite", "report", "eval", "export", "ps-plan", "spec", "config", "keys", "scale", "actor", "learner", "ps", "bench"}) {
    CHECK_THAT(listed, Catch::Contains(std::string("  ") + sub + " "));
  }
  // ps-plan: the CartPole MLP's 64x64 weight alone on one shard, the rest on the other.
  Proc plan = Start({"ps-plan", "configs/cartpole.textproto"}, dir + ".plan.out");
  CHECK(Wait(plan, std::chrono::seconds(20)) == 0);
  const std::string planned = Slurp(dir + ".plan.out");
  CHECK_THAT(planned, Catch::Contains("torso/1/w                        -> ps 0  [320, 4416)  16384 bytes"));
  CHECK_THAT(planned, Catch::Contains("ps 1: 2316 bytes in 7 ranges"));
  CHECK_THAT(planned, Catch::Contains("imbalance (max / mean bytes per shard): 1.752"));
  Proc bad = Start({"trian", "configs/catch.textproto"}, dir + ".bad.out");
  CHECK(Wait(bad, std::chrono::seconds(10)) == 2);
  CHECK_THAT(Slurp(dir + ".bad.out"), Catch::Contains("unknown subcommand \"trian\"") && Catch::Contains("  suite "));
}

TEST_CASE("fleet: `stampede bench --copies 2` times the parts in two processes at once and prints the limit they imply", "[fleet]") {
  const std::string dir = FreshRunDir("bench_copies");
  // The figure on a RESULT line after `key=`, or -1.
  auto result = [](const std::string& out, const std::string& key) {
    const size_t at = out.find("RESULT parts_limit_frames_per_s=");
    if (at == std::string::npos) return -1.0;
    const size_t k = out.find(key + "=", at);
    return k == std::string::npos ? -1.0 : std::atof(out.c_str() + k + key.size() + 1);
  };
  for (const int copies : {1, 2}) {
    const std::string out_path = dir + ".copies" + std::to_string(copies) + ".out";
    Proc bench = Start({"bench", "--config", "configs/catch.textproto", "--seconds", "0.3", "--fleet-frames", "0",
                        "--copies", std::to_string(copies)},
                       out_path);
    REQUIRE(Wait(bench, std::chrono::seconds(60)) == 0);
    const std::string out = Slurp(out_path);
    INFO(out);
    // Only the first process prints: one figure per part, one RESULT line.
    size_t results = 0;
    for (size_t at = out.find("RESULT "); at != std::string::npos; at = out.find("RESULT ", at + 1)) ++results;
    CHECK(results == 1);
    for (const char* part : {"  env steps/s", "  actor frames/s", "  learner steps/s"}) {
      const size_t line = out.find(part);
      REQUIRE(line != std::string::npos);
      const std::string text = out.substr(line, out.find('\n', line) - line);
      CHECK((text.find("[mean of 2 processes at once]") != std::string::npos) == (copies == 2));
    }
    CHECK_THAT(out, Catch::Contains(copies == 2 ? "parts measured with 2 processes at once" : "parts measured alone"));
    // One process with the venv: numpy's single-thread sgemm beside the learner step, and
    // the step's share of it from the two printed figures.
    const std::string numpy = "  numpy's single-thread 512^3 sgemm (the venv's BLAS, one thread): ";
    const char* configured = std::getenv("STAMPEDE_VENV");
    const std::string venv = configured && *configured ? configured : std::string(STAMPEDE_SOURCE_DIR) + "/.venv";
    const bool has_numpy = std::system((venv + "/bin/python -c 'import numpy' > /dev/null 2>&1").c_str()) == 0;
    if (copies == 1 && has_numpy) {
      const size_t at = out.find(numpy);
      REQUIRE(at != std::string::npos);
      const double np_gflops = std::atof(out.c_str() + at + numpy.size());
      const size_t share_at = out.find("the learner step at ", at);
      REQUIRE(share_at != std::string::npos);
      const double share = std::atof(out.c_str() + share_at + 20);
      const size_t step_at = out.find("GFLOP/s; a 512^3 GEMM");
      REQUIRE(step_at != std::string::npos);
      const double step_gflops = std::atof(out.c_str() + out.rfind('~', step_at) + 1);
      CHECK(np_gflops > 1);
      CHECK(std::abs(share - 100 * step_gflops / np_gflops) <= 1.0);
    } else {
      CHECK(out.find(numpy) == std::string::npos);
    }
    // The limit from the parts, computed here: Catch has 2 actors, 1 learner, no replay.
    const double actor = result(out, "actor_frames_per_s"), learner = result(out, "learner_fresh_frames_per_s");
    REQUIRE(actor > 0);
    REQUIRE(learner > 0);
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double expected = std::min({cores / (1 / actor + 1 / learner), 2 * actor, learner});
    CHECK(std::abs(result(out, "parts_limit_frames_per_s") - expected) <= 1.0 + 1e-6 * expected);
  }
}

TEST_CASE("fleet: `stampede bench --fleet-frames` prints each fleet run's share of the parts' limit", "[fleet]") {
  const std::string dir = FreshRunDir("bench_fleet");
  const std::string out_path = dir + ".out";
  Proc bench = Start({"bench", "--config", "configs/catch.textproto", "--seconds", "0.3", "--fleet-frames", "200000",
                      "--set", "coordinator.progress_interval_s=0.2"},
                     out_path);
  REQUIRE(Wait(bench, std::chrono::seconds(120)) == 0);
  const std::string out = Slurp(out_path);
  INFO(out);
  const size_t limit_at = out.find("RESULT parts_limit_frames_per_s=");
  REQUIRE(limit_at != std::string::npos);
  const double limit = std::atof(out.c_str() + limit_at + 32);
  REQUIRE(limit > 0);
  // One machine, ipc:// (the default): no cipher either way, so the runs are named as the
  // same fleet twice, not CURVE on and off.
  CHECK(out.find("CURVE cost") == std::string::npos);
  CHECK_THAT(out, Catch::Contains("the same fleet (no cipher runs over ipc://"));
  const std::string key = "RESULT fleet_frames_per_s=";
  const size_t at = out.find(key);
  REQUIRE(at != std::string::npos);
  double fps[2], share[2], steady[2];
  REQUIRE(std::sscanf(out.c_str() + at,
                      "RESULT fleet_frames_per_s=%lf,%lf fleet_share_of_limit=%lf,%lf fleet_steady_frames_per_s=%lf,%lf",
                      &fps[0], &fps[1], &share[0], &share[1], &steady[0], &steady[1]) == 6);
  // Each run's rate past its start-up, recomputed from its metrics rows: from the first row
  // at a fifth of its frames to its last.
  std::vector<std::string> dirs;
  const std::string dir_key = "  fleet run directory: ";
  for (size_t d = out.find(dir_key); d != std::string::npos; d = out.find(dir_key, d + 1)) {
    const size_t from = d + dir_key.size();
    std::string d_path = out.substr(from, out.find('\n', from) - from);
    if (!d_path.empty() && d_path[0] != '/') d_path = std::string(STAMPEDE_SOURCE_DIR) + "/" + d_path;  // the bench's cwd
    dirs.push_back(d_path);
  }
  REQUIRE(dirs.size() == 2);
  for (int run = 0; run < 2; ++run) {
    CHECK(fps[run] > 0);
    std::vector<std::pair<double, double>> rows;
    for (const json& row : Metrics(dirs[size_t(run)])) {
      if (row.contains("env_frames") && row.contains("elapsed_s") && !row.contains("event")) {
        rows.emplace_back(row["elapsed_s"].get<double>(), double(row["env_frames"].get<int64_t>()));
      }
    }
    REQUIRE(rows.size() >= 2);
    size_t from = 0;
    while (rows[from].second < 0.2 * rows.back().second) ++from;
    REQUIRE(rows.back().first > rows[from].first);
    const double expect = (rows.back().second - rows[from].second) / (rows.back().first - rows[from].first);
    CHECK(steady[run] > 0);
    CHECK(std::abs(steady[run] - expect) <= 0.5 + 1e-9 * expect);
    // The share is the run's frames/s over the printed limit (both printed rounded).
    CHECK(std::abs(share[run] - fps[run] / limit) <= 1e-3 + (0.5 / limit + 0.5 / fps[run]) * share[run]);
    const std::string line = "  fleet frames/s, run " + std::to_string(run + 1) + ", local transport ipc";
    const size_t l = out.find(line);
    REQUIRE(l != std::string::npos);
    const std::string text = out.substr(l, out.find('\n', l) - l);
    const size_t pct = text.find("% of the parts' limit");
    REQUIRE(pct != std::string::npos);
    const double printed = std::atof(text.c_str() + text.rfind(' ', pct) + 1);
    CHECK(std::abs(printed - 100 * share[run]) <= 0.1);
  }
  for (const std::string& d : dirs) std::filesystem::remove_all(d);  // the bench's runs/ entries
}

TEST_CASE("fleet: a killed actor is restarted while the run goes on", "[fleet]") {
  const std::string run_dir = FreshRunDir("restart");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set",
                  "stop.total_env_frames=2500000", "--set", "coordinator.progress_interval_s=0.2"},
                 run_dir + ".out");
  const int victim = PidOnceTraining(run_dir, "actor 0");
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  const int code = Wait(p, std::chrono::seconds(110));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const auto rows = Metrics(run_dir);
  int restarts = 0;
  int new_pid = -1;
  long long frames_at_restart = -1;
  for (const auto& r : rows) {
    if (r.value("event", "") == "actor_restart") {
      ++restarts;
      CHECK(r["actor"].get<int>() == 0);
      CHECK(r["old_pid"].get<int>() == victim);
      new_pid = r["new_pid"].get<int>();
      frames_at_restart = r["env_frames"].get<long long>();
    }
  }
  CHECK(restarts == 1);
  CHECK(new_pid != victim);
  CHECK(Spawned(rows)[new_pid] == "actor 0");
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  // The run went on past the restart to its full budget, and kept learning.
  CHECK(summary["env_frames"].get<long long>() >= 2500000);
  CHECK(frames_at_restart < 2500000);
  CHECK(summary["actor_restarts"].get<int>() == 1);
  CHECK(summary["mean_return_100"].get<double>() >= 0.9);
  CheckNoneLeft(Spawned(rows));
}

TEST_CASE("fleet: every process's malloc asks for huge pages where the kernel gives them only on request", "[fleet]") {
  std::string mode;
  std::getline(std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled") >> std::ws, mode);
  if (mode.find("[madvise]") == std::string::npos || std::getenv("GLIBC_TUNABLES") != nullptr ||
      std::getenv("STAMPEDE_HUGE_PAGES") != nullptr) {
    WARN("skipped: THP mode is \"" << mode << "\" (not madvise), or GLIBC_TUNABLES or STAMPEDE_HUGE_PAGES is set here");
    return;
  }
  const std::string run_dir = FreshRunDir("hugepages");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set", "stop.total_env_frames=100000000"},
                 run_dir + ".out");
  // The coordinator re-executed itself with the tunable; its children inherit it, and
  // their malloc has asked for (and here got) huge pages for the learner's buffers.
  const int learner = PidOnceTraining(run_dir, "learner 0", 5);
  const int actor = PidOnceTraining(run_dir, "actor 0", 5);
  REQUIRE(learner > 0);
  REQUIRE(actor > 0);
  for (const int pid : {int(p.pid), learner, actor}) {
    std::string env = Slurp("/proc/" + std::to_string(pid) + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    INFO("pid " << pid << " environment:\n" << env);
    CHECK(env.find("GLIBC_TUNABLES=glibc.malloc.hugetlb=1\n") != std::string::npos);
  }
  ::kill(-p.pid, SIGINT);
  INFO(Slurp(p.output_path));
  CHECK(Wait(p, std::chrono::seconds(60)) == 130);
  // Turned off, nothing asks.
  const std::string off_dir = FreshRunDir("hugepages-off");
  ::setenv("STAMPEDE_HUGE_PAGES", "0", 1);
  Proc q = Start({"run", "configs/catch.textproto", "--run-dir", off_dir, "--set", "stop.total_env_frames=100000000"},
                 off_dir + ".out");
  ::unsetenv("STAMPEDE_HUGE_PAGES");
  const int off_learner = PidOnceTraining(off_dir, "learner 0", 5);
  REQUIRE(off_learner > 0);
  CHECK(Slurp("/proc/" + std::to_string(off_learner) + "/environ").find("glibc.malloc.hugetlb") == std::string::npos);
  ::kill(-q.pid, SIGINT);
  CHECK(Wait(q, std::chrono::seconds(60)) == 130);
}

TEST_CASE("fleet: Ctrl-C stops every process and writes the final checkpoint", "[fleet]") {
  const std::string run_dir = FreshRunDir("sigint");
  Proc p = Start({"run", "configs/cartpole.textproto", "--run-dir", run_dir, "--set",
                  "stop.total_env_frames=1000000000", "--set", "coordinator.progress_interval_s=0.2"},
                 run_dir + ".out");
  REQUIRE(WaitFor([&] {
    for (const auto& r : Metrics(run_dir)) {
      if (r.value("learner_step", 0) > 5) return true;
    }
    return false;
  }, std::chrono::seconds(60)));
  ::kill(-p.pid, SIGINT);  // what a terminal does: the whole foreground process group
  const int code = Wait(p, std::chrono::seconds(60));
  INFO(Slurp(p.output_path));
  CHECK(code == 130);
  const auto rows = Metrics(run_dir);
  CheckNoneLeft(Spawned(rows));
  CHECK(fs::exists(run_dir + "/checkpoint.bin"));
  CHECK(fs::exists(run_dir + "/summary.json"));
  CHECK_THAT(Slurp(p.output_path), Catch::Contains("interrupted"));
}

TEST_CASE("fleet: a bad config stops the program before anything starts", "[fleet]") {
  const std::string run_dir = FreshRunDir("badcfg");
  // --set before the config file: one value per --set, the file stays positional.
  Proc p = Start({"run", "--set", "learner.batch_size=0", "configs/catch.textproto", "--run-dir", run_dir},
                 run_dir + ".out");
  CHECK(Wait(p, std::chrono::seconds(20)) == 2);
  CHECK_THAT(Slurp(p.output_path), Catch::Contains("--set learner.batch_size: learner.batch_size: 0 is out of range"));
  CHECK_FALSE(fs::exists(run_dir));
}

TEST_CASE("fleet: a network that does not fit the env, or a missing GPU, stops the run before anything starts", "[fleet][net]") {
  SECTION("an image torso on CartPole's vector observation") {
    const std::string run_dir = FreshRunDir("badnet");
    Proc p = Start({"run", "configs/cartpole.textproto", "--run-dir", run_dir, "--set", "net.torso=deep_resnet"},
                   run_dir + ".out");
    CHECK(Wait(p, std::chrono::seconds(20)) == 2);
    CHECK_THAT(Slurp(p.output_path), Catch::Contains("net: net.torso \"deep_resnet\" takes image observations"));
    CHECK_FALSE(fs::exists(run_dir));
  }
  SECTION("a CUDA device this machine lacks") {
    const std::string run_dir = FreshRunDir("nogpu");
    Proc p = Start({"run", "configs/catch_pixels.textproto", "--run-dir", run_dir, "--set", "learner.device=cuda:63"},
                   run_dir + ".out");
    CHECK(Wait(p, std::chrono::seconds(20)) == 2);
    CHECK_THAT(Slurp(p.output_path), Catch::Contains("learner.device: \"cuda:63\" asks for a GPU, but") &&
                                         Catch::Contains("use learner.device: \"cpu\""));
    CHECK_FALSE(fs::exists(run_dir));
  }
}

TEST_CASE("fleet: preflight refuses a directory as config, an unwritable run dir and messages too big", "[fleet]") {
  SECTION("a config path that is a directory") {
    const std::string run_dir = FreshRunDir("cfgdir");
    Proc p = Start({"run", "configs", "--run-dir", run_dir}, run_dir + ".out");
    CHECK(Wait(p, std::chrono::seconds(20)) == 2);
    CHECK_THAT(Slurp(p.output_path), Catch::Contains("configs: not a config file (a directory)"));
    CHECK_FALSE(fs::exists(run_dir));
  }
  SECTION("a run directory under a regular file") {
    const std::string file = FreshRunDir("plainfile");
    std::ofstream(file) << "x";
    Proc p = Start({"run", "configs/catch.textproto", "--run-dir", file + "/run"}, file + ".out");
    CHECK(Wait(p, std::chrono::seconds(20)) == 2);
    CHECK_THAT(Slurp(p.output_path), Catch::Contains("run directory " + file + "/run cannot be created or written"));
  }
  SECTION("max_message_bytes smaller than a trajectory") {
    const std::string run_dir = FreshRunDir("tinymsg");
    Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set", "cluster.max_message_bytes=1024"},
                   run_dir + ".out");
    CHECK(Wait(p, std::chrono::seconds(20)) == 2);
    CHECK_THAT(Slurp(p.output_path), Catch::Contains("cluster.max_message_bytes: 1024 cannot carry one trajectory"));
    CHECK_FALSE(fs::exists(run_dir));
  }
}

TEST_CASE("fleet: a learner or PS shard that keeps dying stops the run with a clear message", "[fleet]") {
  for (const std::string role : {"learner", "ps"}) {
    SECTION(role) {
      const std::string run_dir = FreshRunDir("crash_" + role);
      Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set",
                      "stop.total_env_frames=1000000000", "--set", "coordinator.max_restarts=0"},
                     run_dir + ".out");
      const int victim = PidOnceTraining(run_dir, role + " 0", 0);
      REQUIRE(victim > 0);
      REQUIRE(::kill(victim, SIGKILL) == 0);
      const int code = Wait(p, std::chrono::seconds(60));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      CHECK(code == 1);
      CHECK_THAT(out, Catch::Contains("stopping: " + role + " 0 was killed by signal 9 and its restart budget "
                                      "(coordinator.max_restarts = 0) is spent"));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

namespace {
// The newest progress row (not an event) that `pred` holds for, after `after` rows.
template <class Pred>
bool RowAfter(const std::string& run_dir, size_t after, Pred pred) {
  const auto rows = Metrics(run_dir);
  for (size_t i = after; i < rows.size(); ++i) {
    if (!rows[i].contains("event") && pred(rows[i])) return true;
  }
  return false;
}
int64_t Trajectories(const json& row, int actor) {
  const std::string k = std::to_string(actor);
  return row.contains("actors") && row["actors"].contains(k) ? row["actors"][k]["trajectories"].get<int64_t>() : 0;
}
}  // namespace

TEST_CASE("fleet: `stampede scale` grows a running Catch fleet of 2 to 4 actors and then shrinks it to 1 and nothing is lost",
          "[fleet][scale]") {
  const std::string run_dir = FreshRunDir("scale");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set", "stop.total_env_frames=2500000",
                  "--set", "stop.stop_at_target=false", "--set", "coordinator.progress_interval_s=0.2"},
                 run_dir + ".out");
  REQUIRE(PidOnceTraining(run_dir, "actor 0") > 0);
  auto scale = [&](const std::string& actors) {
    Proc s = Start({"scale", run_dir, "--actors", actors}, run_dir + ".scale" + actors + ".out");
    const int code = Wait(s, std::chrono::seconds(30));
    INFO(Slurp(s.output_path));
    return code;
  };
  CHECK(Wait(Start({"scale", run_dir + "-none", "--actors", "3"}, run_dir + ".scale-none.out"), std::chrono::seconds(30)) == 2);

  size_t at = Metrics(run_dir).size();
  REQUIRE(scale("4") == 0);
  // Four alive, and the new actors' trajectories reach the learner.
  CHECK(WaitFor([&] {
    return RowAfter(run_dir, at, [](const json& r) {
      return r["actors_alive"].get<int>() == 4 && Trajectories(r, 2) > 0 && Trajectories(r, 3) > 0;
    });
  }, std::chrono::seconds(60)));

  at = Metrics(run_dir).size();
  REQUIRE(scale("1") == 0);
  CHECK(WaitFor([&] { return RowAfter(run_dir, at, [](const json& r) { return r["actors_alive"].get<int>() == 1; }); },
                std::chrono::seconds(60)));
  const int code = Wait(p, std::chrono::seconds(150));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("stampede: scale: actors 2 -> 4"));
  const auto rows = Metrics(run_dir);
  std::set<int> retired;
  for (const auto& r : rows) {
    if (r.value("event", "") == "actor_retired") {
      retired.insert(r["actor"].get<int>());
      CHECK(r["how"].get<std::string>() == "exited with status 0");
    }
    CHECK(r.value("event", "") != "actor_restart");
  }
  CHECK(retired == std::set<int>{1, 2, 3});
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["env_frames"].get<int64_t>() >= 2500000);
  for (auto r = rows.rbegin(); r != rows.rend(); ++r) {
    if (r->contains("event")) continue;
    CHECK((*r)["dropped_trajectories"].get<int64_t>() == 0);  // the last row's count, over the run
    break;
  }
  // Each retired actor's every frame reached the learner: its last unroll too (10 steps x
  // 8 envs per trajectory).
  for (int a : {1, 2, 3}) {
    const json& one = summary["actors"][std::to_string(a)];
    INFO("actor " << a << ": " << one.dump());
    CHECK(one.value("retired", false));
    CHECK(one["frames"].get<int64_t>() > 0);
    CHECK(one["trajectories"].get<int64_t>() * 80 == one["frames"].get<int64_t>());
  }
  CheckNoneLeft(Spawned(rows));
}

TEST_CASE("fleet: the binary refuses a CPU without what it was built for and names what is missing", "[fleet][cpu]") {
  // qemu-user runs it as a Westmere (no AVX): the check runs before any initialiser, the
  // shared libraries' included, so the refusal comes instead of an illegal instruction.
  if (std::system("command -v qemu-x86_64 > /dev/null 2>&1") != 0) {
    std::printf("SKIPPED: needs qemu-x86_64 (apt-get install qemu-user, which tools/setup.sh installs)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
  const std::string out = FreshRunDir("cpu_refusal") + ".out";
  const std::string cmd = std::string("qemu-x86_64 -cpu Westmere ") + STAMPEDE_BINARY + " help > " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  const std::string said = Slurp(out);
  CHECK_THAT(said, Catch::Contains("stampede: this binary was built for") && Catch::Contains("lacks:") &&
                       Catch::Contains("avx2"));
  // The same binary on a CPU that has AVX2 (emulated) starts.
  const std::string ok = std::string("qemu-x86_64 -cpu Haswell ") + STAMPEDE_BINARY + " help > /dev/null 2>&1";
  const int ran = std::system(ok.c_str());
  CHECK((WIFEXITED(ran) && WEXITSTATUS(ran) == 0));
}
