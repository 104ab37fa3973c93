// Test helper: a batch of random observations, actions, rewards, behaviour logits and
// episode ends (about 15% terminated and 15% truncated steps).
#pragma once

#include <random>

#include "learner/batch.h"

namespace stampede::testing {

inline learner::Batch RandomBatch(int T, int B, int D, int A, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  std::uniform_int_distribution<int> act(0, A - 1);
  std::uniform_real_distribution<float> u(0, 1);
  learner::Batch b;
  b.Resize(T, B, D, A);
  for (auto& x : b.observations) x = n(rng);
  for (auto& a : b.actions) a = act(rng);
  for (auto& r : b.rewards) r = n(rng);
  for (auto& l : b.behaviour_logits) l = n(rng);
  for (int i = 0; i < T * B; ++i) {
    const float e = u(rng);
    b.terminated[i] = e < 0.15f;
    b.truncated[i] = e >= 0.15f && e < 0.3f;
    b.truncation_values[i] = b.truncated[i] ? n(rng) : 0.f;
  }
  return b;
}

}  // namespace stampede::testing
