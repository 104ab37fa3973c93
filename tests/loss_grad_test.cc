// The IMPALA loss: its value against an independent computation from the network's
// outputs, and its gradient against central finite differences for every parameter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "learner/loss.h"
#include "learner/optimizer.h"
#include "net/from_config.h"
#include "net/model.h"
#include "tests/random_batch.h"
#include "config/config.pb.h"

using namespace stampede;
using stampede::testing::RandomBatch;

namespace {
net::ModelSpec SmallSpec(net::Activation act) {
  net::ModelSpec s;
  s.obs_shape = {3};
  s.hidden_sizes = {5, 4};
  s.policy = net::CategoricalPolicy(3);
  s.activation = act;
  return s;
}

// log softmax(z)[a] over n logits, by its definition (float or double logits).
template <class T>
double LogSoftmax(const T* z, int n, int a) {
  double m = 0;
  for (int j = 0; j < n; ++j) m += std::exp(double(z[j]));
  return double(z[a]) - std::log(m);
}

// Checks grad against central finite differences of the loss's total for every parameter
// (targets fixed: they are constants of the gradient); returns how many were checked.
template <class Model>
int64_t CheckAgainstFiniteDifferences(Model& mlp, const std::vector<double>& p, const learner::Batch& batch,
                                      const learner::Targets<double>& targets, const learner::LossOptions& opt,
                                      const std::vector<double>& grad) {
  const double eps = 1e-6;
  int64_t checked = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    std::vector<double> q = p;
    q[k] = p[k] + eps;
    const double up = learner::LossAndGrad(mlp, q.data(), batch, targets, opt, static_cast<double*>(nullptr)).total;
    q[k] = p[k] - eps;
    const double down = learner::LossAndGrad(mlp, q.data(), batch, targets, opt, static_cast<double*>(nullptr)).total;
    const double fd = (up - down) / (2 * eps);
    INFO("parameter " << k << " of " << p.size());
    CHECK(grad[k] == Approx(fd).margin(1e-5).epsilon(1e-4));
    ++checked;
  }
  return checked;
}
}  // namespace

TEST_CASE("loss: value equals the definition computed from the network outputs", "[loss]") {
  const auto spec = SmallSpec(net::Activation::kTanh);
  const int T = 4, B = 3, A = 3;
  learner::Batch batch = RandomBatch(T, B, 3, A, 11);
  auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
  std::vector<float> pf(mlp.layout().total_size());
  net::InitParams(spec, 5, pf);
  std::vector<double> p(pf.begin(), pf.end());
  for (auto& x : p) x *= 30;  // a policy far from uniform
  learner::LossOptions opt;
  opt.entropy_cost = 0.03;
  opt.baseline_cost = 0.7;
  auto targets = learner::ComputeTargets(mlp, p.data(), batch, opt);
  const auto st = learner::LossAndGrad(mlp, p.data(), batch, targets, opt, static_cast<double*>(nullptr));

  std::vector<double> logits((T + 1) * B * A), values((T + 1) * B);
  mlp.Step(p.data(), batch.observations.data(), (T + 1) * B, nullptr, nullptr, nullptr,
           logits.data(), values.data());
  double pg = 0, base = 0, ent = 0;
  for (int i = 0; i < T * B; ++i) {
    double z = 0;
    for (int j = 0; j < A; ++j) z += std::exp(logits[i * A + j]);
    for (int j = 0; j < A; ++j) {
      const double pj = std::exp(logits[i * A + j]) / z;
      ent -= pj * std::log(pj);
    }
    const double logp_a = logits[i * A + batch.actions[i]] - std::log(z);
    pg -= targets.pg_advantages[i] * logp_a;
    base += 0.5 * (targets.vs[i] - values[i]) * (targets.vs[i] - values[i]);
  }
  CHECK(st.m[base::StepMetric::kPgLoss] == Approx(pg));
  CHECK(st.m[base::StepMetric::kBaselineLoss] == Approx(opt.baseline_cost * base));
  CHECK(st.m[base::StepMetric::kEntropy] == Approx(ent / (T * B)));
  CHECK(st.total == Approx(pg + opt.baseline_cost * base - opt.entropy_cost * ent));
}

