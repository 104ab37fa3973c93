// The coordinator's decisions (coordinator/core.h) on a fake clock with a fake
// launcher and recording sinks: no process, no socket, no sleep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "coordinator/core.h"
#include "base/exit_codes.h"
#include "wire/zmq_util.h"

namespace {

using namespace stampede;
using namespace stampede::coordinator;
using namespace std::chrono_literals;

struct Call {
  std::string what;  // "start", "term", "kill"
  wire::Role role;
  int index;
  int restarts;
};

// Every process it starts gets the next id (1000, 1001, ...) as its pid.
class FakeLauncher final : public Launcher {
 public:
  ProcessId Start(wire::Role role, int index, int restarts) override {
    const ProcessId id = next_++;
    who_[id] = {role, index};
    calls.push_back({"start", role, index, restarts});
    return id;
  }
  void Terminate(ProcessId id) override { calls.push_back({"term", who_[id].first, who_[id].second, 0}); }
  void Kill(ProcessId id) override { calls.push_back({"kill", who_[id].first, who_[id].second, 0}); }
  int Pid(ProcessId id) const override { return int(id); }
  std::string LogPath(wire::Role role, int index) const override {
    return std::string("logs/") + wire::RoleName(role) + "-" + std::to_string(index) + ".log";
  }
  std::string LogTail(wire::Role, int, size_t) const override { return "the end of the log\n"; }

  std::vector<Call> Take(const std::string& what) {
    std::vector<Call> out;
    for (const auto& c : calls) {
      if (c.what == what) out.push_back(c);
    }
    calls.clear();
    return out;
  }
  std::vector<Call> calls;

 private:
  ProcessId next_ = 1000;
  std::map<ProcessId, std::pair<wire::Role, int>> who_;
};

class RecordingSinks final : public Sinks {
 public:
  void Say(const std::string& text) override { said += text; }
  void Warn(const std::string& text) override { warned += text; }
  void Metrics(const nlohmann::json& row) override { rows.push_back(row); }
  void TensorBoard(int64_t frames, double, const Scalars& s) override {
    for (const auto& [name, value] : s) tb[name].emplace_back(frames, value);
  }
  void Summary(const nlohmann::json& s) override { summary = s; }
  void Processes(const std::string& text) override { processes = text; }
  void StopMessages(std::vector<wire::Control> s) override { stops = std::move(s); }
  void EvaluationRequest(int64_t round, int64_t frames) override { eval_requests.emplace_back(round, frames); }
  int Events(const std::string& name) const {
    return int(std::count_if(rows.begin(), rows.end(), [&](const nlohmann::json& r) {
      return r.contains("event") && r["event"] == name;
    }));
  }
  std::string said, warned, processes;
  std::vector<nlohmann::json> rows;
  nlohmann::json summary;
  std::vector<wire::Control> stops;
  std::vector<std::pair<int64_t, int64_t>> eval_requests;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> tb;
};

config::Config TestConfig(int learners = 1, int shards = 1) {
  config::Config cfg;
  cfg.set_run_dir("/nonexistent/run");
  cfg.mutable_actors()->set_num_actors(2);
  cfg.mutable_actors()->set_envs_per_actor(4);
  cfg.mutable_actors()->set_unroll_length(10);
  cfg.mutable_env()->mutable_resolved_spec()->set_frames_per_step(1);
  cfg.mutable_learner()->set_num_learners(learners);
  cfg.mutable_learner()->set_queue_capacity(8);
  cfg.mutable_ps()->set_num_shards(shards);
  cfg.mutable_stop()->set_total_env_frames(1000000);
  auto* c = cfg.mutable_coordinator();
  c->set_max_restarts(2);
  c->set_restart_backoff_s(0.5);
  c->set_max_actor_restarts(1);
  c->set_stall_timeout_s(20);
  c->set_heartbeat_timeout_s(5);
  c->set_shutdown_grace_s(10);
  c->set_progress_interval_s(1000);  // no progress rows unless a test asks
  return cfg;
}

// A core with its fake launcher and sinks, its clock at `t`.
struct Fixture {
  // The run directory's checkpoints as the core reads them: the sequence a new one would
  // get, and the newest complete one's if the ordered stop wrote it (0: not).
  struct {
    int64_t next_sequence = 1;
    int64_t final_sequence = 0;
  } disk;
  explicit Fixture(config::Config cfg, bool standalone = false, int64_t resumed_frames = 0) {
    CoreOptions opt;
    opt.quiet = true;
    opt.standalone = standalone;
    if (resumed_frames > 0) {
      opt.resumed_from = "/nonexistent/run/checkpoint.bin";
      opt.resumed_frames = resumed_frames;
    }
    opt.checkpoints.next_sequence = [this] { return disk.next_sequence; };
    opt.checkpoints.final_sequence = [this] { return disk.final_sequence; };
    core = std::make_unique<Core>(cfg, opt, &launcher, &sinks, &result, t, 1.7e9);
    core->Start(t);
  }
  void Advance(Clock::duration d) {
    // Ticks every 100 ms, as the supervisor's timer does.
    const auto end = t + d;
    while (t < end) {
      t += std::min<Clock::duration>(Core::kTick, end - t);
      core->OnTick(t);
    }
  }
  // The local process of `role` `index`.
  ProcessId Id(wire::Role role, int index) {
    for (const auto& [key, p] : core->processes().all()) {
      if (p.role == role && p.index == index) return p.id;
    }
    FAIL("no process " << wire::RoleName(role) << " " << index);
    return -1;
  }
  void Exit(wire::Role role, int index, ExitStatus how = {true, 0, 0}) { core->OnExit(Id(role, index), how, 0, t); }
  // Every local process exits cleanly, actors first, then learners, then shards.
  void ExitInStopOrder() {
    for (wire::Role role : {wire::ROLE_ACTOR, wire::ROLE_LEARNER, wire::ROLE_PS}) {
      std::vector<int> indices;
      for (const auto& [key, p] : core->processes().all()) {
        if (p.role == role) indices.push_back(p.index);
      }
      for (int index : indices) Exit(role, index);
    }
  }
  void Status(const wire::Status& s) { core->OnStatus(s.SerializeAsString(), "", t); }
  // A status from the local process of `role` `index` (its pid as the launcher gave it).
  wire::Status StatusOf(wire::Role role, int index) {
    wire::Status s;
    *s.mutable_sender() = wire::MakeSender(role, index, 1);
    s.set_pid(int(Id(role, index)));
    s.set_activity("working");
    return s;
  }
  void ActorMade(int actor, int64_t frames) {
    auto s = StatusOf(wire::ROLE_ACTOR, actor);
    s.set_actor_frames(frames);
    Status(s);
  }
  void Learner(int index, int64_t frames, int64_t steps) {
    auto s = StatusOf(wire::ROLE_LEARNER, index);
    s.set_env_frames(frames);
    s.set_learner_steps(steps);
    Status(s);
  }
  Clock::time_point t = Clock::time_point{} + 1000s;
  FakeLauncher launcher;
  RecordingSinks sinks;
  RunResult result;
  std::unique_ptr<Core> core;
};

std::vector<std::string> Names(const std::vector<Call>& calls) {
  std::vector<std::string> out;
  for (const auto& c : calls) out.push_back(std::string(wire::RoleName(c.role)) + " " + std::to_string(c.index));
  return out;
}

}  // namespace

