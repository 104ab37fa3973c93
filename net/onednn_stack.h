// A run of a torso's image layers (convolutions, ReLUs, max pooling, residual blocks) as
// one float layer on oneDNN, whose activations stay in the layouts oneDNN's kernels
// prefer (channel-blocked) from layer to layer: NCHW only at the run's input and output.
// Layer by layer (net/onednn_conv.h) every convolution reorders its input from NCHW and
// its output back, and the ReLUs, pooling and residual sums run on NCHW; here the run
// pays one reorder at each end. What the CPU model builds by default where the build has
// oneDNN (net.conv_backend "auto" or "onednn"; "onednn_per_layer" keeps the layers
// apart). No oneDNN header leaves the .cc.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "base/status.h"
#include "net/layers.h"
#include "net/network.h"

namespace stampede::net {

// Whether a layer of this kind can be in a run (it works on images and oneDNN has it).
bool StackableOnOneDnn(LayerSpec::Kind kind);
// The end of the longest run of such layers from torso.layers[begin] on images (begin
// itself where there is none); io from TorsoShapes.
size_t StackableRunEnd(const Torso& torso, const std::vector<LayerIo>& io, size_t begin);

// torso.layers[begin, end) (all stackable; io from TorsoShapes) as one layer. It
// registers the layers' parameters in `layout` as the layers made one by one would (the
// same names, shapes and order), so the two share checkpoints. Unavailable, with nothing
// registered, where the build has no oneDNN or one of the layers has only oneDNN's
// reference kernel. With begin == 0 the layer computes no input gradient (Backward's din
// must be null), so the first convolution skips its data gradient.
//
// Backward uses what the last Forward kept (every activation, in oneDNN's layouts); if it
// is called for another input or batch size, it runs that Forward again first.
base::StatusOr<std::unique_ptr<Layer<float>>> MakeOneDnnStack(const Torso& torso, const std::vector<LayerIo>& io,
                                                              size_t begin, size_t end, ParamLayout* layout);

// The run of torso.layers[0, end) timed (`stampede bench --networks`): each layer's
// milliseconds a pass forward and backward inside the run (a reorder counted in the layer
// that needed it; every op waited for), over at least `seconds` and 3 passes after an
// untimed one, on n samples of `in` with output gradient `dout`. params: the torso's
// parameters (the run's come first).
struct OneDnnRunTimes {
  std::vector<double> forward, backward;  // per layer of the run
  std::vector<int> chunk;                  // per layer of the run: its samples a chunk
  int passes = 0;
};
base::StatusOr<OneDnnRunTimes> TimeOneDnnStack(const Torso& torso, const std::vector<LayerIo>& io, size_t end,
                                               const float* params, const float* in, const float* dout, int n,
                                               double seconds);

}  // namespace stampede::net
