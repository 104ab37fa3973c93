#include "net/cuda/trainer.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "net/distribution.h"
#include "net/kernel_math.h"
#include "net/layers.h"  // ConvOut / ConvShape / ImageShape (shape arithmetic only)
#include "net/cuda/device.cuh"
#include "net/cuda/heads.cuh"
#include "net/cuda/layers.cuh"

namespace stampede::net::cuda {

namespace {

// ---- the device context ----------------------------------------------------------------

// A stream with its cuBLAS and cuDNN handles on `device`, for the trainer or the policy.
void OpenContext(Context& ctx, int device, bool allow_tf32) {
  STAMPEDE_CUDA_CHECK(cudaSetDevice(device));
  STAMPEDE_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  STAMPEDE_CUBLAS_CHECK(cublasCreate(&ctx.blas));
  STAMPEDE_CUBLAS_CHECK(cublasSetStream(ctx.blas, ctx.stream));
  STAMPEDE_CUBLAS_CHECK(cublasSetMathMode(ctx.blas, CUBLAS_DEFAULT_MATH));
  STAMPEDE_CUDNN_CHECK(cudnnCreate(&ctx.dnn));
  STAMPEDE_CUDNN_CHECK(cudnnSetStream(ctx.dnn, ctx.stream));
  ctx.allow_tf32 = allow_tf32;
}
void CloseContext(Context& ctx) {
  cudnnDestroy(ctx.dnn);
  cublasDestroy(ctx.blas);
  cudaStreamDestroy(ctx.stream);
}

// ---- the network ----------------------------------------------------------------------

// Step t's state [B, 2H] ([h, c] per row, the CPU model's layout) after an LSTM forward.
__global__ void PackLstmState(int B, int H, const float* h, const float* c, float* state) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  const int b = i / H, j = i % H;
  state[int64_t(b) * 2 * H + j] = h[i];
  state[int64_t(b) * 2 * H + H + j] = c[i];
}

// The network on the device, built as the CPU model builds it (net/model.cc): the torso's
// layers (net/network.h's list), the LSTM core, the policy head and the value head, over
// the same flat parameter layout. The trainer and the acting policy each own one.
class GModel {
 public:
  explicit GModel(const ModelSpec& spec) : spec_(spec) {
    const Torso torso = TorsoOf(spec_);
    images_ = torso.images();
    auto shapes = TorsoShapes(torso, spec_.obs_shape);
    if (!shapes.ok()) throw std::invalid_argument(shapes.status().message());
    const std::vector<LayerIo> io = std::move(shapes).value();
    layout_.set_tag(torso.tag);
    feature_ = spec_.obs_size();
    for (size_t i = 0; i < torso.layers.size(); ++i) {
      const LayerSpec& l = torso.layers[i];
      const ImageShape in = io[i].in;
      switch (l.kind) {
        case LayerSpec::Kind::kDense:
          torso_.push_back(std::make_unique<GDense>(&layout_, l.name, in.size(), l.units));
          break;
        case LayerSpec::Kind::kConv:
          torso_.push_back(std::make_unique<GConv>(&layout_, l.name, in, l.channels, l.kernel, l.stride, l.pad));
          break;
        case LayerSpec::Kind::kMaxPool:
          torso_.push_back(std::make_unique<GMaxPool>(in, l.kernel, l.stride, l.pad));
          break;
        case LayerSpec::Kind::kResidual:
          torso_.push_back(std::make_unique<GResidual>(&layout_, l.name, in));
          break;
        case LayerSpec::Kind::kRelu:
        case LayerSpec::Kind::kTanh:
          torso_.push_back(std::make_unique<GActivation>(in.size(), l.kind == LayerSpec::Kind::kTanh));
          break;
      }
      feature_ = io[i].out.size();
    }
    if (spec_.lstm_size > 0) {
      core_ = std::make_unique<GLstm>(&layout_, feature_, spec_.lstm_size);
      feature_ = spec_.lstm_size;
    }
    head_outputs_ = gaussian() ? spec_.policy.num_components : spec_.policy.output_size();
    policy_head_ = std::make_unique<GDense>(&layout_, "policy", feature_, head_outputs_);
    if (gaussian()) log_std_ = layout_.Add("policy/log_std", {spec_.policy.num_components});
    baseline_ = std::make_unique<GDense>(&layout_, "baseline", feature_, spec_.num_values);
    if (spec_.popart) popart_stats_ = layout_.Add("popart/stats", {2, spec_.num_values});
    const ParamLayout cpu = ModelLayout(spec_);
    if (cpu.Fingerprint() != layout_.Fingerprint()) throw std::logic_error("CUDA model layout differs from the CPU model's");
  }