TEST_CASE("coordinator: starts the shards, then the learners, then the actors", "[coordinator]") {
  Fixture f(TestConfig(2, 2));
  CHECK(Names(f.launcher.Take("start")) ==
        std::vector<std::string>{"ps 0", "ps 1", "learner 0", "learner 1", "actor 0", "actor 1"});
  CHECK(f.sinks.processes.find("learner 1 1003") != std::string::npos);
  CHECK(f.sinks.Events("spawn") == 6);
  CHECK(f.sinks.Events("start") == 1);
}

TEST_CASE("coordinator: a standalone coordinator starts nothing and learns its processes from their statuses",
          "[coordinator]") {
  Fixture f(TestConfig(), /*standalone=*/true);
  CHECK(f.launcher.calls.empty());
  wire::Status s;
  *s.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 1);
  s.set_pid(77);
  s.set_activity("stepping");
  f.Status(s);
  CHECK(f.core->processes().Alive(wire::ROLE_ACTOR) == 1);
  // Silent past the heartbeat timeout: reported once, no longer counted, not killed.
  f.Advance(6s);
  CHECK(f.core->processes().Alive(wire::ROLE_ACTOR) == 0);
  CHECK(f.sinks.Events("silent") == 1);
  CHECK(f.launcher.Take("kill").empty());
}

TEST_CASE("coordinator: a crashed actor is restarted at once, within max_actor_restarts", "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.Exit(wire::ROLE_ACTOR, 1, {false, 0, 9});
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"actor 1"});
  CHECK(f.sinks.warned.find("actor 1 (pid 1003) was killed by signal 9; restarted as pid 1004") != std::string::npos);
  CHECK(f.sinks.warned.find("the end of the log") != std::string::npos);
  CHECK_FALSE(f.core->stopping());
  // The budget (1) is spent: the next crash stops the run with exit 1.
  f.Exit(wire::ROLE_ACTOR, 0, {true, 1, 0});
  CHECK(f.launcher.Take("start").empty());
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
}

TEST_CASE("coordinator: a crashed learner is restarted after a doubling backoff, within max_restarts",
          "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.Exit(wire::ROLE_LEARNER, 0, {false, 0, 9});
  f.Advance(400ms);
  CHECK(f.launcher.Take("start").empty());  // backoff 0.5 s
  f.Advance(200ms);
  auto started = f.launcher.Take("start");
  REQUIRE(started.size() == 1);
  CHECK(started[0].role == wire::ROLE_LEARNER);
  CHECK(started[0].restarts == 1);  // told it is a restart (it restores its checkpoint)
  // Second crash: 1 s backoff.
  f.Exit(wire::ROLE_LEARNER, 0, {true, 1, 0});
  f.Advance(900ms);
  CHECK(f.launcher.Take("start").empty());
  f.Advance(200ms);
  started = f.launcher.Take("start");
  REQUIRE(started.size() == 1);
  CHECK(started[0].restarts == 2);
  // The budget (2) is spent: the third crash stops the run.
  f.Exit(wire::ROLE_LEARNER, 0, {false, 0, 11});
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
  CHECK(f.sinks.warned.find("its restart budget (coordinator.max_restarts = 2) is spent") != std::string::npos);
  f.Advance(5s);
  CHECK(f.launcher.Take("start").empty());
}

