// The CUDA learner step (built when the CUDA toolkit is found; STAMPEDE_CUDA=OFF forces it
// off): the same networks as net/model.h over the same flat parameter layout, with cuDNN
// for convolutions and max-pooling, cuBLAS for dense layers and the LSTM's products, and
// CUDA kernels for activations, the LSTM cell, V-trace, the loss, global-norm clipping
// and RMSProp, whose per-element math is net/kernel_math.h and net/distribution.h (the
// code the CPU runs). A step never copies activations to the host: the batch goes up
// (staged in pinned memory, copied on its own stream), and the statistics come back.
// This header needs no CUDA headers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/metrics.h"
#include "net/kernel_math.h"
#include "net/model.h"

namespace stampede::net::cuda {

// Whether this build has the CUDA backend.
bool Built();
// CUDA devices this process can use (at least 1), or Unavailable saying why there is none
// (no CUDA in this build, no driver, no device).
base::StatusOr<int> DeviceCount();
// The GPU a learner's learner.device names: "cuda:N" is N; "cuda" is learner i's GPU i mod
// the GPUs this process sees (Slurm's and Kubernetes' CUDA_VISIBLE_DEVICES: the node's or
// the pod's own). Unavailable when there is none.
base::StatusOr<int> LearnerDevice(const std::string& device, int learner_index);

struct TrainerOptions {
  int unroll_length = 20;  // T
  int batch_size = 32;     // B
  double discount = 0.99;
  VTraceClips clips;
  double baseline_cost = 0.5;
  double entropy_cost = 0.01;
  bool bootstrap_on_truncation = true;
  double reward_clip = 0;
  double reward_scale = 1;
  bool normalize_advantages = false;  // standardise the advantages over the batch
  double max_grad_norm = 40;  // <= 0: no clipping
  OptimizerHyper optimizer;  // learner.optimizer (net/kernel_math.h)
  // Let cuDNN use TF32 tensor cores for convolutions (PyTorch's default); off gives
  // strict FP32, which the CPU-vs-CUDA tests use.
  bool allow_tf32 = false;
  // Per task, its number of actions: a suite's unroll of task t has the policy outputs at
  // and past action_limits[t] masked (as learner/loss.cc does). Empty: none masked.
  std::vector<int> action_limits;
  // PopArt (Hessel et al. 2019), as learner/loss.cc and learner/popart.cc do it on the CPU:
  // the value head's outputs are normalised, one per task, with each task's mean and
  // scale in the parameters' "popart/stats"; after each fused step the statistics move
  // towards the batch's targets by `popart_beta` and the head is rescaled to preserve its
  // outputs. The spec must say popart (ModelSpec::popart, num_values = tasks).
  bool popart = false;
  double popart_beta = 3e-4;
};

// A host batch of B unrolls, time-major, in the wire's layout (learner::Batch's arrays).
struct BatchView {
  const void* observations = nullptr;       // [(T+1) B, obs] uint8 or float32 (the spec's)
  const int32_t* actions = nullptr;         // [T B, K] (discrete kinds)
  const float* box_actions = nullptr;       // [T B, D] (box)
  const float* rewards = nullptr;           // [T B]
  const uint8_t* terminated = nullptr;      // [T B]
  const uint8_t* truncated = nullptr;       // [T B]
  const uint8_t* valid = nullptr;           // [T B]
  const float* behaviour = nullptr;         // [T B, policy_size]
  const float* truncation_values = nullptr; // [T B]
  const float* initial_state = nullptr;     // [B, state_size] (null without a core)
  const int32_t* tasks = nullptr;           // [B] each unroll's task (null: all task 0)
};

struct StepStats {
  double total = 0;
  // As learner/loss.h's LossStats (base/metrics.h declares each), with the gradient's
  // norm before clipping.
  base::StepFigures m;
};

class Trainer {
 public:
  // An error when the device cannot be used or the spec is refused (the device's
  // exceptions are converted here).
  static base::StatusOr<std::unique_ptr<Trainer>> Create(const ModelSpec& spec, int device,
                                                         const TrainerOptions& options);
  virtual ~Trainer() = default;
  virtual const ParamLayout& layout() const = 0;
  // Parameters and optimizer state (learner/optimizer.h's two buffers), host <-> device
  // (synchronous).
  virtual void SetState(std::span<const float> params, std::span<const float> mean_square,
                        std::span<const float> momentum) = 0;
  virtual void GetParams(std::span<float> params) = 0;
  virtual void GetState(std::span<float> params, std::span<float> mean_square,
                        std::span<float> momentum) = 0;
  // Copies the batch into pinned host memory and starts its transfer on the copy
  // stream; returns without waiting, so the host can assemble the next batch while the
  // device computes. The next Step trains on the latest staged batch.
  virtual void Stage(const BatchView& batch) = 0;
  // Forward over [T+1, B], V-trace, loss, backward, clipping and optimizer step `step`
  // (1-based, for Adam's bias correction) on the latest staged batch. Launch returns once
  // the work is queued (stage the next batch then); Wait waits for it and returns the
  // statistics (the only copy back).
  virtual void Launch(double learning_rate, int64_t step) = 0;
  virtual StepStats Wait() = 0;
  // The gradient alone, for updates applied elsewhere (the PS shards): uploads
  // `params` (synchronous), then queues the forward, V-trace, loss and backward on the
  // latest staged batch; WaitGradient waits and copies the unclipped gradient back. The
  // trainer's own parameters become `params`; its optimizer state is left alone.
  virtual void LaunchGradient(std::span<const float> params) = 0;
  virtual StepStats WaitGradient(std::span<float> grad) = 0;
  StepStats Step(double learning_rate, int64_t step) {
    Launch(learning_rate, step);
    return Wait();
  }
  // For tests: on the staged batch at the current parameters, the forward outputs (values
  // as the network gives them: [rows, num_values], normalised with PopArt) and the loss
  // gradient (before clipping), copied back; nothing is updated.
  virtual StepStats ForwardAndGradient(std::vector<float>* policy, std::vector<float>* values,
                                       std::vector<float>* grad) = 0;
};

// Acting on the device: the model's Step (net/model.h) for the inference server of a
// learner that has a GPU (actors.inference "central" with learner.device "cuda..."), SEED
// RL's setting. The network is the trainer's (the same layers and layout); the rows of a
// batch are padded to the largest batch seen so far, so cuDNN chooses its algorithms once
// per size, not once per batch.
class Policy {
 public:
  // An error when the device cannot be used or the spec is refused. `allow_tf32`: as
  // TrainerOptions'.
  static base::StatusOr<std::unique_ptr<Policy>> Create(const ModelSpec& spec, int device, bool allow_tf32);
  virtual ~Policy() = default;
  virtual const ParamLayout& layout() const = 0;
  // Uploads a version of the parameters (synchronous).
  virtual void SetParams(std::span<const float> params) = 0;
  // Model::Step from and to host arrays: n observations in the spec's dtype; `first` [n]
  // (may be null: none) starts a row from a zero state, the others start from state_in
  // [n, state_size] (may be null: zeros); writes state_out (may alias state_in, may be
  // null), policy outputs [n, policy_size] and values [n, num_values] (either may be null).
  virtual void Step(const void* obs, int n, const uint8_t* first, const float* state_in, float* state_out,
                    float* policy, float* values) = 0;
};

}  // namespace stampede::net::cuda
