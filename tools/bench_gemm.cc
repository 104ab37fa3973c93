// `stampede bench --gemm`: float32 GEMM GFLOP/s on one thread, per backend this machine
// has (net/gemm.h: Eigen, and OpenBLAS, BLIS and oneDNN where installed), for a square
// 512^3 and every product of the shallow CNN and deep ResNet learner steps (the Pong
// config's B = 16, T = 20, convolutions as im2col products), and which backend
// net.gemm_backend "auto" chooses for each, against the fastest.
#include "base/log.h"
#include "tools/bench.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "envs/rng.h"
#include "net/gemm.h"
#include "net/layers.h"
#include "net/model.h"
#include "net/network.h"

namespace stampede::tools {
namespace {

// The operands of a shape, filled with small values.
struct Operands {
  explicit Operands(const net::GemmShape& s)
      : a(size_t(s.M * s.K)), b(size_t(s.K * s.N)), c(size_t(s.M * s.N)),
        lda(s.trans_a ? s.M : s.K), ldb(s.trans_b ? s.K : s.N) {
    envs::SplitMix64 rng(11);
    for (auto& v : a) v = float(int(rng() % 2001) - 1000) / 1000.f;
    for (auto& v : b) v = float(int(rng() % 2001) - 1000) / 1000.f;
  }
  std::vector<float> a, b, c;
  int64_t lda, ldb;
};

// The distinct products of one learner step (forward and backward over B = 16 unrolls of
// T + 1 = 21 steps) of `torso` on 4x84x84 uint8 frames, convolutions as im2col GEMMs.
std::vector<net::GemmShape> LearnerStepShapes(const std::string& torso) {
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.uint8_obs = true;
  spec.torso = torso;
  spec.fc_size = 256;
  spec.policy = net::CategoricalPolicy(6);
  auto model = net::MakeCpuModel<float>(spec);
  std::vector<float> params(model->layout().total_size()), grad(params.size(), 0.f);
  net::InitParams(spec, 1, params);
  const int T1 = 21, B = 16, rows = T1 * B;
  std::vector<uint8_t> obs(static_cast<size_t>(rows) * spec.obs_size(), 100), first(static_cast<size_t>(rows), 0);
  std::vector<float> policy(static_cast<size_t>(rows) * 6), values(static_cast<size_t>(rows)), dpolicy(policy.size(), 0.01f),
      dvalues(values.size(), 0.01f);
  net::RecordGemmShapes(true);
  const auto before = net::GemmShapesSeen();
  model->Forward(params.data(), obs.data(), T1, B, first.data(), nullptr, policy.data(), values.data());
  model->Backward(params.data(), dpolicy.data(), dvalues.data(), grad.data());
  net::RecordGemmShapes(false);
  const std::set<net::GemmShape> old(before.begin(), before.end());
  std::vector<net::GemmShape> out;
  for (const auto& s : net::GemmShapesSeen()) {
    if (!old.count(s)) out.push_back(s);
  }
  return out;
}

}  // namespace

std::vector<double> TimeGemmShape(const std::vector<std::string>& backends, const net::GemmShape& s,
                                  double seconds) {
  Operands o(s);
  return net::TimeGemmBackends(backends, s, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(),
                               seconds / (5.0 * double(backends.size())));
}

double MeasureGemmGflops(double seconds, std::string* backend) {
  const net::GemmShape s{false, false, 512, 512, 512};
  const std::string asked = net::GemmBackend();
  const std::string used = asked == "auto" ? net::ChooseGemm(s).backend : asked;
  if (backend) *backend = asked == "auto" ? "auto: " + used : used;
  return TimeGemmShape({used}, s, seconds).front();
}

int RunGemmBench(const BenchOptions& opt) {
  std::vector<std::string> unavailable;
  const std::vector<std::string> backends = net::AvailableGemmBackends(&unavailable);
  std::printf("stampede bench --gemm: float32 GEMM on one thread, GFLOP/s\n");
  std::printf("  CPU: %s; binary built for %s\n", base::CpuDescription().c_str(), base::BuildTarget().c_str());
  for (const std::string& m : unavailable) std::printf("  not measured: %s\n", m.c_str());
  // Every product, recorded with the convolutions as GEMMs and Eigen computing.
  const net::ConvBackend conv = net::GetConvBackend();
  net::SetConvBackend(net::ConvBackend::kEigen);
  if (const base::Status st = net::SetGemmBackend("eigen"); !st.ok()) base::LogInfo("bench: %s\n", st.message().c_str());
  struct Group {
    std::string name;
    std::vector<net::GemmShape> shapes;
  };
  std::vector<Group> groups = {{"square", {{false, false, 512, 512, 512}}},
                               {"shallow CNN learner step (B=16, T=20)", LearnerStepShapes(std::string(net::kShallowCnn))},
                               {"deep ResNet learner step (B=16, T=20)", LearnerStepShapes(std::string(net::kDeepResNet))}};
  net::SetConvBackend(conv);
  if (const base::Status st = net::SetGemmBackend("auto"); !st.ok()) base::LogInfo("bench: %s\n", st.message().c_str());
  size_t count = 0;
  for (const Group& g : groups) count += g.shapes.size();
  const double per = std::max(0.1, opt.seconds / double(count));
  std::printf("  %-30s", "M x N x K");
  for (const std::string& b : backends) std::printf(" %9s", b.c_str());
  std::printf("  %-9s %s\n", "auto", "of the fastest");
  double worst = 1, sum_auto = 0, sum_best = 0, sum_eigen = 0;
  // Auto's choices first (as a role makes them, at first use), then every backend timed in
  // three passes over all the shapes, each figure the best of its passes: this machine's
  // speed drifts by a fifth over seconds, and a pass is shorter than that.
  std::vector<std::vector<std::string>> chosen(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (const net::GemmShape& s : groups[gi].shapes) chosen[gi].push_back(net::ChooseGemm(s).backend);
  }
  std::vector<std::vector<std::vector<double>>> gflops(groups.size());
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      gflops[gi].resize(groups[gi].shapes.size());
      for (size_t si = 0; si < groups[gi].shapes.size(); ++si) {
        const net::GemmShape& s = groups[gi].shapes[si];
        const std::vector<double> g = TimeGemmShape(backends, s, per / 3);
        auto& best = gflops[gi][si];
        if (best.empty()) best = g;
        for (size_t b = 0; b < g.size(); ++b) best[b] = std::max(best[b], g[b]);
      }
    }
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::printf("  %s:\n", groups[gi].name.c_str());
    for (size_t si = 0; si < groups[gi].shapes.size(); ++si) {
      const net::GemmShape& s = groups[gi].shapes[si];
      const std::vector<double>& g = gflops[gi][si];
      const size_t best = size_t(std::max_element(g.begin(), g.end()) - g.begin());
      const size_t at = size_t(std::find(backends.begin(), backends.end(), chosen[gi][si]) - backends.begin());
      const double share = g[at] / g[best];
      worst = std::min(worst, share);
      // FLOP-weighted: the step's time on each choice.
      const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
      sum_auto += flop / g[at], sum_best += flop / g[best], sum_eigen += flop / g[0];
      std::printf("    %-28s", s.Text().c_str());
      for (double v : g) std::printf(" %9.1f", v);
      std::printf("  %-9s %5.1f%%\n", chosen[gi][si].c_str(), 100 * share);
    }
  }
  std::printf("  auto's choice: at least %.1f%% of the fastest backend on every product (target >= 90%%); over "
              "every product's FLOPs, %.1f%% of the fastest's speed and %.2fx Eigen's\n",
              100 * worst, 100 * sum_best / sum_auto, sum_eigen / sum_auto);
  std::printf("RESULT gemm_auto_worst_share=%.3f\n", worst);
  return 0;
}

}  // namespace stampede::tools
