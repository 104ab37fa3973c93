// Fleet tests per env and network: pixel Catch through each network, Pendulum, C
// plug-ins, CartPole, MinAtar, the gymnasium bridge, Atari, and stampede sweep.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

// Pixel Catch (40x20 uint8, or 20x10 at scale 2) reaches a mean return of 0.9 with each
// network on the CPU learner; `sets` pick the network.
static void PixelCatchLearns(const std::string& name, std::vector<std::string> sets, int seconds) {
  const std::string run_dir = FreshRunDir(name);
  std::vector<std::string> args = {"run", "configs/catch_pixels.textproto", "--run-dir", run_dir,
                                   "--set", "stop.stop_at_target=true", "--set",
                                   "stop.total_env_frames=600000"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  Proc p = Start(args, run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(seconds));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  // The 100-episode mean reached 0.9 (the run then stops; the final mean may be a hair lower).
  CHECK(summary["frames_to_target"].get<long long>() > 0);
  CHECK(summary["frames_to_target"].get<long long>() <= 600000);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: pixel Catch learns through the shallow CNN on the CPU learner", "[fleet][net]") {
  PixelCatchLearns("catch_pixels", {}, 110);
}

TEST_CASE("fleet: pixel Catch learns with an LSTM core, the small CNN and the deep ResNet", "[fleet][net]") {
  SECTION("shallow CNN + LSTM 64") { PixelCatchLearns("catch_lstm", {"net.lstm_size=64"}, 110); }
  SECTION("small CNN") { PixelCatchLearns("catch_small_cnn", {"net.torso=small_cnn"}, 110); }
  SECTION("deep ResNet, 20x10 frames") {
    const std::string cfg = WriteConfig("catch_deep_cfg", "seed: 1\n"
        "env { name: \"CatchPixels\" kwargs { key: \"scale\" value: \"2\" } }\n"
        "net { torso: \"deep_resnet\" fc_size: 64 }\n"
        "actors { num_actors: 2 envs_per_actor: 8 unroll_length: 10 }\n"
        "learner { batch_size: 16 optimizer { learning_rate: 0.002 } }\n"
        "ps { num_shards: 2 }\n"
        "stop { total_env_frames: 300000 target_return: 0.9 stop_at_target: true }\n");
    const std::string run_dir = FreshRunDir("catch_deep");
    Proc p = Start({"run", cfg, "--run-dir", run_dir}, run_dir + ".out");
    const int code = Wait(p, std::chrono::seconds(240));
    INFO(Slurp(p.output_path));
    REQUIRE(code == 0);
    const json summary = json::parse(Slurp(run_dir + "/summary.json"));
    CHECK(summary["frames_to_target"].get<long long>() > 0);
    CheckNoneLeft(Spawned(Metrics(run_dir)));
  }
}

TEST_CASE("fleet: pixel Catch learns through a network described only in the config (net.layers)", "[fleet][net]") {
  const std::string run_dir = FreshRunDir("catch_custom");
  Proc p = Start({"run", "configs/catch_pixels_custom.textproto", "--run-dir", run_dir, "--set",
                  "stop.stop_at_target=true"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(240));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["frames_to_target"].get<long long>() > 0);
  CHECK(summary["frames_to_target"].get<long long>() <= 600000);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: pixel Catch with an LSTM learns through central inference (CURVE on)", "[fleet][net][inference]") {
  const std::string run_dir = FreshRunDir("catch_central");
  Proc p = Start({"run", "configs/catch_pixels.textproto", "--run-dir", run_dir, "--set", "stop.stop_at_target=true",
                  "--set", "stop.total_env_frames=600000", "--set", "net.lstm_size=64", "--set",
                  "actors.inference=central", "--set", "cluster.local_transport=tcp"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(110));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["frames_to_target"].get<long long>() > 0);
  CHECK(summary["frames_to_target"].get<long long>() <= 600000);
  // The learner's server did the acting: it says how many batches, none refused.
  std::string learner_log;
  for (const auto& f : fs::directory_iterator(run_dir + "/logs")) {
    if (f.path().filename().string().rfind("learner", 0) == 0) learner_log += Slurp(f.path().string());
  }
  INFO(learner_log);
  CHECK_THAT(learner_log, Catch::Contains("inference server: ") && Catch::Contains(" 0 requests refused"));
  CHECK_THAT(Slurp(run_dir + "/config.textproto"), Catch::Contains("inference: \"tcp://"));
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: Pendulum (box actions, Gaussian head) learns a 100-episode mean of -850", "[fleet][net]") {
  // Baselines, simulated with the same dynamics (2,000 episodes each): a uniformly random
  // torque scores -1223 per 200-step episode (a 100-episode mean stays above -1135 in
  // 99.9% of windows), no torque -1217, and no constant torque better than -1289. So a
  // mean of -850 needs torques that depend on the state. The config stops at -400.
  // (The first full window is not a baseline: on a fast fleet the policy has already
  // learned for a while before 100 episodes have ended; one run's first mean was -670.)
  const std::string run_dir = FreshRunDir("pendulum");
  Proc p = Start({"run", "configs/pendulum.textproto", "--run-dir", run_dir, "--set",
                  "coordinator.progress_interval_s=0.5"}, run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(170));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  double best = -1e9;
  int windows = 0;
  for (const auto& r : Metrics(run_dir)) {
    if (r.contains("event") || !r.contains("mean_return_100") || r.value("returns_counted", 0) < 100) continue;
    best = std::max(best, r["mean_return_100"].get<double>());
    ++windows;
  }
  REQUIRE(windows > 0);
  INFO("best 100-episode mean " << best);
  CHECK(best >= -850);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: a user's C plug-in, built outside the tree, learns from a config", "[fleet][plugin]") {
  const std::string run_dir = FreshRunDir("corridor");
  Proc p = Start({"run", "configs/corridor_plugin.textproto", "--run-dir", run_dir, "--set",
                  std::string("env.plugin=") + STAMPEDE_EXAMPLE_PLUGIN},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(110));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  // The best policy averages 0.895 and a random walk about -0.5 (configs/corridor_plugin).
  CHECK(summary["frames_to_target"].get<long long>() > 0);
  CHECK(summary["mean_return_100"].get<double>() >= 0.85);
  CHECK_THAT(Slurp(run_dir + "/config.textproto"), Catch::Contains("resolved_spec {") &&
                                                       Catch::Contains("obs_shape: 16"));
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: a crashing plug-in takes down only its actor, which is restarted", "[fleet][plugin]") {
  for (const char* how : {"segv", "throw", "abort"}) {
    DYNAMIC_SECTION(how) {
      const std::string config = WriteConfig(std::string("crashy_cfg_") + how,
          std::string("env { plugin: \"") + STAMPEDE_CRASHY_PLUGIN + "\" name: \"Crashy\"\n"
          "  kwargs { key: \"crash_after\" value: \"20000\" } kwargs { key: \"how\" value: \"" + how + "\" } }\n"
          "net { hidden_sizes: [16] }\n"
          "actors { num_actors: 2 envs_per_actor: 8 unroll_length: 10 }\n"
          "learner { batch_size: 8 queue_capacity: 16 }\n"
          "ps { num_shards: 1 }\n"
          "stop { total_env_frames: 150000 }\n");
      const std::string run_dir = FreshRunDir(std::string("crashy_") + how);
      Proc p = Start({"run", config, "--run-dir", run_dir}, run_dir + ".out");
      const int code = Wait(p, std::chrono::seconds(110));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      REQUIRE(code == 0);
      const json summary = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(summary["env_frames"].get<long long>() >= 150000);
      // Each actor process crashes after 20k steps: 150k frames need several restarts.
      CHECK(summary["actor_restarts"].get<int>() >= 3);
      // The coordinator's message carries the end of the actor's log: the env's error.
      if (std::string(how) == "throw") CHECK_THAT(out, Catch::Contains("Crashy threw across the ABI"));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

TEST_CASE("fleet: a missing or mismatched plug-in stops the run before anything starts", "[fleet][plugin]") {
  const std::string run_dir = FreshRunDir("bad_plugin");
  Proc p = Start({"run", "configs/corridor_plugin.textproto", "--run-dir", run_dir, "--set",
                  "env.plugin=/nonexistent/libcorridor.so"}, run_dir + ".out");
  CHECK(Wait(p, std::chrono::seconds(20)) == 2);
  CHECK_THAT(Slurp(p.output_path), Catch::Contains("/nonexistent/libcorridor.so: cannot load"));
  CHECK(Spawned(Metrics(run_dir)).empty());
  Proc q = Start({"run", "configs/corridor_plugin.textproto", "--run-dir", run_dir + "_abi", "--set",
                  std::string("env.plugin=") + STAMPEDE_OTHER_ABI_PLUGIN}, run_dir + ".abi.out");
  CHECK(Wait(q, std::chrono::seconds(20)) == 2);
  CHECK_THAT(Slurp(q.output_path), Catch::Contains("built against plug-in ABI version 42, this Stampede loads version 1"));
  CHECK(Spawned(Metrics(run_dir + "_abi")).empty());
}

TEST_CASE("fleet: CartPole with the shipped config (replay) reaches 475 within 0.5M frames", "[fleet][replay]") {
  std::string run_dir;
  RunReachingTarget("cartpole_shipped", {"run", "configs/cartpole.textproto", "--set", "stop.total_env_frames=500000"},
                    std::chrono::seconds(120), 500000, &run_dir);
  // The replay table was used: every metrics row says so, and it filled.
  long long samples = 0;
  for (const auto& r : Metrics(run_dir)) {
    if (r.contains("event") || !r.contains("replay")) continue;
    samples = std::max(samples, r["replay"]["samples"].get<long long>());
    CHECK(r["replay"]["selector"] == "uniform");
  }
  CHECK(samples > 10000);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: a config of only CartPole learns it with the library's defaults (PopArt on)", "[fleet][defaults]") {
  // Only the env: the default learner (PopArt on the CPU relay learner) reached 475 at
  // 362k-541k frames in 3 of 3 seeds here, and without PopArt at 711k and 845k in 2 of 3.
  const std::string cfg = WriteConfig("cartpole_only", "env { name: \"CartPole-v1\" }\n"
                                                        "stop { total_env_frames: 1000000 target_return: 475 }\n");
  std::string run_dir;
  RunReachingTarget("cartpole_only", {"run", cfg, "--set", "stop.stop_at_target=true"}, std::chrono::seconds(120),
                    1000000, &run_dir);
  // PopArt was on: its statistics are in the rows and moved from their start (mean 0, scale 1).
  double scale = 1;
  for (const auto& r : Metrics(run_dir)) {
    if (r.contains("event") || !r.contains("tasks") || !r["tasks"].contains("CartPole-v1")) continue;
    const auto& t = r["tasks"]["CartPole-v1"];
    REQUIRE(t.contains("popart_scale"));
    scale = t["popart_scale"].get<double>();
  }
  CHECK(scale > 2.0);  // returns of up to ~100 at discount 0.99
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: a config of only Acrobot learns it with the library's defaults (PopArt on)", "[fleet][python][defaults]") {
  // Only the env (rewards of -1 a step, returns near -100): -120 at 55k-79k frames in 3 of 3
  // seeds here. While PopArt's statistics started at mean 0 and scale 1 the first
  // advantages were the whole return and the policy went deterministic within 20k frames
  // (-500 at 1M frames in 3 of 3 seeds, docs/learning-benchmarks.md, "Library defaults"); this guards that.
  RequireVenv("gymnasium");
  const std::string cfg = WriteConfig("acrobot_only", "env { gym_id: \"Acrobot-v1\" }\n"
                                                       "stop { total_env_frames: 400000 target_return: -120 }\n");
  std::string run_dir;
  RunReachingTarget("acrobot_only", {"run", cfg, "--set", "stop.stop_at_target=true"}, std::chrono::seconds(120),
                    400000, &run_dir);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: stampede sweep runs every grid point x seed and tabulates them", "[fleet][sweep]") {
  const std::string dir = FreshRunDir("sweep");
  Proc p = Start({"sweep", "configs/catch.textproto", "--grid", "learner.batch_size=8,16", "--seeds", "2", "--parallel",
                  "2", "--dir", dir, "--set", "stop.total_env_frames=150000", "--target", "0.5"},
                 dir + ".out");
  const int code = Wait(p, std::chrono::seconds(180));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  REQUIRE(code == 0);
  // One CSV row per run, with its grid value, seed and a run directory holding its summary.
  std::ifstream csv(dir + "/sweep.csv");
  std::string header, line;
  std::getline(csv, header);
  CHECK(header.find("learner.batch_size") != std::string::npos);
  std::map<std::string, int> per_value;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    std::stringstream ss(line);
    std::vector<std::string> f;
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 10);
    ++per_value[f[2]];
    CHECK(f[8] == "0");  // exit code
    const json summary = json::parse(Slurp(f[9] + "/summary.json"));
    CHECK(summary["env_frames"].get<long long>() >= 150000);
    CHECK(std::stod(f[3]) == Approx(summary["mean_return_100"].get<double>()).margin(0.5));
  }
  CHECK(rows == 4);
  CHECK(per_value["8"] == 2);
  CHECK(per_value["16"] == 2);
  const std::string md = Slurp(dir + "/sweep.md");
  CHECK_THAT(md, Catch::Contains("| point | learner.batch_size | final | best | frames to target | reached | frames/s |"));
  // A grid without values is refused before anything runs.
  Proc bad = Start({"sweep", "configs/catch.textproto", "--grid", "learner.batch_size=", "--dir", dir + "_bad"},
                   dir + ".bad.out");
  CHECK(Wait(bad, std::chrono::seconds(20)) == 2);
  CHECK_THAT(Slurp(dir + ".bad.out"), Catch::Contains("expected field=v1,v2"));
  CHECK_FALSE(fs::exists(dir + "_bad"));
}

TEST_CASE("fleet: MinAtar Breakout (C++ game, shipped config) passes a mean return of 3 within 1M frames",
          "[fleet][minatar]") {
  // A random policy scores about 0.4; the shipped config reaches about 8 at 1M frames
  // and about 20 at 5M here (docs/learning-benchmarks.md).
  const std::string run_dir = FreshRunDir("minatar_breakout");
  Proc p = Start({"run", "configs/minatar/breakout.textproto", "--run-dir", run_dir, "--set",
                  "stop.total_env_frames=1000000"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(240));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  INFO(summary.dump(2));
  CHECK(summary["mean_return_100"].get<double>() >= 3.0);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: CartPole through the gymnasium bridge reaches 475 within 3M frames", "[fleet][python]") {
  RequireVenv("gymnasium");
  std::string run_dir;
  RunReachingTarget("cartpole_gym", {"run", "configs/cartpole_gym.textproto"}, std::chrono::seconds(170), 3000000,
                    &run_dir);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: Acrobot (shipped config) reaches -100 within 0.5M frames", "[fleet][python]") {
  // About 0.1M frames here (3 of 3 seeds); a random policy stays near -500.
  RequireVenv("gymnasium");
  std::string run_dir;
  const json summary = RunReachingTarget("acrobot", {"run", "configs/acrobot.textproto", "--set",
                                         "stop.stop_at_target=true"}, std::chrono::seconds(200), 500000, &run_dir);
  // The target was met (above); episodes that end while the roles stop still count, so
  // the final window may sit just under it.
  CHECK(summary["mean_return_100"].get<double>() >= -110.0);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: the Atari learnability probe (Pong pixels, paddle level with the ball) is learnt", "[fleet][python][atari]") {
  // configs/probe_pong_track.textproto: real ALE frames as the Atari configs see them; a
  // random policy scores about 25, one that follows the ball about 180. The config's
  // target (100) was reached at 0.98-1.07M frames here; this test asks for 60, reached at
  // 0.71-0.83M in the same runs (CI time), while without net.center_frames the return
  // stays near 22 for 2.4M frames (docs/learning-benchmarks.md, "Atari: why Pong did not learn").
  RequireVenv("gymnasium, ale_py");
  std::string run_dir;
  RunReachingTarget("probe",
                    {"run", "configs/probe_pong_track.textproto", "--set", "stop.stop_at_target=true", "--set",
                     "stop.target_return=60"},
                    std::chrono::seconds(600), 2500000, &run_dir);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: the Atari-5 suite runs from game names alone and its report gives the Atari-5 estimate", "[fleet][python][atari]") {
  // configs/atari5.textproto names five games and nothing else per task: each task's env,
  // name and scores come from the preset and the built-in table.
  RequireVenv("gymnasium, ale_py");
  const std::string run_dir = FreshRunDir("atari5");
  // Small: five ALE actor processes start on two cores (about 40 s here with another run
  // beside them), and 4 envs each reach the budget soon after.
  Proc p = Start({"suite", "configs/atari5.textproto", "--run-dir", run_dir, "--set", "stop.total_env_frames=40000",
                  "--set", "actors.envs_per_actor=4", "--set", "learner.replay.capacity=100"},
                 run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(300));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  REQUIRE((code == 0 || (code == 1 && out.find("no curves") != std::string::npos)));
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  INFO(summary.dump(2));
  for (const char* game : {"BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"}) {
    INFO(game);
    CHECK(summary["tasks"][game]["env_frames"].get<long long>() > 0);
  }
  // Each game's row carries the table's random and human scores (report.csv's columns 6
  // and 7); the estimate itself is checked against a hand computation in suite_test.cc.
  const std::string csv = Slurp(run_dir + "/report.csv");
  for (const char* row : {"BattleZone,", "DoubleDunk,", "NameThisGame,", "Phoenix,", "Qbert,"}) {
    CHECK_THAT(csv, Catch::Contains(row));
  }
  CHECK_THAT(csv, Catch::Contains(",2360,37187.5,") && Catch::Contains(",-18.6,-16.4,") &&
                      Catch::Contains(",2292.3,8049,") && Catch::Contains(",761.4,7242.6,") &&
                      Catch::Contains(",163.9,13455,"));
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: Atari Pong runs for 200k frames and every process is gone afterwards", "[fleet][python]") {
  RequireVenv("gymnasium, ale_py");
  const std::string run_dir = FreshRunDir("pong");
  Proc p = Start({"run", "configs/atari_pong.textproto", "--run-dir", run_dir, "--set",
                  "stop.total_env_frames=200000"}, run_dir + ".out");
  const int code = Wait(p, std::chrono::seconds(300));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["env_frames"].get<long long>() >= 200000);
  CHECK(summary["actor_restarts"].get<int>() == 0);
  // ALE frames: 4 per agent step, and uint8 pixels in the resolved spec.
  const std::string resolved = Slurp(run_dir + "/config.textproto");
  CHECK_THAT(resolved, Catch::Contains("frames_per_step: 4") && Catch::Contains("obs_dtype: UINT8"));
  // A mean Pong score (episodes of 21 points won or lost) lies in [-21, 21].
  const double ret = summary["mean_return_100"].get<double>();
  CHECK(ret >= -21.0);
  CHECK(ret <= 21.0);
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}
