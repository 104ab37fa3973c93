// V-trace against hand-computed values, against a reference written straight from
// eq. 1 (a double loop over s and t), and against n-step returns on-policy.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "learner/vtrace.h"

using stampede::learner::VTraceFromLogProbs;
using stampede::learner::VTraceFromLogRhos;
using stampede::learner::VTraceOptions;

TEST_CASE("vtrace: on-policy two-step case matches hand computation", "[vtrace]") {
  // T=2, B=1, gamma=0.9, r=[1,2], V=[0.5,1.0], V(x_2)=3.
  // vs_1 = 2 + 0.9*3 = 4.7; vs_0 = 1 + 0.9*2 + 0.81*3 = 5.23
  // A_0 = 1 + 0.9*4.7 - 0.5 = 4.73; A_1 = 2 + 0.9*3 - 1 = 3.7
  const double log_rhos[] = {0, 0}, discounts[] = {0.9, 0.9}, rewards[] = {1, 2};
  const double values[] = {0.5, 1.0}, bootstrap[] = {3.0};
  double vs[2], adv[2];
  VTraceFromLogRhos(2, 1, log_rhos, discounts, rewards, values, bootstrap, VTraceOptions{}, vs, adv);
  CHECK(vs[0] == Approx(5.23));
  CHECK(vs[1] == Approx(4.7));
  CHECK(adv[0] == Approx(4.73));
  CHECK(adv[1] == Approx(3.7));
}

TEST_CASE("vtrace: clipped importance weights match hand computation", "[vtrace]") {
  // rho = [2, 0.5], rho_bar = c_bar = pg_rho_bar = 1.
  // delta_1 = 0.5*(2 + 0.9*3 - 1) = 1.85, vs_1 = 1 + 1.85 = 2.85
  // delta_0 = 1*(1 + 0.9*1 - 0.5) = 1.4, vs_0 = 0.5 + 1.4 + 0.9*1*1.85 = 3.565
  // A_0 = 1*(1 + 0.9*2.85 - 0.5) = 3.065, A_1 = 0.5*(2 + 0.9*3 - 1) = 1.85
  const double log_rhos[] = {std::log(2.0), std::log(0.5)}, discounts[] = {0.9, 0.9};
  const double rewards[] = {1, 2}, values[] = {0.5, 1.0}, bootstrap[] = {3.0};
  double vs[2], adv[2];
  VTraceFromLogRhos(2, 1, log_rhos, discounts, rewards, values, bootstrap, VTraceOptions{}, vs, adv);
  CHECK(vs[0] == Approx(3.565));
  CHECK(vs[1] == Approx(2.85));
  CHECK(adv[0] == Approx(3.065));
  CHECK(adv[1] == Approx(1.85));
}

namespace {
struct Case {
  int T = 0, B = 0;
  std::vector<double> log_rhos, discounts, rewards, values, bootstrap;
};

Case RandomCase(int T, int B, std::mt19937_64& rng, double episode_end_prob) {
  std::normal_distribution<double> n(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  Case c;
  c.T = T;
  c.B = B;
  for (int i = 0; i < T * B; ++i) {
    c.log_rhos.push_back(0.7 * n(rng));
    c.discounts.push_back(u(rng) < episode_end_prob ? 0.0 : 0.95);
    c.rewards.push_back(n(rng));
    c.values.push_back(n(rng));
  }
  for (int b = 0; b < B; ++b) c.bootstrap.push_back(n(rng));
  return c;
}

// Straight from eq. 1: v_s = V_s + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t.
void Reference(const Case& c, const VTraceOptions& o, std::vector<double>* vs,
               std::vector<double>* adv) {
  const int T = c.T, B = c.B;
  auto clip = [](double x, double th) { return th > 0 ? std::min(th, x) : x; };
  auto V = [&](int t, int b) { return t < T ? c.values[t * B + b] : c.bootstrap[b]; };
  vs->assign(T * B, 0);
  adv->assign(T * B, 0);
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < T; ++s) {
      double sum = 0;
      for (int t = s; t < T; ++t) {
        double prod = 1;
        for (int i = s; i < t; ++i) {
          prod *= c.discounts[i * B + b] * o.lambda * clip(std::exp(c.log_rhos[i * B + b]), o.clip_c_threshold);
        }
        const int k = t * B + b;
        const double delta = clip(std::exp(c.log_rhos[k]), o.clip_rho_threshold) *
                             (c.rewards[k] + c.discounts[k] * V(t + 1, b) - V(t, b));
        sum += prod * delta;
      }
      (*vs)[s * B + b] = V(s, b) + sum;
    }
    for (int s = 0; s < T; ++s) {
      const int k = s * B + b;
      const double next = s + 1 < T ? (*vs)[k + B] : c.bootstrap[b];
      (*adv)[k] = clip(std::exp(c.log_rhos[k]), o.clip_pg_rho_threshold) *
                  (c.rewards[k] + c.discounts[k] * next - V(s, b));
    }
  }
}
}  // namespace

