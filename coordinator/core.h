// The coordinator's decision core: no system calls, no sockets, no CAF. Driven by events
// (a status arrived, a process exited, a tick at time t, a stop was asked for), it
// answers by calling its launcher (start, terminate, kill) and its sinks (console lines,
// metrics rows, the summary, the stop messages). Time comes in with every event, so the
// unit tests (tests/coordinator_test.cc) run it on a fake clock with a fake launcher.
//
// What it decides: the start of every role, restarts (actors within
// coordinator.max_actor_restarts; learners and shards within coordinator.max_restarts
// with an exponential backoff; exit status 2, "refused its input", is never restarted),
// the stop order (actors and non-chief learners, then the chief, then the shards),
// the frame/step/target budget, the watchdog, heartbeats, and which learner statuses are
// believed (frames never go back, never run ahead of what the actors made).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/actor_watch.h"
#include "coordinator/run.h"
#include "coordinator/launcher.h"
#include "coordinator/sinks.h"
#include "config/config.pb.h"
#include "base/log_limit.h"
#include "wire/messages.pb.h"

namespace stampede::coordinator {

using Clock = std::chrono::steady_clock;

// One process of the run, local (started by the launcher) or started elsewhere (known
// from its statuses: `stampede coordinator`).
struct Process {
  wire::Role role = wire::ROLE_UNSPECIFIED;
  int index = 0;
  bool local = false;
  ProcessId id = -1;  // the launcher's id (local only)
  int pid = 0;        // as its statuses say (0: not heard yet)
  Clock::time_point last_heard;
  std::string activity = "starting";
  bool stopped = false;  // started elsewhere: said "stopped", or went silent
  std::string Name() const;  // "learner 0"
};

// Every process of the run, one per (role, index).
class ProcessTable {
 public:
  Process& Add(Process p);
  void Remove(wire::Role role, int index);
  Process* Find(wire::Role role, int index);
  Process* FindLocal(ProcessId id);
  // Running: local ones, and remote ones not stopped.
  int Alive(wire::Role role) const;
  bool AnyAlive(wire::Role role, bool chief) const;  // learners: the chief (index 0) or the others
  bool AllGone() const {
    return Alive(wire::ROLE_ACTOR) + Alive(wire::ROLE_LEARNER) + Alive(wire::ROLE_PS) + Alive(wire::ROLE_EVALUATOR) == 0;
  }
  const std::map<std::pair<int, int>, Process>& all() const { return procs_; }
  std::map<std::pair<int, int>, Process>& all() { return procs_; }
  std::string Text() const;  // processes.txt: "ROLE INDEX PID" per local process