TEST_CASE("loss: gradient matches finite differences for every parameter", "[loss]") {
  for (auto act : {net::Activation::kTanh, net::Activation::kRelu}) {
    SECTION(act == net::Activation::kTanh ? "tanh torso" : "relu torso") {
      const auto spec = SmallSpec(act);
      learner::Batch batch = RandomBatch(5, 3, 3, 3, 21);
      auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
      const int64_t N = mlp.layout().total_size();
      std::vector<float> pf(N);
      net::InitParams(spec, 9, pf);
      std::vector<double> p(pf.begin(), pf.end());
      std::mt19937_64 rng(3);
      std::normal_distribution<double> n(0, 0.3);
      for (auto& x : p) x += n(rng);  // non-zero biases, a non-uniform policy
      learner::LossOptions opt;
      opt.entropy_cost = 0.05;
      // Targets are constants of the gradient (stop-gradient), so they are fixed here.
      const auto targets = learner::ComputeTargets(mlp, p.data(), batch, opt);
      std::vector<double> grad(N, 0.0);
      learner::LossAndGrad(mlp, p.data(), batch, targets, opt, grad.data());
      CHECK(CheckAgainstFiniteDifferences(mlp, p, batch, targets, opt, grad) == N);
    }
  }
}

TEST_CASE("loss: the single-pass training step equals targets + loss", "[loss]") {
  const auto spec = SmallSpec(net::Activation::kRelu);
  learner::Batch batch = RandomBatch(6, 4, 3, 3, 5);
  auto model = net::MakeCpuModel<float>(spec);
  auto& mlp = *model;
  std::vector<float> p(mlp.layout().total_size());
  net::InitParams(spec, 2, p);
  learner::LossOptions opt;
  std::vector<float> g1(p.size(), 0.f), g2(p.size(), 0.f);
  const auto a = learner::ComputeLossAndGrad(mlp, p.data(), batch, opt, g1.data());
  const auto targets = learner::ComputeTargets(mlp, p.data(), batch, opt);
  const auto b = learner::LossAndGrad(mlp, p.data(), batch, targets, opt, g2.data());
  CHECK(a.total == Approx(b.total));
  for (size_t i = 0; i < p.size(); ++i) CHECK(g1[i] == Approx(g2[i]).margin(1e-6));
}

TEST_CASE("optimizer: RMSProp step and global-norm clipping follow their formulas", "[loss]") {
  learner::Optimizer rms(2, {net::OptimizerKind::kRmsProp, 0.9f, 0.5f, 0.01f});
  std::vector<float> w = {1.f, -2.f};
  const std::vector<float> g = {0.5f, -1.f};
  rms.Step(w, g, 0.1, 1);
  // ms = 0.1 g^2; mom = 0.1 g / sqrt(ms + 0.01); w -= mom
  const double ms0 = 0.1 * 0.25, ms1 = 0.1 * 1.0;
  const double m0 = 0.1 * 0.5 / std::sqrt(ms0 + 0.01), m1 = 0.1 * -1.0 / std::sqrt(ms1 + 0.01);
  CHECK(w[0] == Approx(1 - m0));
  CHECK(w[1] == Approx(-2 - m1));
  rms.Step(w, g, 0.1, 2);  // second step: momentum carries 0.5 of the first
  const double ms0b = 0.9 * ms0 + 0.1 * 0.25;
  CHECK(w[0] == Approx(1 - m0 - (0.5 * m0 + 0.1 * 0.5 / std::sqrt(ms0b + 0.01))));

  std::vector<float> grad = {3.f, 4.f};
  CHECK(learner::ClipGlobalNorm(grad, 1.0) == Approx(5.0));
  CHECK(grad[0] == Approx(0.6));
  CHECK(grad[1] == Approx(0.8));
  std::vector<float> small = {0.3f, 0.4f};
  learner::ClipGlobalNorm(small, 1.0);
  CHECK(small[0] == Approx(0.3f));
  // A length that is no multiple of the sum's lanes: element k = (k % 7) - 3, norm in closed form.
  std::vector<float> odd(1003);
  double expect = 0;
  for (size_t k = 0; k < odd.size(); ++k) {
    odd[k] = float(int(k % 7) - 3);
    expect += double(odd[k]) * odd[k];
  }
  expect = std::sqrt(expect);
  const std::vector<float> odd_before = odd;
  CHECK(learner::ClipGlobalNorm(odd, 2.0) == Approx(expect).epsilon(1e-12));
  for (size_t k : {size_t(0), size_t(1000), size_t(1002)}) CHECK(odd[k] == Approx(odd_before[k] * 2.0 / expect));
}

