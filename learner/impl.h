// Private to the learner: Learner::Impl, shared by learner.cc (start, stop, status,
// checkpoints), receive.cc (the receiver thread, admission checks, the fresh/replayed
// batch mix) and train_loops.cc (the one train loop, the updaters of the relay and the
// sharded modes, the chief's sharded checkpoint rounds). Include nowhere else.
#pragma once

#include "learner/learner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "base/mutex.h"
#include "learner/backend.h"
#include "learner/batch.h"
#include "learner/checkpoint.h"
#include "learner/loss.h"
#include "learner/popart.h"
#include "learner/ring.h"
#include "learner/optimizer.h"
#include "net/from_config.h"
#include "ps/checkpoints.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "replay/bounded_queue.h"
#include "replay/table.h"
#include "wire/auth.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "base/log_limit.h"
#include "config/tasks.h"
#include "base/trace.h"
#include "wire/zmq_util.h"

namespace stampede::learner {

using Clock = std::chrono::steady_clock;
constexpr size_t kReturnWindow = 100;  // episodes in the mean-return window

// The mean of a window, recomputed from the window itself (a running sum would keep the
// rounding damage of one huge value forever); 0 for an empty one.
double WindowMean(const std::deque<float>& window);

// One unroll of a received batch: the batch is shared by its n unrolls.
struct UnrollRef {
  std::shared_ptr<const wire::TrajectoryBatch> batch;
  int column = 0;
};


// The learner's second seam: what becomes of a step's gradient. Relay applies it here and
// publishes the parameters; sync/async push it to the shards, which own the optimizer. A
// new update mode is a new Updater (train_loops.cc), not a new loop.
class Updater {
 public:
  virtual ~Updater() = default;
  // Before a batch is taken, the mode's own upkeep (sync/async: the shards' newest
  // parameters, the chief's checkpoint rounds). False: not now, look again (sync: the
  // shards have not yet made the version this learner's last gradient helped make).
  virtual bool Ready() = 0;
  // How long the loop waits for a batch, and what it does when none came.
  virtual std::chrono::milliseconds TakeWait() const = 0;
  virtual void Idle() {}
  // Just before the step: brings the learner's parameters to the ones the gradient is
  // taken at; returns their version. *update_ratio: the update since the previous step,
  // where it was applied elsewhere.
  virtual int64_t BeforeStep(double* update_ratio) = 0;
  // The step's finite, clipped gradient (the learner's grad; already applied where the
  // backend fused the step): apply and publish, or push. *learning_rate: the schedule's,
  // which the updater may recompute (allreduce: from every learner's frames). False:
  // stopped, or failed (Impl::failure says why), end the loop.
  virtual bool Commit(double* learning_rate, const Batch& batch, const Targets<float>* targets,
                      double* update_ratio) = 0;
  // A step whose loss or gradient was not finite, so not applied (counted). Allreduce still
  // takes part in the reduction, with nothing to add. False: end the loop, as Commit.
  virtual bool Skip() { return true; }
  // After the step's books: this mode's periodic checkpoint.
  virtual void AfterStep() {}
};

struct Learner::Impl {
  Learner* self;
  config::Config cfg;
  zmq::context_t& ctx;
  std::string bind_endpoint;
  uint64_t incarnation;
  std::unique_ptr<zmq::socket_t> socket;  // receiver thread's, after Start
  std::unique_ptr<net::Model<float>> net;
  std::unique_ptr<ps::ParamsPublisher> publisher;
  std::unique_ptr<ps::ParamsFetcher> fetcher;  // sync/async: the shards' parameters
  int index = 0;
  bool restarted = false;
  bool ps_mode = false;  // the shards own the optimizer (sync/async)
  bool allreduce = false;  // the learners average their gradients in a ring (learner/ring.h)
  std::unique_ptr<Ring> ring;  // allreduce: this learner's place in it
  int64_t version_floor = 0;   // allreduce chief, restarted: the PS's newest version + 1
  // Sync/async chief: the sharded checkpoint in progress (0: none).
  int64_t ckpt_sequence = 0;
  std::string ckpt_dir;
  Clock::time_point ckpt_started;
  std::vector<wire::CheckpointDone> ckpt_done;
  std::vector<bool> ckpt_asked;  // per shard: the request is queued to it
  // Each shard's incarnation when the round began: a shard restarted since, before its
  // part arrived, lost the request, so the round is abandoned and the next one begins.
  std::vector<uint64_t> ckpt_incarnations;
  bool ckpt_final = false;      // the round in progress is the stop's final one
  bool ckpt_abandoned = false;  // the last round was abandoned: start the next at once
  std::vector<float> params, grad;
  std::unique_ptr<Optimizer> rms;
  std::unique_ptr<Backend> backend;  // learner.device's: the CPU model or the CUDA trainer
  // Relay on a backend that fuses the update (CUDA): the step runs there, and the
  // backend's parameters and optimizer state are the newest (checkpoints read them back).
  bool fused = false;
  net::ParamLayout layout;
  wire::StepShape shape;
  int frames_per_step = 1;
  replay::BoundedQueue<UnrollRef> queue;
  // Experience replay (learner.replay.fraction > 0): this learner's table, and how many
  // unrolls of each batch come from it.
  std::unique_ptr<replay::Table<UnrollRef>> table;
  int replay_per_batch = 0;
  bool prioritized = false;
  // One sampled unroll of a batch (batch columns B - picks.size() .. B - 1).
  struct Pick {
    uint64_t key;
    double probability;
    int64_t table_size;
  };
  std::atomic<bool> stop{false};
  std::thread receiver, trainer;
  std::atomic<int64_t> dropped[size_t(wire::DropReason::kCount)] = {};
  std::string checkpoint_path;

