#include "learner/optimizer.h"

#include <algorithm>

namespace stampede::learner {

// Built with -fno-math-errno (learner/CMakeLists.txt): without it every sqrtf carries a
// branch that sets errno for a negative argument, and GCC leaves the loop scalar.
double Optimizer::Step(std::span<float> params, std::span<const float> grad, double learning_rate, int64_t t) {
  const net::OptimizerStep st = net::MakeOptimizerStep(hyper_, learning_rate, t);
  switch (hyper_.kind) {
    case net::OptimizerKind::kAdam: return StepAs<net::OptimizerKind::kAdam>(params, grad, st);
    case net::OptimizerKind::kRmsPropTorch: return StepAs<net::OptimizerKind::kRmsPropTorch>(params, grad, st);
    default: return StepAs<net::OptimizerKind::kRmsProp>(params, grad, st);
  }
}

// Each element as OptimizerElement computes it, a block at a time: the kind is fixed, so
// the elementwise loop vectorises, and the ratio's sums run per lane. (One running
// double sum over every element, in order, kept the whole step scalar: 4.5 ns a
// parameter, 3 ms of each Pong learner step.)
template <net::OptimizerKind K>
double Optimizer::StepAs(std::span<float> params, std::span<const float> grad, const net::OptimizerStep& st) {
  net::OptimizerHyper h = hyper_;
  h.kind = K;
  constexpr size_t kBlock = 512, kLanes = 8;
  float before[kBlock];
  double step_sq[kLanes] = {}, param_sq[kLanes] = {};
  const size_t n = params.size();
  float* w = params.data();
  float* s = s_.data();
  float* m = m_.data();
  const float* g = grad.data();
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t len = std::min(kBlock, n - at);
    std::copy_n(w + at, len, before);
    for (size_t i = at; i < at + len; ++i) net::OptimizerElement(h, st, w[i], s[i], m[i], g[i]);
    size_t j = 0;
    for (; j + kLanes <= len; j += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) {
        const double after = w[at + j + k], d = after - double(before[j + k]);
        step_sq[k] += d * d;
        param_sq[k] += after * after;
      }
    }
    for (; j < len; ++j) {
      const double after = w[at + j], d = after - double(before[j]);
      step_sq[0] += d * d;
      param_sq[0] += after * after;
    }
  }
  double step_total = 0, param_total = 0;
  for (size_t k = 0; k < kLanes; ++k) {
    step_total += step_sq[k];
    param_total += param_sq[k];
  }
  return param_total > 0 ? std::sqrt(step_total / param_total) : 0.0;
}

}  // namespace stampede::learner
