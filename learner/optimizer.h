// The learner's optimizer (learner.optimizer.kind: net/kernel_math.h's OptimizerElement),
// elementwise over the flat parameter buffer; its state is two buffers of the same size
// (RMSProp: mean square and momentum; Adam: second and first moment), saved in checkpoints
// as they are. Also the global-norm clip and the learning-rate schedule.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "net/kernel_math.h"

namespace stampede::config {
class OptimizerConfig;
}

namespace stampede::learner {

class Optimizer {
 public:
  Optimizer(int64_t size, net::OptimizerHyper hyper) : hyper_(hyper), s_(size, 0.f), m_(size, 0.f) {}
  // Optimizer step t (1-based: the number of steps applied so far, this one included; it
  // matters only to Adam's bias correction). Returns the update-to-parameter ratio,
  // RMS(step) / RMS(parameters after it).
  double Step(std::span<float> params, std::span<const float> grad, double learning_rate, int64_t t);
  const net::OptimizerHyper& hyper() const { return hyper_; }
  // RMSProp's mean square, Adam's second moment.
  std::vector<float>& mean_square() { return s_; }
  // RMSProp's momentum, Adam's first moment.
  std::vector<float>& momentum() { return m_; }

 private:
  template <net::OptimizerKind K>
  double StepAs(std::span<float> params, std::span<const float> grad, const net::OptimizerStep& st);

  net::OptimizerHyper hyper_;
  std::vector<float> s_, m_;
};

// RMS(after - before) / RMS(after): the update-to-parameter ratio of a step that was not
// applied here (the CUDA trainer's, the shards').
inline double UpdateToParamRatio(std::span<const float> before, std::span<const float> after) {
  double step_sq = 0, param_sq = 0;
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    const double d = double(after[i]) - double(before[i]);
    step_sq += d * d;
    param_sq += double(after[i]) * after[i];
  }
  return param_sq > 0 ? std::sqrt(step_sq / param_sq) : 0.0;
}

// Scales grad so its global L2 norm is at most max_norm (<= 0: no clipping). Returns
// the norm before clipping.
// The squares are summed in 8 running doubles, one per lane: a single running sum made
// every element wait for the one before (0.7 ms of each Pong learner step).
inline double ClipGlobalNorm(std::span<float> grad, double max_norm) {
  constexpr size_t kLanes = 8;
  double lane[kLanes] = {};
  const size_t n = grad.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] += double(grad[i + k]) * grad[i + k];
  }
  for (; i < n; ++i) lane[0] += double(grad[i]) * grad[i];
  double sq = 0;
  for (double v : lane) sq += v;
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = float(max_norm / norm);
    for (float& g : grad) g *= scale;
  }
  return norm;
}

}  // namespace stampede::learner
