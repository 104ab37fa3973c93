// A float32 2-D convolution on oneDNN (Debian's libdnnl, JIT kernels for the host's
// ISA, one thread): the CPU convolutions' fast path where the build has oneDNN
// (net/layers.h, ConvBackend). The layers keep NCHW activations and [out, in, k, k]
// weights; inside, oneDNN computes in the activation layout it prefers (channel-blocked;
// NHWC where blocked has only a reference kernel) with its own weight layout, and the
// reorders both ways are part of every call. No oneDNN header leaves this file's .cc.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace stampede::net {

struct ConvGeometry {
  int c = 0, h = 0, w = 0;     // input channels and size
  int o = 0, oh = 0, ow = 0;   // output channels and size
  int k = 0, s = 1, p = 0;     // square kernel, stride, padding
};

// oneDNN's convolution on its own, as a yardstick for OneDnnConv (`stampede bench
// --networks`' table by layer): every tensor in the layout oneDNN prefers (no reorders),
// the whole batch of n in one call, each primitive run repeatedly for `seconds`.
// Milliseconds per call; Unavailable without oneDNN.
struct ConvAloneMs {
  double forward = 0, backward_weights = 0, backward_data = 0;
};
base::StatusOr<ConvAloneMs> TimeOneDnnConvAlone(const ConvGeometry& g, int n, double seconds);

// oneDNN's max pooling on its own (kernel g.k, stride g.s, padding g.p; g.o == g.c), the
// same kind of yardstick for the max-pool layers: the layout oneDNN prefers, forward
// (keeping its workspace of winners) and backward from that workspace, n samples a call.
struct PoolAloneMs {
  double forward = 0, backward = 0;
};
base::StatusOr<PoolAloneMs> TimeOneDnnMaxPoolAlone(const ConvGeometry& g, int n, double seconds);

class OneDnnConv {
 public:
  // Unavailable where the build has no oneDNN or oneDNN has only its reference kernel for
  // this geometry (far slower than the Eigen path).
  static base::StatusOr<std::unique_ptr<OneDnnConv>> Create(const ConvGeometry& g);
  ~OneDnnConv();
  // out [n, o, oh, ow] = conv(in [n, c, h, w], w [o, c, k, k]) + b [o].
  void Forward(const float* w, const float* b, const float* in, int n, float* out);
  // Given the input of the last Forward and dLoss/dout: ADDS dLoss/dw and dLoss/db,
  // writes dLoss/din where `din` is non-null.
  void Backward(const float* w, const float* in, const float* dout, int n, float* din, float* dw, float* db);
  // The kernels oneDNN picked for a batch of n (forward, backward weights, backward data).
  std::string Kernels(int n);

 private:
  struct Impl;
  explicit OneDnnConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True where the build has oneDNN.
bool OneDnnBuilt();
// The calling thread's oneDNN work runs on OneDnnThreads() OpenMP threads, one unless
// SetOneDnnThreads said otherwise for this thread (net/gemm.cc's sgemm too).
void UseOneDnnThreads();
// The OpenMP threads the calling thread's oneDNN work runs on from its next call (at least
// 1; a build without oneDNN ignores it). Thread-local: a learner's trainer sets it for
// itself (learner.threads), every other thread keeps one.
void SetOneDnnThreads(int n);
int OneDnnThreads();

}  // namespace stampede::net
