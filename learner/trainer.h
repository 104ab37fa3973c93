// The learner's trainer core: the one train loop (batch -> backend -> updater -> publish
// -> checkpoint) and each update mode's decisions (relay applies and puts; sync and async
// push gradients to the shards, sync waiting for the version its last one helped make;
// allreduce averages among the learners), with everything outside it reached through the
// seams below. It opens no socket and links no ZeroMQ: the fleet's learner (learner.cc,
// receive.cc) plugs in the receiver's queue and replay table, the PS client, the ring and
// its checkpoint files; tests/trainer_test.cc plugs in fakes and a fake clock, as the
// coordinator's core is tested.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/cpu.h"
#include "base/metrics.h"
#include "base/status.h"
#include "config/config.pb.h"
#include "learner/backend.h"
#include "learner/batch.h"
#include "learner/loss.h"
#include "learner/optimizer.h"
#include "learner/popart.h"
#include "learner/ring.h"

namespace stampede::learner {

using Clock = std::chrono::steady_clock;

// The counters the learner's threads share; the status reads them at any time.
struct Counters {
  std::atomic<int64_t> steps{0}, frames{0}, version{0};
  std::atomic<int64_t> other_frames{0};  // several learners: the others' frames (from the PS, or the ring)
};

// Where batches come from: the receiver's queue and the replay table in the fleet.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next batch, written into *batch (sized for it); false when none came within `wait`
  // or the learner is stopping. The loop loads it into the backend.
  virtual bool Next(Batch* batch, std::chrono::milliseconds wait) = 0;
  // The oldest batch Next gave and not yet settled was trained on (`targets`: the step's
  // V-trace targets where the backend gives them, else null), or skipped (not finite).
  virtual void Trained(const Batch& batch, const Targets<float>* targets, const LossStats& stats) = 0;
  virtual void NotTrained() = 0;
  // The source uses the step's targets (replay priorities).
  virtual bool wants_targets() const = 0;
};

// Where the trainer's figures go: the learner's status in the fleet.
class TrainerBooks {
 public:
  virtual ~TrainerBooks() = default;
  // A step applied or pushed: the batch, the version its parameters were (its policy lags
  // are against this) and its figures (base/metrics.h; step seconds among them).
  virtual void Stepped(const Batch& batch, int64_t trained_on, const base::StepFigures& figures) = 0;
  // A step whose loss or gradient was not finite: never applied, never pushed.
  virtual void SkippedStep() = 0;
  // The trainer ended on an error it cannot recover from (the role exits with it).
  virtual void Failed(const base::Status& why) = 0;
  // PopArt's statistics ("popart/stats", [2, tasks]) after they changed.
  virtual void PopArtStats(std::span<const float> stats) = 0;
  // Allreduce: a ring formed (its generation), a reduction done (the ring's counters).
  virtual void RingFormed(int64_t generation) {}
  virtual void RingReduced(const RingStats& stats) {}
};

// The parameter server as a learner sees it (ps/client.h in the fleet).
class ShardLink {
 public:
  virtual ~ShardLink() = default;
  // Relay (and allreduce's chief): puts `version` to every shard; false while it has not
  // reached every one (the trainer puts again soon, and at every step until it has).
  virtual bool Put(std::span<const float> params, int64_t version) = 0;
  // Sync/async: the newest parameters the shards hold, if new ones came (fresh: also
  // waiting briefly for replies already on their way), with the counters below.
  virtual bool Poll(std::span<float> params, int64_t* version, bool fresh) = 0;
  // Waits up to `wait` for a reply from any shard.
  virtual bool WaitForReply(std::chrono::milliseconds wait) = 0;
  // Each shard's version of the parameters Poll gave last.
  virtual const std::vector<int64_t>& shard_versions() const = 0;
  // Each learner's frames as the shards know them.
  virtual const std::vector<int64_t>& env_frames_by_learner() const = 0;
  // Sync/async: a gradient computed on `at` (each shard's version) at learning rate `lr`,
  // with this learner's frames; false when stopped first.
  virtual bool PushGradient(std::span<const float> grad, const std::vector<int64_t>& at, double lr,
                            int64_t env_frames, const std::atomic<bool>* stop) = 0;
};

// Checkpoints as the trainer starts them; the writer keeps its failures for the status.
class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  // Relay and allreduce's chief: the learner's checkpoint file, now.
  virtual base::Status Save() = 0;
  // Sync/async chief: a sharded round (ps/checkpoints.h). PollRound completes the open
  // round once every shard's part is written: true when one completed in this call, an
  // error when it failed (the round is then over).
  virtual void StartRound() = 0;
  virtual base::StatusOr<bool> PollRound() = 0;
  virtual bool round_open() const = 0;
  // The last round was abandoned (a shard restarted before it wrote): begin the next at once.
  virtual bool round_abandoned() const = 0;
};

