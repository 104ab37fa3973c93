// Per-element math shared by the CPU code and the CUDA kernels (net/cuda/), so the CPU
// tests exercise the code the GPU runs: the optimizers' updates, the LSTM cell forward and
// backward, and one V-trace column. STAMPEDE_HD is __host__ __device__ under nvcc.
#pragma once

#include <cmath>

#include "net/distribution.h"

namespace stampede::net {

// The optimizers (learner.optimizer.kind), one element at a time. Each keeps two state
// buffers the size of the parameters, `s` and `m` (checkpoints save them as they are):
//   kRmsProp       IMPALA's (TensorFlow's form, epsilon inside the square root):
//                    s <- decay s + (1 - decay) g^2;  m <- momentum m + lr g / sqrt(s + eps);  w <- w - m
//   kRmsPropTorch  PyTorch's torch.optim.RMSprop (epsilon outside the root), as TorchBeast,
//                  Cleanba and the other IMPALAs that learn Pong run it:
//                    s <- decay s + (1 - decay) g^2;  m <- momentum m + g / (sqrt(s) + eps);  w <- w - lr m
//   kAdam          Kingma & Ba (2015), bias-corrected (torch.optim.Adam):
//                    m <- b1 m + (1 - b1) g;  s <- b2 s + (1 - b2) g^2;
//                    w <- w - lr (m / c1) / (sqrt(s / c2) + eps),  c_i = 1 - b_i^t
// TF-form epsilon is roughly the square of PyTorch-form epsilon: with eps = 0.01 inside the
// root the denominator never falls below 0.1, outside it below 0.01.
enum class OptimizerKind : int { kRmsProp = 0, kRmsPropTorch = 1, kAdam = 2 };

// PopArt's bounds on a task's scale (learner/popart.h; the CUDA trainer's update too).
inline constexpr double kPopArtMinScale = 1e-4, kPopArtMaxScale = 1e6;

struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::kRmsProp;
  float decay = 0.99f;    // RMSProp's mean-square decay; Adam's beta2
  float momentum = 0.f;   // RMSProp's momentum; Adam's beta1
  float epsilon = 0.01f;
};

// What changes from step to step: the learning rate and Adam's bias corrections.
struct OptimizerStep {
  float lr = 0.f;
  float bias1 = 1.f, bias2 = 1.f;  // 1 - beta^t (Adam); 1 for RMSProp
};

// The step scalars of optimizer step t (1 for the first step ever applied).
inline OptimizerStep MakeOptimizerStep(const OptimizerHyper& h, double lr, long long t) {
  OptimizerStep s;
  s.lr = float(lr);
  if (h.kind == OptimizerKind::kAdam) {
    const double n = double(t < 1 ? 1 : t);
    s.bias1 = float(1.0 - std::pow(double(h.momentum), n));
    s.bias2 = float(1.0 - std::pow(double(h.decay), n));
    if (!(s.bias1 > 0.f)) s.bias1 = 1.f;  // beta1 = 0: no first moment to correct
    if (!(s.bias2 > 0.f)) s.bias2 = 1.f;
  }
  return s;
}

STAMPEDE_HD inline void OptimizerElement(const OptimizerHyper& h, const OptimizerStep& st, float& w, float& s,
                                         float& m, float g) {
  switch (h.kind) {
    case OptimizerKind::kRmsPropTorch:
      s = h.decay * s + (1.f - h.decay) * g * g;
      m = h.momentum * m + g / (sqrtf(s) + h.epsilon);
      w -= st.lr * m;
      return;
    case OptimizerKind::kAdam:
      m = h.momentum * m + (1.f - h.momentum) * g;
      s = h.decay * s + (1.f - h.decay) * g * g;
      w -= st.lr * (m / st.bias1) / (sqrtf(s / st.bias2) + h.epsilon);
      return;
    case OptimizerKind::kRmsProp:
    default:
      s = h.decay * s + (1.f - h.decay) * g * g;
      m = h.momentum * m + st.lr * g / sqrtf(s + h.epsilon);
      w -= m;
      return;
  }
}