TEST_CASE("optimizer: PyTorch-form RMSprop puts epsilon outside the square root", "[loss]") {
  // torch.optim.RMSprop(alpha=0.9, eps=0.01, momentum=0.5), by hand:
  //   s = 0.1 g^2; buf = g / (sqrt(s) + eps); w -= lr buf; then buf = 0.5 buf + g / (sqrt(s') + eps).
  learner::Optimizer opt(1, {net::OptimizerKind::kRmsPropTorch, 0.9f, 0.5f, 0.01f});
  std::vector<float> w = {1.f};
  const std::vector<float> g = {0.5f};
  opt.Step(w, g, 0.1, 1);
  const double s1 = 0.1 * 0.25, b1 = 0.5 / (std::sqrt(s1) + 0.01);
  CHECK(w[0] == Approx(1 - 0.1 * b1));
  opt.Step(w, g, 0.1, 2);
  const double s2 = 0.9 * s1 + 0.1 * 0.25, b2 = 0.5 * b1 + 0.5 / (std::sqrt(s2) + 0.01);
  CHECK(w[0] == Approx(1 - 0.1 * b1 - 0.1 * b2));
  // The same epsilon inside the root (TensorFlow's form) gives a far smaller step when
  // gradients are small: the denominator's floor is sqrt(eps) = 0.1 instead of eps.
  learner::Optimizer tf(1, {net::OptimizerKind::kRmsProp, 0.9f, 0.f, 0.01f});
  learner::Optimizer torch(1, {net::OptimizerKind::kRmsPropTorch, 0.9f, 0.f, 0.01f});
  std::vector<float> wt = {0.f}, wp = {0.f};
  const std::vector<float> tiny = {1e-3f};
  tf.Step(wt, tiny, 1.0, 1);
  torch.Step(wp, tiny, 1.0, 1);
  CHECK(std::abs(wp[0]) > 5 * std::abs(wt[0]));
}

TEST_CASE("optimizer: Adam is bias-corrected, so its first step is lr * sign(g)", "[loss]") {
  learner::Optimizer adam(3, {net::OptimizerKind::kAdam, 0.999f, 0.9f, 1e-8f});
  std::vector<float> w = {0.f, 1.f, -1.f};
  const std::vector<float> g = {2.f, -0.01f, 0.f};
  adam.Step(w, g, 0.001, 1);
  // m = 0.1 g, v = 0.001 g^2; m / 0.1 = g, v / 0.001 = g^2: the step is lr g / (|g| + eps).
  CHECK(w[0] == Approx(-0.001).epsilon(1e-5));
  CHECK(w[1] == Approx(1.001).epsilon(1e-5));
  CHECK(w[2] == -1.f);  // no gradient, no moment, no step
  // Step 2 by Kingma & Ba's algorithm 1, independently.
  const std::vector<float> g2 = {-1.f, -0.01f, 0.f};
  adam.Step(w, g2, 0.001, 2);
  const double m = 0.9 * (0.1 * 2) + 0.1 * -1, v = 0.999 * (0.001 * 4) + 0.001 * 1;
  const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
  CHECK(w[0] == Approx(-0.001 - 0.001 * mhat / (std::sqrt(vhat) + 1e-8)).epsilon(1e-5));
  CHECK(adam.momentum()[0] == Approx(m).epsilon(1e-4));  // float state against double arithmetic
  CHECK(adam.mean_square()[0] == Approx(v).epsilon(1e-4));
}

