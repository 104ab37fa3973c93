// Private to the learner: Learner::Impl, the trainer core (learner/trainer.h) plugged into
// the fleet: its batches (the receiver's queue and the replay table), its books (the
// status), its PS client, ring and checkpoint files. Shared by learner.cc (start, stop,
// status, checkpoints), receive.cc (the receiver thread, admission checks, the
// fresh/replayed batch mix) and sharded_checkpoints.cc (the chief's sharded checkpoint
// rounds, and the books). Include nowhere else.
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
#include "learner/trainer.h"
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

constexpr size_t kReturnWindow = 100;  // episodes in the mean-return window

// The mean of a window, recomputed from the window itself (a running sum would keep the
// rounding damage of one huge value forever); 0 for an empty one.
double WindowMean(const std::deque<float>& window);

// One unroll of a received batch: the batch is shared by its n unrolls.
struct UnrollRef {
  std::shared_ptr<const wire::TrajectoryBatch> batch;
  int column = 0;
};


struct Learner::Impl : Trainer, BatchSource, TrainerBooks, CheckpointWriter {
  zmq::context_t& ctx;
  std::string bind_endpoint;
  uint64_t incarnation;
  std::unique_ptr<zmq::socket_t> socket;  // receiver thread's, after Start
  std::unique_ptr<net::Model<float>> net;
  std::unique_ptr<ps::ParamsPublisher> publisher;
  std::unique_ptr<ps::ParamsFetcher> fetcher;  // sync/async: the shards' parameters
  bool restarted = false;
  bool ps_mode = false;  // the shards own the optimizer (sync/async)
  bool allreduce = false;  // the learners average their gradients in a ring (learner/ring.h)
  std::unique_ptr<Ring> ring;  // allreduce: this learner's place in it
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
  net::ParamLayout layout;
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
  std::thread receiver, trainer;
  std::atomic<int64_t> dropped[size_t(wire::DropReason::kCount)] = {};
  std::string checkpoint_path;

  std::vector<int> action_limits;  // per task

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

  // The trainer's PS as the fleet reaches it (ps/client.h).
  class PsLink;
  std::unique_ptr<PsLink> ps_link;
  // The batches Next gave and the trainer has not settled yet, oldest first (the trainer
  // thread's): their unrolls stay referenced until then (replay inserts the fresh ones).
  struct Pending {
    std::vector<UnrollRef> items;
    std::vector<Pick> picks;
  };
  std::deque<Pending> pending;

  Impl(const config::Config& c, zmq::context_t& z, std::string ep, uint64_t inc);
  ~Impl() override;

  // BatchSource: the receiver's queue and the replay table.
  bool Next(Batch* batch, std::chrono::milliseconds wait) override;
  void Trained(const Batch& batch, const Targets<float>* targets, const LossStats& st) override;
  void NotTrained() override { pending.pop_front(); }
  bool wants_targets() const override { return table != nullptr; }
  // TrainerBooks: the status's figures.
  void Stepped(const Batch& batch, int64_t trained_on, const base::StepFigures& figures) override;
  void SkippedStep() override;
  void Failed(const base::Status& why) override;
  void PopArtStats(std::span<const float> stats) override;
  void RingFormed(int64_t generation) override;
  void RingReduced(const RingStats& stats) override;
  // CheckpointWriter: RUN_DIR/checkpoint.bin, or the sharded rounds.
  base::Status Save() override { return SaveCheckpoint(); }
  void StartRound() override { StartShardedCheckpoint(); }
  base::StatusOr<bool> PollRound() override;
  bool round_open() const override { return ckpt_sequence != 0; }
  bool round_abandoned() const override { return ckpt_abandoned; }

  // The next batch's unrolls: fresh ones from the queue first, then (replay) sampled
  // ones, whose picks go to *picks. False on timeout or stop.
  bool Take(int B, std::vector<UnrollRef>* items, std::vector<Pick>* picks, std::chrono::milliseconds timeout);
  // Replay: marks the sampled columns (and their importance weights) in the batch.
  void MarkReplayed(const std::vector<Pick>& picks, Batch* batch) const;
  // Replay, after a step: the fresh unrolls go into the table, the sampled ones get new
  // priorities; `targets` (CPU learner) gives the advantages, null on the CUDA learner.
  void AfterStep(const std::vector<UnrollRef>& items, const std::vector<Pick>& picks, const Batch& batch,
                 const Targets<float>* targets, const LossStats& st);

  // Sync/async chief: starts a sharded checkpoint, and completes it once every shard's
  // part is written (true when one was completed by this call; an error ends the round).
  // `final`: the ordered stop's last checkpoint (its manifest says so).
  void StartShardedCheckpoint(bool final = false);
  base::StatusOr<bool> PollShardedCheckpoint();

  void ReceiveLoop();
  void Accept(std::shared_ptr<wire::TrajectoryBatch> b);
  // A trajectory's task id names a task of the run and its actions are that task's.
  wire::DropReason CheckTask(const wire::TrajectoryBatch& b, std::string* detail) const;
  // Records the trajectory's policy lag for its actor; kStale past learner.max_policy_lag.
  wire::DropReason CheckLag(const wire::TrajectoryBatch& b, std::string* detail);
  void Drop(const std::vector<zmq::message_t>& parts, wire::DropReason reason,
            const std::string& detail);
  void Assemble(const std::vector<UnrollRef>& items, Batch* batch) const;
  // Writes the checkpoint; a failure is also kept for the status (the run's exit code
  // and summary report it).
  base::Status SaveCheckpoint();
  base::Status WriteCheckpointFile();
};

// Before a gradient, the shards' replies are read for up to this long while they keep
// coming (ps::ParamsFetcher::PollFresh).
inline constexpr std::chrono::milliseconds kFreshWait{1};

class Learner::Impl::PsLink : public ShardLink {
 public:
  explicit PsLink(Impl& m) : m_(m) {}
  bool Put(std::span<const float> params, int64_t version) override { return m_.publisher->Put(params, version); }
  bool Poll(std::span<float> params, int64_t* version, bool fresh) override {
    return fresh ? m_.fetcher->PollFresh(params, version, kFreshWait) : m_.fetcher->Poll(params, version);
  }
  bool WaitForReply(std::chrono::milliseconds wait) override { return m_.fetcher->WaitForReply(wait); }
  const std::vector<int64_t>& shard_versions() const override { return m_.fetcher->shard_versions(); }
  const std::vector<int64_t>& env_frames_by_learner() const override { return m_.fetcher->env_frames_by_learner(); }
  bool PushGradient(std::span<const float> grad, const std::vector<int64_t>& at, double lr, int64_t env_frames,
                    const std::atomic<bool>* stop) override {
    m_.publisher->set_env_frames(env_frames);
    return m_.publisher->PushGradient(grad, at, lr, stop);
  }

 private:
  Impl& m_;
};

}  // namespace stampede::learner
