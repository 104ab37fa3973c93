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
#include "net/cuda/layers.cuh"

namespace stampede::net::cuda {

namespace {

// ---- heads, loss, V-trace, optimizer ---------------------------------------------------

__global__ void GaussianOutputs(const float* mean, const float* log_std, int64_t rows, int D, float* policy) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * D) return;
  const int64_t r = i / D;
  const int d = int(i % D);
  policy[r * 2 * D + d] = mean[i];
  policy[r * 2 * D + D + d] = log_std[d];
}
__global__ void GaussianSplit(const float* dpolicy, int64_t rows, int D, float* dmean) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * D) return;
  dmean[i] = dpolicy[(i / D) * 2 * D + i % D];
}
__global__ void GaussianLogStdGrad(const float* dpolicy, int64_t rows, int D, float* grad) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  double s = 0;
  for (int64_t r = 0; r < rows; ++r) s += dpolicy[r * 2 * D + D + d];
  grad[d] += float(s);
}

// Per-task action masks (TrainerOptions::action_limits): the policy outputs of row i at and
// past its unroll's task's action count become kMaskedLogit, as learner/loss.cc does on the
// CPU (their probability is then 0, and so is their gradient).
__global__ void MaskLogits(int64_t rows, int B, int P, const int32_t* tasks, const int32_t* limits, int num_tasks,
                           float* policy) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * P) return;
  const int64_t r = i / P;
  int t = tasks[r % B];
  if (t < 0 || t >= num_tasks) t = 0;
  if (int(i % P) >= limits[t]) policy[i] = kMaskedLogit;
}

// Episode starts for rows 1 .. T from the [T, B] flags; row 0 starts from the state.
__global__ void EpisodeStarts(int T, int B, const uint8_t* terminated, const uint8_t* truncated,
                              const uint8_t* valid, uint8_t* first) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (T + 1) * B) return;
  first[i] = i < B ? 0 : uint8_t(terminated[i - B] | truncated[i - B] | uint8_t(!valid[i - B]));
}

__device__ void ActionRow(const int32_t* actions, const float* box_actions, int64_t i, int K, float* a) {
  for (int k = 0; k < K; ++k) a[k] = box_actions ? box_actions[i * K + k] : float(actions[i * K + k]);
}

struct LossParams {
  PolicyShape policy;
  double discount, baseline_cost, entropy_cost, reward_clip, reward_scale;
  bool bootstrap_on_truncation;
};

__global__ void TargetsInputs(int TB, LossParams lp, const float* policy, const float* behaviour,
                              const int32_t* actions, const float* box_actions, const float* rewards_in,
                              const uint8_t* terminated, const uint8_t* truncated,
                              const float* truncation_values, float* log_rhos, float* discounts,
                              float* rewards) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= TB) return;
  const int P = lp.policy.output_size(), K = lp.policy.action_size();
  const bool ended = terminated[i] || truncated[i];
  discounts[i] = ended ? 0.f : float(lp.discount);
  double r = rewards_in[i];
  if (lp.reward_clip > 0) r = fmin(fmax(r, -lp.reward_clip), lp.reward_clip);
  r *= lp.reward_scale;
  if (truncated[i] && !terminated[i] && lp.bootstrap_on_truncation) r += lp.discount * truncation_values[i];
  rewards[i] = float(r);
  float a[kMaxActionComponents];
  ActionRow(actions, box_actions, i, K, a);
  log_rhos[i] = float(PolicyLogProb(lp.policy, policy + int64_t(i) * P, a) -
                      PolicyLogProb(lp.policy, behaviour + int64_t(i) * P, a));
}

__global__ void VTraceKernel(int T, int B, VTraceClips clips, const float* log_rhos, const float* discounts,
                             const float* rewards, const float* values, float* vs, float* pg_adv) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  VTraceColumn(T, B, b, log_rhos, discounts, rewards, values, values + int64_t(T) * B, clips, vs, pg_adv);
}