TEST_CASE("coordinator: a shard that refused its input (exit 2) is not restarted", "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.Exit(wire::ROLE_PS, 0, {true, 2, 0});
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
  f.Advance(3s);
  CHECK(f.launcher.Take("start").empty());
}

TEST_CASE("coordinator: a stop goes actors and other learners, then the chief, then the shards", "[coordinator]") {
  Fixture f(TestConfig(2, 2));
  f.launcher.Take("start");
  f.core->RequestStop("test", 0, f.t);
  auto stage = Names(f.launcher.Take("term"));
  std::sort(stage.begin(), stage.end());
  CHECK(stage == std::vector<std::string>{"actor 0", "actor 1", "learner 1"});
  // The control messages carry the same stage for processes started elsewhere.
  std::vector<std::string> msgs;
  for (const auto& c : f.sinks.stops) msgs.push_back(std::string(wire::RoleName(c.stop_role())) + " " + std::to_string(c.stop_index()));
  CHECK(msgs == std::vector<std::string>{"actor -1", "learner 1"});
  f.Exit(wire::ROLE_ACTOR, 0);
  f.Exit(wire::ROLE_ACTOR, 1);
  f.launcher.Take("term");  // the same stage again: a second SIGTERM changes nothing
  f.Exit(wire::ROLE_LEARNER, 1);
  stage = Names(f.launcher.Take("term"));
  CHECK(stage == std::vector<std::string>{"learner 0"});
  f.Exit(wire::ROLE_LEARNER, 0);
  stage = Names(f.launcher.Take("term"));
  CHECK(stage == std::vector<std::string>{"ps 0", "ps 1"});
  CHECK_FALSE(f.core->finished());
  f.Exit(wire::ROLE_PS, 0);
  f.Exit(wire::ROLE_PS, 1);
  CHECK(f.core->finished());
  CHECK(f.result.exit_code == 0);
  CHECK(f.sinks.summary["stop_reason"] == "test");
  CHECK(f.sinks.summary["exit_code"] == 0);
}

TEST_CASE("coordinator: a learner that fails on its way out fails the run, and the grace ends in SIGKILL",
          "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.core->RequestStop("budget", 0, f.t);
  f.Exit(wire::ROLE_ACTOR, 0);
  f.Exit(wire::ROLE_ACTOR, 1);
  f.Exit(wire::ROLE_LEARNER, 0, {true, 1, 0});
  CHECK(f.result.exit_code == 1);
  // The shard does not exit: past shutdown_grace_s it is killed.
  f.launcher.Take("term");
  f.Advance(9s);
  CHECK(f.launcher.Take("kill").empty());
  f.Advance(2s);
  CHECK(Names(f.launcher.Take("kill")) == std::vector<std::string>{"ps 0"});
  f.Exit(wire::ROLE_PS, 0, {false, 0, 9});
  CHECK(f.core->finished());
  CHECK(f.sinks.summary["exit_code"] == 1);
}

namespace {

// Starts the fleet, asks for a stop, and lets both actors exit 0 (the first stage).
void StopWithActorsGone(Fixture& f, const std::string& reason) {
  f.launcher.Take("start");
  f.core->RequestStop(reason, 0, f.t);
  f.Exit(wire::ROLE_ACTOR, 0);
  f.Exit(wire::ROLE_ACTOR, 1);
}

}  // namespace

TEST_CASE("coordinator: a shard that dies after the chief's final checkpoint is said, not counted", "[coordinator]") {
  // Two learners (sync/async: the chief's final checkpoint holds every shard's part).
  Fixture f(TestConfig(2, 2));
  StopWithActorsGone(f, "target return reached");
  f.Exit(wire::ROLE_LEARNER, 1);
  f.Exit(wire::ROLE_LEARNER, 0);  // exit 0: its final checkpoint is complete
  f.Exit(wire::ROLE_PS, 0, {false, 0, 9});
  f.Exit(wire::ROLE_PS, 1);
  CHECK(f.core->finished());
  CHECK(f.result.exit_code == 0);
  CHECK(f.sinks.summary["exit_code"] == 0);
  CHECK(f.sinks.summary["stop_reason"] == "target return reached");
  CHECK_THAT(f.sinks.warned, Catch::Contains("ps 0 was killed by signal 9 while stopping, after the final "
                                             "checkpoint was complete: nothing was lost"));
}

TEST_CASE("coordinator: a shard that dies before the chief's final checkpoint still fails the run", "[coordinator]") {
  Fixture f(TestConfig(2, 2));
  StopWithActorsGone(f, "target return reached");
  f.Exit(wire::ROLE_PS, 0, {false, 0, 9});  // while the learners still write theirs
  CHECK(f.result.exit_code == 1);
  f.Exit(wire::ROLE_LEARNER, 1);
  f.Exit(wire::ROLE_LEARNER, 0);
  f.Exit(wire::ROLE_PS, 1);
  CHECK(f.core->finished());
  CHECK(f.sinks.summary["exit_code"] == 1);
}

