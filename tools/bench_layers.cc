// `stampede bench --networks`' table by layer: where a CPU learner step's time goes for
// the shallow CNN and the deep ResNet + LSTM 256 at the Pong configs' B = 16, T = 20
// (336 rows of 4x84x84), each layer's forward and backward beside
//  - the fastest implementation installed here for the same work: oneDNN's convolution
//    alone (its preferred layouts, the whole batch in one call, no reorders) for a
//    convolution and a residual block's two; every GEMM backend net/gemm.h has, the
//    fastest kept per product, for a dense layer and the LSTM's products;
//  - the roofline bound of that work: its FLOPs at the 512^3 GEMM's rate on this core,
//    or its bytes at this core's copy bandwidth, whichever takes longer.
// Elementwise and pooling layers have only the bound. Prints figures; asserts nothing.
#include "tools/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "envs/rng.h"
#include "net/gemm.h"
#include "net/layers.h"
#include "net/model.h"
#include "net/network.h"
#include "net/onednn_conv.h"
#include "net/onednn_stack.h"

namespace stampede::tools {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// GB/s of one thread copying 64 MB (read and write both counted), the best of a few.
double CopyBandwidthGBs(double seconds) {
  const size_t n = size_t(64) << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, 2.0 * double(n) / Since(t0) / 1e9);
    a[size_t(best) % n] ^= 1;  // the copies are not the same work twice
  } while (Since(start) < seconds);
  return best;
}

// The time of a product on the fastest backend here, ms.
double BestGemmMs(const net::GemmShape& s, double seconds) {
  const std::vector<double> g = TimeGemmShape(net::AvailableGemmBackends(), s, seconds);
  return 2.0 * double(s.M) * double(s.N) * double(s.K) / (*std::max_element(g.begin(), g.end()) * 1e6);
}

struct Row {
  std::string name;
  double fwd = 0, bwd = 0;            // ours, ms per call
  double ref_fwd = -1, ref_bwd = -1;  // the fastest measured beside it (-1: none)
  double bound_fwd = 0, bound_bwd = 0;
  std::string note;
};

// The roofline bound, ms: the FLOPs at `peak` GFLOP/s or the bytes at `bw` GB/s.
double Bound(double flops, double bytes, double peak, double bw) {
  return 1e3 * std::max(flops / (peak * 1e9), bytes / (bw * 1e9));
}

void PrintRows(const std::string& title, const std::vector<Row>& rows, int reps) {
  std::printf("  %s (%d reps), ms per call:\n", title.c_str(), reps);
  std::printf("    %-26s %8s %8s %8s %8s %8s %8s %9s\n", "layer", "fwd", "fastest", "bound", "bwd", "fastest", "bound",
              "of fastest");
  double ours = 0, best = 0, bound = 0;
  for (const Row& r : rows) {
    auto ref = [](double v) {
      char buf[16];
      if (v < 0) return std::string("-");
      std::snprintf(buf, sizeof buf, "%.2f", v);
      return std::string(buf);
    };
    const double rf = r.ref_fwd < 0 ? r.fwd : std::min(r.fwd, r.ref_fwd);
    const double rb = r.ref_bwd < 0 ? r.bwd : std::min(r.bwd, r.ref_bwd);
    ours += r.fwd + r.bwd;
    best += rf + rb;
    bound += r.bound_fwd + r.bound_bwd;
    std::string share = "-";
    if (r.ref_fwd >= 0 || r.ref_bwd >= 0) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.0f%%", 100 * (rf + rb) / (r.fwd + r.bwd));
      share = buf;
    }
    std::printf("    %-26s %8.2f %8s %8.2f %8.2f %8s %8.2f %9s%s%s\n", r.name.c_str(), r.fwd, ref(r.ref_fwd).c_str(),
                r.bound_fwd, r.bwd, ref(r.ref_bwd).c_str(), r.bound_bwd, share.c_str(), r.note.empty() ? "" : "  ",
                r.note.c_str());
  }
  std::printf("    %-26s %8.1f ms forward + backward; the fastest of each layer's implementations %.1f ms (%.0f%%); "
              "the bounds %.1f ms (%.0f%%)\n",
              "total", ours, best, 100 * best / ours, bound, 100 * bound / ours);
}