TEST_CASE("optimizer: every element of a large buffer and the update ratio follow the formulas in double", "[loss]") {
  // Sizes across the step's 512-element blocks and 8-lane sums (and their tails), each
  // kind over three steps, against a double-precision replay of the same formulas.
  for (const net::OptimizerKind kind :
       {net::OptimizerKind::kRmsProp, net::OptimizerKind::kRmsPropTorch, net::OptimizerKind::kAdam}) {
    for (const size_t n : {size_t(1), size_t(7), size_t(512), size_t(1031)}) {
      CAPTURE(int(kind), n);
      const net::OptimizerHyper h{kind, 0.99f, kind == net::OptimizerKind::kAdam ? 0.9f : 0.5f, 0.01f};
      learner::Optimizer opt(int64_t(n), h);
      std::vector<float> w(n);
      std::vector<double> wd(n), sd(n, 0.0), md(n, 0.0);
      for (size_t i = 0; i < n; ++i) wd[i] = w[i] = float(std::sin(0.37 * double(i) + 1.0));
      for (int t = 1; t <= 3; ++t) {
        std::vector<float> g(n);
        for (size_t i = 0; i < n; ++i) g[i] = float(0.1 * std::cos(0.11 * double(i) * t) + 0.01 * t);
        const double lr = 0.01 * t;
        const double ratio = opt.Step(w, g, lr, t);
        double step_sq = 0, param_sq = 0;
        for (size_t i = 0; i < n; ++i) {
          const double gi = g[i], d = h.decay, mo = h.momentum, eps = h.epsilon, before = wd[i];
          sd[i] = d * sd[i] + (1 - d) * gi * gi;
          if (kind == net::OptimizerKind::kRmsProp) {
            md[i] = mo * md[i] + lr * gi / std::sqrt(sd[i] + eps);
            wd[i] -= md[i];
          } else if (kind == net::OptimizerKind::kRmsPropTorch) {
            md[i] = mo * md[i] + gi / (std::sqrt(sd[i]) + eps);
            wd[i] -= lr * md[i];
          } else {
            md[i] = mo * md[i] + (1 - mo) * gi;
            const double mhat = md[i] / (1 - std::pow(mo, t)), vhat = sd[i] / (1 - std::pow(d, t));
            wd[i] -= lr * mhat / (std::sqrt(vhat) + eps);
          }
          step_sq += (wd[i] - before) * (wd[i] - before);
          param_sq += wd[i] * wd[i];
          CHECK(w[i] == Approx(wd[i]).epsilon(1e-4).margin(1e-6));
        }
        CHECK(ratio == Approx(std::sqrt(step_sq / param_sq)).epsilon(1e-3));
      }
    }
  }
}

TEST_CASE("optimizer: the learning-rate schedule has its own horizon and an optional warm-up", "[loss]") {
  config::OptimizerConfig oc;
  oc.set_learning_rate(1.0);
  // Default: linear to zero at the run's budget.
  CHECK(net::ScheduledLearningRate(oc, 1000, 250) == Approx(0.75));
  CHECK(net::ScheduledLearningRate(oc, 1000, 2000) == 0.0);
  oc.set_schedule_frames(4000);  // the peers anneal over 200M frames whatever the run's length
  CHECK(net::ScheduledLearningRate(oc, 1000, 1000) == Approx(0.75));
  oc.set_schedule("cosine");
  CHECK(net::ScheduledLearningRate(oc, 1000, 2000) == Approx(0.5));
  CHECK(net::ScheduledLearningRate(oc, 1000, 4000) == Approx(0.0).margin(1e-12));
  oc.set_schedule("constant");
  CHECK(net::ScheduledLearningRate(oc, 1000, 3999) == 1.0);
  oc.set_warmup_frames(100);
  CHECK(net::ScheduledLearningRate(oc, 1000, 25) == Approx(0.25));
  CHECK(net::ScheduledLearningRate(oc, 1000, 100) == 1.0);
  config::OptimizerConfig old;  // linear_decay: false, the older spelling of "constant"
  old.set_learning_rate(2.0);
  old.set_linear_decay(false);
  CHECK(net::ScheduledLearningRate(old, 1000, 900) == 2.0);
}

