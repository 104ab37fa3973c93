#include "learner/popart.h"

#include <algorithm>
#include <cmath>

namespace stampede::learner {

PopArtSlots PopArtSlotsOf(const net::ParamLayout& layout) {
  PopArtSlots s;
  const auto& stats = layout.Find("popart/stats");
  const auto& w = layout.Find("baseline/w");
  s.stats = stats.offset;
  s.w = w.offset;
  s.b = layout.Find("baseline/b").offset;
  s.feature = w.shape[0];
  s.num_values = w.shape[1];
  return s;
}

void PopArtUpdate(const PopArtSlots& slots, float* params, int task, double target_mean,
                  double target_square_mean, double beta, bool preserve_outputs) {
  const int V = slots.num_values;
  float& mean = params[slots.stats + task];
  float& scale = params[slots.stats + V + task];
  const double old_mean = mean, old_scale = scale;
  // The new statistics as they will be stored (float), so the rescaling uses exactly them.
  const double new_mean = float((1 - beta) * old_mean + beta * target_mean);
  const double second = (1 - beta) * (old_scale * old_scale + old_mean * old_mean) + beta * target_square_mean;
  const double new_scale = float(
      std::clamp(std::sqrt(std::max(0.0, second - new_mean * new_mean)), kPopArtMinScale, kPopArtMaxScale));
  if (preserve_outputs) {
    for (int f = 0; f < slots.feature; ++f) {
      float& w = params[slots.w + int64_t(f) * V + task];
      w = float(double(w) * old_scale / new_scale);
    }
    float& b = params[slots.b + task];
    b = float((old_scale * double(b) + old_mean - new_mean) / new_scale);
  }
  mean = float(new_mean);
  scale = float(new_scale);
}

double PopArtStepSize(double beta, int64_t updates, bool fresh) {
  return fresh ? std::max(beta, 1.0 / double(updates + 1)) : beta;
}

}  // namespace stampede::learner
