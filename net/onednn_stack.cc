#include "net/onednn_stack.h"

#include <string>

namespace stampede::net {

bool StackableOnOneDnn(LayerSpec::Kind kind) {
  switch (kind) {
    case LayerSpec::Kind::kConv:
    case LayerSpec::Kind::kMaxPool:
    case LayerSpec::Kind::kResidual:
    case LayerSpec::Kind::kRelu:
      return true;
    case LayerSpec::Kind::kDense:
    case LayerSpec::Kind::kTanh:
      return false;
  }
  return false;
}

size_t StackableRunEnd(const Torso& torso, const std::vector<LayerIo>& io, size_t begin) {
  size_t end = begin;
  while (end < torso.layers.size() && end < io.size() && StackableOnOneDnn(torso.layers[end].kind) &&
         io[end].in_image && io[end].out_image) {
    ++end;
  }
  return end;
}

}  // namespace stampede::net

#ifdef STAMPEDE_HAVE_ONEDNN

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <deque>
#include <optional>
#include <stdexcept>
#include <utility>

#include "net/onednn_internal.h"

namespace stampede::net {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using onednn::Engine;
using onednn::IsReference;
using Clock = std::chrono::steady_clock;

// A layer of the run as built from its spec: what a plan for a batch size needs.
struct ConvSpec {
  ConvGeometry g;
  int64_t w = 0, b = 0;  // parameter offsets (set when registered)
};
struct Stage {
  enum class Kind { kConv, kRelu, kPool, kResidual } kind = Kind::kConv;
  ConvSpec conv, conv1;  // kConv: conv; kResidual: conv (conv0) and conv1
  ImageShape out;
  int k = 0, s = 1, p = 0;  // kPool's window
};

memory::dims Dims(int n, ImageShape s) { return {n, s.c, s.h, s.w}; }

// The float count of a memory (padding included, for blocked layouts).
size_t Floats(const memory& m) { return m.get_desc().get_size() / sizeof(float); }
float* Data(const memory& m) { return static_cast<float*>(m.get_data_handle()); }

class Stack : public Layer<float> {
 public:
  Stack(std::vector<Stage> stages, ImageShape in, ImageShape out, bool first)
      : stages_(std::move(stages)), in_(in), out_(out), first_(first) {
    Split();
  }

  int in_size() const override { return in_.size(); }
  int out_size() const override { return out_.size(); }
  double flops() const override {
    double f = 0;
    auto conv = [](const ConvSpec& c) { return 2.0 * c.g.c * c.g.k * c.g.k * c.g.o * c.g.oh * c.g.ow; };
    for (const Stage& st : stages_) {
      if (st.kind == Stage::Kind::kConv) f += conv(st.conv);
      if (st.kind == Stage::Kind::kResidual) f += conv(st.conv) + conv(st.conv1);
    }
    return f;
  }
  std::vector<Stage>& stages() { return stages_; }
  // From now on, each op's milliseconds are added to its layer's in `times` (null: none).
  void SetTimes(OneDnnRunTimes* times) {
    times_ = times;
    if (times_) times_->forward.assign(stages_.size(), 0.0), times_->backward.assign(stages_.size(), 0.0);
  }

  // Builds the plan for a full chunk (an error where a kernel is oneDNN's reference one).
  base::Status Probe() {
    try {
      for (int k = 0; k < int(segs_.size()); ++k) {
        Plan& plan = For(k, ChunkSamples(k));
        if (!plan.references.empty()) {
          return base::Unavailable("oneDNN has only its reference kernel (" + plan.references + ") for a layer");
        }
      }
    } catch (const dnnl::error& e) {
      return base::Unavailable(std::string("oneDNN: ") + e.what());
    }
    return base::OkStatus();
  }

  // The batch runs in chunks of samples, each through every layer of a segment of the
  // run while its activations are in cache (a chunk's largest activation about 1 MB); the
  // layers after the activations shrink form another segment with larger chunks (fewer,
  // larger calls), met through the whole batch's activation between them. Each chunk's
  // activations are kept for Backward, which runs the segments and chunks again in
  // reverse; the weights' gradients add up over the chunks.
  void Forward(const float* p, const float* in, int n, float* out) override {
    onednn::ApplyThreads();
    const int last = int(segs_.size()) - 1;
    for (int k = 0; k <= last; ++k) {
      ForEachChunk(k, n, [&](Plan& plan, int j, int s0, bool first_chunk) {
        const float* x = k == 0 ? in + int64_t(s0) * in_.size() : bounds_[size_t(k - 1)].Val(s0);
        float* y = k == last ? out + int64_t(s0) * out_.size() : bounds_[size_t(k)].Val(s0);
        Bind(plan, j, x, y, nullptr, nullptr);
        for (Op& op : plan.ops) {
          const auto t0 = times_ ? Clock::now() : Clock::time_point{};
          RunForward(plan, op, p, first_chunk);
          if (times_) {
            stream_.wait();
            times_->forward[size_t(op.stage)] += 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
          }
        }
        stream_.wait();
      });
    }
    last_n_ = n, last_in_ = in;
  }

