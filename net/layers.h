// The CPU (Eigen) layers the models are built from. Every layer maps n rows of
// in_size() values to n rows of out_size() values (images as C x H x W per row, the
// layout of NCHW). Parameters live in the model's flat buffer at offsets the layer
// took from the ParamLayout when it was built; a layer keeps only scratch space, so it
// is used by one thread at a time. Backward ADDS into the gradient buffer and writes
// (overwrites) the input gradient when `din` is non-null.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/layout.h"
#include "net/network.h"  // ImageShape, ConvShape

namespace stampede::net {

template <class S>
class Layer {
 public:
  virtual ~Layer() = default;
  virtual int in_size() const = 0;
  virtual int out_size() const = 0;
  // Floating-point operations of one row's forward pass (a multiply-add counts 2).
  virtual double flops() const { return 0; }
  virtual void Forward(const S* params, const S* in, int n, S* out) = 0;
  // `in` and `out` are the Forward's input and output for the same n.
  virtual void Backward(const S* params, const S* in, const S* out, const S* dout, int n,
                        S* din, S* grad) = 0;
};

// y = x W + b, W [in, out] ("<name>/w", "<name>/b").
template <class S>
std::unique_ptr<Layer<S>> MakeDense(ParamLayout* layout, const std::string& name, int in, int out);
// Elementwise activations.
template <class S>
std::unique_ptr<Layer<S>> MakeRelu(int size);
template <class S>
std::unique_ptr<Layer<S>> MakeTanh(int size);
// Which code computes the float32 CPU convolutions of layers made from now on
// (process-wide; double-precision layers always use Eigen): oneDNN's JIT kernels where
// the build has oneDNN (the default), else Eigen GEMMs over unrolled windows. With
// kOneDnn, BuildTorso makes each run of image layers one layer whose activations stay in
// oneDNN's layouts (net/onednn_stack.h); with kOneDnnPerLayer each convolution is a
// layer of its own that reorders from NCHW and back. A convolution oneDNN has only a
// reference kernel for stays on Eigen.
enum class ConvBackend { kEigen, kOneDnn, kOneDnnPerLayer };
// false (and nothing changes) if oneDNN is asked for and the build lacks it.
bool SetConvBackend(ConvBackend backend);
ConvBackend GetConvBackend();
const char* ConvBackendName(ConvBackend backend);
// 2-D convolution, weights [out_channels, in.c, k, k] ("<name>/w"), bias [out_channels].
template <class S>
std::unique_ptr<Layer<S>> MakeConv(ParamLayout* layout, const std::string& name, ImageShape in,
                                   int out_channels, int k, int stride, int pad);
// Max-pooling over k x k windows (padding never wins), per channel.
template <class S>
std::unique_ptr<Layer<S>> MakeMaxPool(ImageShape in, int k, int stride, int pad);
// IMPALA's residual block: x + conv1(relu(conv0(relu(x)))), 3x3 convolutions with
// padding 1 and in.c channels ("<name>/conv0", "<name>/conv1").
template <class S>
std::unique_ptr<Layer<S>> MakeResidual(ParamLayout* layout, const std::string& name, ImageShape in);

// A torso's layers (net/network.h's Torso: a preset's list or net.layers) on an
// observation of `obs_shape`, their parameters registered in list order (what a CPU
// model builds). In float with ConvBackend::kOneDnn, each run of image layers becomes one
// layer on oneDNN (net/onednn_stack.h; the same parameters), unless `per_layer` (the
// bench's table by layer) or oneDNN lacks a real kernel for one of them. An error names
// a layer that does not fit its input.
template <class S>
base::StatusOr<std::vector<std::unique_ptr<Layer<S>>>> BuildTorso(const Torso& torso, const std::vector<int>& obs_shape,
                                                                  ParamLayout* layout, bool per_layer = false);

// An LSTM core over a time-major sequence [T1, B, in]: gates [i, f, g, o] =
// x Wx + h Wh + b ("<name>/wx" [in, 4H], "<name>/wh" [H, 4H], "<name>/b" [4H]);
// c' = f c + i g, h' = o tanh(c'). State rows are [h (H), c (H)]. Where first[t, b]
// is set, the state entering step t is zero (a new episode).
template <class S>
class Lstm {
 public:
  Lstm(ParamLayout* layout, const std::string& name, int in, int hidden);
  ~Lstm();
  int in_size() const { return in_; }
  int hidden() const { return h_; }
  int state_size() const { return 2 * h_; }
  double flops() const { return 2.0 * (in_ + h_) * 4 * h_; }
  // x [T1 * B, in] -> out [T1 * B, H]. initial_state [B, 2H] (null: zeros);
  // final_state [B, 2H] (may be null). Keeps what Backward needs.
  void Forward(const S* params, const S* x, int T1, int B, const uint8_t* first,
               const S* initial_state, S* out, S* final_state);
  // dout [T1 * B, H] -> dx [T1 * B, in] (overwritten); ADDS parameter gradients.
  void Backward(const S* params, const S* dout, S* dx, S* grad);

 private:
  struct Scratch;
  int in_, h_;
  int64_t wx_, wh_, b_;
  std::unique_ptr<Scratch> s_;
};

}  // namespace stampede::net
