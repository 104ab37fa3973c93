// Networks as data: a torso is a list of layer specs (dense, conv, max-pool, IMPALA's
// residual block, relu, tanh) that every backend builds from (net/model.cc on the CPU,
// net/cuda/trainer.cu on the GPU). The named torsos
// ("presets") are declared once, in the registry in network.cc; a config may name one
// (net.torso) or give its own list (net.layers). The LSTM core and the heads follow the
// torso as before (net.lstm_size, the env's action space).
//
// Parameters keep one flat layout: each layer with weights registers "<name>/w" and
// "<name>/b" (a residual block "<name>/conv0/..." and "<name>/conv1/...") in list order,
// so a preset's list reproduces the layout of the networks it always built and their
// checkpoints load bit for bit.
//
// No heavy headers: the config check (wire/) uses this too.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace stampede::net {

struct ImageShape {
  int c = 0, h = 0, w = 0;
  int size() const { return c * h * w; }
};

// Output side of a k x k window with stride s and padding p on each side.
// (0 when the window does not fit).
inline int ConvOut(int in, int k, int s, int p) { return in + 2 * p < k ? 0 : (in + 2 * p - k) / s + 1; }

// Output image of a conv or pool layer.
inline ImageShape ConvShape(ImageShape in, int out_channels, int k, int s, int p) {
  return ImageShape{out_channels, ConvOut(in.h, k, s, p), ConvOut(in.w, k, s, p)};
}

struct LayerSpec {
  enum class Kind { kDense, kConv, kMaxPool, kResidual, kRelu, kTanh };
  Kind kind = Kind::kDense;
  std::string name;  // the parameters' prefix (dense, conv, residual); empty for the others
  int units = 0;     // dense: outputs (the input is flattened)
  int channels = 0;  // conv: output channels
  int kernel = 0, stride = 1, pad = 0;  // conv, max-pool: square windows
  std::string where;  // where it was described, for messages ("net.hidden_sizes", "net.layers[2]")
};

// "dense", "conv", "max_pool", "residual", "relu", "tanh" (net.layers' field names).
const char* KindName(LayerSpec::Kind kind);
// Whether the layer works on images ([C, H, W] rows) rather than flat vectors.
bool TakesImage(LayerSpec::Kind kind);

struct Torso {
  std::vector<LayerSpec> layers;
  // Goes into the parameter layout's fingerprint, so networks with the same tensors but
  // different parameterless layers do not load each other's checkpoints.
  std::string tag;
  std::string where;  // `net.torso "<preset>"` or `net.layers`, for messages
  // The first layer works on images: the observation must be [H, W] or [C, H, W].
  bool images() const { return !layers.empty() && TakesImage(layers.front().kind); }
};

// What the presets take from the config.
struct PresetArgs {
  std::vector<int> hidden_sizes{64, 64};  // net.hidden_sizes (mlp)
  bool tanh = false;                      // net.activation "tanh" (mlp)
  int fc_size = 256;                      // net.fc_size (the CNN presets' last layer)
};

struct TorsoPreset {
  std::string_view name;
  std::string_view about;  // one line, for --help and errors
  Torso (*build)(const PresetArgs& args);
};

// The registry (network.cc), in the order the docs list them; the first is the default
// (an unset net.torso with no net.layers).
std::span<const TorsoPreset> TorsoPresets();
// The preset of that name; the default for an empty name (an unset net.torso); null where
// there is no such preset.
const TorsoPreset* FindTorsoPreset(std::string_view name);
// The presets' names, quoted, joined with commas and a final "or", for messages.
std::string TorsoPresetNames();
// The presets' names for code that needs one of them (benchmarks): the strings live in
// network.cc only.
extern const std::string_view kMlp, kShallowCnn, kDeepResNet, kSmallCnn;

// A network of the user's own (net.layers): parameters named "torso/layer<i>", the tag
// from the whole list.
Torso CustomTorso(std::vector<LayerSpec> layers);

// One layer's input and output: an image, or a flat vector of `size()` values
// (ImageShape{size, 1, 1}, image false).
struct LayerIo {
  ImageShape in, out;
  bool in_image = false, out_image = false;
};
// Walks the torso from the observation shape ([D], [H, W] or [C, H, W]): each layer's
// input and output, or an error naming the layer that does not fit (an image layer on a
// vector, a window larger than its image, a width that is not positive).
base::StatusOr<std::vector<LayerIo>> TorsoShapes(const Torso& torso, const std::vector<int>& obs_shape);

}  // namespace stampede::net