  void Backward(const float* p, const float* in, const float*, const float* dout, int n, float* din,
                float* grad) override {
    if (din != nullptr && first_) {
      throw std::logic_error("a oneDNN layer run at the torso's start computes no input gradient");
    }
    if (last_n_ != n || last_in_ != in) {
      scratch_out_.resize(size_t(n) * out_.size());
      Forward(p, in, n, scratch_out_.data());
    }
    onednn::ApplyThreads();
    const int last = int(segs_.size()) - 1;
    for (int k = last; k >= 0; --k) {
      // A later segment always gives its input's gradient (the earlier segment's).
      const bool want_din = k > 0 || din != nullptr;
      ForEachChunk(k, n, [&](Plan& plan, int j, int s0, bool first_chunk) {
        const float* x = k == 0 ? in + int64_t(s0) * in_.size() : bounds_[size_t(k - 1)].Val(s0);
        float* dx = k == 0 ? (din ? din + int64_t(s0) * in_.size() : nullptr) : bounds_[size_t(k - 1)].Diff(s0);
        const float* dy = k == last ? dout + int64_t(s0) * out_.size() : bounds_[size_t(k)].Diff(s0);
        Bind(plan, j, x, nullptr, dx, dy);
        for (Tensor& t : plan.tensors) t.diff_set = false;
        plan.tensors.back().diff_set = true;
        for (size_t i = plan.ops.size(); i-- > 0;) {
          const auto t0 = times_ ? Clock::now() : Clock::time_point{};
          RunBackward(plan, plan.ops[i], p, grad, want_din, first_chunk);
          if (times_) {
            stream_.wait();
            times_->backward[size_t(plan.ops[i].stage)] +=
                1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
          }
        }
        stream_.wait();
      });
    }
  }

  // Each layer's samples a chunk (bench).
  std::vector<int> LayerChunks() const {
    std::vector<int> c(stages_.size());
    for (int k = 0; k < int(segs_.size()); ++k) {
      for (int i = segs_[size_t(k)].begin; i < segs_[size_t(k)].end; ++i) c[size_t(i)] = ChunkSamples(k);
    }
    return c;
  }

 private:
  // Bytes held 64-byte aligned (oneDNN's kernels load whole cache lines).
  struct Store {
    std::unique_ptr<std::byte, decltype(&std::free)> p{nullptr, &std::free};
    size_t stride = 0;    // bytes a chunk, rounded up to 64
    size_t capacity = 0;  // bytes held
    // Room for `count` chunks of `bytes`; what it held is kept only where the chunk's
    // size is the same (Backward's calls, after their Forward's).
    void Hold(size_t bytes, int count) {
      const size_t want = (bytes + 63) / 64 * 64, total = want * size_t(count);
      if (total > capacity) {
        p.reset(static_cast<std::byte*>(std::aligned_alloc(64, std::max<size_t>(64, total))));
        if (!p) throw std::bad_alloc();
        capacity = total;
      }
      stride = want;
    }
    void* At(int j) const { return p.get() + stride * size_t(j); }
  };
  // Stages [begin, end) of the run, in chunks of the same size; `largest`: the floats a
  // sample of its largest activation (its input's included).
  struct Segment {
    int begin = 0, end = 0;
    int64_t largest = 1;
  };
  // The whole batch's activation between segment k and k + 1, and its gradient, in the
  // layout the first plan of segment k gave it (the sample outermost, so a chunk of it is
  // the samples' floats from its first sample's on).
  struct Boundary {
    std::optional<memory::desc> layout;  // for one sample
    size_t sample = 0;                   // floats a sample
    Store vals, diffs;
    float* Val(int s0) const { return static_cast<float*>(vals.At(0)) + size_t(s0) * sample; }
    float* Diff(int s0) const { return static_cast<float*>(diffs.At(0)) + size_t(s0) * sample; }
  };
  struct Tensor {
    memory::desc d;
    memory val, diff;  // handles set per chunk: the user's at both ends, else the stores'
    Store vals;        // a value per chunk (Backward reads them)
    Store diffs;       // one chunk's gradient (used within a chunk)
    bool user = false;
    bool diff_set = false;
    bool from_input = false;  // the run's input, or a copy of it (no gradient without din)
  };
  enum class OpKind { kReorder, kConv, kRelu, kPool, kAdd };
  struct Op {
    OpKind kind = OpKind::kReorder;
    int stage = 0;  // the layer it is part of (a reorder: the layer that needed it)
    int in = -1, in2 = -1, out = -1;
    dnnl::reorder fwd_reorder, bwd_reorder;
    // kConv (in2: the tensor a fused sum adds, or -1)
    const ConvSpec* conv = nullptr;
    bool relu = false;  // a ReLU fused (eb: its gradient from the output, in place)
    dnnl::convolution_forward cf;
    dnnl::convolution_backward_weights cbw;
    std::optional<dnnl::convolution_backward_data> cbd;
    memory u_w, u_b, w_f, w_d, dw, db, u_dw;
    dnnl::reorder to_w_f, to_w_d, from_dw;
    std::vector<float> dw_plain, db_plain;
    // kRelu
    dnnl::eltwise_forward ef;
    dnnl::eltwise_backward eb;
    // kPool
    dnnl::pooling_forward pf;
    dnnl::pooling_backward pb;
    memory ws;
    Store ws_store;  // the pooling's winners, per chunk
    // A gradient for an input whose gradient another op has set already, added after.
    std::optional<memory> partial;
  };
  struct Plan {
    int seg = 0;             // the segment it runs
    int n = 0, threads = 1;  // samples a chunk; OpenMP threads its primitives were made for
    std::deque<Tensor> tensors;  // [0]: the run's input; back(): its output
    std::vector<Op> ops;
    std::string references;      // the reference kernels among the ops' ("" if none)
  };

