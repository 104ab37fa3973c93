#include "net/onednn_conv.h"

#include <atomic>

#include "net/layers.h"

namespace stampede::net {

// The process-wide choice (net/layers.h): oneDNN where built.
namespace {
std::atomic<ConvBackend> g_conv_backend{OneDnnBuilt() ? ConvBackend::kOneDnn : ConvBackend::kEigen};
}  // namespace

bool SetConvBackend(ConvBackend backend) {
  if (backend != ConvBackend::kEigen && !OneDnnBuilt()) return false;
  g_conv_backend = backend;
  return true;
}
ConvBackend GetConvBackend() { return g_conv_backend.load(); }
const char* ConvBackendName(ConvBackend backend) {
  switch (backend) {
    case ConvBackend::kOneDnn:
      return "onednn";
    case ConvBackend::kOneDnnPerLayer:
      return "onednn_per_layer";
    case ConvBackend::kEigen:
      break;
  }
  return "eigen";
}

}  // namespace stampede::net

#ifdef STAMPEDE_HAVE_ONEDNN

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>

#include "net/onednn_internal.h"
#include <tuple>
#include <utility>
#include <vector>

// GNU OpenMP's, which Debian's oneDNN runs on (declared here: clang, which the
// thread-safety check and the fuzz builds use, does not see GCC's omp.h).
extern "C" void omp_set_num_threads(int);

namespace stampede::net {

namespace onednn {
dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// oneDNN's OpenMP runs one thread unless the calling thread asks for more: every role
// shares the machine's cores with others (actors beside the learner), and the roles are
// the parallelism; a learner that bounds the fleet may take more (learner.threads).
// OpenMP's thread count belongs to the calling thread, so each thread that computes sets
// it (a learner's trainer thread is not the one that made the model; left at the default,
// it would run a team of one thread per core whose idle members spin).
namespace {
thread_local int wanted_threads = 1;
}  // namespace
int WantedThreads() { return wanted_threads; }
void ApplyThreads() {
  thread_local int applied = 0;
  if (applied != wanted_threads) {
    omp_set_num_threads(wanted_threads);
    applied = wanted_threads;
  }
}
void SetWanted(int n) { wanted_threads = std::max(1, n); }
}  // namespace onednn

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using onednn::ApplyThreads;
using onednn::Engine;
using onednn::IsReference;

using onednn::ConvDescs;

// The descriptions with activations in `act` (NHWC, or "any" for oneDNN's choice).
ConvDescs MakeDescs(const ConvGeometry& g, int n, tag act, bool data_grad, const dnnl::primitive_attr& attr) {
  auto& eng = Engine();
  const memory::dims src_dims{n, g.c, g.h, g.w}, w_dims{g.o, g.c, g.k, g.k}, b_dims{g.o},
      dst_dims{n, g.o, g.oh, g.ow}, strides{g.s, g.s}, pad{g.p, g.p};
  const memory::desc src_d(src_dims, dt::f32, act), dst_d(dst_dims, dt::f32, act), w_any(w_dims, dt::f32, tag::any),
      b_d(b_dims, dt::f32, tag::x);
  ConvDescs d;
  d.fwd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_d,
                                      w_any, b_d, dst_d, strides, pad, pad),
      attr, eng);
  d.bww = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.fwd.src_desc(), w_any, b_d,
                                               d.fwd.dst_desc(), strides, pad, pad),
      eng, d.fwd);
  if (data_grad) {
    d.bwd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.fwd.src_desc(), w_any,
                                              d.fwd.dst_desc(), strides, pad, pad),
        eng, d.fwd);
  }
  return d;
}
}  // namespace

namespace onednn {
std::string ConvDescs::References() const {
  std::string refs;
  for (const char* k : {fwd.impl_info_str(), bww.impl_info_str(), bwd ? bwd->impl_info_str() : ""}) {
    if (IsReference(k)) refs += std::string(refs.empty() ? "" : ", ") + k;
  }
  return refs;
}
// The activations in the layout oneDNN prefers (its channel-blocked nChw8c on AVX2: about
// 10% faster than NHWC over the deep ResNet's convolutions on a Zen 3, reorders
// included); where that leaves only a reference kernel (the 4-channel first layers'
// backward), NHWC, which has JIT kernels for every conv of the project's nets (NCHW gets
// its GEMM fallback, several times slower). OneDnnConv, its yardstick and the layer runs
// of net/onednn_stack.h all run these.
ConvDescs PreferredConvDescs(const ConvGeometry& g, int n, bool data_grad, const dnnl::primitive_attr& attr) {
  ConvDescs d = MakeDescs(g, n, tag::any, data_grad, attr);
  return d.References().empty() ? d : MakeDescs(g, n, tag::nhwc, data_grad, attr);
}
}  // namespace onednn

