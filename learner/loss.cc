#include "learner/loss.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "net/distribution.h"
#include "net/kernel_math.h"
#include "base/trace.h"

namespace stampede::learner {

namespace {
template <class S>
struct Forwarded {
  std::vector<S> policy;  // [(T+1) * B, P], masked per task
  std::vector<S> raw;     // [(T+1) * B, V]: the network's value outputs
  std::vector<S> values;  // [(T+1) * B]: each unroll's task's value, unnormalised
  std::vector<S> mean, scale;  // [B]: PopArt statistics of each unroll's task (0, 1 when off)
  int V = 1;
};

template <class S>
Forwarded<S> RunNet(net::Model<S>& net, const S* params, const Batch& batch, const LossOptions& opt) {
  const int T1 = batch.T() + 1, B = batch.n(), P = net.policy_size();
  Forwarded<S> f;
  f.V = net.num_values();
  f.policy.resize(size_t(T1) * B * P);
  f.raw.resize(size_t(T1) * B * f.V);
  std::vector<uint8_t> first;
  batch.EpisodeStarts(&first);
  const std::vector<S> state(batch.initial_core_state.begin(), batch.initial_core_state.end());
  const void* obs = batch.uint8_obs() ? static_cast<const void*>(batch.observations_u8.data())
                                      : static_cast<const void*>(batch.observations.data());
  net.Forward(params, obs, T1, B, first.data(), state.empty() ? nullptr : state.data(),
              f.policy.data(), f.raw.data());
  auto task = [&](int b) { return batch.tasks.empty() ? 0 : batch.tasks[size_t(b)]; };
  if (!opt.action_limits.empty()) {
    for (int b = 0; b < B; ++b) {
      const int limit = opt.action_limits[size_t(task(b))];
      if (limit >= P) continue;
      for (int t = 0; t < T1; ++t) {
        S* row = &f.policy[(size_t(t) * B + b) * P];
        std::fill(row + limit, row + P, S(net::kMaskedLogit));
      }
    }
  }
  f.mean.assign(B, S(0));
  f.scale.assign(B, S(1));
  if (opt.popart) {
    const auto& stats = net.layout().Find("popart/stats");
    for (int b = 0; b < B; ++b) {
      f.mean[b] = params[stats.offset + task(b)];
      f.scale[b] = params[stats.offset + f.V + task(b)];
    }
  }
  f.values.resize(size_t(T1) * B);
  for (int t = 0; t < T1; ++t) {
    for (int b = 0; b < B; ++b) {
      const size_t i = size_t(t) * B + b;
      const int k = f.V == 1 ? 0 : task(b);
      f.values[i] = f.scale[b] * f.raw[i * f.V + k] + f.mean[b];
    }
  }
  return f;
}

// The action of step i as the floats the distributions take.
void ActionRow(const Batch& batch, int i, int K, float* a) {
  if (batch.shape.box()) {
    for (int k = 0; k < K; ++k) a[k] = batch.box_actions[size_t(i) * K + k];
  } else {
    for (int k = 0; k < K; ++k) a[k] = float(batch.actions[size_t(i) * K + k]);
  }
}

template <class S>
Targets<S> TargetsFrom(net::Model<S>& net, const Forwarded<S>& f, const Batch& batch,
                       const LossOptions& opt) {
  const int T = batch.T(), B = batch.n(), TB = T * B;
  const net::PolicyShape& pol = net.spec().policy;
  const int P = pol.output_size(), K = pol.action_size();
  Targets<S> tg;
  tg.vs.resize(TB);
  tg.pg_advantages.resize(TB);
  tg.discounts.resize(TB);
  tg.rewards.resize(TB);
  std::vector<S> log_rhos(TB);
  float action[net::kMaxActionComponents];
  for (int i = 0; i < TB; ++i) {
    const bool ended = batch.terminated[i] || batch.truncated[i];
    tg.discounts[i] = ended ? S(0) : S(opt.discount);
    double reward = batch.rewards[i];
    if (opt.reward_clip > 0) reward = std::clamp(reward, -opt.reward_clip, opt.reward_clip);
    tg.rewards[i] = S(reward * opt.reward_scale);
    if (batch.truncated[i] && !batch.terminated[i] && opt.bootstrap_on_truncation) {
      tg.rewards[i] += S(opt.discount) * S(batch.truncation_values[i]);
    }
    ActionRow(batch, i, K, action);
    log_rhos[i] = S(net::PolicyLogProb(pol, &f.policy[size_t(i) * P], action) -
                    net::PolicyLogProb(pol, &batch.behaviour_logits[size_t(i) * P], action));
  }
  VTraceFromLogRhos(T, B, log_rhos.data(), tg.discounts.data(), tg.rewards.data(),
                    f.values.data(), f.values.data() + TB, opt.vtrace, tg.vs.data(),
                    tg.pg_advantages.data());
  if (opt.popart) {
    // Advantages in the task's normalised units (Hessel et al. 2019, eq. 9).
    for (int i = 0; i < TB; ++i) tg.pg_advantages[i] /= f.scale[i % B];
  }
  tg.values.assign(f.values.begin(), f.values.begin() + TB);
  tg.log_rhos = std::move(log_rhos);
  return tg;
}

// The learning diagnostics of LossStats over the steps in the loss.
template <class S>
void Diagnose(const Targets<S>& tg, const std::vector<uint8_t>& kept, const LossOptions& opt, LossStats* st) {
  double n = 0, vs_sum = 0, vs_sq = 0, err_sum = 0, err_sq = 0, kl = 0, clipped = 0;
  const double rho_bar = opt.vtrace.clip_rho_threshold;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!kept[i]) continue;
    const double vs = double(tg.vs[i]), err = vs - double(tg.values[i]);
    const double log_rho = double(tg.log_rhos[i]), rho = std::exp(log_rho);
    n += 1;
    vs_sum += vs, vs_sq += vs * vs;
    err_sum += err, err_sq += err * err;
    kl += (rho - 1) - log_rho;
    if (rho_bar > 0 && rho > rho_bar) clipped += 1;
  }
  if (n == 0) return;
  const double var_vs = vs_sq / n - (vs_sum / n) * (vs_sum / n);
  const double var_err = err_sq / n - (err_sum / n) * (err_sum / n);
  // Targets without spread (a batch of one constant return) explain nothing either way.
  st->m[base::StepMetric::kExplainedVariance] = var_vs > 1e-12 ? 1.0 - var_err / var_vs : 0.0;
  st->m[base::StepMetric::kApproxKl] = kl / n;
  st->m[base::StepMetric::kRhoClipFraction] = clipped / n;
}