TEST_CASE("coordinator: a shard killed once the final checkpoint is whole on disk, before the chief exits, is not counted",
          "[coordinator]") {
  Fixture f(TestConfig(2, 2));
  f.disk = {4, 3};  // checkpoints 1-3 (3 final, from the run this one resumed) before the stop
  StopWithActorsGone(f, "target return reached");
  f.Exit(wire::ROLE_LEARNER, 1);
  f.disk = {5, 4};  // the chief's final checkpoint, 4, is whole; the chief has not exited
  f.Exit(wire::ROLE_PS, 0, {false, 0, 9});
  CHECK(f.result.exit_code == 0);
  CHECK_THAT(f.sinks.warned, Catch::Contains("ps 0 was killed by signal 9 while stopping, after the final "
                                             "checkpoint was complete: nothing was lost"));
  f.Exit(wire::ROLE_LEARNER, 0);
  f.Exit(wire::ROLE_PS, 1);
  CHECK(f.core->finished());
  CHECK(f.sinks.summary["exit_code"] == 0);
}

TEST_CASE("coordinator: a final checkpoint from before the stop, or a periodic one during it, does not cover a death",
          "[coordinator]") {
  SECTION("the newest final checkpoint predates the stop (a resumed run's)") {
    Fixture f(TestConfig(2, 2));
    f.disk = {4, 3};
    StopWithActorsGone(f, "target return reached");
    f.Exit(wire::ROLE_PS, 0, {false, 0, 9});  // checkpoint 3 is still the newest
    CHECK(f.result.exit_code == 1);
  }
  SECTION("a periodic round completed during the stop, the final one not") {
    Fixture f(TestConfig(2, 2));
    f.disk = {4, 0};
    StopWithActorsGone(f, "target return reached");
    f.disk = {6, 0};  // 4 periodic and whole, 5 begun: the newest complete is not final
    f.Exit(wire::ROLE_PS, 1, {false, 0, 9});
    CHECK(f.result.exit_code == 1);
  }
}

TEST_CASE("coordinator: the frame budget stops the run once a believable status reaches it", "[coordinator]") {
  auto cfg = TestConfig();
  cfg.mutable_stop()->set_total_env_frames(5000);
  Fixture f(cfg);
  f.ActorMade(0, 2400);
  f.ActorMade(1, 2400);
  f.Learner(0, 4000, 10);
  CHECK_FALSE(f.core->stopping());
  CHECK(f.core->learners().merged.env_frames() == 4000);
  f.Learner(0, 5200, 13);
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 0);
  CHECK(f.sinks.warned.empty());  // quiet, exit 0: nothing on stderr
}

TEST_CASE("coordinator: a learner status ahead of the actors is held, applied once they vouch for it",
          "[coordinator]") {
  Fixture f(TestConfig());
  f.ActorMade(0, 1000);
  f.ActorMade(1, 1000);
  // Bound: made 2000 + unreported (2 x (min(1000, 64 x 40) + 40)) + peak 0 + in flight
  // 40 x (8/4 + 4 + 8) = 560: 4640. 10k is beyond it.
  f.Learner(0, 10000, 50);
  CHECK(f.core->learners().merged.env_frames() == 0);
  f.Advance(1s);
  f.ActorMade(0, 5000);
  f.ActorMade(1, 5000);
  CHECK(f.core->learners().merged.env_frames() == 10000);
  CHECK(f.core->implausible_statuses() == 0);
}

TEST_CASE("coordinator: a learner status the actors never vouch for is dropped after 3 s", "[coordinator]") {
  Fixture f(TestConfig());
  f.ActorMade(0, 1000);
  f.ActorMade(1, 1000);
  f.Learner(0, 3000, 10);
  REQUIRE(f.core->learners().merged.env_frames() == 3000);
  f.Learner(0, 1000000, 11);
  f.Advance(2900ms);
  CHECK(f.core->implausible_statuses() == 0);
  f.Advance(300ms);
  CHECK(f.core->implausible_statuses() == 1);
  CHECK(f.core->learners().merged.env_frames() == 3000);
  CHECK(f.sinks.Events("implausible_status") == 1);
  CHECK_FALSE(f.core->stopping());
  // Frames going back within one learner process are refused too.
  f.Learner(0, 2000, 12);
  f.Advance(3500ms);
  CHECK(f.core->implausible_statuses() == 2);
  CHECK(f.core->learners().merged.env_frames() == 3000);
}

TEST_CASE("coordinator: the watchdog stops a run whose learner steps stop moving", "[coordinator]") {
  Fixture f(TestConfig());
  f.ActorMade(0, 500);
  f.ActorMade(1, 500);
  for (int i = 1; i <= 10; ++i) {
    f.Learner(0, 50 * i, i);
    f.Advance(2s);  // moving: 20 s pass without a stall
  }
  CHECK_FALSE(f.core->stopping());
  // Keep the processes heard (no heartbeat kill), but the steps stay at 10.
  for (int i = 0; i < 11; ++i) {
    f.Learner(0, 500, 10);
    f.ActorMade(0, 500);
    f.ActorMade(1, 500);
    f.Advance(2s);
  }
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
  CHECK(f.sinks.Events("stall") == 1);
  CHECK(f.sinks.warned.find("learner: step 10") != std::string::npos);
}

TEST_CASE("coordinator: a silent local process is killed, then restarted when its exit is seen", "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  for (int i = 0; i < 6; ++i) {
    f.ActorMade(0, 10);
    f.ActorMade(1, 10);
    f.Status(f.StatusOf(wire::ROLE_PS, 0));
    f.Advance(1s);  // the learner says nothing
  }
  CHECK(Names(f.launcher.Take("kill")) == std::vector<std::string>{"learner 0"});
  CHECK(f.sinks.Events("silent") == 1);
  f.Exit(wire::ROLE_LEARNER, 0, {false, 0, 9});
  f.Advance(600ms);
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"learner 0"});
}

