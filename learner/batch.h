// A time-major learner batch of B unrolls: observations [T+1, B, obs_size], everything
// else [T, B] (logits [T, B, num_actions]). Row index t * B + b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stampede::wire {
struct TrajectoryBatch;
}

namespace stampede::learner {

struct Batch {
  int T = 0, B = 0, obs_size = 0, num_actions = 0;
  std::vector<float> observations;
  std::vector<int32_t> actions;
  std::vector<float> rewards;
  std::vector<uint8_t> terminated;
  std::vector<uint8_t> truncated;
  std::vector<float> behaviour_logits;
  std::vector<float> truncation_values;
  std::vector<int64_t> policy_versions;  // [B]

  void Resize(int T_, int B_, int obs_size_, int num_actions_) {
    T = T_, B = B_, obs_size = obs_size_, num_actions = num_actions_;
    const size_t tb = size_t(T) * B;
    observations.assign((tb + B) * obs_size, 0.f);
    actions.assign(tb, 0);
    rewards.assign(tb, 0.f);
    terminated.assign(tb, 0);
    truncated.assign(tb, 0);
    behaviour_logits.assign(tb * num_actions, 0.f);
    truncation_values.assign(tb, 0.f);
    policy_versions.assign(B, 0);
  }
};

// Copies unroll `column` of a received trajectory into slot b of the batch (the
// shapes must match; the learner has checked them on receipt).
void CopyUnroll(const wire::TrajectoryBatch& src, int column, int b, Batch* batch);

}  // namespace stampede::learner