template <class S>
STAMPEDE_HD inline S Sigmoid(S x) {
  return S(1) / (S(1) + S(exp(-double(x))));
}

// Unit j of an LSTM cell: `gates` holds the pre-activations [i, f, g, o] (4H values) and
// receives the activations; writes the new cell value, its tanh and the output h.
template <class S>
STAMPEDE_HD inline void LstmCellForward(S* gates, int H, int j, S c_prev, S* c, S* tanh_c, S* h) {
  const S i = Sigmoid(gates[j]), f = Sigmoid(gates[H + j]);
  const S g = S(tanh(double(gates[2 * H + j]))), o = Sigmoid(gates[3 * H + j]);
  gates[j] = i, gates[H + j] = f, gates[2 * H + j] = g, gates[3 * H + j] = o;
  *c = f * c_prev + i * g;
  *tanh_c = S(tanh(double(*c)));
  *h = o * *tanh_c;
}

// Its backward: from dLoss/dh (dh) and dLoss/dc through the next step (dc_next), the
// pre-activation gradients dz (4H values, unit j's four) and dLoss/dc_prev.
template <class S>
STAMPEDE_HD inline void LstmCellBackward(const S* gates, int H, int j, S c_prev, S tanh_c, S dh,
                                         S dc_next, S* dz, S* dc_prev) {
  const S i = gates[j], f = gates[H + j], g = gates[2 * H + j], o = gates[3 * H + j];
  const S dc = dh * o * (S(1) - tanh_c * tanh_c) + dc_next;
  dz[j] = dc * g * i * (S(1) - i);
  dz[H + j] = dc * c_prev * f * (S(1) - f);
  dz[2 * H + j] = dc * i * (S(1) - g * g);
  dz[3 * H + j] = dh * tanh_c * o * (S(1) - o);
  *dc_prev = dc * f;
}

struct VTraceClips {
  double rho = 1.0, c = 1.0, pg_rho = 1.0, lambda = 1.0;  // <= 0: no clip (rho, c, pg_rho)
};

STAMPEDE_HD inline double ClipAbove(double x, double threshold) {
  return threshold > 0 && x > threshold ? threshold : x;
}

// V-trace for column b of time-major [T, B] arrays (Espeholt et al. 2018, eq. 1, by the
// backward recursion), then the policy-gradient advantages.
template <class S>
STAMPEDE_HD inline void VTraceColumn(int T, int B, int b, const S* log_rhos, const S* discounts,
                                     const S* rewards, const S* values, const S* bootstrap_value,
                                     VTraceClips clips, S* vs, S* pg_advantages) {
  double acc = 0;  // v_{t+1} - V(x_{t+1})
  for (int t = T - 1; t >= 0; --t) {
    const int i = t * B + b;
    const double rho = exp(double(log_rhos[i]));
    const double next_value = t + 1 < T ? double(values[i + B]) : double(bootstrap_value[b]);
    const double delta = ClipAbove(rho, clips.rho) *
                         (double(rewards[i]) + double(discounts[i]) * next_value - double(values[i]));
    const double c = clips.lambda * ClipAbove(rho, clips.c);
    acc = delta + double(discounts[i]) * c * acc;
    vs[i] = S(double(values[i]) + acc);
  }
  for (int t = 0; t < T; ++t) {
    const int i = t * B + b;
    const double rho = exp(double(log_rhos[i]));
    const double next_vs = t + 1 < T ? double(vs[i + B]) : double(bootstrap_value[b]);
    pg_advantages[i] = S(ClipAbove(rho, clips.pg_rho) *
                         (double(rewards[i]) + double(discounts[i]) * next_vs - double(values[i])));
  }
}

// One standardised advantage: (adv - mean) / std over the batch's counted steps, with
// std = sqrt(sum_sq / n - mean^2) kept away from 0 (a batch of equal advantages gives
// zeros, not NaNs). sum, sum_sq and n are the moments over those steps.
STAMPEDE_HD inline double StandardisedAdvantage(double adv, double sum, double sum_sq, double n) {
  if (n <= 0) return adv;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  return (adv - mean) / sqrt(var > 1e-16 ? var : 1e-16);
}

}  // namespace stampede::net
