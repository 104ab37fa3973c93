// The learner: a receiver thread (owns the trajectory PULL socket; decodes, checks and
// queues unrolls), a trainer thread (forms time-major batches, V-trace, loss,
// gradient clipping, RMSProp, puts new versions to the PS) and the caller's thread,
// which reads metrics. Metrics and counters are shared between the threads under
// one mutex or as atomics; parameters belong to the trainer thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "base/status.h"
#include "config/config.pb.h"
#include "wire/messages.pb.h"
#include "wire/trajectory.h"

namespace stampede::wire {
class Curve;
}

namespace stampede::learner {

class Learner {
 public:
  // `trajectory_endpoint` is where the PULL socket binds (may end in ":*" in tests).
  // `curve`: the run's keys (CURVE on: only actors may send trajectories, and puts to
  // the PS are authenticated), or null. The learner runs the context's ZAP handler.
  // `index`: this learner's index (0 is the chief); `restarted`: the coordinator started it
  // again after it died (relay mode: it restores RUN_DIR/checkpoint.bin and numbers its
  // versions above what the PS holds).
  Learner(const config::Config& cfg, zmq::context_t& ctx, std::string trajectory_endpoint,
          uint64_t incarnation, std::shared_ptr<const wire::Curve> curve = nullptr, int index = 0,
          bool restarted = false);
  ~Learner();

  // Binds, initialises (or restores) parameters, puts version 0 to every PS shard
  // and starts the threads. Fails on a bad endpoint or checkpoint.
  base::Status Start();
  std::string endpoint() const;  // bound trajectory endpoint
  void Stop();                   // stops and joins the threads; idempotent

  // Fills the learner fields of a status message; interval statistics (policy lag)
  // restart after each call.
  void FillStatus(wire::Status* status);
  // Writes RUN_DIR/checkpoint.bin (call after Stop, or let the trainer do it periodically).
  // Sync/async: the chief also has the shards write a sharded checkpoint (ps/checkpoints.h)
  // and waits for it; RUN_DIR/checkpoint.bin then holds the parameters (for eval and
  // export) with the optimizer state left at zero (it lives on the shards).
  base::Status WriteCheckpoint();

  // Not ok once the trainer thread has ended on an error it cannot recover from, said once
  // on stderr: a device error on the CUDA backend (out of memory, a failed launch; the role
  // exits with kExitDeviceError, not restarted), or allreduce's ring broken (a learner gone
  // past learner.allreduce_timeout_s; kExitFailed, restarted) or the learners' parameters
  // found to differ.
  base::Status failure() const;

  int64_t learner_steps() const;
  int64_t env_frames() const;
  int64_t policy_version() const;
  int64_t dropped(wire::DropReason reason) const;
  int64_t dropped_total() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t start_frames_ = 0;  // frames restored from a checkpoint; set in Start
};

}  // namespace stampede::learner