// Step i's policy-gradient advantage: V-trace's (weighted by min(rho, rho_pg)), or with
// PPO's surrogate the same without that weight (r A comes back in the surrogate).
template <class S>
double PgAdvantage(const Targets<S>& tg, int i, const LossOptions& opt) {
  const double a = double(tg.pg_advantages[size_t(i)]);
  if (opt.ppo_clip <= 0) return a;
  const double r = std::exp(double(tg.log_rhos[size_t(i)]));
  const double rho_pg = opt.vtrace.clip_pg_rho_threshold;
  return a / (rho_pg > 0 ? std::min(r, rho_pg) : r);
}

// Loss and gradient from the network outputs of the last Forward (f).
template <class S>
LossStats GradFrom(net::Model<S>& net, const S* params, const Forwarded<S>& f, const Batch& batch,
                   const Targets<S>& tg, const LossOptions& opt, S* grad) {
  const int T = batch.T(), B = batch.n(), TB = T * B;
  const net::PolicyShape& pol = net.spec().policy;
  const int P = pol.output_size(), K = pol.action_size();
  const int V = f.V;
  std::vector<S> dpolicy(size_t(TB + B) * P, S(0)), dvalues(size_t(TB + B) * V, S(0));
  float action[net::kMaxActionComponents];
  LossStats st;
  double entropy_sum = 0, pg_loss = 0, baseline_loss = 0;
  int64_t counted = 0;
  // Replay: weights and masks per unroll; without replay every factor below is exactly 1
  // and every mask open, so the step is bit for bit the one without these lines.
  const bool any_replayed = !batch.replayed.empty();
  std::vector<float> current(P);
  double entropy_bonus_sum = 0;  // over the steps that get the entropy bonus
  // The steps in the loss: not an env reset (no transition there), and not a replayed step
  // outside LASER's trust region.
  std::vector<uint8_t> kept(size_t(TB), 0);
  double adv_sum = 0, adv_sum_sq = 0, adv_n = 0;  // moments over the kept steps
  for (int i = 0; i < TB; ++i) {
    if (!batch.valid[i]) continue;
    const int b = i % B;
    if (any_replayed && batch.replayed[size_t(b)] && opt.trust_region_kl > 0) {
      const S* out = &f.policy[size_t(i) * P];
      for (int j = 0; j < P; ++j) current[size_t(j)] = float(out[j]);
      if (PolicyKl(pol, &batch.behaviour_logits[size_t(i) * P], current.data()) > opt.trust_region_kl) {
        ++st.trust_region_dropped;
        continue;
      }
    }
    kept[size_t(i)] = 1;
    const double a = PgAdvantage(tg, i, opt);
    adv_sum += a;
    adv_sum_sq += a * a;
    adv_n += 1;
  }
  for (int i = 0; i < TB; ++i) {
    if (!kept[size_t(i)]) continue;
    const int b = i % B, k = V == 1 ? 0 : batch.tasks[size_t(b)];
    const S* out = &f.policy[size_t(i) * P];
    const bool replayed = any_replayed && batch.replayed[size_t(b)];
    ++counted;
    const double w = batch.weights.empty() ? 1.0 : double(batch.weights[size_t(b)]);
    const double entropy_cost = replayed && opt.entropy_online_only ? 0.0 : opt.entropy_cost;
    ActionRow(batch, i, K, action);
    const double raw_adv = PgAdvantage(tg, i, opt);
    double adv =
        w * (opt.normalize_advantages ? net::StandardisedAdvantage(raw_adv, adv_sum, adv_sum_sq, adv_n) : raw_adv);
    const double log_pi = net::PolicyLogProb(pol, out, action);
    if (opt.ppo_clip > 0) {
      // PPO's surrogate with r = pi / mu at these parameters: d(-min(r A, clip(r) A)) =
      // -r A dlog pi where r A is the smaller term, 0 where the clipped one is (the policy
      // moved past 1 +- e in A's direction).
      const double r = std::exp(log_pi - net::PolicyLogProb(pol, &batch.behaviour_logits[size_t(i) * P], action));
      const bool clipped = adv >= 0 ? r > 1 + opt.ppo_clip : r < 1 - opt.ppo_clip;
      const double rc = std::clamp(r, 1 - opt.ppo_clip, 1 + opt.ppo_clip);
      pg_loss += -std::min(r * adv, rc * adv);
      adv = clipped ? 0.0 : r * adv;
    } else {
      pg_loss += -adv * log_pi;
    }
    const double h = net::PolicyEntropy(pol, out);
    entropy_sum += h;
    if (entropy_cost != 0.0 || opt.entropy_cost == 0.0) entropy_bonus_sum += h;
    // PopArt: the error of the normalised output against the normalised target.
    const double err = opt.popart ? double(f.raw[size_t(i) * V + k]) - (double(tg.vs[i]) - f.mean[b]) / f.scale[b]
                                  : double(f.values[i]) - double(tg.vs[i]);
    baseline_loss += w * 0.5 * err * err;
    // d(-adv log pi(a) - entropy_cost H) / d outputs
    net::PolicyGrad(pol, out, action, -adv, -entropy_cost, &dpolicy[size_t(i) * P]);
    dvalues[size_t(i) * V + k] = S(opt.baseline_cost * w * err);
  }
  baseline_loss *= opt.baseline_cost;
  st.m[base::StepMetric::kPgLoss] = pg_loss;
  st.m[base::StepMetric::kBaselineLoss] = baseline_loss;
  st.m[base::StepMetric::kEntropy] = counted ? entropy_sum / double(counted) : 0;
  Diagnose(tg, kept, opt, &st);
  st.total = pg_loss + baseline_loss - opt.entropy_cost * entropy_bonus_sum;
  if (grad != nullptr) net.Backward(params, dpolicy.data(), dvalues.data(), grad);
  return st;
}
}  // namespace

