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

// ---- layers ----------------------------------------------------------------------------

class GLayer {
 public:
  virtual ~GLayer() = default;
  virtual int in_size() const = 0;
  virtual int out_size() const = 0;
  virtual void Forward(Context& c, const float* p, const float* in, int n, float* out) = 0;
  virtual void Backward(Context& c, const float* p, const float* in, const float* out,
                        const float* dout, int n, float* din, float* grad) = 0;
};

class GDense : public GLayer {
 public:
  GDense(ParamLayout* layout, const std::string& name, int in, int out) : in_(in), out_(out) {
    w_ = layout->Add(name + "/w", {in, out});
    b_ = layout->Add(name + "/b", {out});
  }
  int in_size() const override { return in_; }
  int out_size() const override { return out_; }
  void Forward(Context& c, const float* p, const float* in, int n, float* out) override {
    Gemm(c.blas, false, false, n, out_, in_, in, p + w_, out, 0.f);
    AddRowBias<<<Blocks(int64_t(n) * out_), 256, 0, c.stream>>>(out, p + b_, n, out_);
  }
  void Backward(Context& c, const float* p, const float* in, const float*, const float* dout, int n,
                float* din, float* grad) override {
    Gemm(c.blas, true, false, in_, out_, n, in, dout, grad + w_, 1.f);
    AddColumnSums<<<Blocks(out_), 256, 0, c.stream>>>(dout, n, out_, grad + b_);
    if (din) Gemm(c.blas, false, true, n, in_, out_, dout, p + w_, din, 0.f);
  }

 private:
  int in_, out_;
  int64_t w_, b_;
};

class GActivation : public GLayer {
 public:
  GActivation(int size, bool tanh) : size_(size), tanh_(tanh) {}
  int in_size() const override { return size_; }
  int out_size() const override { return size_; }
  void Forward(Context& c, const float*, const float* in, int n, float* out) override {
    const int64_t m = int64_t(n) * size_;
    if (tanh_) {
      TanhForward<<<Blocks(m), 256, 0, c.stream>>>(in, m, out);
    } else {
      ReluForward<<<Blocks(m), 256, 0, c.stream>>>(in, m, out);
    }
  }
  void Backward(Context& c, const float*, const float*, const float* out, const float* dout, int n,
                float* din, float*) override {
    if (!din) return;
    const int64_t m = int64_t(n) * size_;
    if (tanh_) {
      TanhBackward<<<Blocks(m), 256, 0, c.stream>>>(out, dout, m, din);
    } else {
      ReluBackward<<<Blocks(m), 256, 0, c.stream>>>(out, dout, m, din);
    }
  }

 private:
  int size_;
  bool tanh_;
};

cudnnTensorDescriptor_t Tensor4(int n, ImageShape s) {
  cudnnTensorDescriptor_t d;
  STAMPEDE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  STAMPEDE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w));
  return d;
}

class GConv : public GLayer {
 public:
  GConv(ParamLayout* layout, const std::string& name, ImageShape in, int out_channels, int k, int s, int p)
      : in_(in), out_(ConvShape(in, out_channels, k, s, p)), k_(k), s_(s), p_(p) {
    w_ = layout->Add(name + "/w", {out_channels, in.c, k, k});
    b_ = layout->Add(name + "/b", {out_channels});
  }
  ~GConv() override { Release(); }
  int in_size() const override { return in_.size(); }
  int out_size() const override { return out_.size(); }