  int num_tasks = 1;
  std::vector<int> action_limits;  // per task
  std::optional<PopArtSlots> popart;
  // PopArt: each task's statistics updates since this learner started, and whether its
  // statistics started fresh (PopArtStepSize); set on the first update.
  std::vector<int64_t> popart_updates;
  std::vector<uint8_t> popart_fresh;

  // The figures the receiver and trainer threads write and FillStatus reads.
  base::Mutex mu;
  base::Status failure GUARDED_BY(mu);  // why the trainer thread ended (Learner::failure)
  // Per task: its own return window, counters and lag (a suite's returns have different
  // scales, so one window over all tasks would mean nothing).
  struct TaskStats {
    std::deque<float> returns, lengths;
    int64_t episodes = 0, frames = 0, frames_to_target = -1;
    double lag_sum = 0;
    int64_t lag_count = 0;
  };
  std::vector<TaskStats> tasks GUARDED_BY(mu);
  std::vector<float> popart_stats GUARDED_BY(mu);  // PopArt: a copy of "popart/stats" for the status
  std::deque<float> returns GUARDED_BY(mu);
  std::deque<float> lengths GUARDED_BY(mu);
  int64_t episodes GUARDED_BY(mu) = 0;
  int64_t frames_to_target GUARDED_BY(mu) = -1;
  double lag_sum GUARDED_BY(mu) = 0;
  int64_t lag_count GUARDED_BY(mu) = 0;
  int64_t lag_max GUARDED_BY(mu) = 0;
  // Per actor: its trajectories' policy versions and lags on arrival (the status's actor_lags).
  struct ActorArrivals {
    int64_t version = -1, lag = 0, lag_max = 0, count = 0, total = 0;
    double lag_sum = 0;
  };
  std::map<int, ActorArrivals> actor_arrivals GUARDED_BY(mu);
  // The newest step's metrics (base/metrics.h), for the status.
  base::StepFigures last_figures GUARDED_BY(mu);
  double train_seconds GUARDED_BY(mu) = 0;
  double receive_wait_s GUARDED_BY(mu) = 0;
  int64_t skipped_steps GUARDED_BY(mu) = 0;  // non-finite loss or gradient: not applied
  RingStats ring_stats GUARDED_BY(mu);       // allreduce: a copy of the ring's, after each reduction
  int64_t ring_generation GUARDED_BY(mu) = 0;  // allreduce: the ring's, as the newest rendezvous made it
  // Replay figures: ages of sampled unrolls since the last status; cumulative counts.
  double replay_age_sum GUARDED_BY(mu) = 0;
  int64_t replay_age_count GUARDED_BY(mu) = 0;
  int64_t replay_age_max GUARDED_BY(mu) = 0;
  int64_t replay_inserts_refused GUARDED_BY(mu) = 0;
  int64_t trust_region_dropped GUARDED_BY(mu) = 0;
  int64_t trained_fresh GUARDED_BY(mu) = 0;  // since the last status
  int64_t trained_replayed GUARDED_BY(mu) = 0;
  // Drop lines, rate-limited per reason for the whole learner (a claimed sender id
  // costs an attacker nothing).
  base::LogLimiter drop_log GUARDED_BY(mu);
  std::string checkpoint_error GUARDED_BY(mu);  // the newest failed checkpoint write
  int64_t checkpoint_failures GUARDED_BY(mu) = 0;
  std::shared_ptr<const wire::Curve> curve;  // CURVE on: the run's keys
  std::unique_ptr<wire::ZapHandler> zap;    // ... and the handler for the PULL socket