TEST_CASE("coordinator: an exit during Ctrl-C is a stop with 130, not a crash", "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.core->OnExit(f.Id(wire::ROLE_ACTOR, 0), {false, 0, 2}, 2, f.t);
  CHECK(f.launcher.Take("start").empty());
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 130);
}

TEST_CASE("coordinator: with two learners the target is met over both windows together", "[coordinator]") {
  auto cfg = TestConfig(2, 1);
  cfg.mutable_stop()->set_target_return(0.5);
  cfg.mutable_stop()->set_stop_at_target(true);
  Fixture f(cfg);
  f.ActorMade(0, 10000);
  f.ActorMade(1, 10000);
  auto a = f.StatusOf(wire::ROLE_LEARNER, 0);
  a.set_env_frames(3000);
  a.set_mean_return_100(0.9);
  a.set_returns_counted(60);
  f.Status(a);
  CHECK_FALSE(f.core->stopping());  // 60 returns: not yet a window of 100
  auto b = f.StatusOf(wire::ROLE_LEARNER, 1);
  b.set_env_frames(2000);
  b.set_mean_return_100(0.1);
  b.set_returns_counted(40);
  f.Status(b);
  // (0.9 x 60 + 0.1 x 40) / 100 = 0.58 >= 0.5 over 100 returns, at 5000 frames.
  CHECK(f.core->stopping());
  CHECK(f.result.frames_to_target == 5000);
}

TEST_CASE("coordinator: a failed checkpoint fails the run only if no later one completes", "[coordinator]") {
  auto cfg = TestConfig();
  cfg.mutable_stop()->set_total_env_frames(5000);
  SECTION("a later checkpoint completes: exit 0, the failure counted") {
    Fixture f(cfg);
    f.ActorMade(0, 3000);
    f.ActorMade(1, 3000);
    auto s = f.StatusOf(wire::ROLE_LEARNER, 0);
    s.set_env_frames(1000);
    s.set_checkpoint_error("only 2 of 3 shards wrote their part within 60 s");
    s.set_checkpoint_failures(1);
    f.Status(s);
    CHECK(f.sinks.Events("checkpoint_failed") == 1);
    s.set_env_frames(5000);
    s.clear_checkpoint_error();
    f.Status(s);
    CHECK(f.sinks.Events("checkpoint_recovered") == 1);
    f.launcher.Take("start");
    f.ExitInStopOrder();
    REQUIRE(f.core->finished());
    CHECK(f.result.exit_code == 0);
    CHECK(f.sinks.summary["checkpoint_failures"] == 1);
    CHECK_FALSE(f.sinks.summary.contains("checkpoint_error"));
  }
  SECTION("the failure stands at the end: exit 1, the error in the summary") {
    Fixture f(cfg);
    f.ActorMade(0, 3000);
    f.ActorMade(1, 3000);
    auto s = f.StatusOf(wire::ROLE_LEARNER, 0);
    s.set_env_frames(5000);
    s.set_checkpoint_error("disk full");
    s.set_checkpoint_failures(1);
    f.Status(s);
    f.ExitInStopOrder();
    REQUIRE(f.core->finished());
    CHECK(f.result.exit_code == 1);
    CHECK(f.sinks.summary["checkpoint_error"] == "disk full");
  }
}

TEST_CASE("coordinator: a learner that ends on a device error (exit 3) is not restarted", "[coordinator]") {
  Fixture f(TestConfig());
  f.launcher.Take("start");
  f.Exit(wire::ROLE_LEARNER, 0, {true, 3, 0});
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
  f.Advance(3s);
  CHECK(f.launcher.Take("start").empty());
  CHECK(f.sinks.warned.find("a device error: not restarted") != std::string::npos);
}

TEST_CASE("coordinator: a role's Status decides, through its exit code, whether it is restarted", "[coordinator]") {
  // The role bodies return a base::Status and `stampede` exits with base::ExitCode of it:
  // what the coordinator then does is what the code promises.
  struct Case {
    base::Status status;
    bool restarted;
  };
  const Case cases[] = {
      {base::Unavailable("no parameters from the PS (2 shards) after 60 s"), true},
      {base::Internal("an env failed"), true},
      {base::InvalidArgument("checkpoint ckpt-3 has no usable part for this shard"), false},
      {base::DeviceError("out of memory"), false},
  };
  for (const auto& c : cases) {
    INFO(c.status.ToString());
    Fixture f(TestConfig());
    f.launcher.Take("start");
    f.Exit(wire::ROLE_LEARNER, 0, {true, base::ExitCode(c.status), 0});
    f.Advance(3s);
    CHECK(f.launcher.Take("start").size() == (c.restarted ? 1u : 0u));
    CHECK(f.core->stopping() == !c.restarted);
  }
  // Stopped on request, a role returns ok and exits 0.
  CHECK(base::ExitCode(base::OkStatus()) == 0);
}

TEST_CASE("status: StatusOr holds a value or the failure, and Within names where it happened", "[status]") {
  base::StatusOr<int> seven = 7;
  REQUIRE(seven.ok());
  CHECK(*seven == 7);
  CHECK(seven.status().ok());
  base::StatusOr<int> refused = base::InvalidArgument("learner.batch_size is 0");
  CHECK_FALSE(refused.ok());
  CHECK(refused.status().code() == base::Code::kInvalidArgument);
  CHECK(refused.status().Within("config.textproto:12").ToString() ==
        "invalid argument: config.textproto:12: learner.batch_size is 0");
  // An ok Status has no value to give: it cannot pass for one.
  base::StatusOr<std::string> empty = base::OkStatus();
  CHECK_FALSE(empty.ok());
  CHECK(empty.status().code() == base::Code::kInternal);
  CHECK(base::OkStatus().Within("anywhere").ok());
}

