// The convolution layer against a convolution written out directly: the Eigen path's
// chunks of unrolled windows (double precision) and each backend's float path (Eigen,
// and oneDNN where the build has it), output and all three gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "net/layers.h"
#include "net/onednn_conv.h"
#include "tests/random_values.h"
#include "tests/skip_only.h"

using namespace stampede;
using net::ImageShape;
using testing::Random;

namespace {
// A convolution written out directly (no unrolling, no chunks): the output, and the
// gradients of sum(out * R) by weights, bias and input.
struct DirectConv {
  std::vector<double> out, dw, db, din;
};
DirectConv Direct(const std::vector<double>& p, const std::vector<double>& in, const std::vector<double>& R,
                  ImageShape is, int C, int k, int s, int pad, int n) {
  const ImageShape os = net::ConvShape(is, C, k, s, pad);
  const size_t nw = size_t(C) * is.c * k * k;
  DirectConv d{std::vector<double>(size_t(n) * os.size(), 0.0), std::vector<double>(nw, 0.0),
               std::vector<double>(size_t(C), 0.0), std::vector<double>(in.size(), 0.0)};
  for (int i = 0; i < n; ++i)
    for (int co = 0; co < C; ++co)
      for (int oy = 0; oy < os.h; ++oy)
        for (int ox = 0; ox < os.w; ++ox) {
          const size_t o = size_t(i) * os.size() + (size_t(co) * os.h + oy) * os.w + ox;
          double v = p[nw + co];
          d.db[co] += R[o];
          for (int ci = 0; ci < is.c; ++ci)
            for (int ky = 0; ky < k; ++ky)
              for (int kx = 0; kx < k; ++kx) {
                const int y = oy * s - pad + ky, x = ox * s - pad + kx;
                if (y < 0 || y >= is.h || x < 0 || x >= is.w) continue;
                const size_t w = ((size_t(co) * is.c + ci) * k + ky) * k + kx;
                const size_t a = size_t(i) * is.size() + (size_t(ci) * is.h + y) * is.w + x;
                v += p[w] * in[a];
                d.dw[w] += R[o] * in[a];
                d.din[a] += R[o] * p[w];
              }
          d.out[o] = v;
        }
  return d;
}
}  // namespace

// The layer unrolls windows in chunks of samples (a chunk is ~256k values), as rows for
// strides above 1 and as columns for stride 1; these shapes span several chunks.
TEST_CASE("layers: convolutions equal a direct convolution across sample chunks", "[net]") {
  struct Case {
    ImageShape in;
    int C, k, s, pad, n;
  };
  const Case cases[] = {{{4, 84, 84}, 16, 8, 4, 0, 5},    // shallow CNN's first: 2 samples a chunk
                        {{16, 20, 20}, 32, 4, 2, 0, 15},  // its second: 12 a chunk
                        {{3, 120, 100}, 5, 3, 2, 1, 7},   // padded, strided: 3 a chunk
                        {{2, 90, 90}, 4, 3, 1, 1, 4}};    // stride 1, padded: 1 a chunk
  for (const Case& c : cases) {
    INFO("conv " << c.in.c << "x" << c.in.h << "x" << c.in.w << " -> " << c.C << ", " << c.k << "x" << c.k
                 << " stride " << c.s << " pad " << c.pad << ", " << c.n << " samples");
    net::ParamLayout L;
    auto conv = net::MakeConv<double>(&L, "c", c.in, c.C, c.k, c.s, c.pad);
    const std::vector<double> p = Random(size_t(L.total_size()), 11, 0.5);
    const std::vector<double> in = Random(size_t(c.n) * c.in.size(), 12);
    const std::vector<double> R = Random(size_t(c.n) * conv->out_size(), 13);
    const DirectConv want = Direct(p, in, R, c.in, c.C, c.k, c.s, c.pad, c.n);
    std::vector<double> out(R.size()), grad(p.size(), 0.0), din(in.size(), 7.0);
    conv->Forward(p.data(), in.data(), c.n, out.data());
    conv->Backward(p.data(), in.data(), out.data(), R.data(), c.n, din.data(), grad.data());
    auto max_diff = [](const double* a, const double* b, size_t len) {
      double m = 0;
      for (size_t i = 0; i < len; ++i) m = std::max(m, std::abs(a[i] - b[i]));
      return m;
    };
    const size_t nw = want.dw.size();
    CHECK(max_diff(out.data(), want.out.data(), out.size()) < 1e-9);
    CHECK(max_diff(grad.data(), want.dw.data(), nw) < 1e-8);
    CHECK(max_diff(grad.data() + nw, want.db.data(), want.db.size()) < 1e-8);
    CHECK(max_diff(din.data(), want.din.data(), din.size()) < 1e-9);
  }
}

