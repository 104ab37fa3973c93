// Fleet tests with several learners and PS shards (sync and async), kills and resume,
// and processes started by hand on distinct hosts.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
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

TEST_CASE("fleet: 2 learners x 3 shards x 4 actors learn Catch in sync and in async mode", "[fleet][learners]") {
  for (const std::string mode : {"sync", "async"}) {
    SECTION(mode) {
      const std::string run_dir = FreshRunDir("learners_" + mode);
      Proc p = Start({"run", "configs/catch_2learners.textproto", "--run-dir", run_dir, "--set",
                      "learner.update_mode=" + mode},
                     run_dir + ".out");
      const int code = Wait(p, std::chrono::seconds(120));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      REQUIRE(code == 0);
      const json summary = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(summary["stop_reason"] == "target return reached");
      // The 100-episode mean passed 0.9; episodes that end while the roles stop still
      // count, so the final mean can sit a little lower (0.87 once in async mode).
      CHECK(summary["frames_to_target"].get<long long>() > 0);
      CHECK(summary["mean_return_100"].get<double>() >= 0.8);
      REQUIRE(summary["learners"].size() == 2);
      for (const auto& [index, l] : summary["learners"].items()) CHECK(l["env_frames"].get<int64_t>() > 0);
      REQUIRE(summary["ps"].size() == 3);
      int64_t applied = 0;
      for (const auto& [shard, s] : summary["ps"].items()) {
        INFO("ps " << shard);
        CHECK(s["gradients_applied"].get<int64_t>() > 10);
        applied = std::max(applied, s["gradients_applied"].get<int64_t>());
        // Sync with replicas_to_aggregate = num_learners: nothing is ever too old.
        if (mode == "sync") CHECK(s["gradients_dropped"].get<int64_t>() == 0);
        if (mode == "async") {
          int64_t counted = 0;
          for (const auto& n : s["staleness_histogram"]) counted += n.get<int64_t>();
          CHECK(counted == s["gradients_applied"].get<int64_t>());
        }
      }
      // Sync: one step per pair of gradients, so the learners computed about twice as many.
      int64_t computed = 0;
      for (const auto& [index, l] : summary["learners"].items()) computed += l["steps"].get<int64_t>();
      if (mode == "sync") CHECK(computed >= 2 * applied);
      // The chief's sharded checkpoint: a manifest over every shard's part.
      {
        bool manifest = false;
        for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) {
          manifest = manifest || fs::exists(e.path() / "MANIFEST");
          if (fs::exists(e.path() / "MANIFEST")) {
            for (int s = 0; s < 3; ++s) CHECK(fs::exists(e.path() / ("shard-" + std::to_string(s) + ".bin")));
          }
        }
        CHECK(manifest);
      }
      CHECK(fs::exists(run_dir + "/checkpoint.bin"));
      CheckNeverBackwards(Metrics(run_dir));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

TEST_CASE("fleet: 2 and 3 allreduce learners learn Catch with the same parameters on every learner", "[fleet][learners]") {
  // The learners compare parameter fingerprints every 5 steps (a difference fails the run);
  // the chief publishes to the shards as in relay mode.
  static std::map<int, double> bytes_per_round;  // kept across the sections (Catch runs the case once per section)
  for (const int L : {2, 3}) {
    SECTION(std::to_string(L) + " learners") {
      const std::string run_dir = FreshRunDir("allreduce_" + std::to_string(L));
      Proc p = Start({"run", "configs/catch_2learners.textproto", "--run-dir", run_dir, "--set",
                      "learner.update_mode=allreduce", "--set", "learner.num_learners=" + std::to_string(L), "--set",
                      "learner.allreduce_check_every=5"},
                     run_dir + ".out");
      const int code = Wait(p, std::chrono::seconds(120));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      REQUIRE(code == 0);
      const json summary = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(summary["stop_reason"] == "target return reached");
      CHECK(summary["frames_to_target"].get<long long>() > 0);
      REQUIRE(summary["learners"].size() == size_t(L));
      int64_t low = -1, high = -1;
      for (const auto& [index, l] : summary["learners"].items()) {
        INFO("learner " << index << ": " << l.dump());
        CHECK(l["env_frames"].get<int64_t>() > 0);
        const int64_t rounds = l["allreduce_rounds"].get<int64_t>();
        CHECK(rounds > 10);
        CHECK(l["allreduce_dropped"].get<int64_t>() == 0);
        low = low < 0 ? rounds : std::min(low, rounds);
        high = std::max(high, rounds);
        if (index == "0") bytes_per_round[L] = double(l["allreduce_bytes_sent"].get<int64_t>()) / double(rounds);
      }
      // Every learner takes every step: their counts differ by the last status at most.
      CHECK(high - low <= 2 * L);
      // The shards took whole versions from the chief (relay's way), no gradients.
      for (const auto& [shard, s] : summary["ps"].items()) CHECK(s["gradients_applied"].get<int64_t>() == 0);
      CHECK(fs::exists(run_dir + "/checkpoint.bin"));
      CheckNeverBackwards(Metrics(run_dir));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
  // A learner sends 2 (L - 1) / L of the gradient per step: 1 with two learners, 4/3 with
  // three (the headers add a little).
  if (bytes_per_round.size() == 2) CHECK(bytes_per_round[3] / bytes_per_round[2] == Approx(4.0 / 3.0).epsilon(0.05));
}

TEST_CASE("fleet: an allreduce learner killed mid-run: the others go on in a smaller ring, it rejoins with their state, and the run ends at its budget", "[fleet][learners]") {
  for (const int killed : {2, 0}) {  // a learner, then the chief
    SECTION("learner " + std::to_string(killed)) {
      const std::string run_dir = FreshRunDir("allreduce_kill_" + std::to_string(killed));
      // Parameter fingerprints every 5 steps: a rejoined learner whose state differs fails the run.
      Proc p = Start({"run", "configs/catch_2learners.textproto", "--run-dir", run_dir, "--set",
                      "learner.update_mode=allreduce", "--set", "learner.num_learners=3", "--set",
                      "learner.allreduce_timeout_s=2", "--set", "learner.allreduce_check_every=5", "--set",
                      "learner.checkpoint_interval_s=0.5", "--set", "stop.stop_at_target=false", "--set",
                      "stop.total_env_frames=1500000"},
                     run_dir + ".out");
      const std::string who = "learner " + std::to_string(killed);
      const int pid = PidOnceTraining(run_dir, who, 30);
      REQUIRE(pid > 0);
      // Mid-run: once the chief has a checkpoint on disk (the state a rejoining learner may
      // be behind of).
      REQUIRE(WaitFor([&] { return CheckpointOnDisk(run_dir); }, std::chrono::seconds(60)));
      REQUIRE(::kill(pid, SIGKILL) == 0);
      REQUIRE(WaitRestart(run_dir, who) > 0);
      const int code = Wait(p, std::chrono::seconds(180));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      REQUIRE(code == 0);
      const json summary = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(summary["restarts"].get<int>() == 1);
      CHECK(summary["env_frames"].get<int64_t>() >= 1500000);
      CheckNeverBackwards(Metrics(run_dir));
      // The ring's resets are counted: in the summary, the rows, an event and the progress line.
      CHECK(summary["allreduce_resets"].get<int64_t>() >= 1);
      int reset_events = 0;
      int64_t row_resets = -1;
      for (const auto& r : Metrics(run_dir)) {
        if (r.value("event", "") == "allreduce_reset") ++reset_events;
        if (!r.contains("event") && r.contains("allreduce_resets")) row_resets = r["allreduce_resets"].get<int64_t>();
      }
      CHECK(reset_events >= 1);
      // The restarted learner's actors act with the ring's version before it rejoins: their
      // trajectories are taken, not dropped as from the future.
      for (const auto& r : Metrics(run_dir)) {
        if (!r.contains("event") && r.contains("dropped_by_reason")) CHECK_FALSE(r["dropped_by_reason"].contains("future_version"));
      }
      CHECK(row_resets == summary["allreduce_resets"].get<int64_t>());
      int64_t line_resets = 0;
      for (size_t at = out.find("| ring resets "); at != std::string::npos; at = out.find("| ring resets ", at + 1)) {
        line_resets = std::max<int64_t>(line_resets, std::stoll(out.substr(at + 14)));
      }
      CHECK(line_resets >= 1);
      // The restarted learner joined a ring of all three at the survivors' version (it
      // took their state: its own was fresh, or the chief's last checkpoint). Whether the
      // survivors first went on in a ring of two depends on whether it came back within
      // learner.allreduce_timeout_s (the ring test covers that case).
      const std::string restarted = Slurp(run_dir + "/logs/learner-" + std::to_string(killed) + ".log");
      INFO(restarted);
      const size_t at = restarted.rfind("learners 0,1,2 at version ");
      REQUIRE(at != std::string::npos);
      const int64_t joined_at = std::stoll(restarted.substr(at + std::string("learners 0,1,2 at version ").size()));
      CHECK(joined_at > 0);
      CHECK_THAT(restarted, Catch::Contains("(state of learner"));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

TEST_CASE("fleet: Catch learns with PyTorch's RMSprop and with Adam, in relay mode and on the shards (sync)", "[fleet][learners]") {
  // learner.optimizer.kind runs in the learner (relay) and in every PS shard (sync).
  const std::pair<const char*, std::vector<std::string>> kinds[] = {
      {"rmsprop_torch", {"learner.optimizer.kind=rmsprop_torch", "learner.optimizer.learning_rate=0.0006"}},
      {"adam", {"learner.optimizer.kind=adam", "learner.optimizer.learning_rate=0.001"}}};
  for (const auto& [kind, sets] : kinds) {
    for (const char* config : {"configs/catch.textproto", "configs/catch_2learners.textproto"}) {
      INFO(kind << ", " << config);
      std::vector<std::string> args = {"run", config, "--set", "stop.stop_at_target=true"};
      for (const auto& s : sets) args.insert(args.end(), {"--set", s});
      std::string run_dir;
      const json summary = RunReachingTarget(std::string("optimizer_") + kind, args, std::chrono::seconds(150),
                                             800000, &run_dir);
      const std::string resolved = Slurp(run_dir + "/config.textproto");
      CHECK_THAT(resolved, Catch::Contains(std::string("kind: \"") + kind + "\""));
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

TEST_CASE("fleet: kill -9 of a shard and then of a learner mid-run: the run recovers and learns", "[fleet][learners]") {
  for (const std::string mode : {"sync", "async", "relay"}) {
    SECTION(mode) {
      const std::string run_dir = FreshRunDir("recover_" + mode);
      const bool sharded = mode != "relay";
      std::vector<std::string> args = {"run", sharded ? "configs/catch_2learners.textproto" : "configs/catch.textproto",
                                       "--run-dir", run_dir, "--set", "stop.stop_at_target=false",
                                       "--set", "stop.total_env_frames=1500000", "--set", "learner.checkpoint_interval_s=0.3"};
      if (sharded) args.push_back("--set"), args.push_back("learner.update_mode=" + mode);
      // The budget leaves the killed learner's restart (after its 0.5 s backoff) time to come
      // before the others spend it: 700k frames once did not, over ipc.
      Proc p = Start(args, run_dir + ".out");
      const std::string shard = sharded ? "ps 1" : "ps 0", learner = sharded ? "learner 1" : "learner 0";
      const int ps_pid = PidOnceTraining(run_dir, shard, 30);
      REQUIRE(ps_pid > 0);
      REQUIRE(WaitFor([&] { return CheckpointOnDisk(run_dir); }, std::chrono::seconds(60)));  // one to restore
      REQUIRE(::kill(ps_pid, SIGKILL) == 0);
      REQUIRE(WaitRestart(run_dir, shard) > 0);
      const int learner_pid = PidOnceTraining(run_dir, learner, 30);
      REQUIRE(learner_pid > 0);
      REQUIRE(::kill(learner_pid, SIGKILL) == 0);
      REQUIRE(WaitRestart(run_dir, learner) > 0);
      const int code = Wait(p, std::chrono::seconds(120));
      const std::string out = Slurp(p.output_path);
      INFO(out);
      REQUIRE(code == 0);
      const json summary = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(summary["restarts"].get<int>() == 2);
      CHECK(summary["env_frames"].get<int64_t>() >= 1500000);
      CHECK(summary["mean_return_100"].get<double>() >= 0.9);
      CheckNeverBackwards(Metrics(run_dir));
      const std::string shard_log = Slurp(run_dir + "/logs/" + (sharded ? "ps-1" : "ps-0") + ".log");
      const std::string learner_log = Slurp(run_dir + "/logs/" + (sharded ? "learner-1" : "learner-0") + ".log");
      if (sharded) {
        // The shard came back from the newest complete checkpoint, numbered above what it served.
        CHECK_THAT(shard_log, Catch::Contains("after a restart; serving them as version"));
      } else {
        CHECK_THAT(learner_log, Catch::Contains("learner: restarted: restored version"));
      }
      CheckNoneLeft(Spawned(Metrics(run_dir)));
    }
  }
}

TEST_CASE("fleet: a shard killed by -9 right after the chief logs its final checkpoint, at the target: exit 0",
          "[fleet][learners]") {
  // The ordered stop ends the chief learner after its final checkpoint (every shard's part
  // in it) and the shards after the chief. A shard killed as soon as the chief's log says
  // its final checkpoint is written (the chief may not have exited yet) loses nothing: the
  // coordinator judges the death by the checkpoint on disk, the run that reached its target
  // ends 0, and the death is said and written as an event. The kill races the shard's own
  // exit on SIGTERM; a run where the shard was gone first tests nothing, so it is run again
  // (at most three times).
  bool landed = false;
  for (int attempt = 0; attempt < 3 && !landed; ++attempt) {
    const std::string run_dir = FreshRunDir("final_kill_" + std::to_string(attempt));
    Proc p = Start({"run", "configs/catch_2learners.textproto", "--run-dir", run_dir, "--set",
                    "learner.checkpoint_interval_s=0"},
                   run_dir + ".out");
    const int chief = PidOnceTraining(run_dir, "learner 0", 10);
    const int shard = PidOnceTraining(run_dir, "ps 0", 0);
    REQUIRE(chief > 0);
    REQUIRE(shard > 0);
    const std::string chief_log = run_dir + "/logs/learner-0.log";
    REQUIRE(WaitFor([&] { return Slurp(chief_log).find("final checkpoint at version") != std::string::npos; },
                    std::chrono::seconds(120), std::chrono::milliseconds(1)));
    ::kill(shard, SIGKILL);
    const bool chief_alive_at_kill = Alive(chief);
    const int code = Wait(p, std::chrono::seconds(60));
    const std::string out = Slurp(p.output_path);
    INFO("attempt " << attempt << ", chief alive at the kill: " << chief_alive_at_kill << "\n" << out);
    json shard_exit;
    for (const auto& r : Metrics(run_dir)) {
      if (r.value("event", "") == "process_exit" && r.value("process", "") == "ps 0") shard_exit = r;
    }
    if (shard_exit.is_null()) continue;  // the shard exited on its own first
    landed = true;
    CHECK(shard_exit["how"].get<std::string>() == "was killed by signal 9");
    CHECK(shard_exit["while_stopping"].get<bool>());
    CHECK_FALSE(shard_exit["counted"].get<bool>());
    CHECK_THAT(out, Catch::Contains("after the final checkpoint was complete: nothing was lost"));
    CHECK(code == 0);
    const json summary = json::parse(Slurp(run_dir + "/summary.json"));
    // It stopped at its target (the window's mean at the end, some episodes later, may sit
    // a hair below it).
    CHECK(summary["stop_reason"].get<std::string>() == "target return reached");
    CHECK(summary["frames_to_target"].get<int64_t>() > 0);
    // The final checkpoint is whole: every shard's part matches its manifest, which says
    // the ordered stop wrote it.
    CHECK(std::system((std::string(STAMPEDE_BINARY) + " checkpoints " + run_dir + " > /dev/null 2>&1").c_str()) == 0);
  }
  REQUIRE(landed);
}

TEST_CASE("fleet: a silent actor is reported with its last activity and restarted", "[fleet]") {
  const std::string run_dir = FreshRunDir("silent");
  Proc p = Start({"run", "configs/catch.textproto", "--run-dir", run_dir, "--set",
                  "stop.total_env_frames=1000000000", "--set", "coordinator.heartbeat_timeout_s=3"},
                 run_dir + ".out");
  const int victim = PidOnceTraining(run_dir, "actor 1");
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGSTOP) == 0);  // alive but silent: a hung actor
  bool silent = false, restarted = false;
  REQUIRE(WaitFor([&] {
    for (const auto& r : Metrics(run_dir)) {
      if (r.value("event", "") == "silent") {
        silent = true;
        CHECK(r["process"].get<std::string>() == "actor 1");
        CHECK(r["last_activity"].get<std::string>().size() > 0);
      }
      if (r.value("event", "") == "actor_restart" && r["old_pid"].get<int>() == victim) restarted = true;
    }
    return silent && restarted;
  }, std::chrono::seconds(30)));
  ::kill(-p.pid, SIGINT);
  const int code = Wait(p, std::chrono::seconds(60));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  CHECK(code == 130);
  CHECK_THAT(out, Catch::Contains("actor 1 (pid " + std::to_string(victim) + ") silent for"));
  CheckNoneLeft(Spawned(Metrics(run_dir)));
}

TEST_CASE("fleet: --resume continues a stopped run with exactly its parameters and optimizer state and version", "[fleet][learners]") {
  for (const std::string mode : {"relay", "sync"}) {
    SECTION(mode) {
      const std::string run_dir = FreshRunDir("resume_" + mode);
      const bool sharded = mode == "sync";
      Proc first = Start({"run", sharded ? "configs/catch_2learners.textproto" : "configs/catch.textproto", "--run-dir",
                          run_dir, "--set", "stop.stop_at_target=false", "--set", "stop.total_env_frames=100000"},
                         run_dir + ".out");
      REQUIRE(Wait(first, std::chrono::seconds(60)) == 0);
      const json before = json::parse(Slurp(run_dir + "/summary.json"));
      // What the stopped run left: the relay learner's checkpoint, or the shards' parts.
      std::map<std::string, std::string> parts;
      std::string newest;
      if (sharded) {
        for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) newest = std::max(newest, e.path().string());
        for (int s = 0; s < 3; ++s) parts[std::to_string(s)] = Slurp(newest + "/shard-" + std::to_string(s) + ".bin");
      } else {
        parts["learner"] = Slurp(run_dir + "/checkpoint.bin");
      }
      // Resumed with the budget already spent: it restores and stops without a step, and
      // its final checkpoint is the same bytes (parameters, optimizer state, version, counters).
      Proc again = Start({"run", "--resume", run_dir}, run_dir + ".again.out");
      REQUIRE(Wait(again, std::chrono::seconds(60)) == 0);
      const std::string out = Slurp(again.output_path);
      INFO(out);
      CHECK_THAT(out, Catch::Contains("stampede: resuming " + run_dir));
      if (sharded) {
        std::string latest;
        for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) latest = std::max(latest, e.path().string());
        REQUIRE(latest != newest);
        for (int s = 0; s < 3; ++s) CHECK(Slurp(latest + "/shard-" + std::to_string(s) + ".bin") == parts[std::to_string(s)]);
      } else {
        CHECK(Slurp(run_dir + "/checkpoint.bin") == parts["learner"]);
      }
      // Resumed with a larger budget: it goes on from the stopped run's step and frames.
      Proc more = Start({"run", "--resume", run_dir, "--set", "stop.total_env_frames=250000"}, run_dir + ".more.out");
      REQUIRE(Wait(more, std::chrono::seconds(60)) == 0);
      const json after = json::parse(Slurp(run_dir + "/summary.json"));
      CHECK(after["env_frames"].get<int64_t>() >= 250000);
      CHECK(after["learner_steps"].get<int64_t>() > before["learner_steps"].get<int64_t>());
      int resumes = 0;
      int64_t first_step_after = -1;
      for (const auto& r : Metrics(run_dir)) {
        resumes += r.value("event", "") == "resume";
        if (resumes == 2 && !r.contains("event") && first_step_after < 0) first_step_after = r["learner_step"].get<int64_t>();
      }
      CHECK(resumes == 2);
      CHECK(first_step_after >= before["learner_steps"].get<int64_t>());
    }
  }
}

namespace {
// A free TCP port on `host` (one of the 127.x.y.z loopback addresses).
int FreePortOn(const char* host) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, host, &addr.sin_addr);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}
}  // namespace

TEST_CASE("fleet: a sync run resumed with fewer, then more PS shards continues at the same version with the same parameters", "[fleet][learners]") {
  const std::string run_dir = FreshRunDir("reshard");
  Proc first = Start({"run", "configs/catch_2learners.textproto", "--run-dir", run_dir, "--set",
                      "stop.stop_at_target=false", "--set", "stop.total_env_frames=100000"},
                     run_dir + ".out");
  REQUIRE(Wait(first, std::chrono::seconds(60)) == 0);
  const json before = json::parse(Slurp(run_dir + "/summary.json"));
  // The parameters the chief read back from the 3 shards at the stop (with the version and
  // frames), for eval and export.
  const std::string params_before = Slurp(run_dir + "/checkpoint.bin");
  // 3 -> 2 shards, the budget spent: the parts are redistributed, the run restores them and
  // stops without a step, and the parameters read back from the 2 shards are the same bytes.
  Proc fewer = Start({"run", "--resume", run_dir, "--set", "ps.num_shards=2"}, run_dir + ".fewer.out");
  REQUIRE(Wait(fewer, std::chrono::seconds(60)) == 0);
  {
    const std::string out = Slurp(fewer.output_path);
    INFO(out);
    CHECK_THAT(out, Catch::Contains("stampede: resharded ") && Catch::Contains("(3 shards") && Catch::Contains("(2 shards"));
    // checkpoint.bin: magic, format, layout fingerprint, version and env frames (bytes
    // [0, 36)), the chief's own step count (a learner counter, not restored in sync mode),
    // then the layout, the parameters and the (sync: zero) optimizer buffers, and a checksum.
    const std::string params_after = Slurp(run_dir + "/checkpoint.bin");
    REQUIRE(params_after.size() == params_before.size());
    REQUIRE(params_before.size() > 52);
    CHECK(params_after.compare(0, 36, params_before, 0, 36) == 0);
    CHECK(params_after.compare(44, params_after.size() - 52, params_before, 44, params_before.size() - 52) == 0);
    std::string latest;
    for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) latest = std::max(latest, e.path().string());
    CHECK(fs::exists(latest + "/shard-1.bin"));
    CHECK_FALSE(fs::exists(latest + "/shard-2.bin"));
  }
  // 2 -> 4 shards with a larger budget: it goes on from the stopped run's step and frames.
  Proc more = Start({"run", "--resume", run_dir, "--set", "ps.num_shards=4", "--set", "stop.total_env_frames=250000"},
                    run_dir + ".more.out");
  REQUIRE(Wait(more, std::chrono::seconds(60)) == 0);
  const std::string out = Slurp(more.output_path);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("(2 shards") && Catch::Contains("(4 shards"));
  const json after = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(after["env_frames"].get<int64_t>() >= 250000);
  CHECK(after["ps"].size() == 4);
  int resumes = 0;
  int64_t first_version_after = -1;
  for (const auto& r : Metrics(run_dir)) {
    resumes += r.value("event", "") == "resume";
    if (resumes == 2 && !r.contains("event") && first_version_after < 0) first_version_after = r["policy_version"].get<int64_t>();
  }
  CHECK(resumes == 2);
  CHECK(first_version_after >= before["learner_steps"].get<int64_t>());
}

TEST_CASE("fleet: processes started by hand on distinct loopback hosts report to stampede coordinator and stop at the budget", "[fleet][hosts]") {
  const std::string run_dir = FreshRunDir("hosts");
  const std::string config = run_dir + ".textproto";
  auto at = [](const char* host) { return std::string("tcp://") + host + ":" + std::to_string(FreePortOn(host)); };
  {
    std::ofstream out(config);
    out << "env { name: \"Catch\" }\n"
           "net { hidden_sizes: [64] }\n"
           "actors { num_actors: 2 envs_per_actor: 8 unroll_length: 10 }\n"
           "learner { batch_size: 16 optimizer { learning_rate: 0.002 } }\n"
           "ps { num_shards: 2 }\n"
           "stop { total_env_frames: 300000 }\n"
           "cluster {\n"
        << "  coordinator: \"" << at("127.0.0.2") << "\"\n"
        << "  control: \"" << at("127.0.0.2") << "\"\n"
        << "  learner: \"" << at("127.0.0.3") << "\"\n"
        << "  ps: [\"" << at("127.0.0.4") << "\", \"" << at("127.0.0.5") << "\"]\n"
        << "}\n";
  }
  Proc coordinator = Start({"coordinator", config, "--run-dir", run_dir}, run_dir + ".out");
  const std::string resolved = run_dir + "/config.textproto";
  REQUIRE(WaitFor([&] { return fs::exists(resolved); }, std::chrono::seconds(30)));
  std::vector<Proc> roles;
  for (const auto& [role, index] : std::vector<std::pair<std::string, int>>{
           {"ps", 0}, {"ps", 1}, {"learner", 0}, {"actor", 0}, {"actor", 1}}) {
    roles.push_back(Start({role, "--config", resolved, "--task-index", std::to_string(index)},
                          run_dir + "." + role + std::to_string(index) + ".out"));
  }
  const int code = Wait(coordinator, std::chrono::seconds(90));
  const std::string out = Slurp(coordinator.output_path);
  INFO(out);
  REQUIRE(code == 0);
  // Every process heard the stop and exited cleanly; the learner wrote its checkpoint.
  for (const auto& r : roles) {
    INFO(Slurp(r.output_path));
    CHECK(Wait(r, std::chrono::seconds(30)) == 0);
    CHECK_THAT(Slurp(r.output_path), Catch::Contains("the coordinator stops the run: frame budget of 300000 spent"));
  }
  for (const char* who : {"ps 0 joined", "ps 1 joined", "learner 0 joined", "actor 0 joined", "actor 1 joined"}) {
    CHECK_THAT(out, Catch::Contains(who));
  }
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["stop_reason"] == "frame budget of 300000 spent");
  CHECK(summary["env_frames"].get<int64_t>() >= 300000);
  int progress_rows = 0;
  for (const auto& r : Metrics(run_dir)) progress_rows += !r.contains("event") && r["env_frames"].get<int64_t>() > 0;
  CHECK(progress_rows >= 1);
  CHECK(fs::exists(run_dir + "/checkpoint.bin"));

  // With the coordinator gone, a process says within seconds that it cannot reach it.
  Proc lonely = Start({"actor", "--config", resolved, "--task-index", "0"}, run_dir + ".lonely.out");
  const bool said = WaitFor([&] { return Slurp(lonely.output_path).find("nothing from the coordinator") != std::string::npos; },
                            std::chrono::seconds(15));
  ::kill(-lonely.pid, SIGKILL);
  int status = 0;
  ::waitpid(lonely.pid, &status, 0);
  CHECK(said);
}
