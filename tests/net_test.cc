// The networks: every layer's gradient against central finite differences (double
// precision), forward passes against hand-computed small cases, the LSTM's episode
// resets, the heads' log-probabilities and entropies, and whole models (each torso,
// with and without the core, each head) through the IMPALA loss.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "learner/loss.h"
#include "net/distribution.h"
#include "envs/rng.h"
#include "net/fast_math.h"
#include "net/layers.h"
#include "net/model.h"
#include "tests/random_values.h"

using namespace stampede;
using net::ImageShape;
using testing::Random;

namespace {

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks d(sum(out * R))/d(params) and /d(in) of a layer against finite differences.
void CheckLayer(net::Layer<double>& layer, int64_t num_params, int n, uint64_t seed) {
  std::vector<double> p = Random(num_params, seed, 0.5), in = Random(size_t(n) * layer.in_size(), seed + 1);
  const std::vector<double> R = Random(size_t(n) * layer.out_size(), seed + 2);
  std::vector<double> out(R.size()), grad(num_params, 0.0), din(in.size());
  auto loss = [&](const std::vector<double>& pp, const std::vector<double>& x) {
    std::vector<double> o(R.size());
    layer.Forward(pp.data(), x.data(), n, o.data());
    return Dot(o, R);
  };
  layer.Forward(p.data(), in.data(), n, out.data());
  layer.Backward(p.data(), in.data(), out.data(), R.data(), n, din.data(), grad.data());
  const double eps = 1e-6;
  for (int64_t k = 0; k < num_params; ++k) {
    std::vector<double> q = p;
    q[k] += eps;
    const double up = loss(q, in);
    q[k] -= 2 * eps;
    const double fd = (up - loss(q, in)) / (2 * eps);
    INFO("parameter " << k);
    CHECK(grad[k] == Approx(fd).margin(1e-6).epsilon(1e-5));
  }
  for (size_t k = 0; k < in.size(); ++k) {
    std::vector<double> x = in;
    x[k] += eps;
    const double up = loss(p, x);
    x[k] -= 2 * eps;
    const double fd = (up - loss(p, x)) / (2 * eps);
    INFO("input " << k);
    CHECK(din[k] == Approx(fd).margin(1e-6).epsilon(1e-5));
  }
}
}  // namespace

TEST_CASE("layers: gradients match finite differences (FC, conv, max-pool, residual)", "[net]") {
  SECTION("fully connected") {
    net::ParamLayout L;
    auto layer = net::MakeDense<double>(&L, "fc", 5, 4);
    CheckLayer(*layer, L.total_size(), 3, 1);
  }
  SECTION("conv with stride and padding") {
    net::ParamLayout L;
    auto layer = net::MakeConv<double>(&L, "c", ImageShape{2, 6, 5}, 3, 3, 2, 1);
    CHECK(layer->out_size() == 3 * 3 * 3);
    CheckLayer(*layer, L.total_size(), 2, 2);
  }
  SECTION("conv without padding (IMPALA shallow: 8x8 stride 4)") {
    net::ParamLayout L;
    auto layer = net::MakeConv<double>(&L, "c", ImageShape{1, 12, 16}, 2, 8, 4, 0);
    CHECK(layer->out_size() == 2 * 2 * 3);
    CheckLayer(*layer, L.total_size(), 2, 3);
  }
  SECTION("max-pool 3x3 stride 2, padded") {
    auto layer = net::MakeMaxPool<double>(ImageShape{2, 5, 6}, 3, 2, 1);
    CHECK(layer->out_size() == 2 * 3 * 3);
    CheckLayer(*layer, 0, 3, 4);  // random inputs: no ties, so the max is differentiable
  }
  SECTION("residual block") {
    net::ParamLayout L;
    auto layer = net::MakeResidual<double>(&L, "r", ImageShape{2, 4, 3});
    CheckLayer(*layer, L.total_size(), 2, 5);
  }
}