  Impl(Learner* s, const config::Config& c, zmq::context_t& z, std::string ep, uint64_t inc)
      : self(s), cfg(c), ctx(z), bind_endpoint(std::move(ep)), incarnation(inc),
        queue(size_t(c.learner().queue_capacity())) {
    const auto& rc = c.learner().replay();
    if (rc.fraction() > 0) {
      replay::TableOptions o;
      o.capacity = rc.capacity();
      o.max_bytes = rc.max_bytes();
      o.max_times_sampled = rc.max_times_sampled();
      o.limiter.min_size = rc.min_size();
      o.limiter.samples_per_insert = rc.samples_per_insert();
      o.limiter.error_buffer = rc.error_buffer();
      table = std::make_unique<replay::Table<UnrollRef>>(
          o, replay::MakeSelector(rc.selector(), rc.priority_exponent()), uint64_t(c.seed()) * 7919 + 17);
      replay_per_batch = int(std::lround(rc.fraction() * c.learner().batch_size()));
      prioritized = ChoiceOf<config::Selector>(rc.selector()) == config::Selector::prioritized;
    }
  }

  // The next batch's unrolls: fresh ones from the queue first, then (replay) sampled
  // ones, whose picks go to *picks. False on timeout or stop.
  bool Take(int B, std::vector<UnrollRef>* items, std::vector<Pick>* picks, std::chrono::milliseconds timeout);
  // Replay: marks the sampled columns (and their importance weights) in the batch.
  void MarkReplayed(const std::vector<Pick>& picks, Batch* batch) const;
  // Replay, after a step: the fresh unrolls go into the table, the sampled ones get new
  // priorities; `targets` (CPU learner) gives the advantages, null on the CUDA learner.
  void AfterStep(const std::vector<UnrollRef>& items, const std::vector<Pick>& picks, const Batch& batch,
                 const Targets<float>* targets, const LossStats& st);

  // The learner's counters (the updaters reach them through here).
  std::atomic<int64_t>& version() { return self->version_; }
  std::atomic<int64_t>& steps() { return self->steps_; }
  int64_t frames() const { return self->frames_.load(); }
  // Sync/async: the run's frames (the others' from the PS, ours counted here).
  int64_t GlobalFrames() const { return self->frames_.load() + self->other_frames_.load(); }
  // learner.optimizer's schedule at the global frame count (one learner or several).
  double LearningRate() const {
    return net::ScheduledLearningRate(cfg.learner().optimizer(), cfg.stop().total_env_frames(), double(GlobalFrames()));
  }
  // Sync/async: reads the newest parameters the shards have (non-blocking) and the
  // counters that come with them.
  bool PollParams(bool fresh = false);
  // Sync/async chief: starts a sharded checkpoint, and completes it once every shard's
  // part is written (true when one was completed by this call).
  // `final`: the ordered stop's last checkpoint (its manifest says so).
  void StartShardedCheckpoint(bool final = false);
  bool PollShardedCheckpoint(std::string* error);

  // The update modes (train_loops.cc).
  class RelayUpdater;
  class ShardedUpdater;
  class AllreduceUpdater;
  // Ends the trainer thread with `status` (said once on stderr; the role exits with it).
  void Fail(const base::Status& status);
  void ReceiveLoop();
  // The one train loop: batch -> backend -> updater -> publish -> checkpoint, for every
  // update mode and backend.
  void TrainLoop();
  // A step whose loss or gradient was not finite.
  void CountSkippedStep();
  // A step's policy lag (against `trained_on`, the version its parameters were), loss
  // and timing, for the status.
  void RecordStep(const Batch& batch, int64_t trained_on, const LossStats& st, double norm, double update_ratio,
                  double lr, double seconds);
  void Accept(std::shared_ptr<wire::TrajectoryBatch> b);
  // A trajectory's task id names a task of the run and its actions are that task's.
  wire::DropReason CheckTask(const wire::TrajectoryBatch& b, std::string* detail) const;
  // Records the trajectory's policy lag for its actor; kStale past learner.max_policy_lag.
  wire::DropReason CheckLag(const wire::TrajectoryBatch& b, std::string* detail);
  void Drop(const std::vector<zmq::message_t>& parts, wire::DropReason reason,
            const std::string& detail);
  void Assemble(const std::vector<UnrollRef>& items, Batch* batch) const;
  // PopArt: each task's statistics from its valid targets in the batch, then the head rescaled.
  void UpdatePopArt(const Batch& batch, const Targets<float>& targets);
  // The parameters' "popart/stats" copied for the status (after any change to them).
  void SharePopArtStats();
  // Writes the checkpoint; a failure is also kept for the status (the run's exit code
  // and summary report it).
  base::Status SaveCheckpoint();
  base::Status WriteCheckpointFile();
};

}  // namespace stampede::learner