TEST_CASE("loss: episode ends zero the discount, and truncation bootstraps only when configured", "[loss]") {
  const auto spec = SmallSpec(net::Activation::kTanh);
  learner::Batch batch = RandomBatch(4, 2, 3, 3, 8);
  std::fill(batch.terminated.begin(), batch.terminated.end(), 0);
  std::fill(batch.truncated.begin(), batch.truncated.end(), 0);
  batch.terminated[1] = 1;  // t=0, b=1
  batch.truncated[4] = 1;   // t=2, b=0
  batch.truncation_values[4] = 2.5f;
  auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
  std::vector<float> pf(mlp.layout().total_size());
  net::InitParams(spec, 1, pf);
  std::vector<double> p(pf.begin(), pf.end());
  learner::LossOptions opt;
  opt.discount = 0.9;
  for (bool bootstrap : {true, false}) {
    opt.bootstrap_on_truncation = bootstrap;
    const auto tg = learner::ComputeTargets(mlp, p.data(), batch, opt);
    for (int i = 0; i < 8; ++i) {
      CHECK(tg.discounts[i] == Approx(i == 1 || i == 4 ? 0.0 : 0.9));
      const double want = batch.rewards[i] + (i == 4 && bootstrap ? 0.9 * 2.5 : 0.0);
      CHECK(tg.rewards[i] == Approx(want));
    }
  }
}

