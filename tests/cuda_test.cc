// The CUDA backend against the CPU one, for every network (each torso, the LSTM core,
// each head): forward outputs, the loss gradient, and one full learner step (V-trace,
// loss, global-norm clipping, the optimizer, and PopArt's update where a suite has it) from
// the same parameters and batch, and the gradient
// alone (the sync/async learner's) at parameters the host gives. Tolerances:
// outputs 1e-4 relative (or absolute where small), gradients 2e-3 of the gradient's
// largest magnitude, parameter updates 2e-3 of the update's largest magnitude (strict
// FP32 on the GPU: no TF32; the CPU sums in a different order). Where this machine has
// no CUDA device the test reports skipped, with the reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "learner/batch.h"
#include "learner/loss.h"
#include "learner/optimizer.h"
#include "learner/popart.h"
#include "net/cuda/trainer.h"
#include "net/distribution.h"
#include "net/model.h"
#include "tests/skip_only.h"
#include "tests/status_testing.h"

using namespace stampede;

namespace {
struct Case {
  const char* name;
  net::ModelSpec spec;
  std::vector<int> action_limits = {};  // per task (a suite's masks); empty: one task, none masked
  bool popart = false;                  // one value output per task, normalised (learner.popart)
};

net::ModelSpec Spec(const std::string& torso, std::vector<int> obs, bool u8, int lstm, net::PolicyShape pol) {
  net::ModelSpec s;
  s.obs_shape = std::move(obs);
  s.uint8_obs = u8;
  s.torso = torso;
  s.hidden_sizes = {16, 8};
  s.activation = net::Activation::kTanh;
  s.fc_size = 12;
  s.lstm_size = lstm;
  s.policy = pol;
  return s;
}

// net.layers: every layer kind, in an order no preset has.
net::ModelSpec Custom() {
  net::ModelSpec s = Spec("", {2, 9, 9}, true, 6, net::CategoricalPolicy(3));
  using K = net::LayerSpec::Kind;
  auto layer = [](K kind, int units, int channels, int k, int st, int p) {
    net::LayerSpec l;
    l.kind = kind, l.units = units, l.channels = channels, l.kernel = k, l.stride = st, l.pad = p;
    return l;
  };
  s.layers = {layer(K::kConv, 0, 6, 3, 1, 1),   layer(K::kTanh, 0, 0, 0, 1, 0), layer(K::kMaxPool, 0, 0, 2, 2, 0),
              layer(K::kResidual, 0, 0, 0, 1, 0), layer(K::kConv, 0, 4, 2, 1, 0), layer(K::kRelu, 0, 0, 0, 1, 0),
              layer(K::kDense, 10, 0, 0, 1, 0),  layer(K::kTanh, 0, 0, 0, 1, 0)};
  return s;
}

std::vector<Case> Cases() {
  net::PolicyShape md;
  md.kind = net::PolicyKind::kMultiDiscrete;
  md.num_components = 2;
  md.nvec[0] = 3, md.nvec[1] = 2;
  net::PolicyShape g;
  g.kind = net::PolicyKind::kGaussian;
  g.num_components = 2;
  return {
      {"mlp (tanh), categorical", Spec("mlp", {6}, false, 0, net::CategoricalPolicy(4))},
      {"mlp + lstm, multi-discrete", Spec("mlp", {6}, false, 8, md)},
      {"mlp, gaussian", Spec("mlp", {5}, false, 0, g)},
      {"shallow cnn, uint8 pixels", Spec("shallow_cnn", {2, 36, 28}, true, 0, net::CategoricalPolicy(3))},
      {"deep resnet + lstm", Spec("deep_resnet", {2, 16, 12}, true, 8, net::CategoricalPolicy(3))},
      {"small cnn", Spec("small_cnn", {3, 6, 7}, false, 0, net::CategoricalPolicy(5))},
      {"a layer list of the user's own (conv, max-pool, residual, dense, tanh) + lstm", Custom()},
      // A suite of three tasks with 5, 2 and 3 of the union's 5 actions.
      {"mlp + lstm, per-task action masks", Spec("mlp", {6}, false, 8, net::CategoricalPolicy(5)), {5, 2, 3}},
      // The same suite with PopArt: three value outputs, each task's statistics.
      {"small cnn, per-task action masks and PopArt", Spec("small_cnn", {3, 6, 7}, false, 0, net::CategoricalPolicy(5)),
       {5, 2, 3}, true},
  };
}

learner::Batch RandomBatch(const net::ModelSpec& spec, int T, int B, uint64_t seed,
                           const std::vector<int>& action_limits = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  std::uniform_real_distribution<float> u(0, 1);
  wire::StepShape shape{spec.obs_shape, spec.uint8_obs ? wire::DType::kUint8 : wire::DType::kFloat32,
                        spec.policy.output_size(), 2 * spec.lstm_size};
  if (spec.policy.kind == net::PolicyKind::kGaussian) {
    shape.action_kind = wire::ActionKind::kBox;
    shape.action_low.assign(spec.policy.num_components, -1.f);
    shape.action_high.assign(spec.policy.num_components, 1.f);
  } else if (spec.policy.kind == net::PolicyKind::kMultiDiscrete) {
    shape.action_kind = wire::ActionKind::kMultiDiscrete;
    shape.action_nvec.assign(spec.policy.nvec, spec.policy.nvec + spec.policy.num_components);
  }
  learner::Batch b;
  b.Resize(T, B, shape);
  for (auto& x : b.observations) x = n(rng);
  for (auto& x : b.observations_u8) x = uint8_t(rng());
  const int K = shape.action_size();
  for (size_t i = 0; i < b.actions.size(); ++i) {
    const int k = int(i % K);
    const int count = spec.policy.kind == net::PolicyKind::kMultiDiscrete ? spec.policy.nvec[k] : spec.policy.nvec[0];
    b.actions[i] = int(rng() % uint64_t(count));
  }
  for (auto& a : b.box_actions) a = n(rng);
  for (auto& r : b.rewards) r = n(rng);
  for (auto& l : b.behaviour_logits) l = 0.5f * n(rng);
  if (spec.policy.kind == net::PolicyKind::kGaussian) {
    const int D = spec.policy.num_components;
    for (size_t i = 0; i < b.behaviour_logits.size(); ++i) {
      if (i % (2 * D) >= size_t(D)) b.behaviour_logits[i] = -0.3f;  // log-std
    }
  }
  for (auto& s : b.initial_core_state) s = 0.3f * n(rng);
  if (!action_limits.empty()) {
    // Each unroll a task; its actions among that task's.
    for (int u = 0; u < B; ++u) b.tasks[size_t(u)] = int32_t(rng() % action_limits.size());
    for (int t = 0; t < T; ++t) {
      for (int u = 0; u < B; ++u) {
        const size_t i = size_t(t) * B + u;
        b.actions[i] = int32_t(rng() % uint64_t(action_limits[size_t(b.tasks[size_t(u)])]));
      }
    }
  }
  for (int i = 0; i < T * B; ++i) {
    const float e = u(rng);
    b.terminated[i] = e < 0.1f;
    b.truncated[i] = e >= 0.1f && e < 0.2f;
    b.valid[i] = e < 0.95f;
    b.truncation_values[i] = b.truncated[i] ? n(rng) : 0.f;
  }
  return b;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}
}  // namespace

