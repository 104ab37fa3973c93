// A run of image layers on oneDNN with its activations in oneDNN's layouts
// (net/onednn_stack.h) against the same layers one by one in double precision (Eigen's
// convolutions, the project's own pooling, ReLU and residual sums): the output, every
// parameter's gradient and the input's, on the torsos the presets build and a custom one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "net/layers.h"
#include "net/model.h"
#include "net/network.h"
#include "net/onednn_conv.h"
#include "net/onednn_stack.h"
#include "tests/random_values.h"
#include "tests/skip_only.h"

using namespace stampede;
using net::LayerSpec;
using testing::Random;

namespace {

void RequireOneDnn() {
  if (!net::OneDnnBuilt()) testing::Skip("this build has no oneDNN (apt-get install libdnnl-dev, then reconfigure)");
}

// The largest difference over the largest value of `want` (offset: what `got` held first).
double RelDiff(const std::vector<float>& got, const std::vector<double>& want, double offset = 0) {
  double m = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    m = std::max(m, std::abs(double(got[i]) - offset - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return m / scale;
}

// torso.layers[begin, end) one by one in double, registered in order in `layout`.
std::vector<std::unique_ptr<net::Layer<double>>> OneByOne(const net::Torso& torso,
                                                          const std::vector<net::LayerIo>& io, size_t begin,
                                                          size_t end, net::ParamLayout* layout) {
  std::vector<std::unique_ptr<net::Layer<double>>> L;
  for (size_t i = begin; i < end; ++i) {
    const LayerSpec& l = torso.layers[i];
    switch (l.kind) {
      case LayerSpec::Kind::kConv:
        L.push_back(net::MakeConv<double>(layout, l.name, io[i].in, l.channels, l.kernel, l.stride, l.pad));
        break;
      case LayerSpec::Kind::kMaxPool:
        L.push_back(net::MakeMaxPool<double>(io[i].in, l.kernel, l.stride, l.pad));
        break;
      case LayerSpec::Kind::kResidual:
        L.push_back(net::MakeResidual<double>(layout, l.name, io[i].in));
        break;
      case LayerSpec::Kind::kRelu:
        L.push_back(net::MakeRelu<double>(io[i].in.size()));
        break;
      default:
        FAIL("not an image layer");
    }
  }
  return L;
}

struct Result {
  std::vector<double> out, grad, din;
};
// Forward, then Backward of sum(out * R), through double layers.
Result RunDouble(std::vector<std::unique_ptr<net::Layer<double>>>& L, const std::vector<double>& p,
                 const std::vector<double>& in, const std::vector<double>& R, int n, bool want_din) {
  std::vector<std::vector<double>> acts(L.size() + 1);
  acts[0] = in;
  for (size_t i = 0; i < L.size(); ++i) {
    acts[i + 1].resize(size_t(n) * L[i]->out_size());
    L[i]->Forward(p.data(), acts[i].data(), n, acts[i + 1].data());
  }
  Result r{acts.back(), std::vector<double>(p.size(), 0.0), {}};
  std::vector<double> d = R;
  for (size_t i = L.size(); i-- > 0;) {
    std::vector<double> din(acts[i].size());
    const bool need = i > 0 || want_din;
    L[i]->Backward(p.data(), acts[i].data(), acts[i + 1].data(), d.data(), n, need ? din.data() : nullptr,
                   r.grad.data());
    d = std::move(din);
  }
  if (want_din) r.din = d;
  return r;
}

// Layers [begin, end) of a torso on `obs`: the oneDNN run against them one by one, at
// each batch size in `ns` (in that order: plans are kept per size).
void CheckRun(const net::Torso& torso, const std::vector<int>& obs, size_t begin, size_t end,
              const std::vector<int>& ns) {
  auto io_or = net::TorsoShapes(torso, obs);
  REQUIRE(io_or.ok());
  const std::vector<net::LayerIo> io = io_or.value();
  net::ParamLayout lf, ld;
  auto made = net::MakeOneDnnStack(torso, io, begin, end, &lf);
  INFO(made.status().message());
  REQUIRE(made.ok());
  std::unique_ptr<net::Layer<float>> run = std::move(made).value();
  auto layers = OneByOne(torso, io, begin, end, &ld);
  // The same parameters as the layers one by one: names, shapes, offsets.
  REQUIRE(lf.tensors().size() == ld.tensors().size());
  for (size_t i = 0; i < lf.tensors().size(); ++i) {
    CHECK(lf.tensors()[i].name == ld.tensors()[i].name);
    CHECK(lf.tensors()[i].shape == ld.tensors()[i].shape);
    CHECK(lf.tensors()[i].offset == ld.tensors()[i].offset);
  }
  CHECK(run->in_size() == io[begin].in.size());
  CHECK(run->out_size() == io[end - 1].out.size());
  const bool want_din = begin > 0;
  // Weights of about the scale an initialiser gives (fan-ins of 36-1024 here): larger ones
  // grow the deep ResNet's activations to 1e8, where float sums of either kind part from
  // the double ones by 4e-4.
  const std::vector<double> p = Random(size_t(ld.total_size()), 31, 0.08);
  const std::vector<float> pf(p.begin(), p.end());
  uint64_t seed = 40;
  for (const int n : ns) {
    INFO(n << " samples, layers " << begin << " to " << end);
    const std::vector<double> in = Random(size_t(n) * run->in_size(), ++seed);
    const std::vector<double> R = Random(size_t(n) * run->out_size(), ++seed);
    const Result want = RunDouble(layers, p, in, R, n, want_din);
    const std::vector<float> inf(in.begin(), in.end()), Rf(R.begin(), R.end());
    // The gradient buffer holds something first (Backward adds to it): half the largest
    // gradient, so that float rounding of the sum stays at the gradients' own scale.
    double largest = 0;
    for (double g : want.grad) largest = std::max(largest, std::abs(g));
    const float held = float(0.5 * largest);
    std::vector<float> out(R.size()), grad(p.size(), held), din(want_din ? in.size() : 0, 9.f);
    run->Forward(pf.data(), inf.data(), n, out.data());
    run->Backward(pf.data(), inf.data(), out.data(), Rf.data(), n, want_din ? din.data() : nullptr, grad.data());
    CHECK(RelDiff(out, want.out) < 1e-5);
    CHECK(RelDiff(grad, want.grad, held) < 1e-4);  // added to what was there
    if (want_din) CHECK(RelDiff(din, want.din) < 1e-5);
    // Backward for an input the last Forward did not see runs that Forward first.
    const std::vector<double> in2 = Random(in.size(), ++seed);
    const Result want2 = RunDouble(layers, p, in2, R, n, want_din);
    const std::vector<float> in2f(in2.begin(), in2.end());
    std::vector<float> grad2(p.size(), 0.f), din2(din.size());
    run->Backward(pf.data(), in2f.data(), out.data(), Rf.data(), n, want_din ? din2.data() : nullptr, grad2.data());
    CHECK(RelDiff(grad2, want2.grad) < 1e-4);
    if (want_din) CHECK(RelDiff(din2, want2.din) < 1e-5);
  }
}

// A batch against its chunks run one at a time on the same layer: the same kernels on
// the same samples, so the outputs are bit for bit the same and the gradients (added up
// over the chunks in the same order) too. Against double layers, a batch this large with
// max pooling would differ wherever two values of a window are nearer than float
// rounding and the float and double passes pick different winners.
void CheckChunks(const net::Torso& torso, const std::vector<int>& obs, size_t end, int n,
                 const std::vector<int>& chunks) {
  auto io = net::TorsoShapes(torso, obs);
  REQUIRE(io.ok());
  net::ParamLayout layout;
  auto made = net::MakeOneDnnStack(torso, io.value(), 0, end, &layout);
  REQUIRE(made.ok());
  std::unique_ptr<net::Layer<float>> run = std::move(made).value();
  const std::vector<double> pd = Random(size_t(layout.total_size()), 51, 0.08);
  const std::vector<double> ind = Random(size_t(n) * run->in_size(), 52), Rd = Random(size_t(n) * run->out_size(), 53);
  const std::vector<float> p(pd.begin(), pd.end()), in(ind.begin(), ind.end()), R(Rd.begin(), Rd.end());
  std::vector<float> out(R.size()), grad(p.size(), 0.f);
  run->Forward(p.data(), in.data(), n, out.data());
  run->Backward(p.data(), in.data(), out.data(), R.data(), n, nullptr, grad.data());
  std::vector<float> out2(R.size()), grad2(p.size(), 0.f);
  int s0 = 0;
  for (const int m : chunks) {
    const float* x = in.data() + int64_t(s0) * run->in_size();
    float* y = out2.data() + int64_t(s0) * run->out_size();
    run->Forward(p.data(), x, m, y);
    run->Backward(p.data(), x, y, R.data() + int64_t(s0) * run->out_size(), m, nullptr, grad2.data());
    s0 += m;
  }
  REQUIRE(s0 == n);
  CHECK(out == out2);
  CHECK(grad == grad2);
}

LayerSpec Conv(const std::string& name, int channels, int k, int s, int p) {
  LayerSpec l;
  l.kind = LayerSpec::Kind::kConv;
  l.name = name, l.channels = channels, l.kernel = k, l.stride = s, l.pad = p;
  return l;
}
LayerSpec Of(LayerSpec::Kind kind, const std::string& name = "", int k = 0, int s = 1, int p = 0) {
  LayerSpec l;
  l.kind = kind;
  l.name = name, l.kernel = k, l.stride = s, l.pad = p;
  return l;
}

}  // namespace

TEST_CASE("oneDNN layer runs: the shallow CNN's image layers equal them one by one", "[net]") {
  RequireOneDnn();
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.torso = std::string(net::kShallowCnn);
  const net::Torso torso = net::TorsoOf(spec);
  size_t end = 0;
  while (end < torso.layers.size() && net::StackableOnOneDnn(torso.layers[end].kind)) ++end;
  REQUIRE(end == 4);  // conv, relu, conv, relu; then the dense layer
  // A chunk holds 9 samples (its input, 4x84x84 floats, about 1 MB): 16 is a chunk of 9 and
  // one of 7, each on its own primitives.
  CheckRun(torso, spec.obs_shape, 0, end, {16, 7, 16});
}

TEST_CASE("oneDNN layer runs: the deep ResNet's image layers (pooling, residual blocks) equal them one by one", "[net]") {
  RequireOneDnn();
  net::ModelSpec spec;
  spec.obs_shape = {4, 36, 36};  // smaller than Atari's 84: the same layers, a faster test
  spec.torso = std::string(net::kDeepResNet);
  const net::Torso torso = net::TorsoOf(spec);
  size_t end = 0;
  while (end < torso.layers.size() && net::StackableOnOneDnn(torso.layers[end].kind)) ++end;
  REQUIRE(end > 10);
  CheckRun(torso, spec.obs_shape, 0, end, {5});
  // Its first two layers (a convolution and its pooling, one segment of the run) on a
  // batch of 30 run as two chunks of 12 (about 1 MB of its largest activation, 16x36x36
  // floats, each) and one of 6.
  CheckChunks(torso, spec.obs_shape, 2, 30, {12, 12, 6});
}

TEST_CASE("oneDNN layer runs: at 84x84 the deep ResNet's run is in segments of growing chunks, and equals its layers one by one", "[net]") {
  RequireOneDnn();
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.torso = std::string(net::kDeepResNet);
  const net::Torso torso = net::TorsoOf(spec);
  auto io = net::TorsoShapes(torso, spec.obs_shape);
  REQUIRE(io.ok());
  const size_t end = net::StackableRunEnd(torso, io.value(), 0);
  REQUIRE(end == 13);
  // 5 samples: chunks of 2, 2 and 1 for the 84x84 convolution and its pooling (16x84x84
  // floats a sample), of 4 and 1 for the 42x42 layers (the 32-channel convolution's output),
  // and one of 5 for the rest; the whole batch's activation between them.
  CheckRun(torso, spec.obs_shape, 0, end, {5});
  // The segments' chunks (times the OpenMP threads): 2 samples for the 84x84 layers, 4
  // for the 42x42 ones, 18 for the 21x21 and 11x11 ones (their chunk would be 67, under 4
  // times 18, so they stay in one segment).
  net::ParamLayout layout;
  auto made = net::MakeOneDnnStack(torso, io.value(), 0, end, &layout);
  REQUIRE(made.ok());
  const std::vector<float> p(size_t(layout.total_size()), 0.01f), in(size_t(3) * made.value()->in_size(), 0.5f),
      dout(size_t(3) * made.value()->out_size(), 0.1f);
  auto timed = net::TimeOneDnnStack(torso, io.value(), end, p.data(), in.data(), dout.data(), 3, 0.0);
  REQUIRE(timed.ok());
  const std::vector<int>& c = timed.value().chunk;
  REQUIRE(c.size() == end);
  const int t = c[0] / 2;
  CHECK(c == std::vector<int>{2 * t, 2 * t, 4 * t, 4 * t, 4 * t, 4 * t, 18 * t, 18 * t, 18 * t, 18 * t, 18 * t, 18 * t,
                              18 * t});
}

TEST_CASE("oneDNN layer runs: a run after the torso's start gives the input's gradient, with odd sizes and padding", "[net]") {
  RequireOneDnn();
  const net::Torso torso = net::CustomTorso(
      {Conv("c0", 8, 3, 1, 1), Of(LayerSpec::Kind::kMaxPool, "", 3, 2, 1), Of(LayerSpec::Kind::kResidual, "r0"),
       Of(LayerSpec::Kind::kRelu), Conv("c1", 12, 4, 2, 0), Of(LayerSpec::Kind::kRelu),
       Of(LayerSpec::Kind::kMaxPool, "", 2, 2, 0)});
  CheckRun(torso, {3, 23, 19}, 1, torso.layers.size(), {6, 2});
  CheckRun(torso, {3, 23, 19}, 0, torso.layers.size(), {3});
}

TEST_CASE("oneDNN layer runs: a CPU model builds one where oneDNN is the backend, and not per layer", "[net]") {
  RequireOneDnn();
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.torso = std::string(net::kShallowCnn);
  const net::Torso torso = net::TorsoOf(spec);
  const net::ConvBackend before = net::GetConvBackend();
  REQUIRE(net::SetConvBackend(net::ConvBackend::kOneDnn));
  net::ParamLayout a, b, c;
  auto fused = net::BuildTorso<float>(torso, spec.obs_shape, &a);
  REQUIRE(net::SetConvBackend(net::ConvBackend::kOneDnnPerLayer));
  auto apart = net::BuildTorso<float>(torso, spec.obs_shape, &b);
  auto asked = net::BuildTorso<float>(torso, spec.obs_shape, &c, /*per_layer=*/true);
  REQUIRE(net::SetConvBackend(before));
  REQUIRE(fused.ok());
  REQUIRE(apart.ok());
  REQUIRE(asked.ok());
  CHECK(fused.value().size() == torso.layers.size() - 3);  // conv, relu, conv, relu as one
  CHECK(apart.value().size() == torso.layers.size());
  CHECK(asked.value().size() == torso.layers.size());
  CHECK(a.Fingerprint() == b.Fingerprint());
}