// The torso's leading image layers as the model builds them where oneDNN is the backend
// (one run, net/onednn_stack.h), timed layer by layer inside the run on the same input
// and gradient, beside the same fastest implementations as the table above.
void PrintRun(const net::Torso& torso, const std::vector<net::LayerIo>& io, const std::vector<float>& params,
              const std::vector<float>& in, const std::vector<std::vector<float>>& grads, int rows,
              const std::vector<Row>& by_layer, double seconds) {
  const size_t end = std::min(net::StackableRunEnd(torso, io, 0), by_layer.size());
  if (end == 0) return;
  auto timed = net::TimeOneDnnStack(torso, io, end, params.data(), in.data(), grads[end].data(), rows, seconds);
  if (!timed.ok()) {
    std::printf("    no oneDNN run of its image layers: %s\n", timed.status().message().c_str());
    return;
  }
  const net::OneDnnRunTimes& t = timed.value();
  std::vector<Row> run;
  double apart = 0;
  for (size_t i = 0; i < end; ++i) {
    Row r = by_layer[i];
    apart += r.fwd + r.bwd;
    r.fwd = t.forward[i], r.bwd = t.backward[i];
    r.note = "in chunks of " + std::to_string(t.chunk[i]);
    run.push_back(r);
  }
  double together = 0;
  for (const Row& r : run) together += r.fwd + r.bwd;
  PrintRows("its first " + std::to_string(end) + " layers as one oneDNN run, as the model builds them (each layer's "
                "ops inside the run; the reorders at its ends in the first and last layer's; the samples a chunk of "
                "its segment)",
            run, t.passes);
  std::printf("    %-26s %8.1f ms as one run against %.1f ms apart (%.2fx)\n", "", together, apart, apart / together);
}

}  // namespace