  const ParamLayout& layout() const { return layout_; }
  int feature() const { return feature_; }
  int64_t popart_stats() const { return popart_stats_; }
  int64_t baseline_w() const { return layout_.Find("baseline/w").offset; }
  int64_t baseline_b() const { return layout_.Find("baseline/b").offset; }

  // Forward over T1 x B time-major rows from device observations `obs` (the spec's dtype):
  // policy outputs [rows, policy_size] and the value head's [rows, num_values]. `first`
  // [rows] (device) resets the core's state; `initial` [B, 2H] (device, may be null) is
  // the state entering row 0. Keeps the activations for Backward.
  void Forward(Context& c, const float* p, const void* obs, int T1, int B, const uint8_t* first, const float* initial,
               float* policy, float* values) {
    const int64_t rows = int64_t(T1) * B;
    const int D = spec_.obs_size();
    rows_ = rows;
    input_.Resize(size_t(rows) * D);
    if (spec_.uint8_obs) {
      ToInputU8<<<Blocks(rows * D), 256, 0, c.stream>>>(static_cast<const uint8_t*>(obs), rows * D, input_.get());
    } else {
      STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(input_.get(), obs, sizeof(float) * rows * D, cudaMemcpyDeviceToDevice,
                                          c.stream));
    }
    if (spec_.center_frames && images_) {
      // net.center_frames, as the CPU model does it (net/model.h CenterChannel).
      const int64_t area = int64_t(spec_.obs_shape[spec_.obs_shape.size() - 2]) * spec_.obs_shape.back();
      CenterChannels<<<unsigned(rows * (D / area)), 256, 0, c.stream>>>(input_.get(), area);
    }
    acts_.resize(torso_.size() + 1);
    const float* x = input_.get();
    for (size_t i = 0; i < torso_.size(); ++i) {
      acts_[i + 1].Resize(size_t(rows) * torso_[i]->out_size());
      torso_[i]->Forward(c, p, x, int(rows), acts_[i + 1].get());
      x = acts_[i + 1].get();
    }
    h_ = x;
    if (core_) {
      core_out_.Resize(size_t(rows) * spec_.lstm_size);
      core_->Forward(c, p, h_, T1, B, first, initial, core_out_.get());
      h_ = core_out_.get();
    }
    if (gaussian()) {
      head_tmp_.Resize(size_t(rows) * head_outputs_);
      policy_head_->Forward(c, p, h_, int(rows), head_tmp_.get());
      GaussianOutputs<<<Blocks(rows * head_outputs_), 256, 0, c.stream>>>(head_tmp_.get(), p + log_std_, rows,
                                                                           head_outputs_, policy);
    } else {
      policy_head_->Forward(c, p, h_, int(rows), policy);
    }
    baseline_->Forward(c, p, h_, int(rows), values);
  }

  // The last step's core state [B, 2H] (device) after Forward (with a core).
  void FinalState(Context& c, int T1, int B, float* state) {
    const int H = spec_.lstm_size;
    PackLstmState<<<Blocks(B * H), 256, 0, c.stream>>>(B, H, core_out_.get() + int64_t(T1 - 1) * B * H,
                                                       core_->cell() + int64_t(T1 - 1) * B * H, state);
  }