TEST_CASE("layers: forward passes equal hand-computed values", "[net]") {
  SECTION("conv: one 3x3 image, one 2x2 kernel, stride 1, no padding") {
    net::ParamLayout L;
    auto conv = net::MakeConv<double>(&L, "c", ImageShape{1, 3, 3}, 1, 2, 1, 0);
    const std::vector<double> p = {1, 2, 3, 4, /*bias*/ 0.5};
    const std::vector<double> img = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    std::vector<double> out(4);
    conv->Forward(p.data(), img.data(), 1, out.data());
    // top-left window [1 2; 4 5] . [1 2; 3 4] = 1 + 4 + 12 + 20 = 37, + 0.5
    CHECK(out == std::vector<double>{37.5, 47.5, 67.5, 77.5});
  }
  SECTION("conv: padding 1 sees zeros outside the image") {
    net::ParamLayout L;
    auto conv = net::MakeConv<double>(&L, "c", ImageShape{1, 2, 2}, 1, 3, 1, 1);
    std::vector<double> p(10, 0.0);
    p[0] = 1;  // the kernel's top-left tap: out(y, x) = in(y - 1, x - 1)
    const std::vector<double> img = {1, 2, 3, 4};
    std::vector<double> out(4);
    conv->Forward(p.data(), img.data(), 1, out.data());
    CHECK(out == std::vector<double>{0, 0, 0, 1});
  }
  SECTION("max-pool: 3x3 stride 2 padding 1 on a 4x4 image, forward and backward") {
    auto pool = net::MakeMaxPool<double>(ImageShape{1, 4, 4}, 3, 2, 1);
    const std::vector<double> img = {1, 5, 2, 0, 3, 4, 9, 1, 0, 2, 1, 8, 7, 0, 3, 6};
    std::vector<double> out(4);
    pool->Forward(nullptr, img.data(), 1, out.data());
    // windows rows/cols {0,1}x{0,1}, {0,1}x{1,2,3}, {1,2,3}x{0,1}, {1,2,3}x{1,2,3}
    CHECK(out == std::vector<double>{5, 9, 7, 9});
    // The gradient goes to each window's first maximum in row-major order (a tie at (1, 0)
    // loses to (0, 1)), alike from the winners the forward kept (the same input) and from
    // the windows searched again (another buffer with the same values).
    std::vector<double> tied = img;
    tied[4] = 5;
    pool->Forward(nullptr, tied.data(), 1, out.data());
    CHECK(out == std::vector<double>{5, 9, 7, 9});
    const std::vector<double> dout = {1, 2, 3, 4};
    const std::vector<double> expected = {0, 1, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 3, 0, 0, 0};
    std::vector<double> din(16, -1);
    pool->Backward(nullptr, tied.data(), out.data(), dout.data(), 1, din.data(), nullptr);
    CHECK(din == expected);
    const std::vector<double> copy = tied;
    std::fill(din.begin(), din.end(), -1);
    pool->Backward(nullptr, copy.data(), out.data(), dout.data(), 1, din.data(), nullptr);
    CHECK(din == expected);
  }
  SECTION("LSTM: one step of one unit") {
    net::ParamLayout L;
    net::Lstm<double> lstm(&L, "core", 1, 1);
    // wx = [i f g o] = [0.5, -0.3, 0.8, 0.1], wh = [0.2, 0.4, -0.6, 0.3], b = [0.1, 1, 0, -0.2]
    const std::vector<double> p = {0.5, -0.3, 0.8, 0.1, 0.2, 0.4, -0.6, 0.3, 0.1, 1, 0, -0.2};
    const double x = 0.7, h0 = 0.3, c0 = -0.5;
    const std::vector<double> state = {h0, c0};
    const uint8_t first = 0;
    double h = 0;
    std::vector<double> final_state(2);
    lstm.Forward(p.data(), &x, 1, 1, &first, state.data(), &h, final_state.data());
    auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
    const double i = sig(0.5 * x + 0.2 * h0 + 0.1), f = sig(-0.3 * x + 0.4 * h0 + 1);
    const double g = std::tanh(0.8 * x - 0.6 * h0), o = sig(0.1 * x + 0.3 * h0 - 0.2);
    const double c = f * c0 + i * g;
    CHECK(h == Approx(o * std::tanh(c)).epsilon(1e-12));
    CHECK(final_state[1] == Approx(c).epsilon(1e-12));
  }
}