// moments: [sum, sum of squares, count] of the advantages over the valid steps.
__global__ void AdvantageMoments(int TB, const uint8_t* valid, const float* pg_adv, double* moments) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= TB || !valid[i]) return;
  const double a = pg_adv[i];
  atomicAdd(&moments[0], a);
  atomicAdd(&moments[1], a * a);
  atomicAdd(&moments[2], 1.0);
}

// stats: [pg_loss, baseline_loss (before the cost), entropy sum, counted]; diag (the
// learner's diagnostics, as learner/loss.cc's Diagnose sums them): [sum vs, sum vs^2,
// sum err, sum err^2, sum (rho - 1) - log rho, steps with rho > rho-bar]; moments: the
// advantages' (AdvantageMoments) to standardise them, or null.
__global__ void LossKernel(int TB, int B, LossParams lp, const float* policy, const float* values,
                           const int32_t* actions, const float* box_actions, const uint8_t* valid,
                           const float* vs, const float* pg_adv, const float* log_rhos, double rho_bar,
                           const double* moments, float* dpolicy, float* dvalues, double* stats, double* diag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int P = lp.policy.output_size(), K = lp.policy.action_size();
  if (i >= TB + B) return;
  float* dz = dpolicy + int64_t(i) * P;
  if (i >= TB || !valid[i]) {  // bootstrap rows and env resets: no loss
    for (int j = 0; j < P; ++j) dz[j] = 0.f;
    dvalues[i] = 0.f;
    return;
  }
  float a[kMaxActionComponents];
  ActionRow(actions, box_actions, i, K, a);
  const float* out = policy + int64_t(i) * P;
  const double adv =
      moments ? StandardisedAdvantage(pg_adv[i], moments[0], moments[1], moments[2]) : double(pg_adv[i]);
  const double err = double(values[i]) - double(vs[i]);
  atomicAdd(&stats[0], -adv * PolicyLogProb(lp.policy, out, a));
  atomicAdd(&stats[1], 0.5 * err * err);
  atomicAdd(&stats[2], PolicyEntropy(lp.policy, out));
  atomicAdd(&stats[3], 1.0);
  const double v = vs[i], log_rho = log_rhos[i], rho = exp(log_rho);
  atomicAdd(&diag[0], v);
  atomicAdd(&diag[1], v * v);
  atomicAdd(&diag[2], err);
  atomicAdd(&diag[3], err * err);
  atomicAdd(&diag[4], (rho - 1) - log_rho);
  if (rho_bar > 0 && rho > rho_bar) atomicAdd(&diag[5], 1.0);
  PolicyGrad(lp.policy, out, a, -adv, -lp.entropy_cost, dz);
  dvalues[i] = float(lp.baseline_cost * err);
}

__global__ void SquaredNorm(const float* g, int64_t n, double* out) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    s += double(g[i]) * g[i];
  }
  atomicAdd(out, s);
}
__global__ void ClipAndUpdate(float* w, float* ms, float* mom, const float* g, int64_t n, const double* sq_norm,
                              double max_norm, OptimizerHyper hyper, OptimizerStep step) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double norm = sqrt(*sq_norm);
  if (!isfinite(norm)) return;  // a non-finite gradient is never applied (the learner counts it)
  const float scale = max_norm > 0 && norm > max_norm ? float(max_norm / norm) : 1.f;
  OptimizerElement(hyper, step, w[i], ms[i], mom[i], g[i] * scale);
}

// ---- the trainer -----------------------------------------------------------------------