struct OneDnnConv::Impl {
  ConvGeometry g;
  dnnl::stream stream{Engine()};

  // Everything for one batch size n: primitives, oneDNN-side buffers, reorders, and
  // user-side memories whose data handles are set per call.
  struct Prims {
    dnnl::convolution_forward::primitive_desc fpd;
    dnnl::convolution_backward_weights::primitive_desc bwpd;
    dnnl::convolution_backward_data::primitive_desc bdpd;
    dnnl::convolution_forward fwd;
    dnnl::convolution_backward_weights bww;
    dnnl::convolution_backward_data bwd;
    memory u_src, u_dst, u_w, u_b, u_ddst, u_dsrc, u_dw;  // user layouts (NCHW, OIHW, x)
    memory src, dst, w_f, ddst, dw, db, w_d, dsrc;       // oneDNN's
    dnnl::reorder to_src, from_dst, to_w_f, to_ddst, from_dw, to_w_d, from_dsrc;
    std::vector<float> dw_plain, db_plain;
  };
  // By (batch size, OpenMP threads): oneDNN fixes a primitive's thread count when it
  // makes it, so a thread that asks for more threads needs primitives made for them.
  std::map<std::pair<int, int>, std::unique_ptr<Prims>> by_n;
  // Samples per call and thread: about 1 MB of input, so a chunk's NHWC copies stay in cache.
  int chunk = 1;
  // The calling thread's samples per call.
  int Chunk() const { return chunk * onednn::WantedThreads(); }

  explicit Impl(const ConvGeometry& geometry)
      : g(geometry), chunk(int(std::max<int64_t>(1, (int64_t(1) << 18) / (int64_t(g.c) * g.h * g.w)))) {}

  Prims& For(int n) {
    const std::pair<int, int> key{n, onednn::WantedThreads()};
    auto it = by_n.find(key);
    if (it != by_n.end()) return *it->second;
    auto& eng = Engine();
    auto P = std::make_unique<Prims>();
    const memory::dims src_dims{n, g.c, g.h, g.w}, w_dims{g.o, g.c, g.k, g.k}, b_dims{g.o},
        dst_dims{n, g.o, g.oh, g.ow};
    const memory::desc b_d(b_dims, dt::f32, tag::x);
    ConvDescs d = onednn::PreferredConvDescs(g, n);
    P->fpd = std::move(d.fwd);
    P->bwpd = std::move(d.bww);
    P->bdpd = std::move(*d.bwd);
    P->fwd = dnnl::convolution_forward(P->fpd);
    P->bww = dnnl::convolution_backward_weights(P->bwpd);
    P->bwd = dnnl::convolution_backward_data(P->bdpd);
    const memory::desc u_src_d(src_dims, dt::f32, tag::nchw), u_dst_d(dst_dims, dt::f32, tag::nchw),
        u_w_d(w_dims, dt::f32, tag::oihw);
    P->u_src = memory(u_src_d, eng, DNNL_MEMORY_NONE);
    P->u_dst = memory(u_dst_d, eng, DNNL_MEMORY_NONE);
    P->u_w = memory(u_w_d, eng, DNNL_MEMORY_NONE);
    P->u_b = memory(b_d, eng, DNNL_MEMORY_NONE);
    P->u_ddst = memory(u_dst_d, eng, DNNL_MEMORY_NONE);
    P->u_dsrc = memory(u_src_d, eng, DNNL_MEMORY_NONE);
    P->dw_plain.resize(size_t(g.o) * g.c * g.k * g.k);
    P->db_plain.resize(size_t(g.o));
    P->u_dw = memory(u_w_d, eng, P->dw_plain.data());
    P->src = memory(P->fpd.src_desc(), eng);
    P->dst = memory(P->fpd.dst_desc(), eng);
    P->w_f = memory(P->fpd.weights_desc(), eng);
    P->ddst = memory(P->bwpd.diff_dst_desc(), eng);
    P->dw = memory(P->bwpd.diff_weights_desc(), eng);
    P->db = memory(P->bwpd.diff_bias_desc(), eng, P->db_plain.data());
    P->w_d = memory(P->bdpd.weights_desc(), eng);
    P->dsrc = memory(P->bdpd.diff_src_desc(), eng);
    P->to_src = dnnl::reorder(P->u_src, P->src);
    P->from_dst = dnnl::reorder(P->dst, P->u_dst);
    P->to_w_f = dnnl::reorder(P->u_w, P->w_f);
    P->to_ddst = dnnl::reorder(P->u_ddst, P->ddst);
    P->from_dw = dnnl::reorder(P->dw, P->u_dw);
    P->to_w_d = dnnl::reorder(P->u_w, P->w_d);
    P->from_dsrc = dnnl::reorder(P->dsrc, P->u_dsrc);
    return *by_n.emplace(key, std::move(P)).first->second;
  }
};