TEST_CASE("layers: max-pool picks each window's first maximum, ties and all, as a plain scan does", "[net]") {
  // Values in {0, 1, 2, 3}: most windows hold ties. The reference scans each window row by
  // row and keeps the first strictly larger value. Odd and even widths: a stride-2 window
  // reads the two column phases unevenly. The 2x3 image is lower than a 3x3
  // window, which it cuts at the top or the bottom; with stride 2 and padding 1 no window
  // of it lies wholly inside a row.
  envs::SplitMix64 rng(17);
  for (const ImageShape in : {ImageShape{2, 7, 9}, ImageShape{3, 6, 8}, ImageShape{1, 2, 3}}) {
    for (int k : {2, 3}) {
      for (int stride : {1, 2}) {
        for (int pad : {0, 1}) {
          if (pad >= k) continue;
          auto pool = net::MakeMaxPool<double>(in, k, stride, pad);
          const ImageShape o = net::ConvShape(in, in.c, k, stride, pad);
          const int n = 3;
          std::vector<double> x(size_t(n) * in.size()), dout(size_t(n) * o.size());
          for (auto& v : x) v = double(rng() % 4);
          for (auto& v : dout) v = double(rng() % 100) / 10.0;
          std::vector<double> want_out(dout.size()), want_din(x.size(), 0.0);
          for (int i = 0; i < n * in.c; ++i) {
            for (int oy = 0; oy < o.h; ++oy) {
              for (int ox = 0; ox < o.w; ++ox) {
                int64_t best = -1;
                for (int y = std::max(0, oy * stride - pad); y < std::min(in.h, oy * stride - pad + k); ++y) {
                  for (int xx = std::max(0, ox * stride - pad); xx < std::min(in.w, ox * stride - pad + k); ++xx) {
                    const int64_t j = int64_t(i) * in.h * in.w + int64_t(y) * in.w + xx;
                    if (best < 0 || x[size_t(j)] > x[size_t(best)]) best = j;
                  }
                }
                const size_t at = size_t(i) * o.h * o.w + size_t(oy) * o.w + size_t(ox);
                want_out[at] = x[size_t(best)];
                want_din[size_t(best)] += dout[at];
              }
            }
          }
          INFO("image " << in.h << "x" << in.w << " k " << k << " stride " << stride << " pad " << pad);
          std::vector<double> out(dout.size()), din(x.size(), -1.0);
          pool->Forward(nullptr, x.data(), n, out.data());
          CHECK(out == want_out);
          pool->Backward(nullptr, x.data(), out.data(), dout.data(), n, din.data(), nullptr);
          CHECK(din == want_din);
          const std::vector<double> copy = x;  // another buffer: the windows searched again
          std::fill(din.begin(), din.end(), -1.0);
          pool->Backward(nullptr, copy.data(), out.data(), dout.data(), n, din.data(), nullptr);
          CHECK(din == want_din);
          // float: 8 lanes to a vector where double has 4; the same winners
          auto fpool = net::MakeMaxPool<float>(in, k, stride, pad);
          const std::vector<float> xf(x.begin(), x.end()), doutf(dout.begin(), dout.end());
          std::vector<float> outf(dout.size()), dinf(x.size());
          fpool->Forward(nullptr, xf.data(), n, outf.data());
          CHECK(std::vector<double>(outf.begin(), outf.end()) == want_out);
          fpool->Backward(nullptr, xf.data(), outf.data(), doutf.data(), n, dinf.data(), nullptr);
          for (size_t j = 0; j < dinf.size(); ++j) CHECK(dinf[j] == Approx(want_din[j]).margin(1e-4));
        }
      }
    }
  }
}

TEST_CASE("LSTM: gradients match finite differences across an episode reset", "[net]") {
  const int T1 = 4, B = 2, in = 3, H = 2;
  net::ParamLayout L;
  net::Lstm<double> lstm(&L, "core", in, H);
  std::vector<double> p = Random(L.total_size(), 7, 0.6);
  const std::vector<double> x = Random(size_t(T1) * B * in, 8), init = Random(size_t(B) * 2 * H, 9, 0.5);
  const std::vector<double> R = Random(size_t(T1) * B * H, 10);
  std::vector<uint8_t> first(T1 * B, 0);
  first[2 * B + 0] = 1;  // unroll 0 starts a new episode at t = 2
  auto loss = [&](const std::vector<double>& pp, const std::vector<double>& xx) {
    std::vector<double> out(R.size());
    lstm.Forward(pp.data(), xx.data(), T1, B, first.data(), init.data(), out.data(), nullptr);
    return Dot(out, R);
  };
  std::vector<double> out(R.size()), grad(p.size(), 0.0), dx(x.size());
  lstm.Forward(p.data(), x.data(), T1, B, first.data(), init.data(), out.data(), nullptr);
  lstm.Backward(p.data(), R.data(), dx.data(), grad.data());
  const double eps = 1e-6;
  for (size_t k = 0; k < p.size(); ++k) {
    std::vector<double> q = p;
    q[k] += eps;
    const double up = loss(q, x);
    q[k] -= 2 * eps;
    INFO("parameter " << k);
    CHECK(grad[k] == Approx((up - loss(q, x)) / (2 * eps)).margin(1e-6).epsilon(1e-5));
  }
  for (size_t k = 0; k < x.size(); ++k) {
    std::vector<double> xx = x;
    xx[k] += eps;
    const double up = loss(p, xx);
    xx[k] -= 2 * eps;
    const double fd = (up - loss(p, xx)) / (2 * eps);
    INFO("input " << k);
    CHECK(dx[k] == Approx(fd).margin(1e-6).epsilon(1e-5));
  }
}

namespace {
net::ModelSpec Spec(const std::string& torso, std::vector<int> obs, int lstm, net::PolicyShape pol,
                    bool uint8_obs = false) {
  net::ModelSpec s;
  s.obs_shape = std::move(obs);
  s.uint8_obs = uint8_obs;
  s.torso = torso;
  s.hidden_sizes = {6};
  s.fc_size = 5;
  s.lstm_size = lstm;
  s.policy = pol;
  return s;
}

net::PolicyShape MultiDiscrete(std::vector<int> nvec) {
  net::PolicyShape p;
  p.kind = net::PolicyKind::kMultiDiscrete;
  p.num_components = int(nvec.size());
  for (size_t k = 0; k < nvec.size(); ++k) p.nvec[k] = nvec[k];
  return p;
}

net::PolicyShape Gaussian(int dim) {
  net::PolicyShape p;
  p.kind = net::PolicyKind::kGaussian;
  p.num_components = dim;
  return p;
}
}  // namespace