  // Given dLoss/dpolicy [rows, policy_size] and dLoss/dvalues [rows, num_values] for the
  // last Forward, ADDS dLoss/dparams into grad (device). dpolicy is overwritten.
  void Backward(Context& c, const float* p, float* dpolicy, const float* dvalues, float* grad) {
    const int64_t rows = rows_;
    const int F = feature_;
    dA_.Resize(size_t(rows) * MaxWidth()), dB_.Resize(size_t(rows) * MaxWidth());
    float* dcur = dA_.get();
    float* dnext = dB_.get();
    const float* dhead = dpolicy;
    if (gaussian()) {
      GaussianLogStdGrad<<<Blocks(head_outputs_), 256, 0, c.stream>>>(dpolicy, rows, head_outputs_, grad + log_std_);
      GaussianSplit<<<Blocks(rows * head_outputs_), 256, 0, c.stream>>>(dpolicy, rows, head_outputs_, head_tmp_.get());
      dhead = head_tmp_.get();
    }
    policy_head_->Backward(c, p, h_, nullptr, dhead, int(rows), dcur, grad);
    baseline_->Backward(c, p, h_, nullptr, dvalues, int(rows), dnext, grad);
    AddInto<<<Blocks(rows * F), 256, 0, c.stream>>>(dcur, dnext, rows * F);
    if (core_) {
      core_->Backward(c, p, dcur, dnext, grad);
      std::swap(dcur, dnext);
    }
    for (size_t i = torso_.size(); i-- > 0;) {
      const float* in = i == 0 ? input_.get() : acts_[i].get();
      torso_[i]->Backward(c, p, in, acts_[i + 1].get(), dcur, int(rows), i > 0 ? dnext : nullptr, grad);
      if (i > 0) std::swap(dcur, dnext);
    }
  }

 private:
  bool gaussian() const { return spec_.policy.kind == PolicyKind::kGaussian; }
  int MaxWidth() const {
    int w = spec_.obs_size();
    for (const auto& l : torso_) w = std::max({w, l->in_size(), l->out_size()});
    return std::max(w, feature_);
  }

  ModelSpec spec_;
  ParamLayout layout_;
  std::vector<std::unique_ptr<GLayer>> torso_;
  std::unique_ptr<GLstm> core_;
  std::unique_ptr<GDense> policy_head_, baseline_;
  int64_t log_std_ = -1, popart_stats_ = -1;
  int feature_ = 0, head_outputs_ = 0;
  bool images_ = false;  // the torso takes images (net.center_frames applies)
  int64_t rows_ = 0;     // of the last Forward
  const float* h_ = nullptr;  // the heads' input in the last Forward
  DeviceArray<float> input_, core_out_, head_tmp_, dA_, dB_;
  std::vector<DeviceArray<float>> acts_;
};

// ---- the trainer -----------------------------------------------------------------------

class CudaTrainer : public Trainer {
 public:
  CudaTrainer(const ModelSpec& spec, int device, const TrainerOptions& opt)
      : spec_(spec), opt_(opt), device_(device) {
    OpenContext(ctx_, device, opt.allow_tf32);
    STAMPEDE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    model_ = std::make_unique<GModel>(spec_);
    if (opt_.popart && !spec_.popart) throw std::invalid_argument("PopArt asked for, but the network has no PopArt head");
    const int T = opt_.unroll_length, B = opt_.batch_size;
    rows_ = int64_t(T + 1) * B;
    const int64_t N = layout().total_size();
    params_.Resize(N), grad_.Resize(N), ms_.Resize(N), mom_.Resize(N);
    const int P = spec_.policy.output_size(), K = spec_.policy.action_size(), D = spec_.obs_size();
    V_ = spec_.num_values;
    policy_.Resize(rows_ * P), values_.Resize(rows_), dpolicy_.Resize(rows_ * P), dvalues_.Resize(rows_ * V_);
    if (Normalised()) raw_values_.Resize(rows_ * V_);
    if (opt_.popart) popart_sums_.Resize(3 * V_);
    first_.Resize(rows_);
    const int64_t TB = int64_t(T) * B;
    log_rhos_.Resize(TB), discounts_.Resize(TB), rewards_.Resize(TB), vs_.Resize(TB), pg_adv_.Resize(TB);
    // loss stats [0, 4), gradient norm [4], advantage moments [5, 8), diagnostics [8, 14)
    stats_.Resize(kStats);
    STAMPEDE_CUDA_CHECK(cudaMallocHost(&host_stats_, kStats * sizeof(double)));
    // The staged batch: one packed buffer, pinned on the host, twice on the device.
    const size_t obs_bytes = size_t(rows_) * D * (spec_.uint8_obs ? 1 : 4);
    Add(&off_.obs, obs_bytes);
    Add(&off_.actions, size_t(TB) * K * 4);
    Add(&off_.rewards, size_t(TB) * 4);
    Add(&off_.terminated, size_t(TB));
    Add(&off_.truncated, size_t(TB));
    Add(&off_.valid, size_t(TB));
    Add(&off_.behaviour, size_t(TB) * P * 4);
    Add(&off_.truncation_values, size_t(TB) * 4);
    Add(&off_.initial_state, size_t(B) * 2 * spec_.lstm_size * 4);
    Add(&off_.tasks, size_t(B) * 4);
    if (!opt_.action_limits.empty()) {
      limits_.Resize(opt_.action_limits.size());
      const std::vector<int32_t> limits(opt_.action_limits.begin(), opt_.action_limits.end());
      STAMPEDE_CUDA_CHECK(cudaMemcpy(limits_.get(), limits.data(), limits.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < 2; ++i) {
      STAMPEDE_CUDA_CHECK(cudaMallocHost(&pinned_[i], packed_bytes_));
      staged_[i].Resize(packed_bytes_);
      STAMPEDE_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[i], cudaEventDisableTiming));
      STAMPEDE_CUDA_CHECK(cudaEventCreateWithFlags(&consumed_[i], cudaEventDisableTiming));
      STAMPEDE_CUDA_CHECK(cudaEventRecord(consumed_[i], ctx_.stream));
    }
  }
  ~CudaTrainer() override {
    cudaStreamSynchronize(ctx_.stream);
    cudaStreamSynchronize(copy_stream_);
    for (int i = 0; i < 2; ++i) {
      cudaFreeHost(pinned_[i]);
      cudaEventDestroy(copied_[i]);
      cudaEventDestroy(consumed_[i]);
    }
    cudaFreeHost(host_stats_);
    model_.reset();
    CloseContext(ctx_);
    cudaStreamDestroy(copy_stream_);
  }

