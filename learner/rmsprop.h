// RMSProp as IMPALA used it (TensorFlow's form, epsilon inside the square root):
//   ms  <- decay * ms + (1 - decay) * g^2
//   mom <- momentum * mom + lr * g / sqrt(ms + epsilon)
//   w   <- w - mom
// Elementwise over the flat parameter buffer; state is two buffers of the same size.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "net/kernel_math.h"

namespace stampede::learner {

struct RmsPropOptions {
  double decay = 0.99;
  double momentum = 0.0;
  double epsilon = 0.01;
};

class RmsProp {
 public:
  RmsProp(int64_t size, RmsPropOptions opt) : opt_(opt), ms_(size, 0.f), mom_(size, 0.f) {}
  void Step(std::span<float> params, std::span<const float> grad, double learning_rate) {
    const float decay = float(opt_.decay), momentum = float(opt_.momentum);
    const float eps = float(opt_.epsilon), lr = float(learning_rate);
    for (size_t i = 0; i < params.size(); ++i) {
      net::RmsPropElement(params[i], ms_[i], mom_[i], grad[i], lr, decay, momentum, eps);
    }
  }
  std::vector<float>& mean_square() { return ms_; }
  std::vector<float>& momentum() { return mom_; }

 private:
  RmsPropOptions opt_;
  std::vector<float> ms_, mom_;
};

// Scales grad so its global L2 norm is at most max_norm (<= 0: no clipping). Returns
// the norm before clipping.
inline double ClipGlobalNorm(std::span<float> grad, double max_norm) {
  double sq = 0;
  for (float g : grad) sq += double(g) * g;
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = float(max_norm / norm);
    for (float& g : grad) g *= scale;
  }
  return norm;
}

}  // namespace stampede::learner