double PolicyKl(const net::PolicyShape& pol, const float* behaviour, const float* current) {
  if (pol.kind == net::PolicyKind::kGaussian) return 0;
  double kl = 0;
  int offset = 0;
  for (int c = 0; c < pol.num_components; ++c) {
    const int n = pol.nvec[c];
    const float* zb = behaviour + offset;
    const float* zc = current + offset;
    const double lb = net::LogSumExp(zb, n), lc = net::LogSumExp(zc, n);
    for (int a = 0; a < n; ++a) {
      const double log_pb = double(zb[a]) - lb, log_pc = double(zc[a]) - lc;
      const double pb = std::exp(log_pb);
      if (pb > 0) kl += pb * (log_pb - log_pc);
    }
    offset += n;
  }
  return kl;
}

template <class S>
Targets<S> ComputeTargets(net::Model<S>& net, const S* params, const Batch& batch,
                          const LossOptions& opt) {
  return TargetsFrom(net, RunNet(net, params, batch, opt), batch, opt);
}

template <class S>
LossStats LossAndGrad(net::Model<S>& net, const S* params, const Batch& batch,
                      const Targets<S>& targets, const LossOptions& opt, S* grad) {
  return GradFrom(net, params, RunNet(net, params, batch, opt), batch, targets, opt, grad);
}

template <class S>
LossStats ComputeLossAndGrad(net::Model<S>& net, const S* params, const Batch& batch,
                             const LossOptions& opt, S* grad, Targets<S>* targets_out) {
  std::optional<base::TraceSpan> span(std::in_place, "forward", "learner");
  const Forwarded<S> f = RunNet(net, params, batch, opt);
  span.emplace("vtrace", "learner");
  Targets<S> tg = TargetsFrom(net, f, batch, opt);
  span.emplace("backward", "learner");
  LossStats st = GradFrom(net, params, f, batch, tg, opt, grad);
  span.reset();
  if (targets_out != nullptr) *targets_out = std::move(tg);
  return st;
}

#define STAMPEDE_LOSS(S)                                                                         \
  template Targets<S> ComputeTargets(net::Model<S>&, const S*, const Batch&, const LossOptions&); \
  template LossStats LossAndGrad(net::Model<S>&, const S*, const Batch&, const Targets<S>&,       \
                                 const LossOptions&, S*);                                         \
  template LossStats ComputeLossAndGrad(net::Model<S>&, const S*, const Batch&,                  \
                                        const LossOptions&, S*, Targets<S>*);
STAMPEDE_LOSS(float)
STAMPEDE_LOSS(double)
#undef STAMPEDE_LOSS

}  // namespace stampede::learner