namespace {
// The evaluator's status reporting round `round` (one task, return `mean`).
wire::Status EvalReport(Fixture& f, int64_t round, int64_t frames, double mean) {
  auto s = f.StatusOf(wire::ROLE_EVALUATOR, 0);
  auto* r = s.mutable_evaluation();
  r->set_round(round);
  r->set_env_frames(frames);
  r->set_policy_version(7 * round);
  auto* t = r->add_tasks();
  t->set_task(0);
  t->set_return_mean(mean);
  t->set_return_std(0.5);
  t->set_episodes(20);
  return s;
}
}  // namespace

TEST_CASE("coordinator: evaluation asks for a round at each interval, writes each report once, and the stop "
          "waits for the final round",
          "[coordinator][evaluation]") {
  auto cfg = TestConfig();
  cfg.mutable_stop()->set_total_env_frames(5000);
  cfg.mutable_evaluation()->set_interval_frames(1000);
  Fixture f(cfg);
  CHECK(Names(f.launcher.Take("start")) ==
        std::vector<std::string>{"ps 0", "learner 0", "actor 0", "actor 1", "evaluator 0"});
  f.ActorMade(0, 3000);
  f.ActorMade(1, 3000);
  f.Learner(0, 800, 4);
  CHECK(f.sinks.eval_requests.empty());
  f.Learner(0, 1200, 6);
  f.Learner(0, 1500, 7);  // the same interval: no second request
  REQUIRE(f.sinks.eval_requests == std::vector<std::pair<int64_t, int64_t>>{{1, 1200}});
  f.Learner(0, 3300, 16);  // two intervals passed at once: one request, the newest frames
  REQUIRE(f.sinks.eval_requests.size() == 2);
  CHECK(f.sinks.eval_requests[1] == std::pair<int64_t, int64_t>{2, 3300});
  f.Learner(0, 3900, 18);  // the next multiple is 4000
  CHECK(f.sinks.eval_requests.size() == 2);

  // Each round is written once, however often the evaluator repeats it; a round never
  // asked for is not believed.
  f.Status(EvalReport(f, 1, 1200, 0.25));
  f.Status(EvalReport(f, 1, 1200, 0.25));
  f.Status(EvalReport(f, 5, 9999, 1.0));
  REQUIRE(f.sinks.Events("evaluation") == 1);
  nlohmann::json ev;
  for (const auto& r : f.sinks.rows) {
    if (r.value("event", "") == "evaluation") ev = r;
  }
  CHECK(ev["round"] == 1);
  CHECK(ev["env_frames"] == 1200);  // the frames it was asked at, not the frames now
  CHECK(ev["eval_return_mean"].get<double>() == Approx(0.25));
  CHECK(ev["tasks"].begin().value()["episodes"] == 20);
  REQUIRE(f.sinks.tb.count("eval/return_mean"));
  CHECK(f.sinks.tb["eval/return_mean"] == std::vector<std::pair<int64_t, double>>{{1200, 0.25}});

  // The budget: a final round at the last frames; everything else stops, the evaluator
  // only once that round is in.
  f.ActorMade(0, 6000);
  f.Learner(0, 5100, 21);
  REQUIRE(f.core->stopping());
  REQUIRE(f.sinks.eval_requests.size() == 3);
  CHECK(f.sinks.eval_requests[2] == std::pair<int64_t, int64_t>{3, 5100});
  for (const auto& c : f.launcher.Take("term")) CHECK(c.role != wire::ROLE_EVALUATOR);
  for (const auto& c : f.sinks.stops) CHECK(c.stop_role() != wire::ROLE_EVALUATOR);
  f.ExitInStopOrder();
  CHECK_FALSE(f.core->finished());
  f.Advance(15s);  // past shutdown_grace_s: the final round has evaluation.final_timeout_s
  CHECK(f.launcher.Take("kill").empty());
  f.Status(EvalReport(f, 2, 3300, 0.5));
  f.Status(EvalReport(f, 3, 5100, 0.9));
  CHECK(Names(f.launcher.Take("term")) == std::vector<std::string>{"evaluator 0"});
  f.Exit(wire::ROLE_EVALUATOR, 0);
  REQUIRE(f.core->finished());
  CHECK(f.result.exit_code == 0);
  CHECK(f.sinks.Events("evaluation") == 3);
  CHECK(f.sinks.summary["evaluation"]["round"] == 3);
  CHECK(f.sinks.summary["evaluation"]["eval_return_mean"].get<double>() == Approx(0.9));
}

TEST_CASE("coordinator: a crashed evaluator is restarted, and one that refuses its config stops the run",
          "[coordinator][evaluation]") {
  auto cfg = TestConfig();
  cfg.mutable_evaluation()->set_interval_frames(1000);
  cfg.mutable_coordinator()->set_max_actor_restarts(5);
  Fixture f(cfg);
  f.launcher.Take("start");
  f.Exit(wire::ROLE_EVALUATOR, 0, {false, 0, 11});
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"evaluator 0"});
  CHECK_FALSE(f.core->stopping());
  f.Exit(wire::ROLE_EVALUATOR, 0, {true, 2, 0});
  CHECK(f.core->stopping());
  CHECK(f.result.exit_code == 1);
  CHECK(f.sinks.warned.find("evaluator 0") != std::string::npos);
}