class CudaTrainer : public Trainer {
 public:
  CudaTrainer(const ModelSpec& spec, int device, const TrainerOptions& opt)
      : spec_(spec), opt_(opt), device_(device) {
    STAMPEDE_CUDA_CHECK(cudaSetDevice(device));
    STAMPEDE_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    STAMPEDE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    STAMPEDE_CUBLAS_CHECK(cublasCreate(&ctx_.blas));
    STAMPEDE_CUBLAS_CHECK(cublasSetStream(ctx_.blas, ctx_.stream));
    STAMPEDE_CUBLAS_CHECK(cublasSetMathMode(ctx_.blas, CUBLAS_DEFAULT_MATH));
    STAMPEDE_CUDNN_CHECK(cudnnCreate(&ctx_.dnn));
    STAMPEDE_CUDNN_CHECK(cudnnSetStream(ctx_.dnn, ctx_.stream));
    ctx_.allow_tf32 = opt.allow_tf32;
    Build();
    const ParamLayout cpu = ModelLayout(spec_);
    if (cpu.Fingerprint() != layout_.Fingerprint()) {
      throw std::logic_error("CUDA model layout differs from the CPU model's");
    }
    const int T = opt_.unroll_length, B = opt_.batch_size;
    rows_ = int64_t(T + 1) * B;
    const int64_t N = layout_.total_size();
    params_.Resize(N), grad_.Resize(N), ms_.Resize(N), mom_.Resize(N);
    const int P = spec_.policy.output_size(), K = spec_.policy.action_size(), D = spec_.obs_size();
    input_.Resize(rows_ * D);
    policy_.Resize(rows_ * P), values_.Resize(rows_), dpolicy_.Resize(rows_ * P), dvalues_.Resize(rows_);
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
    torso_.clear();
    cudnnDestroy(ctx_.dnn);
    cublasDestroy(ctx_.blas);
    cudaStreamDestroy(ctx_.stream);
    cudaStreamDestroy(copy_stream_);
  }

  const ParamLayout& layout() const override { return layout_; }

  void SetState(std::span<const float> p, std::span<const float> ms, std::span<const float> mom) override {
    Device();
    const size_t bytes = sizeof(float) * size_t(layout_.total_size());
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
    const int64_t N = layout_.total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    ClipAndUpdate<<<Blocks(N), 256, 0, ctx_.stream>>>(params_.get(), ms_.get(), mom_.get(), grad_.get(), N,
                                                       stats_.get() + 4, opt_.max_grad_norm, opt_.optimizer,
                                                       MakeOptimizerStep(opt_.optimizer, lr, step));
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
  }

  StepStats Wait() override {
    Device();
    return Finish();
  }