  const ParamLayout& layout() const override { return model_->layout(); }

  void SetState(std::span<const float> p, std::span<const float> ms, std::span<const float> mom) override {
    Device();
    const size_t bytes = sizeof(float) * size_t(layout().total_size());
    STAMPEDE_CUDA_CHECK(cudaMemcpy(params_.get(), p.data(), bytes, cudaMemcpyHostToDevice));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(ms_.get(), ms.data(), bytes, cudaMemcpyHostToDevice));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(mom_.get(), mom.data(), bytes, cudaMemcpyHostToDevice));
  }
  void GetParams(std::span<float> p) override {
    Device();
    STAMPEDE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(p.data(), params_.get(), sizeof(float) * p.size(), cudaMemcpyDeviceToHost));
  }
  void GetState(std::span<float> p, std::span<float> ms, std::span<float> mom) override {
    GetParams(p);
    STAMPEDE_CUDA_CHECK(cudaMemcpy(ms.data(), ms_.get(), sizeof(float) * ms.size(), cudaMemcpyDeviceToHost));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(mom.data(), mom_.get(), sizeof(float) * mom.size(), cudaMemcpyDeviceToHost));
  }

  void Stage(const BatchView& b) override {
    Device();
    const int slot = next_slot_;
    next_slot_ ^= 1;
    // The device copy in this slot may still feed a running step: wait for it.
    STAMPEDE_CUDA_CHECK(cudaEventSynchronize(consumed_[slot]));
    uint8_t* h = pinned_[slot];
    const int T = opt_.unroll_length, B = opt_.batch_size;
    const size_t TB = size_t(T) * B;
    const int P = spec_.policy.output_size(), K = spec_.policy.action_size();
    std::memcpy(h + off_.obs, b.observations, size_t(rows_) * spec_.obs_size() * (spec_.uint8_obs ? 1 : 4));
    if (spec_.policy.kind == PolicyKind::kGaussian) {
      std::memcpy(h + off_.actions, b.box_actions, TB * K * 4);
    } else {
      std::memcpy(h + off_.actions, b.actions, TB * K * 4);
    }
    std::memcpy(h + off_.rewards, b.rewards, TB * 4);
    std::memcpy(h + off_.terminated, b.terminated, TB);
    std::memcpy(h + off_.truncated, b.truncated, TB);
    std::memcpy(h + off_.valid, b.valid, TB);
    std::memcpy(h + off_.behaviour, b.behaviour, TB * P * 4);
    std::memcpy(h + off_.truncation_values, b.truncation_values, TB * 4);
    if (spec_.lstm_size > 0) {
      if (b.initial_state) {
        std::memcpy(h + off_.initial_state, b.initial_state, size_t(B) * 2 * spec_.lstm_size * 4);
      } else {
        std::memset(h + off_.initial_state, 0, size_t(B) * 2 * spec_.lstm_size * 4);
      }
    }
    if (b.tasks) {
      std::memcpy(h + off_.tasks, b.tasks, size_t(B) * 4);
    } else {
      std::memset(h + off_.tasks, 0, size_t(B) * 4);
    }
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(staged_[slot].get(), h, packed_bytes_, cudaMemcpyHostToDevice, copy_stream_));
    STAMPEDE_CUDA_CHECK(cudaEventRecord(copied_[slot], copy_stream_));
    current_slot_ = slot;
  }

  void Launch(double lr, int64_t step) override {
    Device();
    Compute();
    const int64_t N = layout().total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    ClipAndUpdate<<<Blocks(N), 256, 0, ctx_.stream>>>(params_.get(), ms_.get(), mom_.get(), grad_.get(), N,
                                                       stats_.get() + 4, opt_.max_grad_norm, opt_.optimizer,
                                                       MakeOptimizerStep(opt_.optimizer, lr, step));
    if (opt_.popart) {
      // The statistics of the targets this step trained on, then the head rescaled.
      const int T = opt_.unroll_length, B = opt_.batch_size, TB = T * B;
      STAMPEDE_CUDA_CHECK(cudaMemsetAsync(popart_sums_.get(), 0, 3 * V_ * sizeof(double), ctx_.stream));
      PopArtMoments<<<Blocks(TB), 256, 0, ctx_.stream>>>(TB, B, Head(staged_[current_slot_].get()),
                                                         staged_[current_slot_].get() + off_.valid, vs_.get(),
                                                         popart_sums_.get());
      PopArtApply<<<V_, 128, 0, ctx_.stream>>>(params_.get(), model_->popart_stats(), model_->baseline_w(),
                                               model_->baseline_b(), model_->feature(), V_,
                                               popart_sums_.get(), opt_.popart_beta, kPopArtMinScale, kPopArtMaxScale,
                                               stats_.get() + 4);
      // The staged batch (its tasks and valid flags) was read until here.
      STAMPEDE_CUDA_CHECK(cudaEventRecord(consumed_[current_slot_], ctx_.stream));
    }
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
  }

  StepStats Wait() override {
    Device();
    return Finish();
  }

  void LaunchGradient(std::span<const float> p) override {
    Device();
    if (p.size() != size_t(layout().total_size())) throw std::logic_error("CUDA trainer: parameters of another size");
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(params_.get(), p.data(), sizeof(float) * p.size(), cudaMemcpyHostToDevice,
                                        ctx_.stream));
    Compute();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), layout().total_size(), stats_.get() + 4);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
  }

  StepStats WaitGradient(std::span<float> grad) override {
    Device();
    if (grad.size() != size_t(layout().total_size())) throw std::logic_error("CUDA trainer: gradient of another size");
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(grad.data(), grad_.get(), sizeof(float) * grad.size(), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
    return Finish();  // synchronises the stream: the copy is complete
  }

  StepStats ForwardAndGradient(std::vector<float>* policy, std::vector<float>* values,
                               std::vector<float>* grad) override {
    Device();
    Compute();
    const int64_t N = layout().total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
    StepStats st = Finish();
    const int P = spec_.policy.output_size();
    policy->resize(size_t(rows_) * P);
    values->resize(size_t(rows_) * V_);
    grad->resize(size_t(N));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(policy->data(), policy_.get(), sizeof(float) * policy->size(), cudaMemcpyDeviceToHost));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(values->data(), Normalised() ? raw_values_.get() : values_.get(),
                                   sizeof(float) * values->size(), cudaMemcpyDeviceToHost));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(grad->data(), grad_.get(), sizeof(float) * grad->size(), cudaMemcpyDeviceToHost));
    return st;
  }

 private:
  struct Offsets {
    size_t obs, actions, rewards, terminated, truncated, valid, behaviour, truncation_values, initial_state, tasks;
  };
  void Add(size_t* offset, size_t bytes) {
    *offset = packed_bytes_;
    packed_bytes_ += (bytes + 255) / 256 * 256;
  }

  // The value head has several outputs or PopArt statistics: values_ is computed from it.
  bool Normalised() const { return V_ > 1 || spec_.popart; }
  ValueHead Head(const uint8_t* staged) const {
    ValueHead vh;
    vh.raw = Normalised() ? raw_values_.get() : values_.get();
    vh.V = V_;
    vh.tasks = reinterpret_cast<const int32_t*>(staged + off_.tasks);
    vh.stats = opt_.popart ? params_.get() + model_->popart_stats() : nullptr;
    return vh;
  }

  // Forward, targets, loss and gradient (into grad_) on the current staged batch.
  void Compute() {
    const int slot = current_slot_;
    if (slot < 0) throw std::logic_error("CUDA trainer: Step before Stage");
    STAMPEDE_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, copied_[slot], 0));
    uint8_t* d = staged_[slot].get();
    const int T = opt_.unroll_length, B = opt_.batch_size, T1 = T + 1;
    const int TB = T * B;
    const int P = spec_.policy.output_size();
    const int64_t rows = rows_;
    const float* p = params_.get();
    const int32_t* actions = spec_.policy.kind == PolicyKind::kGaussian ? nullptr : reinterpret_cast<int32_t*>(d + off_.actions);
    const float* box = spec_.policy.kind == PolicyKind::kGaussian ? reinterpret_cast<float*>(d + off_.actions) : nullptr;
    const uint8_t* terminated = d + off_.terminated;
    const uint8_t* truncated = d + off_.truncated;
    const uint8_t* valid = d + off_.valid;
    EpisodeStarts<<<Blocks(rows), 256, 0, ctx_.stream>>>(T, B, terminated, truncated, valid, first_.get());
    const ValueHead vh = Head(d);
    model_->Forward(ctx_, p, d + off_.obs, T1, B, first_.get(), reinterpret_cast<float*>(d + off_.initial_state),
                    policy_.get(), Normalised() ? raw_values_.get() : values_.get());
    if (!opt_.action_limits.empty()) {
      MaskLogits<<<Blocks(rows * P), 256, 0, ctx_.stream>>>(rows, B, P, reinterpret_cast<int32_t*>(d + off_.tasks),
                                                            limits_.get(), int(opt_.action_limits.size()),
                                                            policy_.get());
    }
    if (Normalised()) TaskValues<<<Blocks(rows), 256, 0, ctx_.stream>>>(rows, B, vh, values_.get());
    // Targets (V-trace) and the loss gradient.
    LossParams lp{spec_.policy, opt_.discount, opt_.baseline_cost, opt_.entropy_cost, opt_.reward_clip,
                  opt_.reward_scale, opt_.bootstrap_on_truncation};
    TargetsInputs<<<Blocks(TB), 256, 0, ctx_.stream>>>(
        TB, lp, policy_.get(), reinterpret_cast<float*>(d + off_.behaviour), actions, box,
        reinterpret_cast<float*>(d + off_.rewards), terminated, truncated,
        reinterpret_cast<float*>(d + off_.truncation_values), log_rhos_.get(), discounts_.get(), rewards_.get());
    VTraceKernel<<<Blocks(B, 64), 64, 0, ctx_.stream>>>(T, B, opt_.clips, log_rhos_.get(), discounts_.get(),
                                                        rewards_.get(), values_.get(), vs_.get(), pg_adv_.get());
    if (opt_.popart) NormaliseAdvantages<<<Blocks(TB), 256, 0, ctx_.stream>>>(TB, B, vh, pg_adv_.get());
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get(), 0, 4 * sizeof(double), ctx_.stream));
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 8, 0, 6 * sizeof(double), ctx_.stream));
    const double* moments = nullptr;
    if (opt_.normalize_advantages) {
      STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 5, 0, 3 * sizeof(double), ctx_.stream));
      AdvantageMoments<<<Blocks(TB), 256, 0, ctx_.stream>>>(TB, valid, pg_adv_.get(), stats_.get() + 5);
      moments = stats_.get() + 5;
    }
    LossKernel<<<Blocks(TB + B), 256, 0, ctx_.stream>>>(TB, B, lp, policy_.get(), values_.get(), vh, actions, box, valid,
                                                        vs_.get(), pg_adv_.get(), log_rhos_.get(), opt_.clips.rho,
                                                        moments, dpolicy_.get(), dvalues_.get(), stats_.get(),
                                                        stats_.get() + 8);
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(grad_.get(), 0, sizeof(float) * layout().total_size(), ctx_.stream));
    model_->Backward(ctx_, p, dpolicy_.get(), dvalues_.get(), grad_.get());
    STAMPEDE_CUDA_CHECK(cudaEventRecord(consumed_[slot], ctx_.stream));
  }

  // The calling thread works on this trainer's device.
  void Device() { STAMPEDE_CUDA_CHECK(cudaSetDevice(device_)); }

  StepStats Finish() {
    STAMPEDE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    StepStats st;
    const double pg_loss = host_stats_[0], baseline_loss = opt_.baseline_cost * host_stats_[1];
    st.m[base::StepMetric::kPgLoss] = pg_loss;
    st.m[base::StepMetric::kBaselineLoss] = baseline_loss;
    st.m[base::StepMetric::kEntropy] = host_stats_[3] > 0 ? host_stats_[2] / host_stats_[3] : 0;
    st.total = pg_loss + baseline_loss - opt_.entropy_cost * host_stats_[2];
    st.m[base::StepMetric::kGradNorm] = std::sqrt(host_stats_[4]);
    // The diagnostics, as learner/loss.cc's Diagnose computes them on the CPU.
    const double n = host_stats_[3], *d = host_stats_ + 8;
    if (n > 0) {
      const double var_vs = d[1] / n - (d[0] / n) * (d[0] / n);
      const double var_err = d[3] / n - (d[2] / n) * (d[2] / n);
      st.m[base::StepMetric::kExplainedVariance] = var_vs > 1e-12 ? 1.0 - var_err / var_vs : 0.0;
      st.m[base::StepMetric::kApproxKl] = d[4] / n;
      st.m[base::StepMetric::kRhoClipFraction] = d[5] / n;
    }
    return st;
  }

  ModelSpec spec_;
  TrainerOptions opt_;
  int device_ = 0;
  Context ctx_;
  cudaStream_t copy_stream_ = nullptr;
  std::unique_ptr<GModel> model_;
  int64_t rows_ = 0;
  DeviceArray<float> params_, grad_, ms_, mom_, policy_, values_, dpolicy_, dvalues_;
  DeviceArray<float> log_rhos_, discounts_, rewards_, vs_, pg_adv_;
  DeviceArray<float> raw_values_;  // the value head's [rows, V] where values_ is computed from it
  DeviceArray<double> popart_sums_;  // PopArt: per task [sum vs, sum vs^2, count]
  int V_ = 1;
  DeviceArray<uint8_t> first_;
  DeviceArray<int32_t> limits_;  // TrainerOptions::action_limits, on the device
  DeviceArray<double> stats_;
  Offsets off_{};
  size_t packed_bytes_ = 0;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  DeviceArray<uint8_t> staged_[2];
  cudaEvent_t copied_[2]{}, consumed_[2]{};
  int next_slot_ = 0, current_slot_ = -1;
  static constexpr int kStats = 14;
  double* host_stats_ = nullptr;
};