  void Forward(Context& c, const float* p, const float* in, int n, float* out) override {
    Prepare(c, n);
    const float one = 1.f, zero = 0.f;
    STAMPEDE_CUDNN_CHECK(cudnnConvolutionForward(c.dnn, &one, x_, in, w_desc_, p + w_, conv_, fwd_,
                                                 c.workspace.get(), c.workspace.size(), &zero, y_, out));
    STAMPEDE_CUDNN_CHECK(cudnnAddTensor(c.dnn, &one, bias_, p + b_, &one, y_, out));
  }
  void Backward(Context& c, const float* p, const float* in, const float*, const float* dout, int n,
                float* din, float* grad) override {
    Prepare(c, n);
    const float one = 1.f, zero = 0.f;
    STAMPEDE_CUDNN_CHECK(cudnnConvolutionBackwardBias(c.dnn, &one, y_, dout, &one, bias_, grad + b_));
    STAMPEDE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.dnn, &one, x_, in, y_, dout, conv_, bwd_filter_,
                                                        c.workspace.get(), c.workspace.size(), &one,
                                                        w_desc_, grad + w_));
    if (din) {
      STAMPEDE_CUDNN_CHECK(cudnnConvolutionBackwardData(c.dnn, &one, w_desc_, p + w_, y_, dout, conv_,
                                                        bwd_data_, c.workspace.get(), c.workspace.size(),
                                                        &zero, x_, din));
    }
  }

 private:
  // Descriptors and algorithms for a batch of n rows (rebuilt when n changes).
  void Prepare(Context& c, int n) {
    if (n == n_) return;
    Release();
    n_ = n;
    x_ = Tensor4(n, in_);
    y_ = Tensor4(n, out_);
    bias_ = Tensor4(1, ImageShape{out_.c, 1, 1});
    STAMPEDE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
    STAMPEDE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, out_.c,
                                                    in_.c, k_, k_));
    STAMPEDE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    STAMPEDE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, p_, p_, s_, s_, 1, 1, CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT));
    STAMPEDE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, c.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    constexpr size_t kWorkspaceLimit = size_t(1) << 30;
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[8];
    STAMPEDE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c.dnn, x_, w_desc_, conv_, y_, 8, &found, fwd));
    size_t need = 0;
    for (int i = 0; i < found; ++i) {
      if (fwd[i].status == CUDNN_STATUS_SUCCESS && fwd[i].memory <= kWorkspaceLimit) {
        fwd_ = fwd[i].algo, need = std::max(need, fwd[i].memory);
        break;
      }
    }
    cudnnConvolutionBwdDataAlgoPerf_t bd[8];
    STAMPEDE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.dnn, w_desc_, y_, conv_, x_, 8, &found, bd));
    for (int i = 0; i < found; ++i) {
      if (bd[i].status == CUDNN_STATUS_SUCCESS && bd[i].memory <= kWorkspaceLimit) {
        bwd_data_ = bd[i].algo, need = std::max(need, bd[i].memory);
        break;
      }
    }
    cudnnConvolutionBwdFilterAlgoPerf_t bf[8];
    STAMPEDE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.dnn, x_, y_, conv_, w_desc_, 8, &found, bf));
    for (int i = 0; i < found; ++i) {
      if (bf[i].status == CUDNN_STATUS_SUCCESS && bf[i].memory <= kWorkspaceLimit) {
        bwd_filter_ = bf[i].algo, need = std::max(need, bf[i].memory);
        break;
      }
    }
    c.workspace.Resize(need);
  }
  void Release() {
    if (n_ < 0) return;
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyFilterDescriptor(w_desc_);
    cudnnDestroyConvolutionDescriptor(conv_);
    n_ = -1;
  }
  ImageShape in_, out_;
  int k_, s_, p_;
  int64_t w_, b_;
  int n_ = -1;
  cudnnTensorDescriptor_t x_{}, y_{}, bias_{};
  cudnnFilterDescriptor_t w_desc_{};
  cudnnConvolutionDescriptor_t conv_{};
  cudnnConvolutionFwdAlgo_t fwd_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
};

class GMaxPool : public GLayer {
 public:
  GMaxPool(ImageShape in, int k, int s, int p) : in_(in), out_(ConvShape(in, in.c, k, s, p)), k_(k), s_(s), p_(p) {}
  ~GMaxPool() override { Release(); }
  int in_size() const override { return in_.size(); }
  int out_size() const override { return out_.size(); }
  void Forward(Context& c, const float*, const float* in, int n, float* out) override {
    Prepare(n);
    const float one = 1.f, zero = 0.f;
    STAMPEDE_CUDNN_CHECK(cudnnPoolingForward(c.dnn, pool_, &one, x_, in, &zero, y_, out));
  }
  void Backward(Context& c, const float*, const float* in, const float* out, const float* dout, int n,
                float* din, float*) override {
    if (!din) return;
    Prepare(n);
    const float one = 1.f, zero = 0.f;
    STAMPEDE_CUDNN_CHECK(cudnnPoolingBackward(c.dnn, pool_, &one, y_, out, y_, dout, x_, in, &zero, x_, din));
  }