void PrintLayerTables(double seconds, double peak) {
  const double bw = CopyBandwidthGBs(0.3);
  std::printf("  by layer: the fastest implementation here for the same work (oneDNN's convolution alone, in its "
              "own layouts; its max pooling alone; the fastest GEMM backend per product), and the roofline bound (the 512^3 GEMM's %.1f "
              "GFLOP/s, a 64 MB copy's %.1f GB/s)\n",
              peak, bw);
  const int T1 = 21, B = 16, rows = T1 * B;
  for (const bool deep : {false, true}) {
    net::ModelSpec spec;
    spec.obs_shape = {4, 84, 84};
    spec.uint8_obs = true;
    spec.torso = std::string(deep ? net::kDeepResNet : net::kShallowCnn);
    spec.fc_size = 256;
    const net::Torso torso = net::TorsoOf(spec);
    auto io = net::TorsoShapes(torso, spec.obs_shape);
    net::ParamLayout layout;
    auto built = net::BuildTorso<float>(torso, spec.obs_shape, &layout, /*per_layer=*/true);
    if (!io.ok() || !built.ok()) {
      std::printf("  %s: %s\n", spec.torso.c_str(), (io.ok() ? built.status() : io.status()).message().c_str());
      continue;
    }
    std::vector<std::unique_ptr<net::Layer<float>>> layers = std::move(built).value();
    const int H = deep ? 256 : 0;
    std::unique_ptr<net::Lstm<float>> lstm;
    if (H > 0) lstm = std::make_unique<net::Lstm<float>>(&layout, "lstm", layers.back()->out_size(), H);
    envs::SplitMix64 rng(7);
    auto uniform = [&rng](float scale) { return scale * (float(rng() % 2001) / 1000.f - 1.f); };
    std::vector<float> params(layout.total_size()), grad(params.size());
    for (auto& v : params) v = uniform(0.05f);
    const size_t L = layers.size();
    std::vector<std::vector<float>> acts(L + 1), grads(L + 1);
    acts[0].resize(size_t(rows) * layers[0]->in_size());
    for (auto& v : acts[0]) v = float(rng() % 256) / 255.f;
    for (size_t i = 0; i < L; ++i) {
      acts[i + 1].resize(size_t(rows) * layers[i]->out_size());
      grads[i].resize(acts[i].size());
    }
    grads[L].resize(acts[L].size());
    for (auto& v : grads[L]) v = uniform(0.01f);
    std::vector<float> lstm_out(size_t(rows) * H), lstm_dout(lstm_out.size()), lstm_dx(acts[L].size());
    for (auto& v : lstm_dout) v = uniform(0.01f);
    std::vector<uint8_t> first(size_t(rows), 0);
    for (int b = 0; b < B; ++b) first[size_t(b)] = 1;
    std::vector<double> fwd(L + 1, 0), bwd(L + 1, 0);
    auto pass = [&](bool timed) {
      for (size_t i = 0; i < L; ++i) {
        const auto t0 = Clock::now();
        layers[i]->Forward(params.data(), acts[i].data(), rows, acts[i + 1].data());
        if (timed) fwd[i] += Since(t0);
      }
      if (lstm) {
        const auto t0 = Clock::now();
        lstm->Forward(params.data(), acts[L].data(), T1, B, first.data(), nullptr, lstm_out.data(), nullptr);
        if (timed) fwd[L] += Since(t0);
        const auto t1 = Clock::now();
        lstm->Backward(params.data(), lstm_dout.data(), lstm_dx.data(), grad.data());
        if (timed) bwd[L] += Since(t1);
      }
      for (size_t i = L; i-- > 0;) {
        const auto t0 = Clock::now();
        layers[i]->Backward(params.data(), acts[i].data(), acts[i + 1].data(), grads[i + 1].data(), rows,
                            i == 0 ? nullptr : grads[i].data(), grad.data());
        if (timed) bwd[i] += Since(t0);
      }
    };
    pass(false);  // untimed: oneDNN's primitives, "auto"'s first-use timing of each product
    // At least 3 timed passes: the deep network's pass takes longer than --seconds, and
    // one pass alone read up to 1.7 times a layer's time in a harness on the same core.
    int reps = 0;
    const auto start = Clock::now();
    do {
      pass(true);
      ++reps;
    } while (Since(start) < seconds || reps < 3);
    const double slice = std::max(0.05, seconds / 20);
    std::vector<Row> out;
    for (size_t i = 0; i < L; ++i) {
      const net::LayerSpec& ls = torso.layers[i];
      const net::LayerIo& x = io.value()[i];
      Row r;
      r.fwd = 1e3 * fwd[i] / reps;
      r.bwd = 1e3 * bwd[i] / reps;
      const double in = layers[i]->in_size(), outn = layers[i]->out_size();
      double nparams = 0;
      const double f = layers[i]->flops() * rows;
      const double bflops = (i == 0 ? 1.0 : 2.0) * f;
      char name[64];
      switch (ls.kind) {
        case net::LayerSpec::Kind::kConv: {
          std::snprintf(name, sizeof name, "conv %d->%d %dx%d/%d @%d", x.in.c, ls.channels, ls.kernel, ls.kernel,
                        ls.stride, x.in.h);
          nparams = double(ls.channels) * x.in.c * ls.kernel * ls.kernel + ls.channels;
          const net::ConvGeometry g{x.in.c, x.in.h, x.in.w, x.out.c, x.out.h, x.out.w, ls.kernel, ls.stride, ls.pad};
          if (auto t = net::TimeOneDnnConvAlone(g, rows, slice); t.ok()) {
            r.ref_fwd = t.value().forward;
            r.ref_bwd = t.value().backward_weights + (i == 0 ? 0.0 : t.value().backward_data);
          } else {
            r.note = t.status().message();
          }
          break;
        }
        case net::LayerSpec::Kind::kResidual: {
          std::snprintf(name, sizeof name, "residual %dx(3x3) @%d", x.in.c, x.in.h);
          nparams = 2.0 * (double(x.in.c) * x.in.c * 9 + x.in.c);
          const net::ConvGeometry g{x.in.c, x.in.h, x.in.w, x.in.c, x.in.h, x.in.w, 3, 1, 1};
          if (auto t = net::TimeOneDnnConvAlone(g, rows, slice); t.ok()) {
            r.ref_fwd = 2 * t.value().forward;
            r.ref_bwd = 2 * (t.value().backward_weights + t.value().backward_data);
          } else {
            r.note = t.status().message();
          }
          break;
        }
        case net::LayerSpec::Kind::kDense: {
          std::snprintf(name, sizeof name, "fc %d->%d", int(in), ls.units);
          nparams = in * ls.units + ls.units;
          const int64_t M = rows, N = ls.units, K = int64_t(in);
          r.ref_fwd = BestGemmMs({false, false, M, N, K}, slice);
          r.ref_bwd = BestGemmMs({true, false, K, N, M}, slice) + (i == 0 ? 0.0 : BestGemmMs({false, true, M, K, N}, slice));
          break;
        }
        case net::LayerSpec::Kind::kMaxPool: {
          std::snprintf(name, sizeof name, "max pool %dx%d/%d @%d", ls.kernel, ls.kernel, ls.stride, x.in.h);
          const net::ConvGeometry g{x.in.c, x.in.h, x.in.w, x.out.c, x.out.h, x.out.w, ls.kernel, ls.stride, ls.pad};
          if (auto t = net::TimeOneDnnMaxPoolAlone(g, rows, slice); t.ok()) {
            r.ref_fwd = t.value().forward;
            r.ref_bwd = t.value().backward;
          } else {
            r.note = t.status().message();
          }
          break;
        }
        case net::LayerSpec::Kind::kRelu:
          std::snprintf(name, sizeof name, "relu (%d)", int(in));
          break;
        case net::LayerSpec::Kind::kTanh:
          std::snprintf(name, sizeof name, "tanh (%d)", int(in));
          break;
      }
      r.name = name;
      r.bound_fwd = Bound(f, 4.0 * (rows * (in + outn) + nparams), peak, bw);
      r.bound_bwd = Bound(bflops, 4.0 * (rows * (2 * outn + (i == 0 ? 0.0 : in) + in) + 2 * nparams), peak, bw);
      out.push_back(r);
    }
    if (lstm) {
      Row r;
      r.name = "lstm " + std::to_string(H);
      r.fwd = 1e3 * fwd[L] / reps;
      r.bwd = 1e3 * bwd[L] / reps;
      const int64_t in = lstm->in_size(), G = 4 * H;
      // Its products: the inputs' for all rows at once, the recurrent one per step.
      r.ref_fwd = BestGemmMs({false, false, rows, G, in}, slice) + T1 * BestGemmMs({false, false, B, G, H}, slice);
      r.ref_bwd = BestGemmMs({true, false, in, G, rows}, slice) + BestGemmMs({false, true, rows, in, G}, slice) +
                  T1 * (BestGemmMs({true, false, H, G, B}, slice) + BestGemmMs({false, true, B, H, G}, slice));
      const double f = lstm->flops() * rows, nparams = double(in + H) * G + G;
      r.bound_fwd = Bound(f, 4.0 * (rows * (in + 2.0 * H + G) + nparams), peak, bw);
      r.bound_bwd = Bound(2 * f, 4.0 * (rows * (2.0 * in + 3.0 * H + 2.0 * G) + 2 * nparams), peak, bw);
      r.note = "products only in its fastest";
      out.push_back(r);
    }
    PrintRows(std::string(deep ? "deep ResNet + LSTM 256" : "shallow CNN") + " learner step by layer (B=16, T=20: " +
                  std::to_string(rows) + " rows)",
              out, reps);
    PrintRun(torso, io.value(), params, acts[0], grads, rows, out, seconds);
  }
}

}  // namespace stampede::tools