// ---- acting ----------------------------------------------------------------------------

class CudaPolicy : public Policy {
 public:
  CudaPolicy(const ModelSpec& spec, int device, bool allow_tf32) : spec_(spec), device_(device) {
    OpenContext(ctx_, device, allow_tf32);
    model_ = std::make_unique<GModel>(spec_);
    params_.Resize(size_t(model_->layout().total_size()));
  }
  ~CudaPolicy() override {
    cudaStreamSynchronize(ctx_.stream);
    model_.reset();
    CloseContext(ctx_);
  }
  const ParamLayout& layout() const override { return model_->layout(); }
  void SetParams(std::span<const float> params) override {
    STAMPEDE_CUDA_CHECK(cudaSetDevice(device_));
    if (params.size() != size_t(layout().total_size())) throw std::logic_error("CUDA policy: parameters of another size");
    STAMPEDE_CUDA_CHECK(cudaMemcpy(params_.get(), params.data(), sizeof(float) * params.size(), cudaMemcpyHostToDevice));
  }
  void Step(const void* obs, int n, const uint8_t* first, const float* state_in, float* state_out, float* policy,
            float* values) override {
    STAMPEDE_CUDA_CHECK(cudaSetDevice(device_));
    if (n < 1) return;
    Reserve(n);
    const size_t obs_row = size_t(spec_.obs_size()) * (spec_.uint8_obs ? 1 : 4);
    const int S = 2 * spec_.lstm_size, P = spec_.policy.output_size(), V = spec_.num_values;
    cudaStream_t st = ctx_.stream;
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(obs_.get(), obs, obs_row * n, cudaMemcpyHostToDevice, st));
    if (S > 0) {
      // The padding rows start afresh (their outputs are never read).
      STAMPEDE_CUDA_CHECK(cudaMemsetAsync(first_.get(), 1, size_t(capacity_), st));
      if (first) {
        STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(first_.get(), first, size_t(n), cudaMemcpyHostToDevice, st));
      } else {
        STAMPEDE_CUDA_CHECK(cudaMemsetAsync(first_.get(), 0, size_t(n), st));
      }
      if (state_in) {
        STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(state_.get(), state_in, sizeof(float) * n * S, cudaMemcpyHostToDevice, st));
      } else {
        STAMPEDE_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, sizeof(float) * n * S, st));
      }
    }
    model_->Forward(ctx_, params_.get(), obs_.get(), 1, capacity_, first_.get(), S > 0 ? state_.get() : nullptr,
                    policy_.get(), values_.get());
    if (S > 0 && state_out) {
      model_->FinalState(ctx_, 1, capacity_, state_next_.get());
      STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(state_out, state_next_.get(), sizeof(float) * n * S, cudaMemcpyDeviceToHost, st));
    }
    if (policy) STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(policy, policy_.get(), sizeof(float) * n * P, cudaMemcpyDeviceToHost, st));
    if (values) STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(values, values_.get(), sizeof(float) * n * V, cudaMemcpyDeviceToHost, st));
    STAMPEDE_CUDA_CHECK(cudaStreamSynchronize(st));
  }

 private:
  // Room for n rows: grows to the largest batch asked for (in multiples of 8), zeroed.
  void Reserve(int n) {
    if (n <= capacity_) return;
    capacity_ = (n + 7) / 8 * 8;
    const size_t rows = size_t(capacity_);
    const size_t obs_bytes = rows * spec_.obs_size() * (spec_.uint8_obs ? 1 : 4);
    const int S = 2 * spec_.lstm_size;
    obs_.Resize(obs_bytes);
    first_.Resize(rows);
    state_.Resize(rows * std::max(S, 1)), state_next_.Resize(rows * std::max(S, 1));
    policy_.Resize(rows * spec_.policy.output_size()), values_.Resize(rows * spec_.num_values);
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(obs_.get(), 0, obs_bytes, ctx_.stream));
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, sizeof(float) * rows * std::max(S, 1), ctx_.stream));
  }

  ModelSpec spec_;
  int device_ = 0;
  Context ctx_;
  std::unique_ptr<GModel> model_;
  int capacity_ = 0;
  DeviceArray<float> params_, state_, state_next_, policy_, values_;
  DeviceArray<uint8_t> obs_, first_;
};

}  // namespace