  // ---- building a plan ---------------------------------------------------------------

  void Push(Plan& plan, Op op) {
    op.stage = building_stage_;
    plan.ops.push_back(std::move(op));
  }

  int NewTensor(Plan& plan, const memory::desc& d, bool user = false) {
    auto& eng = Engine();
    Tensor t;
    t.d = d;
    t.user = user;
    t.val = memory(d, eng, DNNL_MEMORY_NONE);
    t.diff = memory(d, eng, DNNL_MEMORY_NONE);
    plan.tensors.push_back(std::move(t));
    return int(plan.tensors.size()) - 1;
  }
  void NoteKernel(Plan& plan, const char* impl) {
    if (IsReference(impl)) plan.references += std::string(plan.references.empty() ? "" : ", ") + impl;
  }
  // Tensor x in layout d (itself where it is in d already).
  int InLayout(Plan& plan, int x, const memory::desc& d) {
    return plan.tensors[size_t(x)].d == d ? x : Reorder(plan, x, d, /*user=*/false);
  }
  // A new tensor (the caller's where `user`) that a reorder op fills from x.
  int Reorder(Plan& plan, int x, const memory::desc& d, bool user) {
    const int y = NewTensor(plan, d, user);
    plan.tensors[size_t(y)].from_input = plan.tensors[size_t(x)].from_input;
    Op op;
    op.kind = OpKind::kReorder;
    op.in = x, op.out = y;
    op.fwd_reorder = dnnl::reorder(plan.tensors[size_t(x)].val, plan.tensors[size_t(y)].val);
    op.bwd_reorder = dnnl::reorder(plan.tensors[size_t(y)].diff, plan.tensors[size_t(x)].diff);
    Push(plan, std::move(op));
    return y;
  }

  // Conv c on tensor x; fused into it where oneDNN's kernel takes it as a post-op: a ReLU
  // of its output (`relu`), or the sum with tensor `skip` (a residual block's). -1 where
  // a fusion was asked for and this kernel has none (the caller then adds the op apart).
  int AddConv(Plan& plan, int x, const ConvSpec& c, bool relu = false, int skip = -1) {
    auto& eng = Engine();
    const ConvGeometry& g = c.g;
    const bool fused = relu || skip >= 0;
    dnnl::primitive_attr attr;
    if (fused) {
      dnnl::post_ops po;
      if (skip >= 0) po.append_binary(dnnl::algorithm::binary_add, plan.tensors[size_t(skip)].d);
      if (relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    const bool data_grad = !(first_ && plan.tensors[size_t(x)].from_input);
    std::optional<onednn::ConvDescs> made;
    try {
      made.emplace(onednn::PreferredConvDescs(g, plan.n, data_grad, attr));
    } catch (const dnnl::error&) {
      if (fused) return -1;
      throw;
    }
    onednn::ConvDescs& d = *made;
    const std::string refs = d.References();
    if (fused) {
      // Fused only on the kernel the convolution alone gets (a post-op oneDNN's direct
      // kernel lacks sends it to a slower one), and a fused sum's gradient is the output's,
      // copied as it is: the same layout.
      const std::string alone = onednn::PreferredConvDescs(g, plan.n, data_grad).fwd.impl_info_str();
      if (!refs.empty() || alone != d.fwd.impl_info_str() ||
          (skip >= 0 && d.fwd.dst_desc() != plan.tensors[size_t(skip)].d)) {
        return -1;
      }
    }
    if (!refs.empty()) plan.references += std::string(plan.references.empty() ? "" : ", ") + refs;
    const auto& fpd = d.fwd;
    const auto& bwpd = d.bww;
    const auto& bdpd = d.bwd;
    const int src = InLayout(plan, x, fpd.src_desc());
    const int y = NewTensor(plan, fpd.dst_desc());
    Op op;
    op.kind = OpKind::kConv;
    op.in = src, op.out = y, op.conv = &c;
    op.relu = relu, op.in2 = skip;
    if (relu) {
      // The ReLU's gradient from its output (what the fused forward keeps), in place.
      const memory::desc dd = fpd.dst_desc();
      auto hint = dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu_use_dst_for_bwd,
                                      dd, 0.f),
          eng);
      auto bpd = dnnl::eltwise_backward::primitive_desc(
          dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu_use_dst_for_bwd, dd, dd, 0.f), eng, hint);
      NoteKernel(plan, bpd.impl_info_str());
      op.eb = dnnl::eltwise_backward(bpd);
    }
    op.cf = dnnl::convolution_forward(fpd);
    op.cbw = dnnl::convolution_backward_weights(bwpd);
    if (bdpd) op.cbd = dnnl::convolution_backward_data(*bdpd);
    const memory::desc u_w_d(memory::dims{g.o, g.c, g.k, g.k}, dt::f32, tag::oihw);
    op.u_w = memory(u_w_d, eng, DNNL_MEMORY_NONE);
    op.u_b = memory(memory::desc(memory::dims{g.o}, dt::f32, tag::x), eng, DNNL_MEMORY_NONE);
    op.w_f = memory(fpd.weights_desc(), eng);
    op.to_w_f = dnnl::reorder(op.u_w, op.w_f);
    if (bdpd) {
      op.w_d = memory(bdpd->weights_desc(), eng);
      op.to_w_d = dnnl::reorder(op.u_w, op.w_d);
    }
    op.dw_plain.resize(size_t(g.o) * g.c * g.k * g.k);
    op.db_plain.resize(size_t(g.o));
    op.dw = memory(bwpd.diff_weights_desc(), eng);
    op.u_dw = memory(u_w_d, eng, op.dw_plain.data());
    op.from_dw = dnnl::reorder(op.dw, op.u_dw);
    op.db = memory(bwpd.diff_bias_desc(), eng, op.db_plain.data());
    Push(plan, std::move(op));
    return y;
  }

