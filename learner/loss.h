// The IMPALA loss on a time-major batch: policy gradient with V-trace advantages,
// baseline_cost * 1/2 squared error to the V-trace targets, and entropy_cost times the
// negative entropy; summed over time and batch (steps with valid = 0, which only reset
// an env, contribute nothing). Targets (vs, pg advantages) are
// constants for the gradient (stop-gradient), as in the paper.
#pragma once

#include <vector>

#include "base/metrics.h"
#include "learner/batch.h"
#include "learner/vtrace.h"
#include "net/model.h"

namespace stampede::learner {

struct LossOptions {
  double discount = 0.99;
  VTraceOptions vtrace;
  double baseline_cost = 0.5;
  double entropy_cost = 0.01;
  bool bootstrap_on_truncation = true;
  double reward_clip = 0;  // > 0: rewards clipped to [-reward_clip, reward_clip]
  double reward_scale = 1;  // then multiplied by this
  // Actions of each task (batch.tasks indexes it); a task's policy outputs at and above
  // its limit are masked (probability zero). Empty: no masks.
  std::vector<int> action_limits;
  // PopArt: the network's values are normalised, one output per task; targets and
  // advantages use the statistics in the parameters' "popart/stats" tensor.
  bool popart = false;
  // Experience replay (batch.replayed): no entropy bonus on replayed unrolls (LASER), and
  // LASER's trust region: a replayed step whose KL(behaviour || current policy) is above
  // this is left out of the loss (0: off; categorical and multi-discrete policies).
  bool entropy_online_only = false;
  double trust_region_kl = 0;
  // Standardise the policy-gradient advantages over the batch's counted steps.
  bool normalize_advantages = false;
  // > 0: PPO's clipped surrogate (Sample Factory's APPO) in place of V-trace's policy
  // gradient: -min(r A, clip(r, 1 - ppo_clip, 1 + ppo_clip) A), r = pi / mu, A the V-trace
  // advantage without its rho weight.
  double ppo_clip = 0;
};

template <class S>
struct Targets {
  std::vector<S> vs;             // [T, B]
  std::vector<S> pg_advantages;  // [T, B]
  std::vector<S> discounts;      // [T, B]
  std::vector<S> rewards;        // [T, B], with truncation bootstraps folded in
  std::vector<S> values;         // [T, B]: the (unnormalised) values they came from
  std::vector<S> log_rhos;       // [T, B]: log pi(a|x) - log mu(a|x) of the taken actions
};

struct LossStats {
  double total = 0;
  int64_t trust_region_dropped = 0;  // replayed steps the trust region left out
  // The step metrics the loss computes (base/metrics.h declares each): the policy-gradient
  // and baseline terms, the mean entropy per step, and why a run does or does not learn
  // (explained variance, approximate KL, the share of clipped rhos), over the steps in
  // the loss. The training step adds the gradient norm, the update ratio and the rate.
  base::StepFigures m;
};

// KL(behaviour || current) of one step's policy outputs (categorical or multi-discrete:
// the sum over components); 0 for a Gaussian policy.
double PolicyKl(const net::PolicyShape& pol, const float* behaviour, const float* current);

// Runs the network on all T+1 rows (from each unroll's initial core state, resetting it
// at episode starts) and computes the V-trace targets.
template <class S>
Targets<S> ComputeTargets(net::Model<S>& net, const S* params, const Batch& batch,
                          const LossOptions& opt);

// Loss for fixed targets; if grad is non-null, ADDS dLoss/dparams into it.
template <class S>
LossStats LossAndGrad(net::Model<S>& net, const S* params, const Batch& batch,
                      const Targets<S>& targets, const LossOptions& opt, S* grad);

// One forward pass: targets from the current network, then loss and gradient (ADDED
// into grad). The training step uses this.
template <class S>
LossStats ComputeLossAndGrad(net::Model<S>& net, const S* params, const Batch& batch,
                             const LossOptions& opt, S* grad, Targets<S>* targets_out = nullptr);

}  // namespace stampede::learner