bool Built() { return true; }

base::StatusOr<int> DeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return base::Unavailable(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
  if (n == 0) return base::Unavailable("the CUDA driver reports no device");
  return n;
}

namespace {
// Why `spec` cannot run on cuda:`device` ("" if it can).
std::string Unusable(const ModelSpec& spec, int device) {
  if (std::string e = spec.Check(); !e.empty()) return e;
  const base::StatusOr<int> n = DeviceCount();
  if (device < 0 || !n.ok() || device >= *n) {
    return "cuda:" + std::to_string(device) + " is not available (" +
           (!n.ok() ? n.status().message() : std::to_string(*n) + " CUDA devices") + ")";
  }
  return {};
}

// `make()`, or an error naming `what` and the device (the device's exceptions converted).
template <class T, class Make>
base::StatusOr<std::unique_ptr<T>> Construct(const ModelSpec& spec, int device, const char* what, Make make) {
  if (std::string e = Unusable(spec, device); !e.empty()) return base::Unavailable(e);
  try {
    return std::unique_ptr<T>(make());
  } catch (const std::exception& e) {
    return base::DeviceError(std::string(what) + " on cuda:" + std::to_string(device) + ": " + e.what());
  }
}
}  // namespace

base::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const ModelSpec& spec, int device,
                                                         const TrainerOptions& options) {
  return Construct<Trainer>(spec, device, "CUDA trainer",
                            [&] { return std::make_unique<CudaTrainer>(spec, device, options); });
}

base::StatusOr<std::unique_ptr<Policy>> Policy::Create(const ModelSpec& spec, int device, bool allow_tf32) {
  return Construct<Policy>(spec, device, "CUDA policy",
                           [&] { return std::make_unique<CudaPolicy>(spec, device, allow_tf32); });
}

}  // namespace stampede::net::cuda