OneDnnConv::OneDnnConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OneDnnConv::~OneDnnConv() = default;

base::StatusOr<std::unique_ptr<OneDnnConv>> OneDnnConv::Create(const ConvGeometry& g) {
  ApplyThreads();
  auto impl = std::make_unique<Impl>(g);
  try {
    // A batch of 16 (an actor's) tells whether oneDNN has real kernels for this shape.
    Impl::Prims& p = impl->For(std::min(16, impl->chunk));
    if (const std::string refs = ConvDescs{p.fpd, p.bwpd, p.bdpd}.References(); !refs.empty()) {
      return base::Unavailable("oneDNN has only its reference kernel (" + refs + ") for this convolution");
    }
  } catch (const dnnl::error& e) {
    return base::Unavailable(std::string("oneDNN: ") + e.what());
  }
  return std::unique_ptr<OneDnnConv>(new OneDnnConv(std::move(impl)));
}

void OneDnnConv::Forward(const float* w, const float* b, const float* in, int n, float* out) {
  ApplyThreads();
  Impl& m = *impl_;
  const int64_t in_size = int64_t(m.g.c) * m.g.h * m.g.w, out_size = int64_t(m.g.o) * m.g.oh * m.g.ow;
  const Impl::Prims* prev = nullptr;  // whose weight copy is current
  const int chunk = m.Chunk();
  for (int s0 = 0; s0 < n; s0 += chunk) {
    Impl::Prims& p = m.For(std::min(chunk, n - s0));
    p.u_src.set_data_handle(const_cast<float*>(in + s0 * in_size));
    p.u_w.set_data_handle(const_cast<float*>(w));
    p.u_b.set_data_handle(const_cast<float*>(b));
    p.u_dst.set_data_handle(out + s0 * out_size);
    p.to_src.execute(m.stream, p.u_src, p.src);
    if (&p != prev) p.to_w_f.execute(m.stream, p.u_w, p.w_f);  // once per batch size
    p.fwd.execute(m.stream, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.w_f}, {DNNL_ARG_BIAS, p.u_b}, {DNNL_ARG_DST, p.dst}});
    p.from_dst.execute(m.stream, p.dst, p.u_dst);
    prev = &p;
  }
  m.stream.wait();
}

void OneDnnConv::Backward(const float* w, const float* in, const float* dout, int n, float* din, float* dw,
                          float* db) {
  ApplyThreads();
  Impl& m = *impl_;
  const int64_t in_size = int64_t(m.g.c) * m.g.h * m.g.w, out_size = int64_t(m.g.o) * m.g.oh * m.g.ow;
  const Impl::Prims* prev = nullptr;  // whose weight copy is current
  const int chunk = m.Chunk();
  for (int s0 = 0; s0 < n; s0 += chunk) {
    Impl::Prims& p = m.For(std::min(chunk, n - s0));
    // The input is reordered again chunk by chunk: a chunk's NHWC copy stays in cache,
    // where one of the whole batch would not.
    p.u_src.set_data_handle(const_cast<float*>(in + s0 * in_size));
    p.to_src.execute(m.stream, p.u_src, p.src);
    p.u_ddst.set_data_handle(const_cast<float*>(dout + s0 * out_size));
    p.to_ddst.execute(m.stream, p.u_ddst, p.ddst);
    p.bww.execute(m.stream, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_DIFF_DST, p.ddst}, {DNNL_ARG_DIFF_WEIGHTS, p.dw},
                             {DNNL_ARG_DIFF_BIAS, p.db}});
    p.from_dw.execute(m.stream, p.dw, p.u_dw);
    if (din != nullptr) {
      p.u_w.set_data_handle(const_cast<float*>(w));
      p.u_dsrc.set_data_handle(din + s0 * in_size);
      if (&p != prev) p.to_w_d.execute(m.stream, p.u_w, p.w_d);
      p.bwd.execute(m.stream, {{DNNL_ARG_DIFF_DST, p.ddst}, {DNNL_ARG_WEIGHTS, p.w_d}, {DNNL_ARG_DIFF_SRC, p.dsrc}});
      p.from_dsrc.execute(m.stream, p.dsrc, p.u_dsrc);
    }
    m.stream.wait();
    for (size_t i = 0; i < p.dw_plain.size(); ++i) dw[i] += p.dw_plain[i];
    for (size_t i = 0; i < p.db_plain.size(); ++i) db[i] += p.db_plain[i];
    prev = &p;
  }
}