TEST_CASE("loss: replayed unrolls use their stored behaviour logits, importance weights and LASER's masks",
          "[loss][replay]") {
  const auto spec = SmallSpec(net::Activation::kTanh);
  const int T = 4, B = 3, A = 3;
  learner::Batch batch = RandomBatch(T, B, 3, A, 23);
  std::fill(batch.terminated.begin(), batch.terminated.end(), 0);
  std::fill(batch.truncated.begin(), batch.truncated.end(), 0);
  auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
  std::vector<float> pf(mlp.layout().total_size());
  net::InitParams(spec, 7, pf);
  std::vector<double> p(pf.begin(), pf.end());
  for (auto& x : p) x *= 10;
  learner::LossOptions opt;
  opt.entropy_cost = 0.05;
  opt.baseline_cost = 0.5;
  opt.discount = 0.9;

  SECTION("no replayed column and unit weights: the plain step") {
    std::vector<double> g1(p.size(), 0.0), g2(p.size(), 0.0);
    const auto a = learner::ComputeLossAndGrad(mlp, p.data(), batch, opt, g1.data());
    learner::Batch marked = batch;
    marked.replayed.assign(B, 0);
    marked.weights.assign(B, 1.f);
    learner::LossOptions o2 = opt;
    o2.entropy_online_only = true;
    o2.trust_region_kl = 0.01;
    const auto b = learner::ComputeLossAndGrad(mlp, p.data(), marked, o2, g2.data());
    // Two calls on the very same inputs already differ in the last bit here and there
    // (Eigen's vectorised sums depend on the buffers' alignment), so "the same step" is
    // checked to 1e-12 relative; every factor the replay code adds is exactly 1.0.
    std::vector<double> g3(p.size(), 0.0);
    const auto c = learner::ComputeLossAndGrad(mlp, p.data(), batch, opt, g3.data());
    CHECK(c.total == Approx(a.total).epsilon(1e-12));
    CHECK(b.total == Approx(a.total).epsilon(1e-12));
    for (size_t i = 0; i < g1.size(); ++i) {
      REQUIRE(g2[i] == Approx(g1[i]).epsilon(1e-12).margin(1e-300));
      REQUIRE(g3[i] == Approx(g1[i]).epsilon(1e-12).margin(1e-300));
    }
  }

  // Column 2 replayed, weight 0.5; entropy only on the fresh columns 0 and 1.
  learner::Batch marked = batch;
  marked.replayed = {0, 0, 1};
  marked.weights = {1.f, 1.f, 0.5f};
  learner::LossOptions o2 = opt;
  o2.entropy_online_only = true;
  const auto targets = learner::ComputeTargets(mlp, p.data(), marked, o2);
  std::vector<double> logits((T + 1) * B * A), values((T + 1) * B);
  mlp.Step(p.data(), marked.observations.data(), (T + 1) * B, nullptr, nullptr, nullptr, logits.data(),
           values.data());
  // V-trace by its definition (lambda 1, rho-bar = c-bar = 1) for the replayed column,
  // with the behaviour policy its stored logits.
  {
    const int b = 2;
    std::vector<double> vs(T + 1);
    vs[T] = values[T * B + b];
    for (int t = T - 1; t >= 0; --t) {
      const int i = t * B + b;
      const double log_rho = LogSoftmax(&logits[i * A], A, marked.actions[i]) -
                             LogSoftmax(&marked.behaviour_logits[i * A], A, marked.actions[i]);
      const double c = std::min(1.0, std::exp(log_rho));
      const double delta = c * (marked.rewards[i] + opt.discount * values[(t + 1) * B + b] - values[i]);
      vs[t] = values[i] + delta + opt.discount * c * (vs[t + 1] - values[(t + 1) * B + b]);
      CHECK(targets.vs[i] == Approx(vs[t]).epsilon(1e-9));
      const double adv = c * (marked.rewards[i] + opt.discount * vs[t + 1] - values[i]);
      CHECK(targets.pg_advantages[i] == Approx(adv).epsilon(1e-9));
    }
  }
  const auto st = learner::LossAndGrad(mlp, p.data(), marked, targets, o2, static_cast<double*>(nullptr));
  double pg = 0, base = 0, ent_fresh = 0;
  for (int i = 0; i < T * B; ++i) {
    const int b = i % B;
    const double w = marked.weights[b];
    pg -= w * targets.pg_advantages[i] * LogSoftmax(&logits[i * A], A, marked.actions[i]);
    base += w * 0.5 * (targets.vs[i] - values[i]) * (targets.vs[i] - values[i]);
    if (b == 2) continue;
    for (int j = 0; j < A; ++j) {
      const double lp = LogSoftmax(&logits[i * A], A, j);
      ent_fresh -= std::exp(lp) * lp;
    }
  }
  CHECK(st.m[base::StepMetric::kPgLoss] == Approx(pg));
  CHECK(st.m[base::StepMetric::kBaselineLoss] == Approx(opt.baseline_cost * base));
  CHECK(st.total == Approx(pg + opt.baseline_cost * base - opt.entropy_cost * ent_fresh));

  SECTION("the trust region leaves out replayed steps whose policy moved too far") {
    learner::LossOptions o3 = o2;
    o3.trust_region_kl = 1e-12;  // every replayed step is further than this
    const auto cut = learner::LossAndGrad(mlp, p.data(), marked, targets, o3, static_cast<double*>(nullptr));
    CHECK(cut.trust_region_dropped == T);
    double pg_fresh = 0;
    for (int i = 0; i < T * B; ++i) {
      if (i % B == 2) continue;
      pg_fresh -= targets.pg_advantages[i] * LogSoftmax(&logits[i * A], A, marked.actions[i]);
    }
    CHECK(cut.m[base::StepMetric::kPgLoss] == Approx(pg_fresh));
    o3.trust_region_kl = 1e9;  // none is
    CHECK(learner::LossAndGrad(mlp, p.data(), marked, targets, o3, static_cast<double*>(nullptr))
              .trust_region_dropped == 0);
  }
  SECTION("KL of a categorical policy against the definition") {
    const float zb[3] = {0.1f, -1.f, 2.f}, zc[3] = {1.f, 0.f, -0.5f};
    net::PolicyShape pol = net::CategoricalPolicy(3);
    double kl = 0;
    for (int a = 0; a < 3; ++a) {
      const double lb = LogSoftmax(zb, 3, a), lc = LogSoftmax(zc, 3, a);
      kl += std::exp(lb) * (lb - lc);
    }
    CHECK(learner::PolicyKl(pol, zb, zc) == Approx(kl).epsilon(1e-12));
    CHECK(learner::PolicyKl(pol, zb, zb) == Approx(0).margin(1e-12));
  }
}

