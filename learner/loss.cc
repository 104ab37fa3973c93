#include "learner/loss.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace stampede::learner {

namespace {
// log-softmax of one row of logits.
template <class S>
void LogSoftmax(const S* logits, int A, S* out) {
  S m = logits[0];
  for (int j = 1; j < A; ++j) m = std::max(m, logits[j]);
  S sum = 0;
  for (int j = 0; j < A; ++j) sum += std::exp(logits[j] - m);
  const S lse = m + std::log(sum);
  for (int j = 0; j < A; ++j) out[j] = logits[j] - lse;
}

template <class S>
std::vector<S> ToScalar(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

template <class S>
struct Forwarded {
  std::vector<S> logits;     // [(T+1) * B, A]
  std::vector<S> values;     // [(T+1) * B]
  std::vector<S> log_probs;  // [T * B, A]: log-softmax of the first T * B rows
};

template <class S>
Forwarded<S> RunNet(net::Mlp<S>& net, const S* params, const Batch& batch) {
  const int rows = (batch.T() + 1) * batch.n();
  Forwarded<S> f;
  f.logits.resize(size_t(rows) * batch.num_actions);
  f.values.resize(rows);
  if (batch.uint8_obs()) {
    std::vector<S> obs(batch.observations_u8.size());
    net::Uint8ToInput(batch.observations_u8.data(), obs.size(), obs.data());
    net.Forward(params, obs.data(), rows, f.logits.data(), f.values.data());
  } else if constexpr (std::is_same_v<S, float>) {
    net.Forward(params, batch.observations.data(), rows, f.logits.data(), f.values.data());
  } else {
    const std::vector<S> obs = ToScalar<S>(batch.observations);
    net.Forward(params, obs.data(), rows, f.logits.data(), f.values.data());
  }
  const int A = batch.num_actions, TB = batch.T() * batch.n();
  f.log_probs.resize(size_t(TB) * A);
  for (int i = 0; i < TB; ++i) LogSoftmax(&f.logits[size_t(i) * A], A, &f.log_probs[size_t(i) * A]);
  return f;
}

template <class S>
Targets<S> TargetsFrom(const Forwarded<S>& f, const Batch& batch, const LossOptions& opt) {
  const int T = batch.T(), B = batch.n(), A = batch.num_actions, TB = T * B;
  Targets<S> tg;
  tg.vs.resize(TB);
  tg.pg_advantages.resize(TB);
  tg.discounts.resize(TB);
  tg.rewards.resize(TB);
  std::vector<S> log_rhos(TB), lp_behaviour(A), behaviour(A);
  for (int i = 0; i < TB; ++i) {
    const bool ended = batch.terminated[i] || batch.truncated[i];
    tg.discounts[i] = ended ? S(0) : S(opt.discount);
    double reward = batch.rewards[i];
    if (opt.reward_clip > 0) reward = std::clamp(reward, -opt.reward_clip, opt.reward_clip);
    tg.rewards[i] = S(reward);
    if (batch.truncated[i] && !batch.terminated[i] && opt.bootstrap_on_truncation) {
      tg.rewards[i] += S(opt.discount) * S(batch.truncation_values[i]);
    }
    for (int j = 0; j < A; ++j) behaviour[j] = S(batch.behaviour_logits[size_t(i) * A + j]);
    LogSoftmax(behaviour.data(), A, lp_behaviour.data());
    const int a = batch.actions[i];
    log_rhos[i] = f.log_probs[size_t(i) * A + a] - lp_behaviour[a];
  }
  VTraceFromLogRhos(T, B, log_rhos.data(), tg.discounts.data(), tg.rewards.data(),
                    f.values.data(), f.values.data() + TB, opt.vtrace, tg.vs.data(),
                    tg.pg_advantages.data());
  return tg;
}
}  // namespace

template <class S>
Targets<S> ComputeTargets(net::Mlp<S>& net, const S* params, const Batch& batch,
                          const LossOptions& opt) {
  return TargetsFrom(RunNet(net, params, batch), batch, opt);
}

namespace {
// Loss and gradient from the network outputs of the last Forward (f).
template <class S>
LossStats GradFrom(net::Mlp<S>& net, const S* params, const Forwarded<S>& f, const Batch& batch,
                   const Targets<S>& tg, const LossOptions& opt, S* grad) {
  const int T = batch.T(), B = batch.n(), A = batch.num_actions, TB = T * B;
  std::vector<S> dlogits(size_t(TB + B) * A, S(0)), dvalues(TB + B, S(0));
  std::vector<double> probs(A);
  LossStats st;
  double entropy_sum = 0;
  int64_t counted = 0;
  for (int i = 0; i < TB; ++i) {
    if (!batch.valid[i]) continue;  // an env reset, not a transition: no loss, no gradient
    ++counted;
    const S* lp = &f.log_probs[size_t(i) * A];
    const int a = batch.actions[i];
    const double adv = double(tg.pg_advantages[i]);
    st.pg_loss += -adv * double(lp[a]);
    const double err = double(f.values[i]) - double(tg.vs[i]);
    st.baseline_loss += 0.5 * err * err;
    for (int j = 0; j < A; ++j) probs[j] = std::exp(double(lp[j]));
    double neg_entropy = 0;  // sum_j p_j log p_j
    for (int j = 0; j < A; ++j) neg_entropy += probs[j] * double(lp[j]);
    entropy_sum += -neg_entropy;
    S* dz = &dlogits[size_t(i) * A];
    for (int j = 0; j < A; ++j) {
      const double p = probs[j];
      // d(-adv log p_a)/dz_j = -adv (1[j=a] - p_j)
      double d = -adv * ((j == a ? 1.0 : 0.0) - p);
      // d(sum_k p_k log p_k)/dz_j = p_j (log p_j - sum_k p_k log p_k)
      d += opt.entropy_cost * p * (double(lp[j]) - neg_entropy);
      dz[j] = S(d);
    }
    dvalues[i] = S(opt.baseline_cost * err);
  }
  st.baseline_loss *= opt.baseline_cost;
  st.entropy = counted ? entropy_sum / double(counted) : 0;
  st.total = st.pg_loss + st.baseline_loss - opt.entropy_cost * entropy_sum;
  if (grad != nullptr) net.Backward(params, dlogits.data(), dvalues.data(), grad);
  return st;
}
}  // namespace

template <class S>
LossStats LossAndGrad(net::Mlp<S>& net, const S* params, const Batch& batch,
                      const Targets<S>& targets, const LossOptions& opt, S* grad) {
  return GradFrom(net, params, RunNet(net, params, batch), batch, targets, opt, grad);
}

template <class S>
LossStats ComputeLossAndGrad(net::Mlp<S>& net, const S* params, const Batch& batch,
                             const LossOptions& opt, S* grad, Targets<S>* targets_out) {
  const Forwarded<S> f = RunNet(net, params, batch);
  Targets<S> tg = TargetsFrom(f, batch, opt);
  LossStats st = GradFrom(net, params, f, batch, tg, opt, grad);
  if (targets_out != nullptr) *targets_out = std::move(tg);
  return st;
}

template Targets<float> ComputeTargets(net::Mlp<float>&, const float*, const Batch&,
                                       const LossOptions&);
template Targets<double> ComputeTargets(net::Mlp<double>&, const double*, const Batch&,
                                        const LossOptions&);
template LossStats LossAndGrad(net::Mlp<float>&, const float*, const Batch&,
                               const Targets<float>&, const LossOptions&, float*);
template LossStats LossAndGrad(net::Mlp<double>&, const double*, const Batch&,
                               const Targets<double>&, const LossOptions&, double*);
template LossStats ComputeLossAndGrad(net::Mlp<float>&, const float*, const Batch&,
                                      const LossOptions&, float*, Targets<float>*);
template LossStats ComputeLossAndGrad(net::Mlp<double>&, const double*, const Batch&,
                                      const LossOptions&, double*, Targets<double>*);

}  // namespace stampede::learner
