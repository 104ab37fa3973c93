// Private to net/cuda/trainer.cu, which includes it once (one translation unit, so the
// kernels need no relocatable device code): error checks for CUDA, cuBLAS and cuDNN
// calls, device arrays, elementwise kernels, row-major GEMM and the stream/handle context.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace stampede::net::cuda {
namespace {

#define STAMPEDE_CUDA_CHECK(call)                                                            \
  do {                                                                                       \
    cudaError_t stampede_err_ = (call);                                                                 \
    if (stampede_err_ != cudaSuccess) {                                                                 \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(stampede_err_));          \
    }                                                                                        \
  } while (0)
#define STAMPEDE_CUBLAS_CHECK(call)                                                          \
  do {                                                                                       \
    cublasStatus_t stampede_blas_ = (call);                                                              \
    if (stampede_blas_ != CUBLAS_STATUS_SUCCESS) {                                                       \
      throw std::runtime_error(std::string(#call) + ": cuBLAS status " + std::to_string(int(stampede_blas_))); \
    }                                                                                        \
  } while (0)
#define STAMPEDE_CUDNN_CHECK(call)                                                           \
  do {                                                                                       \
    cudnnStatus_t stampede_dnn_ = (call);                                                               \
    if (stampede_dnn_ != CUDNN_STATUS_SUCCESS) {                                                        \
      throw std::runtime_error(std::string(#call) + ": " + cudnnGetErrorString(stampede_dnn_));         \
    }                                                                                        \
  } while (0)

// A device allocation of n values of T (uninitialised).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { Resize(n); }
  ~DeviceArray() { Free(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  void Resize(size_t n) {
    if (n <= n_) return;
    Free();
    STAMPEDE_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(1, n) * sizeof(T)));
    n_ = n;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void Free() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

int Blocks(int64_t n, int threads = 256) { return int((n + threads - 1) / threads); }

// ---- elementwise kernels -------------------------------------------------------------

__global__ void ToInputU8(const uint8_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = float(in[i]) * float(kUint8InputScale);
}
// net.center_frames: one block per (row, channel) image of `area` values.
__global__ void CenterChannels(float* x, int64_t area) {
  __shared__ double partial[256];
  float* img = x + int64_t(blockIdx.x) * area;
  double s = 0;
  for (int64_t i = threadIdx.x; i < area; i += blockDim.x) s += img[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (int(threadIdx.x) < k) partial[threadIdx.x] += partial[threadIdx.x + k];
    __syncthreads();
  }
  const float mean = float(partial[0] / double(area));
  for (int64_t i = threadIdx.x; i < area; i += blockDim.x) img[i] -= mean;
}
__global__ void AddRowBias(float* y, const float* b, int64_t rows, int cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < rows * cols) y[i] += b[i % cols];
}
__global__ void AddColumnSums(const float* dy, int64_t rows, int cols, float* db) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  double s = 0;
  for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + j];
  db[j] += float(s);
}
// Per-channel sums of an NCHW tensor [n, C, hw], added into db[C] (a convolution's bias
// gradient), in two passes with a fixed order, so the result is the same on every run:
// block (c, s) sums channel c over the images s, s + slices, ...; then each channel's
// partial sums in slice order. (cuDNN's cudnnConvolutionBackwardBias took over half of the
// deep ResNet's learner step on an H200.)
constexpr int kChannelSumThreads = 256;
__global__ void ChannelPartialSums(const float* x, int n, int C, int hw, int slices, float* partial) {
  const int c = blockIdx.x, s = blockIdx.y;
  float acc = 0.f;
  for (int i = s; i < n; i += slices) {
    const float* plane = x + (int64_t(i) * C + c) * hw;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) acc += plane[j];
  }
  __shared__ float red[kChannelSumThreads];
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[int64_t(c) * slices + s] = red[0];
}
__global__ void AddChannelPartials(const float* partial, int C, int slices, float* db) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0;
  for (int k = 0; k < slices; ++k) s += partial[int64_t(c) * slices + k];
  db[c] += float(s);
}
__global__ void ReluForward(const float* x, int64_t n, float* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void ReluBackward(const float* y, const float* dy, int64_t n, float* dx) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}
__global__ void TanhForward(const float* x, int64_t n, float* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = tanhf(x[i]);
}
__global__ void TanhBackward(const float* y, const float* dy, int64_t n, float* dx) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) dx[i] = dy[i] * (1.f - y[i] * y[i]);
}
__global__ void AddInto(float* a, const float* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) a[i] += b[i];
}
__global__ void Sum3(const float* a, const float* b, int64_t n, float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// ---- cuBLAS: row-major products ------------------------------------------------------

// C[m, n] = op(A) op(B) (+ beta C), row-major; A is [m, k] (or [k, m] when ta), B is
// [k, n] (or [n, k] when tb).
void Gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, const float* A, const float* B,
          float* C, float beta) {
  const float alpha = 1.f;
  STAMPEDE_CUBLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    n, m, k, &alpha, B, tb ? k : n, A, ta ? m : k, &beta, C, n));
}

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  bool allow_tf32 = false;
  DeviceArray<uint8_t> workspace;
};

}  // namespace
}  // namespace stampede::net::cuda