TEST_CASE("loss: normalize_advantages standardises the advantages over the batch's valid steps", "[loss]") {
  const auto spec = SmallSpec(net::Activation::kTanh);
  const int T = 5, B = 4, A = 3;
  learner::Batch batch = RandomBatch(T, B, 3, A, 17);
  batch.valid[2] = 0;  // an env reset: not in the loss, not in the statistics
  batch.valid[9] = 0;
  auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
  const int64_t N = mlp.layout().total_size();
  std::vector<float> pf(N);
  net::InitParams(spec, 4, pf);
  std::vector<double> p(pf.begin(), pf.end());
  for (auto& x : p) x *= 10;
  learner::LossOptions opt;
  opt.entropy_cost = 0.02;
  opt.normalize_advantages = true;
  // The baseline's gradient is checked above; here its huge loss would only drown the
  // finite differences in rounding.
  opt.baseline_cost = 0;
  for (auto& r : batch.rewards) r = 37 * r - 100;  // far from unit scale
  const auto targets = learner::ComputeTargets(mlp, p.data(), batch, opt);
  std::vector<double> grad(N, 0.0);
  const auto st = learner::LossAndGrad(mlp, p.data(), batch, targets, opt, grad.data());

  // Mean and standard deviation of the raw advantages over the valid steps, then the
  // policy-gradient loss with the standardised ones.
  double sum = 0, n = 0;
  for (int i = 0; i < T * B; ++i) {
    if (batch.valid[i]) sum += targets.pg_advantages[i], n += 1;
  }
  const double mean = sum / n;
  double var = 0;
  for (int i = 0; i < T * B; ++i) {
    if (batch.valid[i]) var += (targets.pg_advantages[i] - mean) * (targets.pg_advantages[i] - mean) / n;
  }
  REQUIRE(std::sqrt(var) > 1);  // the raw advantages are far from standard
  std::vector<double> logits((T + 1) * B * A), values((T + 1) * B);
  mlp.Step(p.data(), batch.observations.data(), (T + 1) * B, nullptr, nullptr, nullptr, logits.data(),
           values.data());
  double pg = 0;
  for (int i = 0; i < T * B; ++i) {
    if (!batch.valid[i]) continue;
    double z = 0;
    for (int j = 0; j < A; ++j) z += std::exp(logits[i * A + j]);
    pg -= (targets.pg_advantages[i] - mean) / std::sqrt(var) * (logits[i * A + batch.actions[i]] - std::log(z));
  }
  CHECK(st.m[base::StepMetric::kPgLoss] == Approx(pg).epsilon(1e-9));

  // The gradient is still the loss's (the statistics are constants, as the targets are).
  CHECK(CheckAgainstFiniteDifferences(mlp, p, batch, targets, opt, grad) == N);

  // An affine change of every advantage (50 a + 3, a reward scale and offset) leaves the
  // gradient unchanged (with baseline_cost 0 the whole gradient is the policy's).
  auto t1 = learner::ComputeTargets(mlp, p.data(), batch, opt);
  auto t2 = t1;
  for (auto& a : t2.pg_advantages) a = 50 * a + 3;
  std::vector<double> g1(N, 0.0), g2(N, 0.0);
  learner::LossAndGrad(mlp, p.data(), batch, t1, opt, g1.data());
  learner::LossAndGrad(mlp, p.data(), batch, t2, opt, g2.data());
  for (int64_t k = 0; k < N; ++k) CHECK(g2[k] == Approx(g1[k]).margin(1e-9));
}