  int AddRelu(Plan& plan, int x) {
    auto& eng = Engine();
    const memory::desc d = plan.tensors[size_t(x)].d;
    auto fpd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, d, 0.f), eng);
    auto bpd = dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu, d, d, 0.f), eng, fpd);
    NoteKernel(plan, fpd.impl_info_str());
    NoteKernel(plan, bpd.impl_info_str());
    const int y = NewTensor(plan, fpd.dst_desc());
    Op op;
    op.kind = OpKind::kRelu;
    op.in = x, op.out = y;
    op.ef = dnnl::eltwise_forward(fpd);
    op.eb = dnnl::eltwise_backward(bpd);
    Push(plan, std::move(op));
    return y;
  }

  int AddPool(Plan& plan, int x, const Stage& st) {
    auto& eng = Engine();
    const memory::desc d = plan.tensors[size_t(x)].d;
    const memory::dims strides{st.s, st.s}, kernel{st.k, st.k}, pad{st.p, st.p};
    // "any": the output in the input's layout.
    const memory::desc dst(Dims(plan.n, st.out), dt::f32, tag::any);
    auto fpd = dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, d, dst, strides,
                                    kernel, pad, pad),
        eng);
    auto bpd = dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, d, fpd.dst_desc(), strides, kernel, pad, pad), eng,
        fpd);
    NoteKernel(plan, fpd.impl_info_str());
    NoteKernel(plan, bpd.impl_info_str());
    const int y = NewTensor(plan, fpd.dst_desc());
    Op op;
    op.kind = OpKind::kPool;
    op.in = x, op.out = y;
    op.pf = dnnl::pooling_forward(fpd);
    op.pb = dnnl::pooling_backward(bpd);
    op.ws = memory(fpd.workspace_desc(), eng, DNNL_MEMORY_NONE);
    Push(plan, std::move(op));
    return y;
  }

  // out = x + h, in x's layout.
  int AddSum(Plan& plan, int x, int h) {
    h = InLayout(plan, h, plan.tensors[size_t(x)].d);
    const int y = NewTensor(plan, plan.tensors[size_t(x)].d);
    Op op;
    op.kind = OpKind::kAdd;
    op.in = x, op.in2 = h, op.out = y;
    Push(plan, std::move(op));
    return y;
  }

  // Segment k's plan for chunks of n samples.
  Plan& For(int k, int n, const Plan* keep = nullptr) {
    const int threads = onednn::WantedThreads();
    for (auto& p : plans_) {
      if (p->seg == k && p->n == n && p->threads == threads) return *p;
    }
    const Segment& seg = segs_[size_t(k)];
    const bool last_seg = k + 1 == int(segs_.size());
    auto plan = std::make_unique<Plan>();
    plan->seg = k, plan->n = n, plan->threads = threads;
    // The run's input as the caller holds it (NCHW), or the previous segment's output.
    int x = NewTensor(*plan, k == 0 ? memory::desc(Dims(n, in_), dt::f32, tag::nchw) : BoundaryDesc(k - 1, n),
                      /*user=*/true);
    plan->tensors[size_t(x)].from_input = k == 0;
    for (building_stage_ = seg.begin; building_stage_ < seg.end; ++building_stage_) {
      const Stage& st = stages_[size_t(building_stage_)];
      switch (st.kind) {
        case Stage::Kind::kConv:
          x = AddConv(*plan, x, st.conv);
          break;
        case Stage::Kind::kRelu:
          x = AddRelu(*plan, x);
          break;
        case Stage::Kind::kPool:
          x = AddPool(*plan, x, st);
          break;
        case Stage::Kind::kResidual: {
          // x + conv1(relu(conv0(relu(x)))): the inner ReLU and the sum in the
          // convolutions where the kernels take them. x first in the layout the
          // convolutions work in (once, where the block's input comes in another; the
          // next block's input is then in it).
          {
            const onednn::ConvDescs d = onednn::PreferredConvDescs(st.conv.g, plan->n);
            if (d.References().empty() && d.fwd.src_desc() == d.fwd.dst_desc()) {
              x = InLayout(*plan, x, d.fwd.src_desc());
            }
          }
          const int a0 = AddRelu(*plan, x);
          int a1 = AddConv(*plan, a0, st.conv, /*relu=*/true);
          if (a1 < 0) a1 = AddRelu(*plan, AddConv(*plan, a0, st.conv));
          const int y = AddConv(*plan, a1, st.conv1, /*relu=*/false, /*skip=*/x);
          x = y >= 0 ? y : AddSum(*plan, x, AddConv(*plan, a1, st.conv1));
          break;
        }
      }
    }
    building_stage_ = seg.end - 1;
    // The segment's output: the run's as the caller holds it (NCHW), or the boundary's
    // layout (the first plan of the segment fixes it). The last op writes it, or a reorder
    // to it.
    if (!last_seg && !bounds_[size_t(k)].layout) SetBoundary(k, plan->tensors[size_t(x)].d, n);
    const memory::desc out_d = last_seg ? memory::desc(Dims(n, out_), dt::f32, tag::nchw) : BoundaryDesc(k, n);
    Tensor& last = plan->tensors[size_t(x)];
    if (last.d == out_d && x != 0) {
      last.user = true;
    } else {
      Reorder(*plan, x, out_d, /*user=*/true);
    }
    // An actor's chunk sizes and a learner's are all a process sees; a few kept a segment
    // (not `keep`, which the caller holds).
    if (plans_.size() >= 6 * segs_.size()) {
      auto victim = plans_.begin();
      if (victim->get() == keep) ++victim;
      plans_.erase(victim);
      last_n_ = -1;  // its chunks' activations may be gone
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  // ---- segments ---------------------------------------------------------------------

  // A stage's chunk: its largest activation (input or output) about 1 MB (2^18 floats).
  static int64_t ChunkFor(int64_t floats) { return std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, floats)); }
  // The run's stages in segments: a convolution or residual block whose chunk would be 4
  // or more times its segment's starts a new one (ReLUs and pooling stay with what they
  // follow, whose output they read while it is in cache).
  void Split() {
    int64_t prev = in_.size();
    for (int i = 0; i < int(stages_.size()); ++i) {
      const Stage& st = stages_[size_t(i)];
      const int64_t largest = std::max<int64_t>(prev, st.out.size());
      const bool opens = st.kind == Stage::Kind::kConv || st.kind == Stage::Kind::kResidual;
      if (segs_.empty() || (opens && ChunkFor(largest) >= 4 * ChunkFor(segs_.back().largest))) {
        segs_.push_back(Segment{i, i, largest});
      }
      segs_.back().end = i + 1;
      segs_.back().largest = std::max(segs_.back().largest, largest);
      prev = st.out.size();
    }
    bounds_.resize(segs_.size() - 1);
  }
  // Boundary k's layout for n samples: the sample outermost, so only the batch differs.
  memory::desc BoundaryDesc(int k, int n) const {
    dnnl_memory_desc_t c = bounds_[size_t(k)].layout->data;
    c.dims[0] = n, c.padded_dims[0] = n;
    return memory::desc(c);
  }
  // Fixes boundary k's layout from a plan of n samples' output `d`: d itself where the
  // sample is outermost (oneDNN's channel-blocked layouts), else NCHW.
  void SetBoundary(int k, const memory::desc& d, int n) {
    Boundary& b = bounds_[size_t(k)];
    const dnnl_memory_desc_t& c = d.data;
    bool outer = c.format_kind == dnnl_blocked && c.padded_offsets[0] == 0 && c.offset0 == 0;
    if (outer) {
      const auto& blk = c.format_desc.blocking;
      for (int i = 0; i < blk.inner_nblks; ++i) outer = outer && blk.inner_idxs[i] != 0;
      outer = outer && size_t(blk.strides[0]) * size_t(n) * sizeof(float) == d.get_size();
    }
    const ImageShape s = stages_[size_t(segs_[size_t(k)].end - 1)].out;
    b.layout = outer ? d : memory::desc(Dims(n, s), dt::f32, tag::nchw);
    b.layout = BoundaryDesc(k, 1);
    b.sample = b.layout->get_size() / sizeof(float);
  }

  // ---- running ----------------------------------------------------------------------

  // Segment k's samples a chunk, times the OpenMP threads.
  int ChunkSamples(int k) const { return int(ChunkFor(segs_[size_t(k)].largest)) * onednn::WantedThreads(); }
  // f(plan, chunk index in that plan, first sample, first chunk of that plan in this call)
  // for each chunk of n samples in segment k: the full chunks on one plan, the rest on
  // another.
  template <class F>
  void ForEachChunk(int k, int n, F&& f) {
    const int m = std::min(n, ChunkSamples(k)), full = n / m, rest = n % m;
    Plan& a = For(k, m);
    Plan* b = rest > 0 ? &For(k, rest, &a) : nullptr;
    Hold(a, full);
    if (b) Hold(*b, 1);
    if (k + 1 < int(segs_.size())) {
      Boundary& bd = bounds_[size_t(k)];
      bd.vals.Hold(bd.sample * sizeof(float) * size_t(n), 1);
      bd.diffs.Hold(bd.sample * sizeof(float) * size_t(n), 1);
    }
    for (int j = 0; j < full; ++j) f(a, j, j * m, j == 0);
    if (b) f(*b, 0, full * m, true);
  }
  void Hold(Plan& plan, int chunks) {
    for (Tensor& t : plan.tensors) {
      if (t.user) continue;
      t.vals.Hold(t.d.get_size(), chunks);
      t.diffs.Hold(t.d.get_size(), 1);
    }
    for (Op& op : plan.ops) {
      if (op.kind == OpKind::kPool) op.ws_store.Hold(op.ws.get_desc().get_size(), chunks);
    }
  }
  // Every memory's handle for chunk j: the caller's buffers at both ends (null: not used
  // in this pass), the stores' elsewhere.
  void Bind(Plan& plan, int j, const float* in, float* out, float* din, const float* dout) {
    for (Tensor& t : plan.tensors) {
      if (t.user) continue;
      t.val.set_data_handle(t.vals.At(j));
      t.diff.set_data_handle(t.diffs.At(0));
    }
    Tensor &first = plan.tensors.front(), &last = plan.tensors.back();
    first.val.set_data_handle(const_cast<float*>(in));
    if (din) first.diff.set_data_handle(din);
    if (out) last.val.set_data_handle(out);
    if (dout) last.diff.set_data_handle(const_cast<float*>(dout));
    for (Op& op : plan.ops) {
      if (op.kind == OpKind::kPool) op.ws.set_data_handle(op.ws_store.At(j));
    }
  }

  void RunForward(Plan& plan, Op& op, const float* p, bool first_chunk) {
    auto& T = plan.tensors;
    switch (op.kind) {
      case OpKind::kReorder:
        op.fwd_reorder.execute(stream_, T[size_t(op.in)].val, T[size_t(op.out)].val);
        break;
      case OpKind::kConv:
        if (first_chunk) {  // the weights in the kernel's layout, once a call
          op.u_w.set_data_handle(const_cast<float*>(p + op.conv->w));
          op.u_b.set_data_handle(const_cast<float*>(p + op.conv->b));
          op.to_w_f.execute(stream_, op.u_w, op.w_f);
        }
        if (op.in2 >= 0) {
          op.cf.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val},
                                  {DNNL_ARG_WEIGHTS, op.w_f},
                                  {DNNL_ARG_BIAS, op.u_b},
                                  {DNNL_ARG_DST, T[size_t(op.out)].val},
                                  {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, T[size_t(op.in2)].val}});
        } else {
          op.cf.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val},
                                  {DNNL_ARG_WEIGHTS, op.w_f},
                                  {DNNL_ARG_BIAS, op.u_b},
                                  {DNNL_ARG_DST, T[size_t(op.out)].val}});
        }
        break;
      case OpKind::kRelu:
        op.ef.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val}, {DNNL_ARG_DST, T[size_t(op.out)].val}});
        break;
      case OpKind::kPool:
        op.pf.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val},
                                {DNNL_ARG_DST, T[size_t(op.out)].val},
                                {DNNL_ARG_WORKSPACE, op.ws}});
        break;
      case OpKind::kAdd: {
        stream_.wait();
        const float* a = Data(T[size_t(op.in)].val);
        const float* b = Data(T[size_t(op.in2)].val);
        float* y = Data(T[size_t(op.out)].val);
        const size_t m = Floats(T[size_t(op.out)].val);
        for (size_t i = 0; i < m; ++i) y[i] = a[i] + b[i];
        break;
      }
    }
  }

  // The memory an op writes input t's gradient to: t's own where nothing has set it yet,
  // else the op's partial (added to t's after the op ran).
  memory& GradTarget(Plan& plan, Op& op, int t) {
    Tensor& x = plan.tensors[size_t(t)];
    if (!x.diff_set) return x.diff;
    if (!op.partial) op.partial = memory(x.d, Engine());
    return *op.partial;
  }
  void GradDone(Plan& plan, Op& op, int t) {
    Tensor& x = plan.tensors[size_t(t)];
    if (!x.diff_set) {
      x.diff_set = true;
      return;
    }
    stream_.wait();
    float* d = Data(x.diff);
    const float* s = Data(*op.partial);
    const size_t m = Floats(x.diff);
    for (size_t i = 0; i < m; ++i) d[i] += s[i];
  }

  void RunBackward(Plan& plan, Op& op, const float* p, float* grad, bool want_din, bool first_chunk) {
    auto& T = plan.tensors;
    const bool need_in = want_din || !T[size_t(op.in)].from_input;
    switch (op.kind) {
      case OpKind::kReorder:
        if (!need_in) return;
        op.bwd_reorder.execute(stream_, T[size_t(op.out)].diff, GradTarget(plan, op, op.in));
        GradDone(plan, op, op.in);
        break;
      case OpKind::kConv: {
        if (op.in2 >= 0 && (want_din || !T[size_t(op.in2)].from_input)) {
          // A fused sum: its other summand's gradient is the output's.
          stream_.wait();
          memory& target = GradTarget(plan, op, op.in2);
          std::memcpy(Data(target), Data(T[size_t(op.out)].diff), sizeof(float) * Floats(target));
          GradDone(plan, op, op.in2);
        }
        if (op.relu) {
          memory& dy = T[size_t(op.out)].diff;
          op.eb.execute(stream_, {{DNNL_ARG_DST, T[size_t(op.out)].val}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dy}});
        }
        op.cbw.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val},
                                 {DNNL_ARG_DIFF_DST, T[size_t(op.out)].diff},
                                 {DNNL_ARG_DIFF_WEIGHTS, op.dw},
                                 {DNNL_ARG_DIFF_BIAS, op.db}});
        op.from_dw.execute(stream_, op.dw, op.u_dw);
        if (need_in) {
          if (!op.cbd) throw std::logic_error("a oneDNN layer run's convolution has no data gradient");
          if (first_chunk) {
            op.u_w.set_data_handle(const_cast<float*>(p + op.conv->w));
            op.to_w_d.execute(stream_, op.u_w, op.w_d);
          }
          op.cbd->execute(stream_, {{DNNL_ARG_DIFF_DST, T[size_t(op.out)].diff},
                                    {DNNL_ARG_WEIGHTS, op.w_d},
                                    {DNNL_ARG_DIFF_SRC, GradTarget(plan, op, op.in)}});
          GradDone(plan, op, op.in);
        }
        stream_.wait();
        float* gw = grad + op.conv->w;
        for (size_t i = 0; i < op.dw_plain.size(); ++i) gw[i] += op.dw_plain[i];
        float* gb = grad + op.conv->b;
        for (size_t i = 0; i < op.db_plain.size(); ++i) gb[i] += op.db_plain[i];
        break;
      }
      case OpKind::kRelu:
        if (!need_in) return;
        op.eb.execute(stream_, {{DNNL_ARG_SRC, T[size_t(op.in)].val},
                                {DNNL_ARG_DIFF_DST, T[size_t(op.out)].diff},
                                {DNNL_ARG_DIFF_SRC, GradTarget(plan, op, op.in)}});
        GradDone(plan, op, op.in);
        break;
      case OpKind::kPool:
        if (!need_in) return;
        op.pb.execute(stream_, {{DNNL_ARG_DIFF_DST, T[size_t(op.out)].diff},
                                {DNNL_ARG_WORKSPACE, op.ws},
                                {DNNL_ARG_DIFF_SRC, GradTarget(plan, op, op.in)}});
        GradDone(plan, op, op.in);
        break;
      case OpKind::kAdd: {
        // Both summands get the output's gradient: the second shares its buffer (nothing
        // else writes it), the first gets a copy (its other consumer adds to it later).
        Tensor& h = T[size_t(op.in2)];
        h.diff.set_data_handle(T[size_t(op.out)].diff.get_data_handle());
        h.diff_set = true;
        if (!need_in) return;
        stream_.wait();
        memory& target = GradTarget(plan, op, op.in);
        std::memcpy(Data(target), Data(T[size_t(op.out)].diff), sizeof(float) * Floats(target));
        GradDone(plan, op, op.in);
        break;
      }
    }
  }

  std::vector<Stage> stages_;
  ImageShape in_, out_;
  bool first_;
  dnnl::stream stream_{Engine()};
  std::vector<Segment> segs_;
  std::vector<Boundary> bounds_;  // bounds_[k]: between segments k and k + 1
  std::deque<std::unique_ptr<Plan>> plans_;
  int last_n_ = -1;                  // the last Forward's batch
  const float* last_in_ = nullptr;   // and its input
  std::vector<float> scratch_out_;
  int building_stage_ = 0;
  OneDnnRunTimes* times_ = nullptr;
};

}  // namespace