TEST_CASE("LSTM: an unroll across an episode end equals two separate unrolls", "[net]") {
  const auto spec = Spec("mlp", {3}, 4, net::CategoricalPolicy(3));
  auto model = net::MakeCpuModel<double>(spec);
  std::vector<float> pf(model->layout().total_size());
  net::InitParams(spec, 3, pf);
  const std::vector<double> p(pf.begin(), pf.end());
  const int T1 = 7, B = 1, split = 3;  // rows 0..2 one episode, rows 3..6 the next
  std::vector<float> obs(T1 * 3);
  for (size_t i = 0; i < obs.size(); ++i) obs[i] = float(std::sin(0.7 * double(i)));
  const std::vector<double> init = Random(8, 4, 0.5);
  std::vector<uint8_t> first(T1, 0);
  first[split] = 1;
  std::vector<double> pol(T1 * 3), val(T1);
  model->Forward(p.data(), obs.data(), T1, B, first.data(), init.data(), pol.data(), val.data());
  std::vector<double> pol_a(split * 3), val_a(split), pol_b((T1 - split) * 3), val_b(T1 - split);
  std::vector<uint8_t> none(T1, 0);
  model->Forward(p.data(), obs.data(), split, B, none.data(), init.data(), pol_a.data(), val_a.data());
  model->Forward(p.data(), obs.data() + split * 3, T1 - split, B, none.data(), nullptr, pol_b.data(),
                 val_b.data());
  for (int t = 0; t < T1; ++t) {
    const double v = t < split ? val_a[t] : val_b[t - split];
    CHECK(val[t] == Approx(v).epsilon(1e-12));
    for (int j = 0; j < 3; ++j) {
      const double z = t < split ? pol_a[t * 3 + j] : pol_b[(t - split) * 3 + j];
      CHECK(pol[t * 3 + j] == Approx(z).epsilon(1e-12));
    }
  }
  // Acting one step at a time, carrying the state, gives the learner's outputs.
  std::vector<double> state = init, step_pol(3);
  double step_val = 0;
  for (int t = 0; t < T1; ++t) {
    model->Step(p.data(), obs.data() + t * 3, 1, &first[t], state.data(), state.data(),
                step_pol.data(), &step_val);
    CHECK(step_val == Approx(val[t]).epsilon(1e-12));
    CHECK(step_pol[0] == Approx(pol[t * 3]).epsilon(1e-12));
  }
}

TEST_CASE("heads: log-probabilities and entropies equal their formulas", "[net]") {
  SECTION("categorical") {
    const auto pol = net::CategoricalPolicy(3);
    const double z[3] = {0.2, -1.0, 0.5};
    const double lse = std::log(std::exp(0.2) + std::exp(-1.0) + std::exp(0.5));
    const float a = 2;
    CHECK(net::PolicyLogProb(pol, z, &a) == Approx(0.5 - lse));
    double h = 0;
    for (double v : z) h -= std::exp(v - lse) * (v - lse);
    CHECK(net::PolicyEntropy(pol, z) == Approx(h));
  }
  SECTION("multi-discrete: independent components add") {
    const auto pol = MultiDiscrete({2, 3});
    const double z[5] = {0.1, 0.4, -0.2, 0.3, 1.1};
    const float a[2] = {1, 0};
    const double l0 = 0.4 - std::log(std::exp(0.1) + std::exp(0.4));
    const double l1 = -0.2 - std::log(std::exp(-0.2) + std::exp(0.3) + std::exp(1.1));
    CHECK(net::PolicyLogProb(pol, z, a) == Approx(l0 + l1));
    const auto c0 = net::CategoricalPolicy(2), c1 = net::CategoricalPolicy(3);
    CHECK(net::PolicyEntropy(pol, z) == Approx(net::PolicyEntropy(c0, z) + net::PolicyEntropy(c1, z + 2)));
  }
  SECTION("gaussian: the normal density and entropy") {
    const auto pol = Gaussian(2);
    const double out[4] = {0.5, -1.0, std::log(2.0), std::log(0.5)};
    const float a[2] = {1.5f, -0.75f};
    const double pi = 3.14159265358979323846;
    auto logpdf = [&](double x, double m, double s) {
      return std::log(std::exp(-(x - m) * (x - m) / (2 * s * s)) / (s * std::sqrt(2 * pi)));
    };
    CHECK(net::PolicyLogProb(pol, out, a) == Approx(logpdf(1.5, 0.5, 2) + logpdf(-0.75, -1, 0.5)));
    const double h = 0.5 * std::log(2 * pi * std::exp(1.0) * 4) + 0.5 * std::log(2 * pi * std::exp(1.0) * 0.25);
    CHECK(net::PolicyEntropy(pol, out) == Approx(h));
  }
}