std::string OneDnnConv::Kernels(int n) {
  Impl::Prims& p = impl_->For(n);
  return std::string(p.fpd.impl_info_str()) + " / " + p.bwpd.impl_info_str() + " / " + p.bdpd.impl_info_str();
}

namespace {
// Milliseconds per call of run() (each call waited for), over at least `seconds`; the
// first call, which sets up, untimed.
template <class Run>
double MsPerCall(dnnl::stream& stream, Run&& run, double seconds) {
  using Clock = std::chrono::steady_clock;
  run();
  stream.wait();
  int calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    run();
    stream.wait();
    ++calls;
  } while ((elapsed = std::chrono::duration<double>(Clock::now() - start).count()) < seconds);
  return 1e3 * elapsed / calls;
}
// A memory of `desc` holding small values of both signs, all of them touched.
memory Filled(const memory::desc& desc) {
  memory m(desc, Engine());
  float* p = static_cast<float*>(m.get_data_handle());
  for (size_t i = 0; i < desc.get_size() / sizeof(float); ++i) p[i] = 0.01f * float(int(i % 17) - 8);
  return m;
}
}  // namespace

base::StatusOr<ConvAloneMs> TimeOneDnnConvAlone(const ConvGeometry& g, int n, double seconds) {
  ApplyThreads();
  try {
    auto& eng = Engine();
    dnnl::stream stream(eng);
    // OneDnnConv's layouts, on the whole batch.
    ConvDescs d = onednn::PreferredConvDescs(g, n);
    if (const std::string refs = d.References(); !refs.empty()) {
      return base::Unavailable("oneDNN has only its reference kernel (" + refs + ") for this convolution");
    }
    const auto& fpd = d.fwd;
    const auto& bwpd = d.bww;
    const auto& bdpd = *d.bwd;
    const memory::desc b_d(memory::dims{g.o}, dt::f32, tag::x);
    // Each primitive's memories in the descs it asked for (a layout one primitive prefers
    // and another does not would need a reorder, which a caller keeping that layout
    // across layers would pay once; it is not counted here).
    memory src = Filled(fpd.src_desc()), w = Filled(fpd.weights_desc()), b = Filled(b_d), dst = Filled(fpd.dst_desc());
    memory bw_src = Filled(bwpd.src_desc()), bw_ddst = Filled(bwpd.diff_dst_desc()),
           bw_dw = Filled(bwpd.diff_weights_desc()), bw_db = Filled(bwpd.diff_bias_desc());
    memory bd_ddst = Filled(bdpd.diff_dst_desc()), bd_w = Filled(bdpd.weights_desc()),
           bd_dsrc = Filled(bdpd.diff_src_desc());
    dnnl::convolution_forward fwd(fpd);
    dnnl::convolution_backward_weights bww(bwpd);
    dnnl::convolution_backward_data bwd(bdpd);
    auto time = [&](auto&& run) { return MsPerCall(stream, run, seconds); };
    ConvAloneMs out;
    out.forward = time([&] {
      fwd.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}});
    });
    out.backward_weights = time([&] {
      bww.execute(stream, {{DNNL_ARG_SRC, bw_src}, {DNNL_ARG_DIFF_DST, bw_ddst}, {DNNL_ARG_DIFF_WEIGHTS, bw_dw},
                           {DNNL_ARG_DIFF_BIAS, bw_db}});
    });
    out.backward_data = time([&] {
      bwd.execute(stream, {{DNNL_ARG_DIFF_DST, bd_ddst}, {DNNL_ARG_WEIGHTS, bd_w}, {DNNL_ARG_DIFF_SRC, bd_dsrc}});
    });
    return out;
  } catch (const dnnl::error& e) {
    return base::Unavailable(std::string("oneDNN: ") + e.what());
  }
}

