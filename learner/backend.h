// The learner's compute seam. A Backend takes a batch and gives the loss statistics and
// either the gradient (every update mode) or, where it can, a whole fused step on its own
// copy of the parameters (the CUDA trainer's on-device optimizer, used when the update
// is applied here). The one train loop (trainer.cc) drives a Backend and an Updater;
// neither knows which of the other it has.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "learner/batch.h"
#include "learner/loss.h"

namespace stampede::config {
class Config;
}  // namespace stampede::config

namespace stampede::learner {

// The loss's options from the learner config (both backends take these).
LossOptions LossOptionsFrom(const config::Config& cfg);

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu" or "cuda:N", for messages.
  virtual std::string name() const = 0;
  // The next step's batch. Where overlaps() the loop may load the next batch while a step
  // is in flight (the step keeps what it was launched with); otherwise the batch must
  // stay unchanged until Wait returns.
  virtual void Load(const Batch& batch) = 0;
  virtual bool overlaps() const = 0;

  // Gradient: the loss gradient at `params` on the loaded batch, unclipped. `params` must
  // stay unchanged until WaitGradient returns. `targets` (may be null) receives the
  // step's V-trace targets where the backend computes them on the host (the CPU one:
  // replay priorities and PopArt use them); returns false from has_targets() otherwise.
  virtual void LaunchGradient(std::span<const float> params) = 0;
  virtual LossStats WaitGradient(std::span<float> grad, Targets<float>* targets) = 0;
  virtual bool has_targets() const = 0;
  // The threads the step's kernels may use from the next step on (learner.threads); a
  // backend that cannot use them keeps its own.
  virtual void SetComputeThreads(int threads) {}

  // Fused: gradient, global-norm clipping and the optimizer step `step` (1-based) on the
  // backend's own parameters and optimizer state (set with SetState). Only where
  // fuses_update(). WaitUpdate copies the parameters after the step into `params` and
  // gives the gradient's norm before clipping; a non-finite loss or gradient leaves the
  // parameters alone.
  virtual bool fuses_update() const = 0;
  virtual void SetState(std::span<const float> params, std::span<const float> mean_square,
                        std::span<const float> momentum) = 0;
  virtual void GetState(std::span<float> params, std::span<float> mean_square, std::span<float> momentum) = 0;
  virtual void LaunchUpdate(double learning_rate, int64_t step) = 0;
  virtual LossStats WaitUpdate(std::span<float> params, double* grad_norm) = 0;
};

// The backend learner.device names: "cpu" (the model `net`, which must outlive it),
// "cuda:N", or "cuda" (learner `learner_index` on GPU learner_index mod the GPUs this
// process sees: one GPU per learner on a node of several). A device error when the build
// or the machine has no such device; invalid argument for what only the CPU learner does.
base::StatusOr<std::unique_ptr<Backend>> MakeBackend(const config::Config& cfg, net::Model<float>& net,
                                                     int learner_index = 0);

}  // namespace stampede::learner