TEST_CASE("vtrace: recursion equals the definition on random inputs", "[vtrace]") {
  std::mt19937_64 rng(42);
  struct Clips {
    const char* name;
    VTraceOptions opt;
  };
  const Clips clips[] = {
      {"default clips", {1.0, 1.0, 1.0, 1.0}},
      {"no clipping", {0.0, 0.0, 0.0, 1.0}},
      {"tight clips and lambda", {0.8, 0.6, 1.2, 0.9}},
  };
  for (const auto& cl : clips) {
    for (double end_prob : {0.0, 0.2}) {
      SECTION(std::string(cl.name) + (end_prob > 0 ? ", episode ends inside" : ", no episode ends")) {
        for (int rep = 0; rep < 5; ++rep) {
          Case c = RandomCase(7, 4, rng, end_prob);
          std::vector<double> vs(28), adv(28), ref_vs, ref_adv;
          VTraceFromLogRhos(c.T, c.B, c.log_rhos.data(), c.discounts.data(), c.rewards.data(),
                            c.values.data(), c.bootstrap.data(), cl.opt, vs.data(), adv.data());
          Reference(c, cl.opt, &ref_vs, &ref_adv);
          for (int i = 0; i < 28; ++i) {
            CHECK(vs[i] == Approx(ref_vs[i]).margin(1e-9));
            CHECK(adv[i] == Approx(ref_adv[i]).margin(1e-9));
          }
        }
      }
    }
  }
}

TEST_CASE("vtrace: on-policy targets are n-step bootstrapped returns", "[vtrace]") {
  std::mt19937_64 rng(7);
  Case c = RandomCase(6, 3, rng, 0.25);
  std::vector<double> behaviour(18), target(18), scratch(18), vs(18), adv(18);
  std::normal_distribution<double> n(0, 1);
  for (int i = 0; i < 18; ++i) behaviour[i] = target[i] = -std::abs(n(rng));  // pi = mu
  VTraceFromLogProbs(6, 3, behaviour.data(), target.data(), c.discounts.data(), c.rewards.data(),
                     c.values.data(), c.bootstrap.data(), VTraceOptions{}, vs.data(), adv.data(),
                     scratch.data());
  for (int b = 0; b < 3; ++b) {
    for (int s = 0; s < 6; ++s) {
      // G_s = sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i) r_t + (prod_{i=s}^{T-1} gamma_i) V(x_T)
      double g = 0, disc = 1;
      for (int t = s; t < 6; ++t) {
        g += disc * c.rewards[t * 3 + b];
        disc *= c.discounts[t * 3 + b];
      }
      g += disc * c.bootstrap[b];
      CHECK(vs[s * 3 + b] == Approx(g).margin(1e-9));
    }
  }
}

TEST_CASE("vtrace: an episode end cuts the trace and the bootstrap", "[vtrace]") {
  // T=3, the episode ends at t=1 (discount 0): vs_0 and vs_1 must not depend on
  // anything after t=1, whatever V(x_2), r_2 and V(x_3) are.
  const double log_rhos[] = {0.3, -0.2, 0.1}, discounts[] = {0.9, 0.0, 0.9};
  double rewards[] = {1, 2, 3}, values[] = {0.1, 0.2, 0.3}, bootstrap[] = {4};
  double vs_a[3], adv_a[3], vs_b[3], adv_b[3];
  VTraceFromLogRhos(3, 1, log_rhos, discounts, rewards, values, bootstrap, VTraceOptions{}, vs_a, adv_a);
  rewards[2] = -50;
  values[2] = 17;
  bootstrap[0] = 99;
  VTraceFromLogRhos(3, 1, log_rhos, discounts, rewards, values, bootstrap, VTraceOptions{}, vs_b, adv_b);
  CHECK(vs_a[0] == vs_b[0]);
  CHECK(vs_a[1] == vs_b[1]);
  CHECK(adv_a[0] == adv_b[0]);
  CHECK(adv_a[1] == adv_b[1]);
  CHECK(vs_a[1] == Approx(0.2 + std::min(1.0, std::exp(-0.2)) * (2 - 0.2)));
}