TEST_CASE("coordinator: a suite's evaluation has per-task and normalised scores", "[coordinator][evaluation]") {
  auto cfg = TestConfig();
  cfg.clear_env();
  for (const char* name : {"a", "b"}) {
    auto* t = cfg.add_tasks();
    t->set_name(name);
    t->set_random_score(0);
    t->set_reference_score(10);
  }
  cfg.mutable_env()->mutable_resolved_spec()->set_frames_per_step(1);
  cfg.mutable_evaluation()->set_interval_frames(1000);
  Fixture f(cfg);
  f.ActorMade(0, 3000);
  f.ActorMade(1, 3000);
  f.Learner(0, 1500, 6);
  INFO(f.sinks.warned);
  CHECK(f.core->learners().merged.env_frames() == 1500);
  REQUIRE(f.sinks.eval_requests.size() == 1);
  auto s = EvalReport(f, 1, 1500, 5.0);  // a: 0.5 normalised
  auto* b = s.mutable_evaluation()->add_tasks();
  b->set_task(1);
  b->set_return_mean(2.0);  // b: 0.2
  b->set_episodes(20);
  f.Status(s);
  nlohmann::json ev;
  for (const auto& r : f.sinks.rows) {
    if (r.value("event", "") == "evaluation") ev = r;
  }
  REQUIRE(ev.contains("tasks"));
  CHECK(ev["tasks"]["a"]["eval_normalised_score"].get<double>() == Approx(0.5));
  CHECK(ev["tasks"]["b"]["eval_return_mean"].get<double>() == Approx(2.0));
  CHECK(ev["eval_normalised_mean"].get<double>() == Approx(0.35));
  CHECK(ev["eval_normalised_median"].get<double>() == Approx(0.35));
  CHECK_FALSE(ev.contains("eval_return_mean"));  // raw returns of different scales are not averaged
}

TEST_CASE("coordinator: scale up starts actors past actors.num_actors and scale down stops the highest in order "
          "and never restarts them", "[coordinator][scale]") {
  Fixture f(TestConfig(2, 1));
  f.launcher.calls.clear();
  // Below the learners (each needs an actor), above kMaxActors: refused, nothing started.
  CHECK_FALSE(f.core->Scale(1, f.t).ok);
  CHECK_FALSE(f.core->Scale(1025, f.t).ok);
  CHECK(f.launcher.calls.empty());
  CHECK(f.core->Scale(2, f.t).ok);  // the count it has: nothing to do
  CHECK(f.launcher.calls.empty());

  const ScaleAnswer up = f.core->Scale(4, f.t);
  CHECK(up.ok);
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"actor 2", "actor 3"});
  CHECK(f.core->processes().Alive(wire::ROLE_ACTOR) == 4);
  CHECK(f.core->actors_target() == 4);
  CHECK(f.sinks.Events("scale") == 1);
  // A new actor's statuses count like any other's (its index is past actors.num_actors).
  f.ActorMade(3, 800);
  f.Advance(std::chrono::milliseconds(200));

  const ScaleAnswer down = f.core->Scale(2, f.t);
  CHECK(down.ok);
  CHECK(Names(f.launcher.Take("term")) == std::vector<std::string>{"actor 2", "actor 3"});
  // Asked again before they have gone: refused, so an index is never started twice.
  const ScaleAnswer early = f.core->Scale(3, f.t);
  CHECK_FALSE(early.ok);
  CHECK_THAT(early.message, Catch::Contains("still stopping"));
  f.Exit(wire::ROLE_ACTOR, 3);
  f.Exit(wire::ROLE_ACTOR, 2, ExitStatus{false, 0, 9});  // even a crash on the way out is not restarted
  CHECK(f.launcher.Take("start").empty());
  CHECK(f.sinks.Events("actor_retired") == 2);
  CHECK(f.sinks.Events("actor_restart") == 0);
  CHECK(f.core->processes().Alive(wire::ROLE_ACTOR) == 2);
  // Back up again: the retired index starts afresh.
  CHECK(f.core->Scale(3, f.t).ok);
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"actor 2"});
  // An ordinary crash of a fleet actor is still restarted.
  f.Exit(wire::ROLE_ACTOR, 2, ExitStatus{false, 0, 9});
  CHECK(Names(f.launcher.Take("start")) == std::vector<std::string>{"actor 2"});
  // While the run stops, the fleet's size is not changed.
  f.core->RequestStop("test", 0, f.t);
  CHECK_FALSE(f.core->Scale(4, f.t).ok);
}

