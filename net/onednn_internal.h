// What the oneDNN files of net/ share (onednn_conv.cc, onednn_stack.cc): the process's
// engine and the calling thread's OpenMP threads. Included only by those .cc files, in
// builds with oneDNN: it brings in oneDNN's header.
#pragma once

#ifdef STAMPEDE_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>

#include "net/onednn_conv.h"  // ConvGeometry

namespace stampede::net::onednn {

// One engine for the process (engines are thread-safe); each user has its own stream.
dnnl::engine& Engine();
// The calling thread's wanted OpenMP threads (net/onednn_conv.h, SetOneDnnThreads), and
// that count applied to its OpenMP before it calls oneDNN.
int WantedThreads();
void ApplyThreads();
// Whether oneDNN's implementation string names its reference (slow) kernel.
inline bool IsReference(const char* impl) { return std::string(impl).rfind("ref", 0) == 0; }

// A convolution's three primitives' descriptions for a batch of n: weights in oneDNN's
// own layout, the backward passes in the forward's activation layouts; the data gradient's
// only where asked for (a network's first layer needs none); attr: the forward's post-ops
// (a layer run's fused ReLU or residual sum).
struct ConvDescs {
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_weights::primitive_desc bww;
  std::optional<dnnl::convolution_backward_data::primitive_desc> bwd;
  // The kernels among them that are oneDNN's reference ones ("" if none).
  std::string References() const;
};
// The activations in the layout oneDNN prefers (channel-blocked), or NHWC where that
// leaves a reference kernel.
ConvDescs PreferredConvDescs(const ConvGeometry& g, int n, bool data_grad = true,
                             const dnnl::primitive_attr& attr = dnnl::primitive_attr());

}  // namespace stampede::net::onednn

#endif