namespace {
base::StatusOr<std::unique_ptr<Stack>> MakeStack(const Torso& torso, const std::vector<LayerIo>& io, size_t begin,
                                                 size_t end, ParamLayout* layout) {
  if (begin >= end || end > torso.layers.size() || io.size() < end) {
    return base::InvalidArgument("a oneDNN layer run needs layers [begin, end) of the torso");
  }
  std::vector<Stage> stages;
  for (size_t i = begin; i < end; ++i) {
    const LayerSpec& l = torso.layers[i];
    const LayerIo& x = io[i];
    if (!StackableOnOneDnn(l.kind) || !x.in_image || !x.out_image) {
      return base::InvalidArgument(std::string("a oneDNN layer run cannot hold ") + KindName(l.kind) + " (" + l.where +
                                   ")");
    }
    Stage st;
    st.out = x.out;
    switch (l.kind) {
      case LayerSpec::Kind::kConv:
        st.kind = Stage::Kind::kConv;
        st.conv.g = ConvGeometry{x.in.c, x.in.h, x.in.w, x.out.c, x.out.h, x.out.w, l.kernel, l.stride, l.pad};
        break;
      case LayerSpec::Kind::kRelu:
        st.kind = Stage::Kind::kRelu;
        break;
      case LayerSpec::Kind::kMaxPool:
        st.kind = Stage::Kind::kPool;
        st.k = l.kernel, st.s = l.stride, st.p = l.pad;
        break;
      case LayerSpec::Kind::kResidual:
        st.kind = Stage::Kind::kResidual;
        st.conv.g = ConvGeometry{x.in.c, x.in.h, x.in.w, x.in.c, x.in.h, x.in.w, 3, 1, 1};
        st.conv1 = st.conv;
        break;
      default:
        break;
    }
    stages.push_back(st);
  }
  onednn::ApplyThreads();
  auto stack = std::make_unique<Stack>(std::move(stages), io[begin].in, io[end - 1].out, begin == 0);
  // The plan for a full chunk, which every batch of that many samples or more runs on,
  // tells whether every layer has a real kernel here.
  RETURN_IF_ERROR(stack->Probe());
  // The parameters, as MakeConv and MakeResidual register them.
  size_t i = begin;
  for (Stage& st : stack->stages()) {
    const std::string& name = torso.layers[i++].name;
    auto add = [&](ConvSpec& c, const std::string& prefix) {
      c.w = layout->Add(prefix + "/w", {c.g.o, c.g.c, c.g.k, c.g.k});
      c.b = layout->Add(prefix + "/b", {c.g.o});
    };
    if (st.kind == Stage::Kind::kConv) add(st.conv, name);
    if (st.kind == Stage::Kind::kResidual) {
      add(st.conv, name + "/conv0");
      add(st.conv1, name + "/conv1");
    }
  }
  return stack;
}
}  // namespace

