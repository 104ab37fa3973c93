#include "learner/batch.h"

#include <algorithm>
#include <cstring>

#include "wire/trajectory.h"

namespace stampede::learner {

void CopyUnroll(const wire::TrajectoryBatch& src, int c, int b, Batch* batch) {
  const int T = batch->T(), B = batch->n(), A = batch->num_actions;
  const int n = src.n();
  const size_t obs_bytes = batch->shape.obs_bytes();
  for (int t = 0; t <= T; ++t) {
    std::memcpy(batch->obs_row(size_t(t) * B + b), src.obs_row(size_t(t) * n + c), obs_bytes);
  }
  for (int t = 0; t < T; ++t) {
    const size_t s = size_t(t) * n + c, d = size_t(t) * B + b;
    const size_t K = size_t(batch->shape.action_size());
    if (batch->shape.box()) {
      std::copy_n(&src.box_actions[s * K], K, &batch->box_actions[d * K]);
    } else {
      std::copy_n(&src.actions[s * K], K, &batch->actions[d * K]);
    }
    batch->rewards[d] = src.rewards[s];
    batch->terminated[d] = src.terminated[s];
    batch->truncated[d] = src.truncated[s];
    batch->valid[d] = src.valid[s];
    batch->truncation_values[d] = src.truncation_values[s];
    std::copy_n(&src.behaviour_logits[s * A], A, &batch->behaviour_logits[d * A]);
  }
  const int K = batch->shape.core_state_size;
  std::copy_n(&src.initial_core_state[size_t(c) * K], K, &batch->initial_core_state[size_t(b) * K]);
  batch->policy_versions[b] = src.meta.policy_version();
  batch->tasks[b] = src.meta.task_id();
}

}  // namespace stampede::learner