 private:
  std::map<std::pair<int, int>, Process> procs_;
};

// The answer to `stampede scale` (Core::Scale).
struct ScaleAnswer {
  bool ok = false;
  std::string message;
};

// What the run directory's sharded checkpoints hold (run.cc reads the disk; the tests fake it).
struct CheckpointDisk {
  // The sequence a checkpoint started now would get (a directory listing): read when a stop
  // begins.
  std::function<int64_t()> next_sequence;
  // The newest complete checkpoint's sequence if the ordered stop wrote it, else 0 (reads and
  // verifies that checkpoint): read when a learner or shard dies during the stop.
  std::function<int64_t()> final_sequence;
};

struct CoreOptions {
  bool quiet = false;       // no progress lines
  bool standalone = false;  // start nothing: the processes are started elsewhere
  bool curve = false;       // a status counts only if its connection's identity is the sender it claims
  std::string config_path;  // for the start event and the standalone hint
  std::string resumed_from;  // --resume: the checkpoint the run continues from
  int64_t resumed_frames = 0;  // and its env frames: no row says fewer
  // A death during the stop after the chief's final checkpoint is whole on disk loses
  // nothing. Unset: only the chief's exit 0 says the final checkpoint is complete.
  CheckpointDisk checkpoints;
};

// The learners' statuses and what the coordinator makes of them.
struct LearnerFigures {
  wire::Status merged;  // every learner's newest status merged (MergeLearners)
  bool have_status = false;
  std::map<int, wire::Status> learners;   // newest per learner index
  std::map<int, wire::Status> ps;         // newest per PS shard
  int64_t start_frames = 0;               // frames the learners started from (a restore)
  // Frames a restarted learner's count fell back by (it restored a checkpoint older than
  // its death): made and consumed, but in no checkpoint. `merged` counts them, so the
  // run's frames never go back and the budget holds every frame the envs ran.
  int64_t lost_frames = 0;
  // Each learner's newest failed checkpoint write, cleared when a later one completes
  // (the run fails for one only if it stands at the end).
  std::map<int, std::string> checkpoint_errors;
  int64_t checkpoint_failures = 0;  // failed writes over the run, whatever came after
  // The first learner's standing error ("" if none).
  std::string CheckpointError() const {
    for (const auto& [index, e] : checkpoint_errors) {
      if (!e.empty()) return e;
    }
    return {};
  }
};

// What bounds a learner's frame count: the actors' own counts.
struct ActorCounts {
  std::map<int, std::pair<int64_t, double>> per_process;  // pid -> frames made, seconds waiting to send
  int64_t prev_total = 0;
  Clock::time_point prev_time;
  double peak_rate = 0;  // the fleet's peak frames/s (the ~1 s their reports lag)
  std::pair<int64_t, double> Totals() const;
};

class Core {
 public:
  // How long a learner status may wait for the actors' counts to vouch for it.
  static constexpr std::chrono::seconds kPendingStatusLimit{3};
  // How often the shell should call OnTick.
  static constexpr std::chrono::milliseconds kTick{100};

  Core(config::Config cfg, CoreOptions opt, Launcher* launcher, Sinks* sinks, RunResult* result,
       Clock::time_point now, double unix_now);

  // Starts every role (unless standalone) and writes the start event.
  void Start(Clock::time_point now);
  // A status's bytes from the connection whose CURVE identity is `peer`.
  void OnStatus(const std::string& bytes, const std::string& peer, Clock::time_point now);
  // A local process ended. `interrupt_signal` (0: none): the signal the coordinator got
  // (Ctrl-C reaches the whole group at once, so a child may end first: not a crash).
  void OnExit(ProcessId id, ExitStatus how, int interrupt_signal, Clock::time_point now);
  void OnTick(Clock::time_point now);
  // Begins the ordered stop (once; later calls change nothing).
  void RequestStop(const std::string& reason, int exit_code, Clock::time_point now);
  // `stampede scale RUN_DIR --actors N`: the fleet's actor count becomes N. Up: actors
  // actors_target() .. N-1 start (here or as Slurm job steps; under `stampede coordinator`
  // the scheduler starts them: the shell has made their keys). Down: the highest indices
  // stop in order (SIGTERM; a control stop for those started elsewhere), each sending the
  // unroll it holds first, and none is restarted (killed only past
  // coordinator.shutdown_grace_s). Refused while the run stops, while an earlier scale-down
  // is still stopping actors, outside [max(learners, tasks), config::kMaxActors], or where
  // the launcher has no room.
  ScaleAnswer Scale(int actors, Clock::time_point now);
  int actors_target() const { return actors_target_; }
  // Status refusals by the coordinator's own socket (CURVE's handler), for the rows.
  void SetRejectedConnections(int64_t n) { rejected_connections_ = n; }

  bool finished() const { return finished_; }
  bool stopping() const { return stop_.stopping; }
  const ProcessTable& processes() const { return procs_; }
  const LearnerFigures& learners() const { return figures_; }
  int64_t implausible_statuses() const { return implausible_statuses_; }
  int64_t forged_statuses() const { return forged_statuses_; }
  const config::Config& cfg() const { return cfg_; }

 private:
  friend struct Views;  // views.cc: rows, summary, diagnosis

