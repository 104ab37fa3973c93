// The CUDA learner's heads, loss, V-trace, PopArt and optimizer kernels. Private to
// net/cuda/trainer.cu, which includes it once (the CUDA code stays one translation unit).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "net/distribution.h"
#include "net/kernel_math.h"
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
// The value head: `raw` [rows, V] as the network gives it (V = 1 without PopArt, when
// `values` is that same column); the loss's error is of raw's task column, normalised by
// the task's PopArt statistics where `stats` is not null (learner/loss.cc's rule).
struct ValueHead {
  const float* raw = nullptr;
  int V = 1;
  const int32_t* tasks = nullptr;  // [B]
  const float* stats = nullptr;    // "popart/stats" [2, V], or null
};

__device__ int TaskColumn(const ValueHead& vh, int b) { return vh.V == 1 ? 0 : vh.tasks[b]; }

__global__ void LossKernel(int TB, int B, LossParams lp, const float* policy, const float* values, ValueHead vh,
                           const int32_t* actions, const float* box_actions, const uint8_t* valid,
                           const float* vs, const float* pg_adv, const float* log_rhos, double rho_bar,
                           const double* moments, float* dpolicy, float* dvalues, double* stats, double* diag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int P = lp.policy.output_size(), K = lp.policy.action_size();
  if (i >= TB + B) return;
  float* dz = dpolicy + int64_t(i) * P;
  float* dv = dvalues + int64_t(i) * vh.V;
  for (int k = 0; k < vh.V; ++k) dv[k] = 0.f;
  if (i >= TB || !valid[i]) {  // bootstrap rows and env resets: no loss
    for (int j = 0; j < P; ++j) dz[j] = 0.f;
    return;
  }
  float a[kMaxActionComponents];
  ActionRow(actions, box_actions, i, K, a);
  const float* out = policy + int64_t(i) * P;
  const double adv =
      moments ? StandardisedAdvantage(pg_adv[i], moments[0], moments[1], moments[2]) : double(pg_adv[i]);
  const double err = double(values[i]) - double(vs[i]);
  const int k = TaskColumn(vh, i % B);
  // PopArt: the normalised output's error against the normalised target.
  const double loss_err =
      vh.stats ? double(vh.raw[int64_t(i) * vh.V + k]) - (double(vs[i]) - vh.stats[k]) / vh.stats[vh.V + k] : err;
  atomicAdd(&stats[0], -adv * PolicyLogProb(lp.policy, out, a));
  atomicAdd(&stats[1], 0.5 * loss_err * loss_err);
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
  dv[k] = float(lp.baseline_cost * loss_err);
}

// Each row's value in its task's units: the task's column of the head, unnormalised by
// its PopArt statistics (learner/loss.cc RunNet).
__global__ void TaskValues(int64_t rows, int B, ValueHead vh, float* values) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  const int k = TaskColumn(vh, int(i % B));
  const float raw = vh.raw[i * vh.V + k];
  values[i] = vh.stats ? vh.stats[vh.V + k] * raw + vh.stats[k] : raw;
}

// PopArt: advantages in the task's normalised units (Hessel et al. 2019, eq. 9).
__global__ void NormaliseAdvantages(int TB, int B, ValueHead vh, float* pg_adv) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= TB) return;
  pg_adv[i] /= vh.stats[vh.V + TaskColumn(vh, i % B)];
}

// PopArt: per task, [sum of vs, sum of vs^2, count] over the valid steps.
__global__ void PopArtMoments(int TB, int B, ValueHead vh, const uint8_t* valid, const float* vs, double* sums) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= TB || !valid[i]) return;
  const int k = TaskColumn(vh, i % B);
  const double v = vs[i];
  atomicAdd(&sums[3 * k], v);
  atomicAdd(&sums[3 * k + 1], v * v);
  atomicAdd(&sums[3 * k + 2], 1.0);
}

// PopArt's update after the optimizer step, one block per task (learner/popart.cc
// PopArtUpdate: the same double arithmetic, the new statistics rounded to float before
// the head is rescaled by them). Skipped with the step when the gradient was not finite.
__global__ void PopArtApply(float* params, int64_t stats_at, int64_t w_at, int64_t b_at, int features, int V,
                            const double* sums, double beta, double min_scale, double max_scale,
                            const double* sq_norm) {
  const int k = blockIdx.x;
  if (k >= V || sums[3 * k + 2] == 0 || !isfinite(sqrt(*sq_norm))) return;
  __shared__ double scales[2];  // old / new scale, new mean
  __shared__ double new_mean_s;
  float* stats = params + stats_at;
  if (threadIdx.x == 0) {
    const double n = sums[3 * k + 2];
    const double target_mean = sums[3 * k] / n, target_square = sums[3 * k + 1] / n;
    const double old_mean = stats[k], old_scale = stats[V + k];
    const double new_mean = float((1 - beta) * old_mean + beta * target_mean);
    const double second = (1 - beta) * (old_scale * old_scale + old_mean * old_mean) + beta * target_square;
    const double new_scale = float(fmin(fmax(sqrt(fmax(0.0, second - new_mean * new_mean)), min_scale), max_scale));
    scales[0] = old_scale;
    scales[1] = new_scale;
    new_mean_s = new_mean;
    float& b = params[b_at + k];
    b = float((old_scale * double(b) + old_mean - new_mean) / new_scale);
  }
  __syncthreads();
  for (int f = threadIdx.x; f < features; f += blockDim.x) {
    float& w = params[w_at + int64_t(f) * V + k];
    w = float(double(w) * scales[0] / scales[1]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    stats[k] = float(new_mean_s);
    stats[V + k] = float(scales[1]);
  }
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

}  // namespace
}  // namespace stampede::net::cuda