 private:
  void Prepare(int n) {
    if (n == n_) return;
    Release();
    n_ = n;
    x_ = Tensor4(n, in_);
    y_ = Tensor4(n, out_);
    STAMPEDE_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    STAMPEDE_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, k_, k_,
                                                     p_, p_, s_, s_));
  }
  void Release() {
    if (n_ < 0) return;
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyPoolingDescriptor(pool_);
    n_ = -1;
  }
  ImageShape in_, out_;
  int k_, s_, p_;
  int n_ = -1;
  cudnnTensorDescriptor_t x_{}, y_{};
  cudnnPoolingDescriptor_t pool_{};
};

class GResidual : public GLayer {
 public:
  GResidual(ParamLayout* layout, const std::string& name, ImageShape in)
      : size_(in.size()), relu_(in.size(), false), conv0_(layout, name + "/conv0", in, in.c, 3, 1, 1),
        conv1_(layout, name + "/conv1", in, in.c, 3, 1, 1) {}
  int in_size() const override { return size_; }
  int out_size() const override { return size_; }
  void Forward(Context& c, const float* p, const float* in, int n, float* out) override {
    const size_t m = size_t(n) * size_;
    a0_.Resize(m), h0_.Resize(m), a1_.Resize(m), h1_.Resize(m), d0_.Resize(m), d1_.Resize(m);
    relu_.Forward(c, p, in, n, a0_.get());
    conv0_.Forward(c, p, a0_.get(), n, h0_.get());
    relu_.Forward(c, p, h0_.get(), n, a1_.get());
    conv1_.Forward(c, p, a1_.get(), n, h1_.get());
    Sum3<<<Blocks(int64_t(m)), 256, 0, c.stream>>>(in, h1_.get(), int64_t(m), out);
  }
  void Backward(Context& c, const float* p, const float* in, const float*, const float* dout, int n,
                float* din, float* grad) override {
    const int64_t m = int64_t(n) * size_;
    conv1_.Backward(c, p, a1_.get(), h1_.get(), dout, n, d0_.get(), grad);
    relu_.Backward(c, p, h0_.get(), a1_.get(), d0_.get(), n, d1_.get(), grad);
    conv0_.Backward(c, p, a0_.get(), h0_.get(), d1_.get(), n, d0_.get(), grad);
    if (!din) return;
    relu_.Backward(c, p, in, a0_.get(), d0_.get(), n, d1_.get(), grad);
    Sum3<<<Blocks(m), 256, 0, c.stream>>>(dout, d1_.get(), m, din);
  }

 private:
  int size_;
  GActivation relu_;
  GConv conv0_, conv1_;
  DeviceArray<float> a0_, h0_, a1_, h1_, d0_, d1_;
};

// ---- LSTM ------------------------------------------------------------------------------