TEST_CASE("heads: gradients of log-probability and entropy match finite differences", "[net]") {
  const net::PolicyShape shapes[] = {net::CategoricalPolicy(4), MultiDiscrete({2, 3, 2}), Gaussian(3)};
  const float actions[][3] = {{2}, {1, 2, 0}, {0.3f, -1.2f, 2.0f}};
  for (int s = 0; s < 3; ++s) {
    const auto& pol = shapes[s];
    const int P = pol.output_size();
    const std::vector<double> out = Random(P, 20 + s, 0.7);
    const double w_lp = -0.8, w_ent = 0.3;
    std::vector<double> g(P);
    net::PolicyGrad(pol, out.data(), actions[s], w_lp, w_ent, g.data());
    for (int j = 0; j < P; ++j) {
      auto f = [&](double d) {
        std::vector<double> o = out;
        o[j] += d;
        return w_lp * net::PolicyLogProb(pol, o.data(), actions[s]) + w_ent * net::PolicyEntropy(pol, o.data());
      };
      INFO("head " << s << " output " << j);
      CHECK(g[j] == Approx((f(1e-6) - f(-1e-6)) / 2e-6).margin(1e-7).epsilon(1e-6));
    }
  }
}

TEST_CASE("heads: sampling follows the distribution", "[net]") {
  std::mt19937_64 rng(5);
  auto uniform = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  auto normal = [&] { return std::normal_distribution<double>(0, 1)(rng); };
  const auto cat = net::CategoricalPolicy(3);
  const double z[3] = {std::log(0.2), std::log(0.3), std::log(0.5)};
  int counts[3] = {};
  const int N = 20000;
  for (int i = 0; i < N; ++i) {
    float a;
    net::PolicySample(cat, z, uniform, normal, &a);
    ++counts[int(a)];
  }
  CHECK(counts[0] / double(N) == Approx(0.2).margin(0.015));
  CHECK(counts[2] / double(N) == Approx(0.5).margin(0.015));
  const auto g = Gaussian(1);
  const double out[2] = {1.5, std::log(0.5)};
  double sum = 0, sq = 0;
  for (int i = 0; i < N; ++i) {
    float a;
    net::PolicySample(g, out, uniform, normal, &a);
    sum += a, sq += a * a;
  }
  const double mean = sum / N;
  CHECK(mean == Approx(1.5).margin(0.02));
  CHECK(std::sqrt(sq / N - mean * mean) == Approx(0.5).margin(0.02));
}

namespace {
// A random batch for a model spec (actions drawn for its head).
learner::Batch BatchFor(const net::ModelSpec& spec, int T, int B, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  std::uniform_real_distribution<float> u(0, 1);
  learner::Batch b;
  const int P = spec.policy.output_size();
  wire::StepShape shape{spec.obs_shape, spec.uint8_obs ? wire::DType::kUint8 : wire::DType::kFloat32, P,
                        2 * spec.lstm_size};
  b.Resize(T, B, shape);
  for (auto& x : b.observations) x = n(rng);
  for (auto& x : b.observations_u8) x = uint8_t(rng() % 256);
  for (auto& a : b.actions) a = int(rng() % uint64_t(spec.policy.nvec[0]));
  for (auto& r : b.rewards) r = n(rng);
  for (auto& l : b.behaviour_logits) l = n(rng);
  for (auto& s : b.initial_core_state) s = 0.5f * n(rng);
  for (int i = 0; i < T * B; ++i) b.terminated[i] = u(rng) < 0.2f;
  return b;
}

// Finite-difference check of the full loss's gradient for `checks` parameters spread
// over every tensor of the model.
void CheckModelGradient(const net::ModelSpec& spec, int T, int B, int per_tensor) {
  auto model = net::MakeCpuModel<double>(spec);
  const auto& layout = model->layout();
  std::vector<float> pf(layout.total_size());
  net::InitParams(spec, 11, pf);
  std::vector<double> p(pf.begin(), pf.end());
  const std::vector<double> noise = Random(p.size(), 12, 0.1);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  learner::Batch batch = BatchFor(spec, T, B, 13);
  learner::LossOptions opt;
  opt.entropy_cost = 0.05;
  const auto targets = learner::ComputeTargets(*model, p.data(), batch, opt);
  std::vector<double> grad(p.size(), 0.0);
  learner::LossAndGrad(*model, p.data(), batch, targets, opt, grad.data());
  std::mt19937_64 rng(14);
  for (const auto& t : layout.tensors()) {
    for (int c = 0; c < per_tensor; ++c) {
      const int64_t k = t.offset + int64_t(rng() % uint64_t(t.size));
      auto loss = [&](double d) {
        std::vector<double> q = p;
        q[k] += d;
        return learner::LossAndGrad(*model, q.data(), batch, targets, opt, static_cast<double*>(nullptr)).total;
      };
      const double fd = (loss(1e-6) - loss(-1e-6)) / 2e-6;
      INFO(spec.torso << " lstm " << spec.lstm_size << ": " << t.name << " element " << k - t.offset);
      CHECK(grad[k] == Approx(fd).margin(1e-6).epsilon(1e-4));
    }
  }
}
}  // namespace

