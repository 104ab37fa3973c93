// n unrolls of T steps as time-major arrays: the layout shared by the trajectory an
// actor sends (n = its envs) and the batch a learner trains on (n = B). Row index
// t * n + i; observations have T+1 rows (row T is the bootstrap observation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stampede::wire {

struct Unrolls {
  int unroll_length = 0;  // T
  int num_unrolls = 0;    // n
  int obs_size = 0;
  int num_actions = 0;
  std::vector<float> observations;        // [T+1, n, obs_size]
  std::vector<int32_t> actions;           // [T, n]
  std::vector<float> rewards;             // [T, n]
  std::vector<uint8_t> terminated;        // [T, n]
  std::vector<uint8_t> truncated;         // [T, n]
  std::vector<float> behaviour_logits;    // [T, n, num_actions]
  std::vector<float> truncation_values;   // [T, n]: behaviour value of the final
                                          // observation where truncated, else 0

  int T() const { return unroll_length; }
  int n() const { return num_unrolls; }
  int64_t frames() const { return int64_t(unroll_length) * num_unrolls; }

  // Sizes every array for the given shape and zeroes it.
  void Resize(int T, int n, int obs_size_, int num_actions_) {
    unroll_length = T, num_unrolls = n, obs_size = obs_size_, num_actions = num_actions_;
    const size_t tn = size_t(T) * n;
    observations.assign((tn + n) * obs_size, 0.f);
    actions.assign(tn, 0);
    rewards.assign(tn, 0.f);
    terminated.assign(tn, 0);
    truncated.assign(tn, 0);
    behaviour_logits.assign(tn * num_actions, 0.f);
    truncation_values.assign(tn, 0.f);
  }
};

}  // namespace stampede::wire
