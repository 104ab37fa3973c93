// V-trace targets (Espeholt et al. 2018, eq. 1) and the policy-gradient advantage
// (section 4.2), on time-major [T, B] arrays (index t * B + b). Usable on its own,
// without a running fleet.
//
//   rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_t = lambda * min(c_bar, pi/mu)
//   delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
//   v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t      (eq. 1)
//   A_s = min(pg_rho_bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s))
//
// gamma_t is the per-step discount: 0 where the episode ended at step t, which cuts
// both the trace and the bootstrap. V(x_T) is `bootstrap_value`. A clip threshold
// <= 0 means no clipping.
#pragma once

#include <algorithm>
#include <cmath>

#include "net/kernel_math.h"

namespace stampede::learner {

struct VTraceOptions {
  double clip_rho_threshold = 1.0;
  double clip_c_threshold = 1.0;
  double clip_pg_rho_threshold = 1.0;
  double lambda = 1.0;
};

// Computes vs [T, B] and pg_advantages [T, B] by the backward recursion
// v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})).
template <class S>
void VTraceFromLogRhos(int T, int B, const S* log_rhos, const S* discounts, const S* rewards,
                       const S* values, const S* bootstrap_value, const VTraceOptions& opt,
                       S* vs, S* pg_advantages) {
  const net::VTraceClips clips{opt.clip_rho_threshold, opt.clip_c_threshold,
                               opt.clip_pg_rho_threshold, opt.lambda};
  for (int b = 0; b < B; ++b) {
    net::VTraceColumn(T, B, b, log_rhos, discounts, rewards, values, bootstrap_value, clips, vs,
                      pg_advantages);
  }
}

// The same from behaviour and target log-probabilities of the taken actions.
template <class S>
void VTraceFromLogProbs(int T, int B, const S* behaviour_log_probs, const S* target_log_probs,
                        const S* discounts, const S* rewards, const S* values,
                        const S* bootstrap_value, const VTraceOptions& opt, S* vs,
                        S* pg_advantages, S* log_rhos_scratch) {
  for (int i = 0; i < T * B; ++i) log_rhos_scratch[i] = target_log_probs[i] - behaviour_log_probs[i];
  VTraceFromLogRhos(T, B, log_rhos_scratch, discounts, rewards, values, bootstrap_value, opt, vs,
                    pg_advantages);
}

}  // namespace stampede::learner
