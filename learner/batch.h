// A time-major learner batch of B unrolls: observations [T+1, B, obs_size], everything
// else [T, B] (logits [T, B, num_actions]). Row index t * B + b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "net/cuda/trainer.h"
#include "wire/unrolls.h"

namespace stampede::wire {
struct TrajectoryBatch;
}  // namespace stampede::wire

namespace stampede::learner {

// The time-major training batch: B unrolls (num_unrolls = B) in the wire's layout,
// plus the behaviour policy's version of each.
struct Batch : wire::Unrolls {
  std::vector<int64_t> policy_versions;  // [B]
  std::vector<int32_t> tasks;            // [B]: the task of each unroll (0 in one-task runs)
  // Experience replay (learner.replay): 1 for an unroll sampled from the table, and each
  // unroll's importance weight on its loss (1 for fresh ones). Empty: all fresh, weight 1.
  std::vector<uint8_t> replayed;         // [B]
  std::vector<float> weights;            // [B]

  void Resize(int T, int B, const wire::StepShape& shape) {
    Unrolls::Resize(T, B, shape);
    policy_versions.assign(B, 0);
    tasks.assign(B, 0);
    replayed.clear();
    weights.clear();
  }
  void Resize(int T, int B, int obs_size, int num_actions) {
    Resize(T, B, wire::StepShape{{obs_size}, wire::DType::kFloat32, num_actions});
  }
};

// The batch's arrays as the CUDA trainer stages them.
inline net::cuda::BatchView BatchViewOf(const Batch& b) {
  net::cuda::BatchView v;
  v.observations = b.uint8_obs() ? static_cast<const void*>(b.observations_u8.data())
                                 : static_cast<const void*>(b.observations.data());
  v.actions = b.actions.data();
  v.box_actions = b.box_actions.data();
  v.rewards = b.rewards.data();
  v.terminated = b.terminated.data();
  v.truncated = b.truncated.data();
  v.valid = b.valid.data();
  v.behaviour = b.behaviour_logits.data();
  v.truncation_values = b.truncation_values.data();
  v.initial_state = b.initial_core_state.empty() ? nullptr : b.initial_core_state.data();
  v.tasks = b.tasks.empty() ? nullptr : b.tasks.data();
  return v;
}

// Copies unroll `column` of a received trajectory into slot b of the batch (the
// shapes must match; the learner has checked them on receipt).
void CopyUnroll(const wire::TrajectoryBatch& src, int column, int b, Batch* batch);

}  // namespace stampede::learner
