#include "actors/acting.h"

#include <algorithm>

namespace stampede::actors {

void ResetStartingStates(float* state, int S, const uint8_t* episode_start, int E) {
  if (S <= 0) return;
  for (int e = 0; e < E; ++e) {
    if (episode_start[e] != 0) std::fill_n(state + size_t(e) * S, S, 0.f);
  }
}

void MaskMissingActions(const net::PolicyShape& pol, float* logits, int E, int A, int limit) {
  if (pol.kind != net::PolicyKind::kCategorical || limit <= 0 || limit >= A) return;
  for (int e = 0; e < E; ++e) std::fill(logits + size_t(e) * A + limit, logits + size_t(e + 1) * A, net::kMaskedLogit);
}

void GreedyAction(const net::PolicyShape& pol, const float* out, float* a) {
  if (pol.kind == net::PolicyKind::kGaussian) {
    for (int k = 0; k < pol.num_components; ++k) a[k] = out[k];  // the mean
    return;
  }
  int at = 0;
  for (int k = 0; k < pol.num_components; ++k) {
    a[k] = float(std::max_element(out + at, out + at + pol.nvec[k]) - (out + at));
    at += pol.nvec[k];
  }
}

void ChooseActions(const net::PolicyShape& pol, const float* logits, int E, int A, bool greedy, std::mt19937_64& rng,
                   const ActionOut& out) {
  auto uniform = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  auto normal = [&] { return std::normal_distribution<double>(0, 1)(rng); };
  const int K = pol.action_size();
  const bool box = pol.kind == net::PolicyKind::kGaussian;
  float a[net::kMaxActionComponents];
  for (int e = 0; e < E; ++e) {
    const float* row = logits + size_t(e) * A;
    if (greedy) {
      GreedyAction(pol, row, a);
    } else {
      net::PolicySample(pol, row, uniform, normal, a);
    }
    const size_t at = size_t(e) * K;
    if (box) {
      for (int k = 0; k < K; ++k) {
        if (out.box_raw != nullptr) out.box_raw[at + k] = a[k];
        out.box_clipped[at + k] = std::clamp(a[k], out.low[k], out.high[k]);
      }
    } else {
      for (int k = 0; k < K; ++k) out.actions[at + k] = int32_t(a[k]);
    }
  }
}

}  // namespace stampede::actors