TEST_CASE("loss: ppo_clip takes PPO's clipped surrogate with V-trace's advantages", "[loss]") {
  const auto spec = SmallSpec(net::Activation::kTanh);
  const int T = 6, B = 4, A = 3;
  learner::Batch batch = RandomBatch(T, B, 3, A, 29);
  auto model = net::MakeCpuModel<double>(spec);
  auto& mlp = *model;
  const int64_t N = mlp.layout().total_size();
  std::vector<float> pf(N);
  net::InitParams(spec, 6, pf);
  std::vector<double> p(pf.begin(), pf.end());
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0, 0.4);
  for (auto& x : p) x += noise(rng);  // a policy away from the behaviour's
  learner::LossOptions opt;
  opt.entropy_cost = 0.02;
  opt.ppo_clip = 0.2;
  const auto targets = learner::ComputeTargets(mlp, p.data(), batch, opt);
  std::vector<double> grad(N, 0.0);
  const auto st = learner::LossAndGrad(mlp, p.data(), batch, targets, opt, grad.data());

  // The surrogate by its definition from the network's outputs: r = pi / mu, A the V-trace
  // advantage divided by its weight min(r, 1).
  std::vector<double> logits((T + 1) * B * A), values((T + 1) * B);
  mlp.Step(p.data(), batch.observations.data(), (T + 1) * B, nullptr, nullptr, nullptr, logits.data(),
           values.data());
  double pg = 0;
  int clipped_up = 0, clipped_down = 0;
  for (int i = 0; i < T * B; ++i) {
    if (!batch.valid[i]) continue;
    const int a = batch.actions[i];
    const double r = std::exp(LogSoftmax(&logits[i * A], A, a) - LogSoftmax(&batch.behaviour_logits[i * A], A, a));
    const double adv = targets.pg_advantages[i] / std::min(r, 1.0);
    pg -= std::min(r * adv, std::clamp(r, 0.8, 1.2) * adv);
    clipped_up += adv > 0 && r > 1.2;
    clipped_down += adv < 0 && r < 0.8;
  }
  REQUIRE(clipped_up > 0);  // the batch has steps clipped either way
  REQUIRE(clipped_down > 0);
  CHECK(st.m[base::StepMetric::kPgLoss] == Approx(pg).epsilon(1e-9));
  // Its gradient (r's too: r moves with the parameters) against finite differences.
  CHECK(CheckAgainstFiniteDifferences(mlp, p, batch, targets, opt, grad) == N);

  // On-policy (the behaviour is the current policy, r = 1) it is V-trace's gradient.
  learner::Batch on = batch;
  for (size_t k = 0; k < on.behaviour_logits.size(); ++k) on.behaviour_logits[k] = float(logits[k]);
  learner::LossOptions vt = opt;
  vt.ppo_clip = 0;
  const auto t_on = learner::ComputeTargets(mlp, p.data(), on, vt);
  std::vector<double> g_ppo(N, 0.0), g_vt(N, 0.0);
  learner::LossAndGrad(mlp, p.data(), on, t_on, opt, g_ppo.data());
  learner::LossAndGrad(mlp, p.data(), on, t_on, vt, g_vt.data());
  for (int64_t k = 0; k < N; ++k) CHECK(g_ppo[k] == Approx(g_vt[k]).epsilon(1e-5).margin(1e-6));
}