TEST_CASE("cuda: forward, gradient and a full learner step agree with the CPU for every network", "[cuda]") {
  if (const auto n = net::cuda::DeviceCount(); !n.ok()) testing::Skip("needs a CUDA device: " + n.status().message());
  const int T = 5, B = 4;
  int index = 0;
  for (Case c : Cases()) {
    // Every other network also standardises its advantages (learner.normalize_advantages).
    const bool normalize = index++ % 2 == 1;
    INFO(c.name << (normalize ? ", advantages standardised" : ""));
    if (c.popart) {
      c.spec.popart = true;
      c.spec.num_values = int(c.action_limits.size());
    }
    const int V = c.spec.num_values;
    auto cpu = net::MakeCpuModel<float>(c.spec);
    const int64_t N = cpu->layout().total_size();
    std::vector<float> params(N);
    net::InitParams(c.spec, 7, params);
    std::mt19937_64 rng(8);
    std::normal_distribution<float> noise(0, 0.05f);
    for (auto& p : params) p += noise(rng);
    const learner::Batch batch = RandomBatch(c.spec, T, B, 9, c.action_limits);
    learner::LossOptions lo;
    lo.action_limits = c.action_limits;
    lo.discount = 0.97;
    lo.entropy_cost = 0.02;
    lo.reward_clip = 1.5;
    lo.normalize_advantages = normalize;
    lo.popart = c.popart;
    net::cuda::TrainerOptions to;
    to.unroll_length = T;
    to.batch_size = B;
    to.discount = lo.discount;
    to.entropy_cost = lo.entropy_cost;
    to.reward_clip = lo.reward_clip;
    to.normalize_advantages = normalize;
    to.max_grad_norm = 1.0;  // small: the clip engages
    to.action_limits = c.action_limits;
    to.popart = c.popart;
    to.popart_beta = 0.1;  // large, so the statistics' move shows in the step
    // Each network runs one of the optimizers (net/kernel_math.h), in turn.
    const net::OptimizerKind kinds[] = {net::OptimizerKind::kRmsProp, net::OptimizerKind::kRmsPropTorch,
                                        net::OptimizerKind::kAdam};
    to.optimizer.kind = kinds[index % 3];
    if (to.optimizer.kind == net::OptimizerKind::kAdam) to.optimizer = {net::OptimizerKind::kAdam, 0.999f, 0.9f, 1e-8f};
    INFO("optimizer kind " << int(to.optimizer.kind));
    std::string error;
    auto gpu = ::stampede::testing::ValueOr(net::cuda::Trainer::Create(c.spec, 0, to), &error);
    INFO(error);
    REQUIRE(gpu);
    REQUIRE(gpu->layout().Fingerprint() == cpu->layout().Fingerprint());
    const std::vector<float> zeros(N, 0.f);
    gpu->SetState(params, zeros, zeros);
    gpu->Stage(learner::BatchViewOf(batch));

    // Forward outputs and gradient.
    std::vector<float> g_policy, g_values, g_grad;
    const auto gs = gpu->ForwardAndGradient(&g_policy, &g_values, &g_grad);
    const int T1 = T + 1, P = c.spec.policy.output_size();
    std::vector<float> c_policy(size_t(T1) * B * P), c_values(size_t(T1) * B * V);
    std::vector<uint8_t> first;
    batch.EpisodeStarts(&first);
    cpu->Forward(params.data(), batch.uint8_obs() ? (const void*)batch.observations_u8.data()
                                                  : (const void*)batch.observations.data(),
                 T1, B, first.data(), batch.initial_core_state.empty() ? nullptr : batch.initial_core_state.data(),
                 c_policy.data(), c_values.data());
    // The GPU gives the policy outputs the loss sees: masked where the unroll's task lacks
    // the action (learner/loss.cc masks the CPU's the same way).
    for (int t = 0; t < T1 && !c.action_limits.empty(); ++t) {
      for (int u = 0; u < B; ++u) {
        const int limit = c.action_limits[size_t(batch.tasks[size_t(u)])];
        for (int j = limit; j < P; ++j) c_policy[(size_t(t) * B + u) * P + j] = net::kMaskedLogit;
      }
    }
    REQUIRE(g_policy.size() == c_policy.size());
    for (size_t i = 0; i < c_policy.size(); ++i) CHECK(g_policy[i] == Approx(c_policy[i]).epsilon(1e-4).margin(1e-4));
    for (size_t i = 0; i < c_values.size(); ++i) CHECK(g_values[i] == Approx(c_values[i]).epsilon(1e-4).margin(1e-4));
    REQUIRE(g_values.size() == c_values.size());
    std::vector<float> c_grad(N, 0.f);
    learner::Targets<float> c_targets;
    const auto cs = learner::ComputeLossAndGrad(*cpu, params.data(), batch, lo, c_grad.data(), &c_targets);
    CHECK(gs.total == Approx(cs.total).epsilon(1e-3).margin(1e-3));
    CHECK(gs.m[base::StepMetric::kEntropy] == Approx(cs.m[base::StepMetric::kEntropy]).epsilon(1e-4));
    // The diagnostics, as the CPU learner computes them on the same batch.
    CHECK(gs.m[base::StepMetric::kExplainedVariance] == Approx(cs.m[base::StepMetric::kExplainedVariance]).margin(1e-3));
    CHECK(gs.m[base::StepMetric::kApproxKl] == Approx(cs.m[base::StepMetric::kApproxKl]).margin(1e-5));
    CHECK(gs.m[base::StepMetric::kRhoClipFraction] == Approx(cs.m[base::StepMetric::kRhoClipFraction]).margin(1e-9));
    const double gmax = MaxAbs(c_grad);
    for (int64_t i = 0; i < N; ++i) CHECK(g_grad[i] == Approx(c_grad[i]).margin(2e-3 * gmax));

    // One full step: clipping and the optimizer on both, from the same state and the same
    // gradient. The reference applies the CPU's clip and optimizer to the GPU's gradient
    // (checked against the CPU's just above): Adam's first step moves a parameter by about
    // lr * g / (|g| + eps), so where |g| is near eps (1e-8) a rounding difference between
    // the two gradients, far inside their tolerance, would show as a larger one in the update.
    const double lr = 0.01;
    const double norm = learner::ClipGlobalNorm(c_grad, to.max_grad_norm);
    CHECK(gs.m[base::StepMetric::kGradNorm] == Approx(norm).epsilon(1e-3));
    std::vector<float> ref_grad = g_grad;
    learner::ClipGlobalNorm(ref_grad, to.max_grad_norm);
    learner::Optimizer opt(N, to.optimizer);
    std::vector<float> c_params = params;
    opt.Step(c_params, ref_grad, lr, 1);
    if (c.popart) {
      // Then each task's statistics from the step's targets, and the head rescaled
      // (learner/receive.cc UpdatePopArt).
      const learner::PopArtSlots slots = learner::PopArtSlotsOf(cpu->layout());
      for (int k = 0; k < V; ++k) {
        double sum = 0, square = 0, n = 0;
        for (int i = 0; i < T * B; ++i) {
          if (!batch.valid[i] || batch.tasks[size_t(i % B)] != k) continue;
          sum += c_targets.vs[i], square += double(c_targets.vs[i]) * c_targets.vs[i], n += 1;
        }
        if (n > 0) learner::PopArtUpdate(slots, c_params.data(), k, sum / n, square / n, to.popart_beta);
      }
      // The statistics moved (the check below would pass unchanged otherwise).
      const int64_t stats = cpu->layout().Find("popart/stats").offset;
      CHECK(std::abs(c_params[stats] - params[stats]) > 1e-3);
    }
    gpu->Step(lr, 1);
    std::vector<float> g_params(N), g_ms(N), g_mom(N);
    gpu->GetState(g_params, g_ms, g_mom);
    std::vector<float> c_delta(N);
    for (int64_t i = 0; i < N; ++i) c_delta[i] = c_params[i] - params[i];
    const double dmax = MaxAbs(c_delta);
    for (int64_t i = 0; i < N; ++i) CHECK(g_params[i] - params[i] == Approx(c_delta[i]).margin(2e-3 * dmax));

    // The gradient alone (sync/async: the shards apply it), at parameters the host gives:
    // the CPU's gradient there, and the optimizer state untouched.
    std::vector<float> h_grad(N), c_grad2(N, 0.f);
    gpu->LaunchGradient(c_params);
    const auto hs = gpu->WaitGradient(h_grad);
    const auto cs2 = learner::ComputeLossAndGrad(*cpu, c_params.data(), batch, lo, c_grad2.data());
    CHECK(hs.total == Approx(cs2.total).epsilon(1e-3).margin(1e-3));
    const double gmax2 = MaxAbs(c_grad2);
    for (int64_t i = 0; i < N; ++i) CHECK(h_grad[i] == Approx(c_grad2[i]).margin(2e-3 * gmax2));
    CHECK(hs.m[base::StepMetric::kGradNorm] == Approx(learner::ClipGlobalNorm(c_grad2, 0)).epsilon(1e-3));
    std::vector<float> h_params(N), h_ms(N), h_mom(N);
    gpu->GetState(h_params, h_ms, h_mom);
    CHECK(h_ms == g_ms);
    CHECK(h_mom == g_mom);
    CHECK(h_params == c_params);
  }
}

