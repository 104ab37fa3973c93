// Private to net/cuda/trainer.cu, which includes it once after device.cuh: the network's
// layers on the device (dense, activations, cuDNN convolution and max-pool, residual
// blocks, the LSTM core), each with its forward and backward pass over a [T*B] batch.
#pragma once

#include <vector>

#include "net/cuda/device.cuh"
#include "net/layers.h"  // ConvOut / ConvShape / ImageShape (shape arithmetic only)

namespace stampede::net::cuda {
namespace {

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
    // The bias gradient: per-channel sums of dout (device.cuh).
    const int slices = std::max(1, std::min(n, 2048 / out_.c));
    partial_.Resize(size_t(out_.c) * slices);
    ChannelPartialSums<<<dim3(out_.c, slices), kChannelSumThreads, 0, c.stream>>>(dout, n, out_.c, out_.h * out_.w,
                                                                                 slices, partial_.get());
    AddChannelPartials<<<Blocks(out_.c), 256, 0, c.stream>>>(partial_.get(), out_.c, slices, grad + b_);
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
    // The algorithms are timed on this device at this shape (cudnnFind*, as PyTorch's
    // cudnn.benchmark), fastest first; the first that succeeds within the workspace limit
    // is kept. cuDNN's heuristics (cudnnGet*_v7) chose legacy kernels several times slower
    // for the deep ResNet's convolutions on an H200.
    constexpr size_t kWorkspaceLimit = size_t(1) << 30;
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[8];
    STAMPEDE_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(c.dnn, x_, w_desc_, conv_, y_, 8, &found, fwd));
    size_t need = 0;
    for (int i = 0; i < found; ++i) {
      if (fwd[i].status == CUDNN_STATUS_SUCCESS && fwd[i].memory <= kWorkspaceLimit) {
        fwd_ = fwd[i].algo, need = std::max(need, fwd[i].memory);
        break;
      }
    }
    cudnnConvolutionBwdDataAlgoPerf_t bd[8];
    STAMPEDE_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(c.dnn, w_desc_, y_, conv_, x_, 8, &found, bd));
    for (int i = 0; i < found; ++i) {
      if (bd[i].status == CUDNN_STATUS_SUCCESS && bd[i].memory <= kWorkspaceLimit) {
        bwd_data_ = bd[i].algo, need = std::max(need, bd[i].memory);
        break;
      }
    }
    cudnnConvolutionBwdFilterAlgoPerf_t bf[8];
    STAMPEDE_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(c.dnn, x_, y_, conv_, w_desc_, 8, &found, bf));
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
  DeviceArray<float> partial_;  // the bias gradient's partial sums [C, slices]
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
  // The cell state c of every row after the last Forward [T1 * B, H] (its h is the output).
  const float* cell() const { return c_.get(); }
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

}  // namespace
}  // namespace stampede::net::cuda
