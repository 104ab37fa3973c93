// Action distributions over one row of policy outputs, written as plain functions so
// the CPU loss, the actor and the CUDA kernels (net/cuda/) run the same per-row math
// (STAMPEDE_HD is __host__ __device__ under nvcc).
//
//   categorical     outputs: logits [A]; action: one index (stored as a float)
//   multi-discrete  outputs: logits [sum nvec], one block per component; action: K indices
//   gaussian        outputs: mean [D] then log_std [D] (log_std is a state-independent
//                   parameter broadcast to every row); action: D floats, the unclipped
//                   sample (the actor clips to the box bounds only when it steps the env)
//
// Gradient functions write d(w_logp * log pi(a) + w_ent * entropy) / d(outputs).
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define STAMPEDE_HD __host__ __device__
#else
#define STAMPEDE_HD
#endif

namespace stampede::net {

enum class PolicyKind : int { kCategorical = 1, kMultiDiscrete = 2, kGaussian = 3 };

constexpr int kMaxActionComponents = 64;  // multi-discrete components / box dimensions
// The logit of an action a task does not have: exp() of it is exactly zero, and it stays
// finite, so entropies and gradients (zero for it) stay finite too.
constexpr float kMaskedLogit = -1e9f;

// The head's shape. For categorical, num_components = 1 and nvec[0] = A.
struct PolicyShape {
  PolicyKind kind = PolicyKind::kCategorical;
  int num_components = 1;               // K (multi-discrete) or D (gaussian); 1 for categorical
  int nvec[kMaxActionComponents] = {};  // per-component action counts (discrete kinds)

  // Floats of policy output per row.
  STAMPEDE_HD int output_size() const {
    if (kind == PolicyKind::kGaussian) return 2 * num_components;
    int n = 0;
    for (int k = 0; k < num_components; ++k) n += nvec[k];
    return n;
  }
  // Floats per action.
  STAMPEDE_HD int action_size() const { return num_components; }
};

constexpr double kHalfLog2Pi = 0.91893853320467274178;  // log(2 pi) / 2

// log-softmax statistics of one block of logits: max and log-sum-exp.
template <class S>
STAMPEDE_HD inline double LogSumExp(const S* z, int n) {
  double m = double(z[0]);
  for (int j = 1; j < n; ++j) m = double(z[j]) > m ? double(z[j]) : m;
  double sum = 0;
  for (int j = 0; j < n; ++j) sum += exp(double(z[j]) - m);
  return m + log(sum);
}

// log pi(action) for one row.
template <class S>
STAMPEDE_HD inline double PolicyLogProb(const PolicyShape& p, const S* out, const float* action) {
  double lp = 0;
  if (p.kind == PolicyKind::kGaussian) {
    const int D = p.num_components;
    for (int d = 0; d < D; ++d) {
      const double mean = double(out[d]), log_std = double(out[D + d]);
      const double u = (double(action[d]) - mean) * exp(-log_std);
      lp += -0.5 * u * u - log_std - kHalfLog2Pi;
    }
    return lp;
  }
  const S* z = out;
  for (int k = 0; k < p.num_components; ++k) {
    const int n = p.nvec[k];
    lp += double(z[int(action[k])]) - LogSumExp(z, n);
    z += n;
  }
  return lp;
}

// Entropy of the row's distribution.
template <class S>
STAMPEDE_HD inline double PolicyEntropy(const PolicyShape& p, const S* out) {
  double h = 0;
  if (p.kind == PolicyKind::kGaussian) {
    const int D = p.num_components;
    for (int d = 0; d < D; ++d) h += double(out[D + d]) + 0.5 + kHalfLog2Pi;
    return h;
  }
  const S* z = out;
  for (int k = 0; k < p.num_components; ++k) {
    const int n = p.nvec[k];
    const double lse = LogSumExp(z, n);
    for (int j = 0; j < n; ++j) {
      const double lp = double(z[j]) - lse;
      h -= exp(lp) * lp;
    }
    z += n;
  }
  return h;
}

// dout = w_logp * d log pi(action) / d out + w_ent * d entropy / d out (overwrites dout).
template <class S>
STAMPEDE_HD inline void PolicyGrad(const PolicyShape& p, const S* out, const float* action,
                                   double w_logp, double w_ent, S* dout) {
  if (p.kind == PolicyKind::kGaussian) {
    const int D = p.num_components;
    for (int d = 0; d < D; ++d) {
      const double mean = double(out[d]), log_std = double(out[D + d]);
      const double inv_std = exp(-log_std);
      const double u = (double(action[d]) - mean) * inv_std;
      dout[d] = S(w_logp * u * inv_std);                 // d/dmean = (a - mean) / std^2
      dout[D + d] = S(w_logp * (u * u - 1.0) + w_ent);  // d/dlog_std; dH/dlog_std = 1
    }
    return;
  }
  const S* z = out;
  S* dz = dout;
  for (int k = 0; k < p.num_components; ++k) {
    const int n = p.nvec[k];
    const double lse = LogSumExp(z, n);
    double neg_h = 0;  // sum_j p_j log p_j
    for (int j = 0; j < n; ++j) neg_h += exp(double(z[j]) - lse) * (double(z[j]) - lse);
    const int a = int(action[k]);
    for (int j = 0; j < n; ++j) {
      const double lp = double(z[j]) - lse, pj = exp(lp);
      // d log p_a / dz_j = 1[j = a] - p_j;  d(-sum p log p)/dz_j = -p_j (log p_j - sum p log p)
      dz[j] = S(w_logp * ((j == a ? 1.0 : 0.0) - pj) - w_ent * pj * (lp - neg_h));
    }
    z += n;
    dz += n;
  }
}

// Draws an action from the row's distribution. `uniform` gives numbers in [0, 1),
// `normal` standard normal ones (functors, so host and device code can pass their own).
template <class S, class Uniform, class Normal>
STAMPEDE_HD inline void PolicySample(const PolicyShape& p, const S* out, Uniform& uniform,
                                     Normal& normal, float* action) {
  if (p.kind == PolicyKind::kGaussian) {
    const int D = p.num_components;
    for (int d = 0; d < D; ++d) action[d] = float(double(out[d]) + exp(double(out[D + d])) * normal());
    return;
  }
  const S* z = out;
  for (int k = 0; k < p.num_components; ++k) {
    const int n = p.nvec[k];
    const double lse = LogSumExp(z, n);
    double u = uniform();
    int a = n - 1;
    for (int j = 0; j < n; ++j) {
      u -= exp(double(z[j]) - lse);
      if (u < 0) {
        a = j;
        break;
      }
    }
    action[k] = float(a);
    z += n;
  }
}

}  // namespace stampede::net