TEST_CASE("cuda: asking for a device this machine lacks is a clear error", "[cuda]") {
  const base::StatusOr<int> count = net::cuda::DeviceCount();
  const int n = count.ok() ? *count : 0;
  std::string error;
  auto spec = Spec("mlp", {4}, false, 0, net::CategoricalPolicy(2));
  auto t = ::stampede::testing::ValueOr(net::cuda::Trainer::Create(spec, n + 3, {}), &error);
  CHECK(t == nullptr);
  CHECK_THAT(error, Catch::Contains("cuda:" + std::to_string(n + 3) + " is not available"));
}

TEST_CASE("cuda: the acting policy's step agrees with the CPU model's for every network, its state carried", "[cuda]") {
  // The inference server's forward on the learner's GPU (net/cuda/trainer.h Policy): two
  // steps of batches that are not a multiple of 8 (the padding is exercised), the second
  // smaller than the first, some rows starting afresh, the state carried between them.
  if (const auto n = net::cuda::DeviceCount(); !n.ok()) testing::Skip("needs a CUDA device: " + n.status().message());
  for (Case c : Cases()) {
    INFO(c.name);
    if (c.popart) {
      c.spec.popart = true;
      c.spec.num_values = int(c.action_limits.size());
    }
    auto cpu = net::MakeCpuModel<float>(c.spec);
    const int64_t N = cpu->layout().total_size();
    std::vector<float> params(N);
    net::InitParams(c.spec, 11, params);
    std::string error;
    auto gpu = ::stampede::testing::ValueOr(net::cuda::Policy::Create(c.spec, 0, false), &error);
    INFO(error);
    REQUIRE(gpu);
    REQUIRE(gpu->layout().Fingerprint() == cpu->layout().Fingerprint());
    gpu->SetParams(params);
    const int S = cpu->state_size(), P = cpu->policy_size(), V = cpu->num_values();
    std::mt19937_64 rng(12);
    std::normal_distribution<float> normal(0, 1);
    std::vector<float> c_state(size_t(5) * S), g_state;
    for (auto& x : c_state) x = 0.3f * normal(rng);
    g_state = c_state;
    for (const int n : {5, 3}) {
      INFO("a batch of " << n);
      const size_t row = size_t(c.spec.obs_size()) * (c.spec.uint8_obs ? 1 : 4);
      std::vector<std::byte> obs(row * n);
      if (c.spec.uint8_obs) {
        for (auto& b : obs) b = std::byte(rng() & 0xff);
      } else {
        float* f = reinterpret_cast<float*>(obs.data());
        for (size_t i = 0; i < obs.size() / 4; ++i) f[i] = normal(rng);
      }
      std::vector<uint8_t> first(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) first[size_t(i)] = i == 1 ? 1 : 0;
      std::vector<float> c_policy(size_t(n) * P), g_policy(size_t(n) * P), c_values(size_t(n) * V), g_values(size_t(n) * V);
      cpu->Step(params.data(), obs.data(), n, first.data(), S ? c_state.data() : nullptr, S ? c_state.data() : nullptr,
                c_policy.data(), c_values.data());
      gpu->Step(obs.data(), n, first.data(), S ? g_state.data() : nullptr, S ? g_state.data() : nullptr, g_policy.data(),
                g_values.data());
      for (size_t i = 0; i < c_policy.size(); ++i) CHECK(g_policy[i] == Approx(c_policy[i]).epsilon(1e-4).margin(1e-4));
      for (size_t i = 0; i < c_values.size(); ++i) CHECK(g_values[i] == Approx(c_values[i]).epsilon(1e-4).margin(1e-4));
      for (size_t i = 0; i < size_t(n) * S; ++i) CHECK(g_state[i] == Approx(c_state[i]).epsilon(1e-4).margin(1e-4));
    }
  }
}