TEST_CASE("models: every torso, core and head trains the loss with the right gradient", "[net]") {
  SECTION("mlp + lstm") { CheckModelGradient(Spec("mlp", {4}, 3, net::CategoricalPolicy(3)), 4, 2, 6); }
  SECTION("shallow cnn on uint8 pixels") {
    CheckModelGradient(Spec("shallow_cnn", {2, 20, 28}, 0, net::CategoricalPolicy(3), true), 3, 2, 6);
  }
  SECTION("deep resnet + lstm") {
    CheckModelGradient(Spec("deep_resnet", {1, 8, 8}, 3, net::CategoricalPolicy(2)), 2, 2, 4);
  }
  SECTION("small cnn") { CheckModelGradient(Spec("small_cnn", {2, 5, 5}, 0, net::CategoricalPolicy(4)), 3, 2, 6); }
  SECTION("a list of the user's own (net.layers): conv, tanh, max-pool, residual, dense + lstm") {
    net::ModelSpec s = Spec("", {2, 6, 6}, 3, net::CategoricalPolicy(3));
    auto layer = [](net::LayerSpec::Kind kind, int n, int k, int stride, int pad) {
      net::LayerSpec l;
      l.kind = kind, l.units = n, l.channels = n, l.kernel = k, l.stride = stride, l.pad = pad;
      return l;
    };
    using K = net::LayerSpec::Kind;
    s.layers = {layer(K::kConv, 3, 3, 1, 1), layer(K::kTanh, 0, 0, 1, 0), layer(K::kMaxPool, 0, 2, 2, 0),
                layer(K::kResidual, 0, 0, 1, 0), layer(K::kDense, 5, 0, 1, 0), layer(K::kRelu, 0, 0, 1, 0)};
    CheckModelGradient(s, 3, 2, 6);
  }
}

TEST_CASE("models: multi-discrete and gaussian heads backpropagate their outputs", "[net]") {
  for (const auto& pol : {MultiDiscrete({3, 2}), Gaussian(2)}) {
    const auto spec = Spec("mlp", {3}, 2, pol);
    auto model = net::MakeCpuModel<double>(spec);
    const int T1 = 3, B = 2, P = pol.output_size();
    std::vector<float> pf(model->layout().total_size());
    net::InitParams(spec, 1, pf);
    std::vector<double> p(pf.begin(), pf.end());
    const std::vector<double> noise = Random(p.size(), 2, 0.3);
    for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
    std::vector<float> obs(T1 * B * 3);
    for (size_t i = 0; i < obs.size(); ++i) obs[i] = float(std::cos(1.3 * double(i)));
    std::vector<uint8_t> first(T1 * B, 0);
    first[3] = 1;
    const std::vector<double> R = Random(size_t(T1) * B * P, 3), r = Random(size_t(T1) * B, 4);
    auto loss = [&](const std::vector<double>& q) {
      std::vector<double> pol_out(R.size()), val(r.size());
      model->Forward(q.data(), obs.data(), T1, B, first.data(), nullptr, pol_out.data(), val.data());
      return Dot(pol_out, R) + Dot(val, r);
    };
    loss(p);
    std::vector<double> grad(p.size(), 0.0);
    model->Backward(p.data(), R.data(), r.data(), grad.data());
    for (size_t k = 0; k < p.size(); ++k) {
      std::vector<double> q = p;
      q[k] += 1e-6;
      const double up = loss(q);
      q[k] -= 2e-6;
      INFO("head kind " << int(pol.kind) << " parameter " << k);
      CHECK(grad[k] == Approx((up - loss(q)) / 2e-6).margin(1e-6).epsilon(1e-5));
    }
  }
}

TEST_CASE("models: layout and initialisation depend only on the spec", "[net]") {
  auto spec = Spec("deep_resnet", {4, 84, 84}, 256, net::CategoricalPolicy(6));
  spec.fc_size = 256;
  const net::ParamLayout a = net::ModelLayout(spec), b = net::ModelLayout(spec);
  CHECK(a.Fingerprint() == b.Fingerprint());
  std::vector<float> p1(a.total_size()), p2(a.total_size());
  net::InitParams(spec, 9, p1);
  net::InitParams(spec, 9, p2);
  CHECK(p1 == p2);
  // IMPALA's deep network: 3 stacks (conv + 2 residual blocks), FC 256 on 32x11x11, LSTM 256.
  CHECK(a.Find("torso/fc/w").shape == std::vector<int>{32 * 11 * 11, 256});
  CHECK(a.Find("torso/stack2/res1/conv1/w").shape == std::vector<int>{32, 32, 3, 3});
  CHECK(a.Find("core/wh").shape == std::vector<int>{256, 1024});
  // Forget-gate biases start at 1, the others at 0.
  const auto& cb = a.Find("core/b");
  CHECK(p1[cb.offset] == 0.f);
  CHECK(p1[cb.offset + 256] == 1.f);
  // The shallow network: 84 -> 20 -> 9.
  const auto shallow = net::ModelLayout(Spec("shallow_cnn", {4, 84, 84}, 0, net::CategoricalPolicy(6)));
  CHECK(shallow.Find("torso/fc/w").shape == std::vector<int>{32 * 9 * 9, 5});
}