// State entering step t for each row: zero where `first`, the initial state at t = 0,
// else the previous step's h and c.
__global__ void LstmEnterStep(int t, int B, int H, const uint8_t* first, const float* initial,
                              const float* out, const float* c, float* h_prev, float* c_prev) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  const int b = i / H, j = i % H;
  const int64_t r = int64_t(t) * B + b;
  float h = 0.f, cc = 0.f;
  if (!first[r]) {
    if (t == 0) {
      if (initial) h = initial[int64_t(b) * 2 * H + j], cc = initial[int64_t(b) * 2 * H + H + j];
    } else {
      h = out[(r - B) * H + j], cc = c[(r - B) * H + j];
    }
  }
  h_prev[r * H + j] = h;
  c_prev[r * H + j] = cc;
}
__global__ void LstmCell(int t, int B, int H, float* gates, const float* c_prev, float* c, float* tanh_c,
                         float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  const int b = i / H, j = i % H;
  const int64_t r = int64_t(t) * B + b;
  LstmCellForward(gates + r * 4 * H, H, j, c_prev[r * H + j], &c[r * H + j], &tanh_c[r * H + j], &out[r * H + j]);
}
__global__ void LstmCellGrad(int t, int B, int H, const float* gates, const float* c_prev, const float* tanh_c,
                             const float* dout, const float* dh_rec, float* dc_rec, float* dz) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  const int b = i / H, j = i % H;
  const int64_t r = int64_t(t) * B + b;
  float dc_prev;
  LstmCellBackward(gates + r * 4 * H, H, j, c_prev[r * H + j], tanh_c[r * H + j],
                   dout[r * H + j] + dh_rec[b * H + j], dc_rec[b * H + j], dz + r * 4 * H, &dc_prev);
  dc_rec[b * H + j] = dc_prev;
}
__global__ void LstmCut(int t, int B, int H, const uint8_t* first, float* dh_rec, float* dc_rec) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  if (first[int64_t(t) * B + i / H]) dh_rec[i] = 0.f, dc_rec[i] = 0.f;
}

class GLstm {
 public:
  GLstm(ParamLayout* layout, int in, int H) : in_(in), h_(H) {
    wx_ = layout->Add("core/wx", {in, 4 * H});
    wh_ = layout->Add("core/wh", {H, 4 * H});
    b_ = layout->Add("core/b", {4 * H});
  }
  void Forward(Context& c, const float* p, const float* x, int T1, int B, const uint8_t* first,
               const float* initial, float* out) {
    const int H = h_;
    const int64_t rows = int64_t(T1) * B;
    T1_ = T1, B_ = B, x_ = x, first_ = first;
    gates_.Resize(rows * 4 * H), h_prev_.Resize(rows * H), c_prev_.Resize(rows * H);
    c_.Resize(rows * H), tanh_c_.Resize(rows * H);
    Gemm(c.blas, false, false, int(rows), 4 * H, in_, x, p + wx_, gates_.get(), 0.f);
    AddRowBias<<<Blocks(rows * 4 * H), 256, 0, c.stream>>>(gates_.get(), p + b_, rows, 4 * H);
    for (int t = 0; t < T1; ++t) {
      LstmEnterStep<<<Blocks(B * H), 256, 0, c.stream>>>(t, B, H, first, initial, out, c_.get(), h_prev_.get(),
                                                          c_prev_.get());
      Gemm(c.blas, false, false, B, 4 * H, H, h_prev_.get() + int64_t(t) * B * H, p + wh_,
           gates_.get() + int64_t(t) * B * 4 * H, 1.f);
      LstmCell<<<Blocks(B * H), 256, 0, c.stream>>>(t, B, H, gates_.get(), c_prev_.get(), c_.get(),
                                                     tanh_c_.get(), out);
    }
  }
  void Backward(Context& c, const float* p, const float* dout, float* dx, float* grad) {
    const int H = h_, T1 = T1_, B = B_;
    const int64_t rows = int64_t(T1) * B;
    dz_.Resize(rows * 4 * H), dh_rec_.Resize(size_t(B) * H), dc_rec_.Resize(size_t(B) * H);
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(dh_rec_.get(), 0, sizeof(float) * B * H, c.stream));
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(dc_rec_.get(), 0, sizeof(float) * B * H, c.stream));
    for (int t = T1 - 1; t >= 0; --t) {
      LstmCellGrad<<<Blocks(B * H), 256, 0, c.stream>>>(t, B, H, gates_.get(), c_prev_.get(), tanh_c_.get(),
                                                         dout, dh_rec_.get(), dc_rec_.get(), dz_.get());
      Gemm(c.blas, false, true, B, H, 4 * H, dz_.get() + int64_t(t) * B * 4 * H, p + wh_, dh_rec_.get(), 0.f);
      LstmCut<<<Blocks(B * H), 256, 0, c.stream>>>(t, B, H, first_, dh_rec_.get(), dc_rec_.get());
    }
    Gemm(c.blas, true, false, in_, 4 * H, int(rows), x_, dz_.get(), grad + wx_, 1.f);
    Gemm(c.blas, true, false, H, 4 * H, int(rows), h_prev_.get(), dz_.get(), grad + wh_, 1.f);
    AddColumnSums<<<Blocks(4 * H), 256, 0, c.stream>>>(dz_.get(), rows, 4 * H, grad + b_);
    Gemm(c.blas, false, true, int(rows), in_, 4 * H, dz_.get(), p + wx_, dx, 0.f);
  }

 private:
  int in_, h_;
  int64_t wx_, wh_, b_;
  int T1_ = 0, B_ = 0;
  const float* x_ = nullptr;
  const uint8_t* first_ = nullptr;
  DeviceArray<float> gates_, h_prev_, c_prev_, c_, tanh_c_, dz_, dh_rec_, dc_rec_;
};

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