namespace {
struct FloatCase {
  ImageShape in;
  int C, k, s, pad, n;
};

// One float convolution on the current backend against the direct convolution: output,
// weight, bias and input gradients, and the weight gradient again from another buffer.
void CheckFloatConv(const FloatCase& c) {
  INFO(net::ConvBackendName(net::GetConvBackend()) << ": conv " << c.in.c << "x" << c.in.h << "x" << c.in.w << " -> "
                                                   << c.C << ", " << c.k << "x" << c.k << " stride " << c.s << " pad "
                                                   << c.pad << ", " << c.n << " samples");
  net::ParamLayout L;
  auto conv = net::MakeConv<float>(&L, "c", c.in, c.C, c.k, c.s, c.pad);
  const std::vector<double> p = Random(size_t(L.total_size()), 21, 0.5);
  const std::vector<double> in = Random(size_t(c.n) * c.in.size(), 22);
  const std::vector<double> R = Random(size_t(c.n) * conv->out_size(), 23);
  const DirectConv want = Direct(p, in, R, c.in, c.C, c.k, c.s, c.pad, c.n);
  const std::vector<float> pf(p.begin(), p.end()), inf(in.begin(), in.end()), Rf(R.begin(), R.end());
  std::vector<float> out(R.size()), grad(p.size(), 0.5f), din(in.size(), 7.f);
  conv->Forward(pf.data(), inf.data(), c.n, out.data());
  conv->Backward(pf.data(), inf.data(), out.data(), Rf.data(), c.n, din.data(), grad.data());
  // Relative to the largest value: float sums of up to ~100k products.
  auto rel_diff = [](const float* a, const double* b, size_t len, double offset) {
    double m = 0, scale = 1e-30;
    for (size_t i = 0; i < len; ++i) {
      m = std::max(m, std::abs(double(a[i]) - offset - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    return m / scale;
  };
  const size_t nw = want.dw.size();
  CHECK(rel_diff(out.data(), want.out.data(), out.size(), 0) < 1e-5);
  CHECK(rel_diff(grad.data(), want.dw.data(), nw, 0.5) < 1e-5);  // added to what was there
  CHECK(rel_diff(grad.data() + nw, want.db.data(), want.db.size(), 0.5) < 1e-5);
  CHECK(rel_diff(din.data(), want.din.data(), din.size(), 0) < 1e-5);
  // Backward from another buffer with the same input (not the one Forward saw).
  const std::vector<float> copy = inf;
  std::vector<float> grad2(p.size(), 0.5f);
  conv->Backward(pf.data(), copy.data(), out.data(), Rf.data(), c.n, nullptr, grad2.data());
  CHECK(rel_diff(grad2.data(), want.dw.data(), nw, 0.5) < 1e-5);
}

// Every backend this build has, each case on each.
void CheckFloatConvs(const std::vector<FloatCase>& cases) {
  std::vector<net::ConvBackend> backends = {net::ConvBackend::kEigen};
  if (net::OneDnnBuilt()) backends.push_back(net::ConvBackend::kOneDnn);
  const net::ConvBackend before = net::GetConvBackend();
  for (const net::ConvBackend backend : backends) {
    REQUIRE(net::SetConvBackend(backend));
    for (const FloatCase& c : cases) CheckFloatConv(c);
  }
  REQUIRE(net::SetConvBackend(before));
}
}  // namespace

TEST_CASE("layers: float convolutions on each backend equal a direct convolution (oneDNN where built)", "[net]") {
  CheckFloatConvs({{{4, 84, 84}, 16, 8, 4, 0, 5},    // the shallow CNN's convolutions
                   {{16, 20, 20}, 32, 4, 2, 0, 15},
                   {{16, 21, 21}, 16, 3, 1, 1, 3},   // a deep ResNet block's
                   {{4, 10, 10}, 16, 3, 1, 0, 17},   // MinAtar's small CNN
                   {{3, 120, 100}, 5, 3, 2, 1, 7}});  // odd channels, padded, strided
}

// The sizes training runs: a Pong batch of 16 unrolls of 20 steps is 336 rows, which the
// layers cut into many chunks (about 1 MB of samples each for oneDNN's reorders, ~256k
// values for Eigen's unrolled windows): the first convolution in dozens, the second in
// several.
TEST_CASE("layers: float convolutions at training sizes, across many chunks, equal a direct convolution", "[net]") {
  CheckFloatConvs({{{4, 84, 84}, 16, 8, 4, 0, 336}, {{16, 20, 20}, 32, 4, 2, 0, 336}});
}

TEST_CASE("layers: oneDNN has real kernels for the project's convolutions", "[net]") {
  if (!net::OneDnnBuilt()) testing::Skip("this build has no oneDNN (apt-get install libdnnl-dev, then reconfigure)");
  // The shallow CNN's, a deep ResNet block's, MinAtar's small CNN's.
  const net::ConvGeometry geometries[] = {{4, 84, 84, 16, 20, 20, 8, 4, 0},
                                          {16, 20, 20, 32, 9, 9, 4, 2, 0},
                                          {16, 21, 21, 16, 21, 21, 3, 1, 1},
                                          {4, 10, 10, 16, 8, 8, 3, 1, 0}};
  for (const auto& g : geometries) {
    auto made = net::OneDnnConv::Create(g);
    INFO(made.status().message());
    REQUIRE(made.ok());
    auto conv = std::move(made).value();
    const std::string kernels = conv->Kernels(336);
    INFO(kernels);
    CHECK(kernels.find("ref") == std::string::npos);
  }
}


// learner.threads: a thread that asks for 2 OpenMP threads gets primitives made for them
// and chunks twice as large; the results are the direct convolution's still, and the
// thread's one-thread primitives are still right after it goes back.
TEST_CASE("layers: oneDNN convolutions on 2 threads equal a direct convolution, and on 1 again after", "[net]") {
  if (!net::OneDnnBuilt()) testing::Skip("this build has no oneDNN (apt-get install libdnnl-dev, then reconfigure)");
  const net::ConvBackend before = net::GetConvBackend();
  REQUIRE(net::SetConvBackend(net::ConvBackend::kOneDnn));
  const std::vector<FloatCase> cases = {{{4, 84, 84}, 16, 8, 4, 0, 45}, {{16, 21, 21}, 16, 3, 1, 1, 37}};
  for (const int threads : {2, 1}) {
    net::SetOneDnnThreads(threads);
    CHECK(net::OneDnnThreads() == threads);
    for (const FloatCase& c : cases) CheckFloatConv(c);
  }
  net::SetOneDnnThreads(1);
  REQUIRE(net::SetConvBackend(before));
}