TEST_CASE("models: a torso that does not fit the observation is a clear error", "[net]") {
  try {
    net::MakeCpuModel<float>(Spec("shallow_cnn", {1, 6, 6}, 0, net::CategoricalPolicy(2)));
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("does not fit the image [1, 6, 6]"));
  }
  try {
    net::MakeCpuModel<float>(Spec("deep_resnet", {4}, 0, net::CategoricalPolicy(2)));
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("takes image observations"));
  }
}

namespace {
// The weight matrix of a tensor as torch holds it: [out, in...] (dense layers here are [in, out]).
std::vector<std::vector<double>> TorchMatrix(const net::ParamLayout& layout, const std::vector<float>& p,
                                             const std::string& name) {
  const auto& t = layout.Find(name);
  const bool dense = t.shape.size() == 2;
  const int rows = dense ? t.shape[1] : t.shape[0];
  const int cols = int(t.size / rows);
  std::vector<std::vector<double>> m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m[size_t(r)][size_t(c)] = p[t.offset + (dense ? int64_t(c) * rows + r : int64_t(r) * cols + c)];
  }
  return m;
}
}  // namespace

TEST_CASE("models: net.init orthogonal, torch and glorot start the weights as stated", "[net][init]") {
  auto spec = Spec("shallow_cnn", {4, 84, 84}, 64, net::CategoricalPolicy(6));
  spec.fc_size = 256;
  const net::ParamLayout layout = net::ModelLayout(spec);
  SECTION("orthogonal: W W^T = gain^2 I over the smaller side; the policy head at 0.01") {
    spec.init = "orthogonal";
    spec.policy_init_scale = 0.01;
    std::vector<float> p(layout.total_size());
    net::InitParams(spec, 5, p);
    for (const auto& [name, gain] : std::vector<std::pair<std::string, double>>{
             {"torso/conv0/w", std::sqrt(2.0)}, {"torso/fc/w", std::sqrt(2.0)}, {"core/wx", 1.0},
             {"core/wh", 1.0}, {"baseline/w", 1.0}, {"policy/w", 0.01}}) {
      INFO(name);
      const auto m = TorchMatrix(layout, p, name);
      const size_t rows = m.size(), cols = m[0].size();
      const bool by_rows = rows <= cols;  // the smaller side is orthonormal
      const size_t n = by_rows ? rows : cols, len = by_rows ? cols : rows;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (size_t k = 0; k < len; ++k) dot += by_rows ? m[i][k] * m[j][k] : m[k][i] * m[k][j];
          CHECK(dot == Approx(i == j ? gain * gain : 0.0).margin(1e-5 * gain * gain));
        }
      }
    }
    CHECK(p[layout.Find("torso/fc/b").offset] == 0.f);
  }
  SECTION("torch: weights and biases uniform in +-1/sqrt(fan_in), spread as a uniform's") {
    spec.init = "torch";
    spec.policy_init_scale = 1;
    std::vector<float> p(layout.total_size());
    net::InitParams(spec, 5, p);
    for (const auto& [w, b, fan_in] : std::vector<std::tuple<std::string, std::string, double>>{
             {"torso/conv0/w", "torso/conv0/b", 4.0 * 8 * 8}, {"torso/fc/w", "torso/fc/b", 32.0 * 9 * 9}}) {
      INFO(w);
      const double bound = 1 / std::sqrt(fan_in);
      for (const std::string& name : {w, b}) {
        const auto& t = layout.Find(name);
        double sq = 0, most = 0;
        for (int64_t i = 0; i < t.size; ++i) {
          sq += double(p[t.offset + i]) * p[t.offset + i];
          most = std::max(most, std::abs(double(p[t.offset + i])));
        }
        CHECK(most <= bound);
        if (t.size >= 256) CHECK(std::sqrt(sq / double(t.size)) == Approx(bound / std::sqrt(3.0)).epsilon(0.05));
        if (t.size >= 16) CHECK(most > 0.8 * bound);
      }
    }
  }
  SECTION("glorot: the policy head is policy_init_scale times the other layers' rule") {
    std::vector<float> a(layout.total_size()), b(layout.total_size());
    spec.init = "glorot";
    spec.policy_init_scale = 0.01;
    net::InitParams(spec, 5, a);
    spec.policy_init_scale = 1;
    net::InitParams(spec, 5, b);
    const auto& t = layout.Find("policy/w");
    for (int64_t i = 0; i < layout.total_size(); ++i) {
      const bool head = i >= t.offset && i < t.offset + t.size;
      if (head) {
        CHECK(a[size_t(i)] == Approx(0.01 * b[size_t(i)]).margin(1e-9));
      } else {
        CHECK(a[size_t(i)] == b[size_t(i)]);
      }
    }
  }
}