base::StatusOr<PoolAloneMs> TimeOneDnnMaxPoolAlone(const ConvGeometry& g, int n, double seconds) {
  ApplyThreads();
  try {
    auto& eng = Engine();
    dnnl::stream stream(eng);
    const memory::dims strides{g.s, g.s}, kernel{g.k, g.k}, pad{g.p, g.p};
    // Pooling takes no "any": the activations channel-blocked as the convolutions
    // around it prefer them (nChw8c), NHWC where that gives a reference kernel.
    auto descs = [&](tag act) {
      const memory::desc src(memory::dims{n, g.c, g.h, g.w}, dt::f32, act),
          dst(memory::dims{n, g.c, g.oh, g.ow}, dt::f32, act);
      auto fpd = dnnl::pooling_forward::primitive_desc(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, src, dst,
                                      strides, kernel, pad, pad),
          eng);
      auto bpd = dnnl::pooling_backward::primitive_desc(
          dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, src, dst, strides, kernel, pad, pad), eng, fpd);
      return std::make_pair(fpd, bpd);
    };
    auto [fpd, bpd] = descs(tag::nChw8c);
    if (IsReference(fpd.impl_info_str()) || IsReference(bpd.impl_info_str())) std::tie(fpd, bpd) = descs(tag::nhwc);
    if (IsReference(fpd.impl_info_str()) || IsReference(bpd.impl_info_str())) {
      return base::Unavailable(std::string("oneDNN has only its reference kernel (") + fpd.impl_info_str() + ", " +
                               bpd.impl_info_str() + ") for this pooling");
    }
    memory src = Filled(fpd.src_desc()), dst = Filled(fpd.dst_desc()), ws = Filled(fpd.workspace_desc());
    memory ddst = Filled(bpd.diff_dst_desc()), dsrc = Filled(bpd.diff_src_desc());
    dnnl::pooling_forward fwd(fpd);
    dnnl::pooling_backward bwd(bpd);
    PoolAloneMs out;
    out.forward = MsPerCall(
        stream, [&] { fwd.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, ws}}); },
        seconds);
    out.backward = MsPerCall(
        stream,
        [&] { bwd.execute(stream, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WORKSPACE, ws}, {DNNL_ARG_DIFF_SRC, dsrc}}); },
        seconds);
    return out;
  } catch (const dnnl::error& e) {
    return base::Unavailable(std::string("oneDNN: ") + e.what());
  }
}

bool OneDnnBuilt() { return true; }

void UseOneDnnThreads() { ApplyThreads(); }
void SetOneDnnThreads(int n) { onednn::SetWanted(n); }
int OneDnnThreads() { return onednn::WantedThreads(); }

}  // namespace stampede::net

#else  // no oneDNN in this build

#include <stdexcept>

namespace stampede::net {

struct OneDnnConv::Impl {};
OneDnnConv::OneDnnConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OneDnnConv::~OneDnnConv() = default;
base::StatusOr<std::unique_ptr<OneDnnConv>> OneDnnConv::Create(const ConvGeometry&) {
  return base::Unavailable("this build has no oneDNN (libdnnl-dev was not found when it was configured)");
}
// Unreachable: Create never makes one without oneDNN.
void OneDnnConv::Forward(const float*, const float*, const float*, int, float*) {
  throw std::logic_error("OneDnnConv without oneDNN");
}
void OneDnnConv::Backward(const float*, const float*, const float*, int, float*, float*, float*) {
  throw std::logic_error("OneDnnConv without oneDNN");
}
std::string OneDnnConv::Kernels(int) { return {}; }
base::StatusOr<ConvAloneMs> TimeOneDnnConvAlone(const ConvGeometry&, int, double) {
  return base::Unavailable("this build has no oneDNN (libdnnl-dev was not found when it was configured)");
}
base::StatusOr<PoolAloneMs> TimeOneDnnMaxPoolAlone(const ConvGeometry&, int, double) {
  return base::Unavailable("this build has no oneDNN (libdnnl-dev was not found when it was configured)");
}
bool OneDnnBuilt() { return false; }

void UseOneDnnThreads() {}
void SetOneDnnThreads(int) {}
int OneDnnThreads() { return 1; }

}  // namespace stampede::net

#endif