// stats: [pg_loss, baseline_loss (before the cost), entropy sum, counted]; moments: the
// advantages' (AdvantageMoments) to standardise them, or null.
__global__ void LossKernel(int TB, int B, LossParams lp, const float* policy, const float* values,
                           const int32_t* actions, const float* box_actions, const uint8_t* valid,
                           const float* vs, const float* pg_adv, const double* moments, float* dpolicy,
                           float* dvalues, double* stats) {
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
__global__ void ClipAndRmsProp(float* w, float* ms, float* mom, const float* g, int64_t n, const double* sq_norm,
                               double max_norm, float lr, float decay, float momentum, float eps) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double norm = sqrt(*sq_norm);
  if (!isfinite(norm)) return;  // a non-finite gradient is never applied (the learner counts it)
  const float scale = max_norm > 0 && norm > max_norm ? float(max_norm / norm) : 1.f;
  RmsPropElement(w[i], ms[i], mom[i], g[i] * scale, lr, decay, momentum, eps);
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
    stats_.Resize(8);  // loss stats [0, 4), gradient norm [4], advantage moments [5, 8)
    STAMPEDE_CUDA_CHECK(cudaMallocHost(&host_stats_, 5 * sizeof(double)));
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
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(staged_[slot].get(), h, packed_bytes_, cudaMemcpyHostToDevice, copy_stream_));
    STAMPEDE_CUDA_CHECK(cudaEventRecord(copied_[slot], copy_stream_));
    current_slot_ = slot;
  }

  void Launch(double lr) override {
    Device();
    Compute();
    const int64_t N = layout_.total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    ClipAndRmsProp<<<Blocks(N), 256, 0, ctx_.stream>>>(params_.get(), ms_.get(), mom_.get(), grad_.get(), N,
                                                        stats_.get() + 4, opt_.max_grad_norm, float(lr),
                                                        opt_.rms_decay, opt_.rms_momentum, opt_.rms_epsilon);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), 5 * sizeof(double), cudaMemcpyDeviceToHost,
                                        ctx_.stream));
  }

  StepStats Wait() override {
    Device();
    return Finish();
  }

  StepStats ForwardAndGradient(std::vector<float>* policy, std::vector<float>* values,
                               std::vector<float>* grad) override {
    Device();
    Compute();
    const int64_t N = layout_.total_size();
    STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 4, 0, sizeof(double), ctx_.stream));
    SquaredNorm<<<256, 256, 0, ctx_.stream>>>(grad_.get(), N, stats_.get() + 4);
    STAMPEDE_CUDA_CHECK(cudaMemcpyAsync(host_stats_, stats_.get(), 5 * sizeof(double), cudaMemcpyDeviceToHost,
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
    size_t obs, actions, rewards, terminated, truncated, valid, behaviour, truncation_values, initial_state;
  };
  void Add(size_t* offset, size_t bytes) {
    *offset = packed_bytes_;
    packed_bytes_ += (bytes + 255) / 256 * 256;
  }

  void Build() {
    const ImageShape img0 = spec_.obs_shape.size() == 3   ? ImageShape{spec_.obs_shape[0], spec_.obs_shape[1], spec_.obs_shape[2]}
                            : spec_.obs_shape.size() == 2 ? ImageShape{1, spec_.obs_shape[0], spec_.obs_shape[1]}
                                                          : ImageShape{};
    ImageShape img = img0;
    auto conv = [&](const std::string& name, int ch, int k, int s, int p) {
      torso_.push_back(std::make_unique<GConv>(&layout_, name, img, ch, k, s, p));
      img = ConvShape(img, ch, k, s, p);
    };
    auto relu = [&](int size) { torso_.push_back(std::make_unique<GActivation>(size, false)); };
    if (spec_.torso == "mlp") {
      layout_.set_tag(spec_.activation == Activation::kTanh ? "mlp activation tanh" : "mlp activation relu");
      int in = spec_.obs_size();
      for (size_t i = 0; i < spec_.hidden_sizes.size(); ++i) {
        const int out = spec_.hidden_sizes[i];
        torso_.push_back(std::make_unique<GDense>(&layout_, "torso/" + std::to_string(i), in, out));
        torso_.push_back(std::make_unique<GActivation>(out, spec_.activation == Activation::kTanh));
        in = out;
      }
      feature_ = in;
    } else {
      if (spec_.torso == "shallow_cnn") {
        conv("torso/conv0", 16, 8, 4, 0);
        relu(img.size());
        conv("torso/conv1", 32, 4, 2, 0);
        relu(img.size());
      } else if (spec_.torso == "small_cnn") {
        conv("torso/conv0", 16, 3, 1, 0);
        relu(img.size());
      } else {  // deep_resnet
        const int channels[3] = {16, 32, 32};
        for (int i = 0; i < 3; ++i) {
          const std::string stack = "torso/stack" + std::to_string(i);
          conv(stack + "/conv", channels[i], 3, 1, 1);
          torso_.push_back(std::make_unique<GMaxPool>(img, 3, 2, 1));
          img = ConvShape(img, img.c, 3, 2, 1);
          torso_.push_back(std::make_unique<GResidual>(&layout_, stack + "/res0", img));
          torso_.push_back(std::make_unique<GResidual>(&layout_, stack + "/res1", img));
        }
        relu(img.size());
      }
      torso_.push_back(std::make_unique<GDense>(&layout_, "torso/fc", img.size(), spec_.fc_size));
      relu(spec_.fc_size);
      feature_ = spec_.fc_size;
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
    const double* moments = nullptr;
    if (opt_.normalize_advantages) {
      STAMPEDE_CUDA_CHECK(cudaMemsetAsync(stats_.get() + 5, 0, 3 * sizeof(double), ctx_.stream));
      AdvantageMoments<<<Blocks(TB), 256, 0, ctx_.stream>>>(TB, valid, pg_adv_.get(), stats_.get() + 5);
      moments = stats_.get() + 5;
    }
    LossKernel<<<Blocks(TB + B), 256, 0, ctx_.stream>>>(TB, B, lp, policy_.get(), values_.get(), actions, box, valid,
                                                        vs_.get(), pg_adv_.get(), moments, dpolicy_.get(),
                                                        dvalues_.get(), stats_.get());
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
  int64_t rows_ = 0;
  DeviceArray<float> params_, grad_, ms_, mom_, input_, policy_, values_, dpolicy_, dvalues_;
  DeviceArray<float> log_rhos_, discounts_, rewards_, vs_, pg_adv_, core_out_, head_tmp_, dA_, dB_;
  DeviceArray<uint8_t> first_;
  DeviceArray<double> stats_;
  std::vector<DeviceArray<float>> acts_;
  Offsets off_{};
  size_t packed_bytes_ = 0;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  DeviceArray<uint8_t> staged_[2];
  cudaEvent_t copied_[2]{}, consumed_[2]{};
  int next_slot_ = 0, current_slot_ = -1;
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