base::StatusOr<std::unique_ptr<Layer<float>>> MakeOneDnnStack(const Torso& torso, const std::vector<LayerIo>& io,
                                                              size_t begin, size_t end, ParamLayout* layout) {
  ASSIGN_OR_RETURN(std::unique_ptr<Stack> stack, MakeStack(torso, io, begin, end, layout));
  return std::unique_ptr<Layer<float>>(std::move(stack));
}

base::StatusOr<OneDnnRunTimes> TimeOneDnnStack(const Torso& torso, const std::vector<LayerIo>& io, size_t end,
                                               const float* params, const float* in, const float* dout, int n,
                                               double seconds) {
  ParamLayout layout;
  ASSIGN_OR_RETURN(std::unique_ptr<Stack> stack, MakeStack(torso, io, 0, end, &layout));
  std::vector<float> out(size_t(n) * stack->out_size()), grad(size_t(layout.total_size()), 0.f);
  auto pass = [&] {
    stack->Forward(params, in, n, out.data());
    stack->Backward(params, in, out.data(), dout, n, nullptr, grad.data());
  };
  pass();  // untimed: the plan
  OneDnnRunTimes times;
  stack->SetTimes(&times);
  const auto start = Clock::now();
  do {
    pass();
    ++times.passes;
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds || times.passes < 3);
  stack->SetTimes(nullptr);
  for (double& t : times.forward) t /= times.passes;
  for (double& t : times.backward) t /= times.passes;
  times.chunk = stack->LayerChunks();
  return times;
}

}  // namespace stampede::net

#else  // no oneDNN in this build

namespace stampede::net {

base::StatusOr<std::unique_ptr<Layer<float>>> MakeOneDnnStack(const Torso&, const std::vector<LayerIo>&, size_t,
                                                              size_t, ParamLayout*) {
  return base::Unavailable("this build has no oneDNN (libdnnl-dev was not found when it was configured)");
}
base::StatusOr<OneDnnRunTimes> TimeOneDnnStack(const Torso&, const std::vector<LayerIo>&, size_t, const float*,
                                               const float*, const float*, int, double) {
  return base::Unavailable("this build has no oneDNN (libdnnl-dev was not found when it was configured)");
}

}  // namespace stampede::net

#endif