TEST_CASE("coordinator: an actor that does not leave within the grace of a scale-down is killed", "[coordinator][scale]") {
  config::Config cfg = TestConfig();
  cfg.mutable_coordinator()->set_heartbeat_timeout_s(100);  // no silence checks, no watchdog here
  cfg.mutable_coordinator()->set_stall_timeout_s(0);
  Fixture f(cfg);
  f.launcher.calls.clear();
  REQUIRE(f.core->Scale(1, f.t).ok);
  CHECK(Names(f.launcher.Take("term")) == std::vector<std::string>{"actor 1"});
  f.Advance(std::chrono::seconds(9));
  CHECK(f.launcher.Take("kill").empty());
  f.Advance(std::chrono::seconds(2));  // past coordinator.shutdown_grace_s (10 s)
  CHECK(Names(f.launcher.Take("kill")) == std::vector<std::string>{"actor 1"});
  f.Advance(std::chrono::seconds(20));
  CHECK(f.launcher.Take("kill").empty());  // once
  f.Exit(wire::ROLE_ACTOR, 1, ExitStatus{false, 0, 9});
  CHECK(f.launcher.Take("start").empty());
  CHECK(f.sinks.Events("actor_retired") == 1);
}

TEST_CASE("coordinator: a standalone coordinator scales down over the control socket, up by the scheduler",
          "[coordinator][scale]") {
  Fixture f(TestConfig(), /*standalone=*/true);
  for (int a = 0; a < 3; ++a) {  // three actors started elsewhere (one past actors.num_actors)
    wire::Status s;
    *s.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, a, 1);
    s.set_pid(70 + a);
    s.set_activity("acting");
    f.Status(s);
  }
  REQUIRE(f.core->processes().Alive(wire::ROLE_ACTOR) == 3);
  const ScaleAnswer up = f.core->Scale(4, f.t);
  CHECK(up.ok);
  CHECK_THAT(up.message, Catch::Contains("--task-index I"));
  CHECK(f.launcher.calls.empty());  // it starts nothing
  REQUIRE(f.core->Scale(1, f.t).ok);
  // A stop for each one retiring that runs (actor 3 never came), on every heartbeat.
  std::vector<int> stopped;
  for (const auto& c : f.sinks.stops) {
    CHECK(c.stop());
    CHECK(c.stop_role() == wire::ROLE_ACTOR);
    stopped.push_back(c.stop_index());
  }
  CHECK(stopped == std::vector<int>{1, 2});
  // Actor 1 says it stopped: its stop leaves the heartbeat.
  wire::Status s;
  *s.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 1, 1);
  s.set_pid(71);
  s.set_activity("stopped");
  f.Status(s);
  REQUIRE(f.sinks.stops.size() == 1);
  CHECK(f.sinks.stops[0].stop_index() == 2);
  CHECK(f.sinks.Events("actor_retired") == 1);
}

TEST_CASE("coordinator: a resumed run writes no row behind its checkpoint's frames", "[coordinator]") {
  config::Config cfg = TestConfig();
  cfg.mutable_coordinator()->set_progress_interval_s(1);
  Fixture f(cfg, false, /*resumed_frames=*/75000);
  f.Advance(3s);  // no learner heard yet: no progress row
  int64_t seen = 0;
  for (const auto& r : f.sinks.rows) {
    CHECK(r["env_frames"].get<int64_t>() >= 75000);
    seen += !r.contains("event");
  }
  CHECK(seen == 0);
  CHECK(f.sinks.Events("resume") == 1);
  f.ActorMade(0, 500);
  auto s = f.StatusOf(wire::ROLE_LEARNER, 0);
  s.set_env_frames(75500);
  s.set_start_env_frames(75000);  // restored from the checkpoint
  s.set_learner_steps(10);
  f.Status(s);
  f.Advance(2s);
  int rows = 0;
  for (const auto& r : f.sinks.rows) {
    if (r.contains("event")) continue;
    ++rows;
    CHECK(r["env_frames"].get<int64_t>() >= 75000);
  }
  CHECK(rows >= 1);
}

TEST_CASE("coordinator: a learner restarted from an older checkpoint: its lost frames still count, rows never go back",
          "[coordinator]") {
  config::Config cfg = TestConfig();
  cfg.mutable_coordinator()->set_progress_interval_s(1);
  cfg.mutable_stop()->set_total_env_frames(60000);
  Fixture f(cfg);
  f.ActorMade(0, 30000);
  f.ActorMade(1, 30000);
  f.Learner(0, 50000, 300);
  f.Advance(1100ms);
  f.Exit(wire::ROLE_LEARNER, 0, {false, 0, 9});
  f.Advance(600ms);  // restarted (its second incarnation); it restored the checkpoint of 40000 frames
  auto restarted = [&](int64_t frames, int64_t steps) {
    auto s = f.StatusOf(wire::ROLE_LEARNER, 0);
    *s.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 2);
    s.set_env_frames(frames);
    s.set_learner_steps(steps);
    f.Status(s);
  };
  restarted(40000, 250);
  f.Advance(1100ms);
  REQUIRE(f.sinks.Events("frames_lost") == 1);
  int64_t prev = 0;
  for (const auto& r : f.sinks.rows) {
    const int64_t frames = r["env_frames"].get<int64_t>();
    CHECK(frames >= prev);
    prev = std::max(prev, frames);
    if (r.value("event", "") == "frames_lost") {
      CHECK(r["lost"] == 10000);
      CHECK(r["restored_frames"] == 40000);
    }
  }
  CHECK(f.core->learners().merged.env_frames() == 50000);  // 40000 + the 10000 lost
  // The budget holds the lost frames: 60000 in all is 50000 of the learner's own.
  f.ActorMade(0, 35000);
  f.ActorMade(1, 35000);
  restarted(49000, 300);
  CHECK_FALSE(f.core->stopping());
  restarted(50000, 310);
  CHECK(f.core->stopping());
}