// The CPU LSTM's float cell (net/fast_math.h): its exp, sigmoid and tanh against the
// double functions over every range the cell meets, and the float LSTM's forward against
// the double one on the same parameters and inputs.
TEST_CASE("LSTM: the float cell's exp, sigmoid and tanh are within a few ulps of the double ones", "[net]") {
  double worst_exp = 0, worst_sig = 0, worst_tanh = 0;
  for (double x = -86.0; x <= 87.0; x += 0.000731) {
    const float xf = float(x);
    const double e = std::exp(double(xf));
    worst_exp = std::max(worst_exp, std::abs(double(net::ExpF(xf)) - e) / e);
    const double sg = 1.0 / (1.0 + std::exp(-double(xf)));
    worst_sig = std::max(worst_sig, std::abs(double(net::SigmoidF(xf)) - sg) / sg);
    const double th = std::tanh(double(xf));
    if (th != 0) worst_tanh = std::max(worst_tanh, std::abs(double(net::TanhF(xf)) - th) / std::abs(th));
  }
  // Tiny arguments, where 1 - 2 / (e^2x + 1) would lose every digit.
  for (double x = 1e-8; x < 0.7; x *= 1.01) {
    for (const double sx : {x, -x}) {
      const float xf = float(sx);
      const double th = std::tanh(double(xf));
      worst_tanh = std::max(worst_tanh, std::abs(double(net::TanhF(xf)) - th) / std::abs(th));
    }
  }
  const double ulp = std::numeric_limits<float>::epsilon();
  INFO("exp " << worst_exp / ulp << " ulp, sigmoid " << worst_sig / ulp << ", tanh " << worst_tanh / ulp);
  CHECK(worst_exp < 1.5 * ulp);
  CHECK(worst_sig < 2.5 * ulp);
  CHECK(worst_tanh < 2 * ulp);
  // Beyond the clamp: saturated, finite.
  CHECK(net::SigmoidF(-200.f) >= 0.f);
  CHECK(net::SigmoidF(-200.f) < 1e-37f);
  CHECK(net::SigmoidF(200.f) == 1.f);
  CHECK(net::TanhF(200.f) == 1.f);
  CHECK(net::TanhF(-200.f) == -1.f);
  CHECK(net::TanhF(0.f) == 0.f);
}

TEST_CASE("LSTM: the float forward equals the double one on the same parameters and inputs", "[net]") {
  const int in = 24, H = 40, T1 = 9, B = 5;  // H not a multiple of the vector width
  net::ParamLayout ld, lf;
  net::Lstm<double> lstm_d(&ld, "l", in, H);
  net::Lstm<float> lstm_f(&lf, "l", in, H);
  REQUIRE(ld.total_size() == lf.total_size());
  const std::vector<double> p = Random(size_t(ld.total_size()), 31, 0.6);
  const std::vector<double> x = Random(size_t(T1) * B * in, 32, 1.5);
  const std::vector<double> init = Random(size_t(B) * 2 * H, 33, 2.0);
  std::vector<uint8_t> first(size_t(T1) * B, 0);
  first[3 * B + 1] = 1;
  const std::vector<float> pf(p.begin(), p.end()), xf(x.begin(), x.end()), initf(init.begin(), init.end());
  std::vector<double> out_d(size_t(T1) * B * H), final_d(size_t(B) * 2 * H);
  std::vector<float> out_f(out_d.size()), final_f(final_d.size());
  lstm_d.Forward(p.data(), x.data(), T1, B, first.data(), init.data(), out_d.data(), final_d.data());
  lstm_f.Forward(pf.data(), xf.data(), T1, B, first.data(), initf.data(), out_f.data(), final_f.data());
  double worst = 0;
  for (size_t i = 0; i < out_d.size(); ++i) worst = std::max(worst, std::abs(double(out_f[i]) - out_d[i]));
  for (size_t i = 0; i < final_d.size(); ++i) worst = std::max(worst, std::abs(double(final_f[i]) - final_d[i]));
  INFO("largest difference " << worst);
  CHECK(worst < 1e-5);
  // The float backward from those activations matches the double one too.
  const std::vector<double> dout = Random(out_d.size(), 34, 1.0);
  const std::vector<float> doutf(dout.begin(), dout.end());
  std::vector<double> dx_d(x.size()), g_d(p.size(), 0.0);
  std::vector<float> dx_f(x.size()), g_f(p.size(), 0.f);
  lstm_d.Backward(p.data(), dout.data(), dx_d.data(), g_d.data());
  lstm_f.Backward(pf.data(), doutf.data(), dx_f.data(), g_f.data());
  double worst_g = 0, scale = 1e-30;
  for (size_t i = 0; i < g_d.size(); ++i) {
    worst_g = std::max(worst_g, std::abs(double(g_f[i]) - g_d[i]));
    scale = std::max(scale, std::abs(g_d[i]));
  }
  INFO("gradient: largest difference " << worst_g << " of " << scale);
  CHECK(worst_g / scale < 2e-5);
}