// What the trainer is plugged into. Null where the mode does not use it (ring: allreduce
// only; checkpoints: not this learner's job, or no run directory).
struct TrainerLinks {
  BatchSource* batches = nullptr;
  TrainerBooks* books = nullptr;
  ShardLink* shards = nullptr;
  RingLink* ring = nullptr;
  CheckpointWriter* checkpoints = nullptr;
  std::function<Clock::time_point()> now = [] { return Clock::now(); };  // tests: a fake clock
  // The machine's cores, which learner.threads 0 shares among the learners, and its
  // idle cores since the previous call (base::IdleCores; tests: a fake).
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  std::function<double()> idle_cores = [idle = std::make_shared<base::IdleCores>()] { return idle->Sample(); };
};

// The learner's second seam: what becomes of a step's gradient. A new update mode is a
// new Updater (trainer.cc), not a new loop.
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
  // The step's finite, clipped gradient (already applied where the backend fused the
  // step): apply and publish, or push. *learning_rate: the schedule's, which the updater
  // may recompute (allreduce: from every learner's frames). False: stopped, or failed
  // (said to the books), end the loop.
  virtual bool Commit(double* learning_rate, const Batch& batch, const Targets<float>* targets,
                      double* update_ratio) = 0;
  // A step whose loss or gradient was not finite, so not applied. Allreduce still takes
  // part in the reduction, with nothing to add. False: end the loop, as Commit.
  virtual bool Skip() { return true; }
  // After the step's books: this mode's periodic checkpoint.
  virtual void AfterStep() {}
};

// learner.threads: the threads each step may use. A fixed count stays; 0 (auto) gives the
// learner `most` threads while it bounds the fleet and the machine has a core to spare,
// and one while it waits for data. It decides once per window of kWindow steps: from the
// share of the window's time the trainer spent waiting for its batches (below kBusy it
// bounds the fleet, above kIdle it waits; between, it keeps what it has, so a learner
// that speeds up enough to wait a little does not flip back at once) and from the
// machine's idle cores over the window (at least kSpareCores to go up: on a machine whose
// cores the actors share, a second learner thread takes its core from them, and
// `stampede bench` measured that fleet slower: docs/benchmarks.md).
class ComputeThreads {
 public:
  static constexpr int kWindow = 8;
  static constexpr double kBusy = 0.02, kIdle = 0.10, kSpareCores = 0.5;
  // setting: learner.threads; most: the threads auto may take (at least 1).
  ComputeThreads(int setting, int most);
  // The threads auto may take: the machine's cores shared among the learners.
  static int Most(int cores, int num_learners) { return std::max(1, cores / std::max(1, num_learners)); }
  // A step after which the trainer had waited `waited_s` for its batch and then computed
  // for `step_s`; `idle_cores` (read at a window's end only) gives the machine's idle
  // cores since the previous window. Returns the threads for the next step.
  int Observe(double waited_s, double step_s, const std::function<double()>& idle_cores);
  int threads() const { return threads_; }

 private:
  const bool auto_;
  const int most_;
  int threads_;
  int steps_ = 0;
  double waited_ = 0, busy_ = 0;
};

class Trainer {
 public:
  Trainer(const config::Config& cfg, int index) : cfg(cfg), index(index) {}
  virtual ~Trainer() = default;

  // The loop, until `stop` is set or the updater ends it; on the trainer thread.
  void Run();

  // Sync/async: takes the newest parameters the shards hold (non-blocking; fresh: waits
  // briefly for replies on their way) and the other learners' frames that came with them.
  bool PollParams(bool fresh = false);
  // PopArt: each task's statistics from its valid targets in the batch, then the value
  // head rescaled to keep its outputs (a fresh head's first update lets them move).
  void UpdatePopArt(const Batch& batch, const Targets<float>& targets);
  // Ends the loop with `why` (said once on stderr and to the books).
  void Fail(const base::Status& why);

  // Sync/async: the run's frames (the others' from the PS, ours counted here).
  int64_t GlobalFrames() const { return counters.frames.load() + counters.other_frames.load(); }
  // learner.optimizer's schedule at the run's frames.
  double LearningRate() const;

  config::Config cfg;
  int index = 0;  // this learner's (0: the chief)
  wire::StepShape shape;  // one unroll step's, from the config's resolved spec (set before Run)
  Counters counters;
  std::atomic<bool> stop{false};
  TrainerLinks links;
  // The trainer thread's own, set before Run.
  std::vector<float> params, grad;
  std::unique_ptr<Optimizer> rms;
  std::unique_ptr<Backend> backend;  // learner.device's: the CPU model or the CUDA trainer
  // Relay on a backend that fuses the update (CUDA): the step runs there, and the
  // backend's parameters and optimizer state are the newest (checkpoints read them back).
  bool fused = false;
  int num_tasks = 1;
  std::optional<PopArtSlots> popart;
  // PopArt: each task's statistics updates since this learner started, and whether its
  // statistics started fresh (PopArtStepSize); set on the first update.
  std::vector<int64_t> popart_updates;
  std::vector<uint8_t> popart_fresh;
  int64_t version_floor = 0;  // allreduce chief, restarted: the PS's newest version + 1

  // The update modes (trainer.cc); MakeUpdater picks learner.update_mode's.
  class RelayUpdater;
  class ShardedUpdater;
  class AllreduceUpdater;
  std::unique_ptr<Updater> MakeUpdater();
  // PopArt: gives the books the statistics (after any change to them).
  void SharePopArtStats();
};

}  // namespace stampede::learner