  struct StopState {
    bool stopping = false;
    std::string reason;
    Clock::time_point deadline;
    bool killed = false;  // the grace ran out: everything left was killed
    // The chief learner exited 0 during this stop with a run directory: its final
    // checkpoint (with every shard's part, in sync/async mode) is complete, and what
    // exits after it can lose nothing.
    bool final_checkpoint = false;
    // The first checkpoint sequence this stop can have written (CoreOptions::checkpoints).
    int64_t first_sequence = 1;
  };
  struct PendingRespawn {
    wire::Role role;
    int index;
    Clock::time_point due;
  };

  ProcessId StartProcess(wire::Role role, int index, int restarts, Clock::time_point now);
  void StopNextStage();
  // A checkpoint written during this stop, marked final by the chief, is whole on disk.
  bool FinalCheckpointOnDisk() const;
  void Finish(Clock::time_point now);
  void Event(const std::string& name, nlohmann::json extra, Clock::time_point now);
  void Progress(Clock::time_point now);
  void ApplyLearnerStatus(const wire::Status& s, Clock::time_point now);
  void CheckPendingLearnerStatus(Clock::time_point now);
  bool Stalled(Clock::time_point now);
  void OnCheckpointReport(const wire::Status& s, Clock::time_point now);
  void OnRemoteStatus(const wire::Status& s, const std::string& who, Clock::time_point now);
  // Evaluation (config `evaluation`): asks for a round when the frames pass the next
  // multiple of the interval; writes each round the evaluator reports.
  void MaybeRequestEvaluation(int64_t frames, bool final_round, Clock::time_point now);
  void OnEvaluation(const wire::EvaluationReport& r, Clock::time_point now);
  bool EvaluationPending() const { return eval_reported_ < eval_round_; }
  void Say(const std::string& text);
  // A retiring actor is gone (exited, or said it stopped): the event, and the control
  // stops of those still retiring.
  void Retired(int actor, const std::string& how, Clock::time_point now);
  void PublishRetireStops();
  double UnixAt(Clock::time_point t) const;
  double Elapsed(Clock::time_point t) const;

  config::Config cfg_;
  CoreOptions opt_;
  Launcher* launcher_;
  Sinks* sinks_;
  RunResult* result_;
  Clock::time_point start_;
  double unix_start_;
  bool finished_ = false;

  ProcessTable procs_;
  std::map<std::pair<int, int>, int> restarts_;  // learner/PS restarts per (role, index)
  int role_restarts_ = 0, actor_restarts_ = 0;
  std::vector<PendingRespawn> respawns_;
  StopState stop_;
  // `stampede scale`: the actor count asked for, and the actors being taken out (index ->
  // when one still running is killed).
  int actors_target_ = 0;
  std::map<int, Clock::time_point> retiring_;

  LearnerFigures figures_;
  ActorCounts actor_counts_;
  ActorWatch actors_{0};
  std::optional<wire::Status> pending_;  // a learner status the actors cannot vouch for yet
  Clock::time_point pending_since_;
  int64_t forged_statuses_ = 0, implausible_statuses_ = 0, rejected_connections_ = 0;
  base::LogLimiter status_log_;
  std::map<std::string, std::map<std::string, int64_t>> refused_;  // "ps 0" -> reason -> count
  std::vector<int64_t> task_reached_;  // frames at which each task reached its target (-1: not yet)
  // Evaluation: the newest round asked for and at which frames, the next multiple of the
  // interval, the newest round written, the last evaluation event, and how long a stop
  // waits for the final round.
  int64_t eval_round_ = 0, eval_frames_ = 0, eval_next_ = -1, eval_reported_ = 0;
  nlohmann::json last_eval_;
  Clock::time_point eval_final_deadline_;

  // Progress rows: the window since the last one.
  Clock::time_point last_row_;
  int64_t last_frames_ = 0;
  double lag_mean_acc_ = 0;
  int lag_mean_n_ = 0;
  int64_t lag_max_acc_ = 0;
  int rows_ = 0;
  // Watchdog: when the learner's step count last moved.
  int64_t watched_steps_ = -1;
  Clock::time_point steps_moved_;
};

}  // namespace stampede::coordinator