  void LaunchGradient(std::span<const float> p) override {
    Device();
    if (p.size() != size_t(layout_.total_size())) throw std::logic_error("CUDA trainer: parameters of another size");
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(params_.get(), p.data(), sizeof(float) * p.size(), cudaMemcpyHostToDevice,
                                        ctx_.stream));
    Compute();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), layout_.total_size(), stats_.get() + 4);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
  }

  StepStats WaitGradient(std::span<float> grad) override {
    Device();
    if (grad.size() != size_t(layout_.total_size())) throw std::logic_error("CUDA trainer: gradient of another size");
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(grad.data(), grad_.get(), sizeof(float) * grad.size(), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
    return Finish();  // synchronises the stream: the copy is complete
  }

  StepStats ForwardAndGradient(std::vector<float>* policy, std::vector<float>* values,
                               std::vector<float>* grad) override {
    Device();
    Compute();
    const int64_t N = layout_.total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), kStats * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
    StepStats st = Finish();
    const int P = spec_.policy.output_size();
    policy->resize(size_t(rows_) * P);
    values->resize(size_t(rows_));
    grad->resize(size_t(N));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(policy->data(), policy_.get(), sizeof(float) * policy->size(), cudaMemcpyDeviceToHost));
    STAMPEDE_CUDA_CHECK(cudaMemcpy(values->data(), values_.get(), sizeof(float) * values->size(), cudaMemcpyDeviceToHost));
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

  void Build() {
    // The torso's layer list (net/network.h), as the CPU model builds it.
    const Torso torso = TorsoOf(spec_);
    images_ = torso.images();
    std::vector<LayerIo> io;
    std::string error;
    if (!TorsoShapes(torso, spec_.obs_shape, &io, &error)) throw std::invalid_argument(error);
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
    const bool gaussian = spec_.policy.kind == PolicyKind::kGaussian;
    head_outputs_ = gaussian ? spec_.policy.num_components : spec_.policy.output_size();
    policy_head_ = std::make_unique<GDense>(&layout_, "policy", feature_, head_outputs_);
    if (gaussian) log_std_ = layout_.Add("policy/log_std", {spec_.policy.num_components});
    baseline_ = std::make_unique<GDense>(&layout_, "baseline", feature_, 1);
  }

  // Forward, targets, loss and gradient (into grad_) on the current staged batch.
  void Compute() {
    const int slot = current_slot_;
    if (slot < 0) throw std::logic_error("CUDA trainer: Step before Stage");
    STAMPEDE_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, copied_[slot], 0));
    uint8_t* d = staged_[slot].get();
    const int T = opt_.unroll_length, B = opt_.batch_size, T1 = T + 1;
    const int TB = T * B;
    const int P = spec_.policy.output_size(), D = spec_.obs_size();
    const int64_t rows = rows_;
    const float* p = params_.get();
    const int32_t* actions = spec_.policy.kind == PolicyKind::kGaussian ? nullptr : reinterpret_cast<int32_t*>(d + off_.actions);
    const float* box = spec_.policy.kind == PolicyKind::kGaussian ? reinterpret_cast<float*>(d + off_.actions) : nullptr;
    const uint8_t* terminated = d + off_.terminated;
    const uint8_t* truncated = d + off_.truncated;
    const uint8_t* valid = d + off_.valid;
    // Input.
    if (spec_.uint8_obs) {
      ToInputU8<<<Blocks(rows * D), 256, 0, ctx_.stream>>>(d + off_.obs, rows * D, input_.get());
    } else {
      STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(input_.get(), d + off_.obs, sizeof(float) * rows * D,
                                          cudaMemcpyDeviceToDevice, ctx_.stream));
    }
    if (spec_.center_frames && images_) {
      // net.center_frames, as the CPU model does it (net/model.h CenterChannel).
      const int64_t area = int64_t(spec_.obs_shape[spec_.obs_shape.size() - 2]) * spec_.obs_shape.back();
      CenterChannels<<<unsigned(rows * (D / area)), 256, 0, ctx_.stream>>>(input_.get(), area);
    }
    EpisodeStarts<<<Blocks(rows), 256, 0, ctx_.stream>>>(T, B, terminated, truncated, valid, first_.get());
    // Forward.
    acts_.resize(torso_.size() + 1);
    const float* x = input_.get();
    for (size_t i = 0; i < torso_.size(); ++i) {
      acts_[i + 1].Resize(size_t(rows) * torso_[i]->out_size());
      torso_[i]->Forward(ctx_, p, x, int(rows), acts_[i + 1].get());
      x = acts_[i + 1].get();
    }
    const float* h = x;
    if (core_) {
      core_out_.Resize(size_t(rows) * spec_.lstm_size);
      core_->Forward(ctx_, p, h, T1, B, first_.get(),
                     reinterpret_cast<float*>(d + off_.initial_state), core_out_.get());
      h = core_out_.get();
    }
    const bool gaussian = spec_.policy.kind == PolicyKind::kGaussian;
    if (gaussian) {
      head_tmp_.Resize(size_t(rows) * head_outputs_);
      policy_head_->Forward(ctx_, p, h, int(rows), head_tmp_.get());
      GaussianOutputs<<<Blocks(rows * head_outputs_), 256, 0, ctx_.stream>>>(head_tmp_.get(), p + log_std_, rows,
                                                                              head_outputs_, policy_.get());
    } else {
      policy_head_->Forward(ctx_, p, h, int(rows), policy_.get());
      if (!opt_.action_limits.empty()) {
        MaskLogits<<<Blocks(rows * P), 256, 0, ctx_.stream>>>(rows, B, P, reinterpret_cast<int32_t*>(d + off_.tasks),
                                                              limits_.get(), int(opt_.action_limits.size()),
                                                              policy_.get());
      }
    }
    baseline_->Forward(ctx_, p, h, int(rows), values_.get());
    // Targets (V-trace) and the loss gradient.
    LossParams lp{spec_.policy, opt_.discount, opt_.baseline_cost, opt_.entropy_cost, opt_.reward_clip,
                  opt_.reward_scale, opt_.bootstrap_on_truncation};
    TargetsInputs<<<Blocks(TB), 256, 0, ctx_.stream>>>(
        TB, lp, policy_.get(), reinterpret_cast<float*>(d + off_.behaviour), actions, box,
        reinterpret_cast<float*>(d + off_.rewards), terminated, truncated,
        reinterpret_cast<float*>(d + off_.truncation_values), log_rhos_.get(), discounts_.get(), rewards_.get());
    VTraceKernel<<<Blocks(B, 64), 64, 0, ctx_.stream>>>(T, B, opt_.clips, log_rhos_.get(), discounts_.get(),
                                                        rewards_.get(), values_.get(), vs_.get(), pg_adv_.get());
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get(), 0, 4 * sizeof(double), ctx_.stream));
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 8, 0, 6 * sizeof(double), ctx_.stream));
    const double* moments = nullptr;
    if (opt_.normalize_advantages) {
      STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 5, 0, 3 * sizeof(double), ctx_.stream));
      AdvantageMoments<<<Blocks(TB), 256, 0, ctx_.stream>>>(TB, valid, pg_adv_.get(), stats_.get() + 5);
      moments = stats_.get() + 5;
    }
    LossKernel<<<Blocks(TB + B), 256, 0, ctx_.stream>>>(TB, B, lp, policy_.get(), values_.get(), actions, box, valid,
                                                        vs_.get(), pg_adv_.get(), log_rhos_.get(), opt_.clips.rho,
                                                        moments, dpolicy_.get(), dvalues_.get(), stats_.get(),
                                                        stats_.get() + 8);
    // Backward, through two scratch buffers wide enough for any layer's input.
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(grad_.get(), 0, sizeof(float) * layout_.total_size(), ctx_.stream));
    const int F = feature_;
    dA_.Resize(size_t(rows) * MaxWidth()), dB_.Resize(size_t(rows) * MaxWidth());
    float* dcur = dA_.get();
    float* dnext = dB_.get();
    const float* dhead = dpolicy_.get();
    if (gaussian) {
      GaussianLogStdGrad<<<Blocks(head_outputs_), 256, 0, ctx_.stream>>>(dpolicy_.get(), rows, head_outputs_,
                                                                          grad_.get() + log_std_);
      GaussianSplit<<<Blocks(rows * head_outputs_), 256, 0, ctx_.stream>>>(dpolicy_.get(), rows, head_outputs_,
                                                                            head_tmp_.get());
      dhead = head_tmp_.get();
    }
    policy_head_->Backward(ctx_, p, h, nullptr, dhead, int(rows), dcur, grad_.get());
    baseline_->Backward(ctx_, p, h, nullptr, dvalues_.get(), int(rows), dnext, grad_.get());
    AddInto<<<Blocks(rows * F), 256, 0, ctx_.stream>>>(dcur, dnext, rows * F);
    if (core_) {
      core_->Backward(ctx_, p, dcur, dnext, grad_.get());
      std::swap(dcur, dnext);
    }
    for (size_t i = torso_.size(); i-- > 0;) {
      const float* in = i == 0 ? input_.get() : acts_[i].get();
      torso_[i]->Backward(ctx_, p, in, acts_[i + 1].get(), dcur, int(rows), i > 0 ? dnext : nullptr, grad_.get());
      if (i > 0) std::swap(dcur, dnext);
    }
    STAMPEDE_CUDA_CHECK(cudaEventRecord(consumed_[slot], ctx_.stream));
  }

  int MaxWidth() const {
    int w = spec_.obs_size();
    for (const auto& l : torso_) w = std::max({w, l->in_size(), l->out_size()});
    return std::max(w, feature_);
  }

  // The calling thread works on this trainer's device.
  void Device() { STAMPEDE_CUDA_CHECK(cudaSetDevice(device_)); }

  StepStats Finish() {
    STAMPEDE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    StepStats st;
    st.pg_loss = host_stats_[0];
    st.baseline_loss = opt_.baseline_cost * host_stats_[1];
    st.entropy = host_stats_[3] > 0 ? host_stats_[2] / host_stats_[3] : 0;
    st.total = st.pg_loss + st.baseline_loss - opt_.entropy_cost * host_stats_[2];
    st.grad_norm = std::sqrt(host_stats_[4]);
    // The diagnostics, as learner/loss.cc's Diagnose computes them on the CPU.
    const double n = host_stats_[3], *d = host_stats_ + 8;
    if (n > 0) {
      const double var_vs = d[1] / n - (d[0] / n) * (d[0] / n);
      const double var_err = d[3] / n - (d[2] / n) * (d[2] / n);
      st.explained_variance = var_vs > 1e-12 ? 1.0 - var_err / var_vs : 0.0;
      st.approx_kl = d[4] / n;
      st.rho_clip_fraction = d[5] / n;
    }
    return st;
  }

  ModelSpec spec_;
  TrainerOptions opt_;
  int device_ = 0;
  Context ctx_;
  cudaStream_t copy_stream_ = nullptr;
  ParamLayout layout_;
  std::vector<std::unique_ptr<GLayer>> torso_;
  std::unique_ptr<GLstm> core_;
  std::unique_ptr<GDense> policy_head_, baseline_;
  int64_t log_std_ = -1;
  int feature_ = 0, head_outputs_ = 0;
  bool images_ = false;  // the torso takes images (net.center_frames applies)
  int64_t rows_ = 0;
  DeviceArray<float> params_, grad_, ms_, mom_, input_, policy_, values_, dpolicy_, dvalues_;
  DeviceArray<float> log_rhos_, discounts_, rewards_, vs_, pg_adv_, core_out_, head_tmp_, dA_, dB_;
  DeviceArray<uint8_t> first_;
  DeviceArray<int32_t> limits_;  // TrainerOptions::action_limits, on the device
  DeviceArray<double> stats_;
  std::vector<DeviceArray<float>> acts_;
  Offsets off_{};
  size_t packed_bytes_ = 0;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  DeviceArray<uint8_t> staged_[2];
  cudaEvent_t copied_[2]{}, consumed_[2]{};
  int next_slot_ = 0, current_slot_ = -1;
  static constexpr int kStats = 14;
  double* host_stats_ = nullptr;
};

}  // namespace

bool Built() { return true; }

int DeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0) *why = "the CUDA driver reports no device";
  return n;
}

std::unique_ptr<Trainer> Trainer::Create(const ModelSpec& spec, int device, const TrainerOptions& options,
                                         std::string* error) {
  if (std::string e = spec.Check(); !e.empty()) {
    *error = e;
    return nullptr;
  }
  std::string why;
  const int n = DeviceCount(&why);
  if (device < 0 || device >= n) {
    *error = "cuda:" + std::to_string(device) + " is not available (" +
             (n == 0 ? why : std::to_string(n) + " CUDA devices") + ")";
    return nullptr;
  }
  try {
    return std::make_unique<CudaTrainer>(spec, device, options);
  } catch (const std::exception& e) {
    *error = std::string("CUDA trainer on cuda:") + std::to_string(device) + ": " + e.what();
    return nullptr;
  }
}

}  // namespace stampede::net::cuda
