#include "net/network.h"

#include <array>

namespace stampede::net {

const std::string_view kMlp = "mlp", kShallowCnn = "shallow_cnn", kDeepResNet = "deep_resnet",
                       kSmallCnn = "small_cnn";

const char* KindName(LayerSpec::Kind kind) {
  switch (kind) {
    case LayerSpec::Kind::kDense: return "dense";
    case LayerSpec::Kind::kConv: return "conv";
    case LayerSpec::Kind::kMaxPool: return "max_pool";
    case LayerSpec::Kind::kResidual: return "residual";
    case LayerSpec::Kind::kRelu: return "relu";
    case LayerSpec::Kind::kTanh: return "tanh";
  }
  return "?";
}

bool TakesImage(LayerSpec::Kind kind) {
  return kind == LayerSpec::Kind::kConv || kind == LayerSpec::Kind::kMaxPool || kind == LayerSpec::Kind::kResidual;
}

namespace {

using Kind = LayerSpec::Kind;

LayerSpec Dense(std::string name, int units, std::string where) {
  LayerSpec l;
  l.kind = Kind::kDense, l.name = std::move(name), l.units = units, l.where = std::move(where);
  return l;
}
LayerSpec Conv(std::string name, int channels, int k, int s, int p, const std::string& where) {
  LayerSpec l;
  l.kind = Kind::kConv, l.name = std::move(name), l.channels = channels, l.kernel = k, l.stride = s, l.pad = p;
  l.where = where;
  return l;
}
LayerSpec Plain(Kind kind, const std::string& where, int k = 0, int s = 1, int p = 0) {
  LayerSpec l;
  l.kind = kind, l.kernel = k, l.stride = s, l.pad = p, l.where = where;
  return l;
}
std::string PresetWhere(std::string_view name) { return "net.torso \"" + std::string(name) + "\""; }

// The presets. Names and order of the parameters are the layouts these torsos always had.

// Dense layers of net.hidden_sizes, each followed by net.activation.
Torso Mlp(const PresetArgs& a) {
  Torso t;
  t.where = PresetWhere(kMlp);
  t.tag = a.tanh ? "mlp activation tanh" : "mlp activation relu";
  for (size_t i = 0; i < a.hidden_sizes.size(); ++i) {
    t.layers.push_back(Dense("torso/" + std::to_string(i), a.hidden_sizes[i], "net.hidden_sizes"));
    t.layers.push_back(Plain(a.tanh ? Kind::kTanh : Kind::kRelu, "net.hidden_sizes"));
  }
  return t;
}

void AddFc(Torso* t, const PresetArgs& a) {
  t->layers.push_back(Dense("torso/fc", a.fc_size, "net.fc_size"));
  t->layers.push_back(Plain(Kind::kRelu, "net.fc_size"));
}

// IMPALA's shallow network: 16 8x8/4, 32 4x4/2, FC.
Torso ShallowCnn(const PresetArgs& a) {
  Torso t;
  t.where = PresetWhere(kShallowCnn);
  t.layers = {Conv("torso/conv0", 16, 8, 4, 0, t.where), Plain(Kind::kRelu, t.where),
              Conv("torso/conv1", 32, 4, 2, 0, t.where), Plain(Kind::kRelu, t.where)};
  AddFc(&t, a);
  return t;
}

// IMPALA's deep network: 3 stacks of 16, 32, 32 channels, each a 3x3 conv, a 3x3/2
// max-pool and two residual blocks; FC.
Torso DeepResNet(const PresetArgs& a) {
  Torso t;
  t.where = PresetWhere(kDeepResNet);
  const int channels[3] = {16, 32, 32};
  for (int i = 0; i < 3; ++i) {
    const std::string stack = "torso/stack" + std::to_string(i);
    t.layers.push_back(Conv(stack + "/conv", channels[i], 3, 1, 1, t.where));
    t.layers.push_back(Plain(Kind::kMaxPool, t.where, 3, 2, 1));
    for (const char* res : {"/res0", "/res1"}) {
      LayerSpec r = Plain(Kind::kResidual, t.where);
      r.name = stack + res;
      t.layers.push_back(r);
    }
  }
  t.layers.push_back(Plain(Kind::kRelu, t.where));
  AddFc(&t, a);
  return t;
}

// MinAtar's network: 16 3x3/1, FC.
Torso SmallCnn(const PresetArgs& a) {
  Torso t;
  t.where = PresetWhere(kSmallCnn);
  t.layers = {Conv("torso/conv0", 16, 3, 1, 0, t.where), Plain(Kind::kRelu, t.where)};
  AddFc(&t, a);
  return t;
}

const std::array<TorsoPreset, 4> kPresets = {{
    {kMlp, "dense layers of net.hidden_sizes with net.activation (vector observations)", Mlp},
    {kShallowCnn, "IMPALA's shallow network: 16 8x8/4, 32 4x4/2, FC net.fc_size", ShallowCnn},
    {kDeepResNet, "IMPALA's deep network: 3 stacks of 16, 32, 32 channels (conv, max-pool, two residual blocks), FC",
     DeepResNet},
    {kSmallCnn, "MinAtar's network: 16 3x3/1, FC net.fc_size", SmallCnn},
}};

std::string ShapeText(ImageShape s) {
  return "[" + std::to_string(s.c) + ", " + std::to_string(s.h) + ", " + std::to_string(s.w) + "]";
}

}  // namespace

std::span<const TorsoPreset> TorsoPresets() { return kPresets; }

const TorsoPreset* FindTorsoPreset(std::string_view name) {
  if (name.empty()) return &kPresets.front();
  for (const auto& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string TorsoPresetNames() {
  std::string s;
  for (size_t i = 0; i < kPresets.size(); ++i) {
    if (i > 0) s += i + 1 == kPresets.size() ? " or " : ", ";
    s += "\"" + std::string(kPresets[i].name) + "\"";
  }
  return s;
}

Torso CustomTorso(std::vector<LayerSpec> layers) {
  Torso t;
  t.where = "net.layers";
  t.tag = "layers";
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerSpec& l = layers[i];
    if (l.where.empty()) l.where = "net.layers[" + std::to_string(i) + "]";
    const bool weights = l.kind == Kind::kDense || l.kind == Kind::kConv || l.kind == Kind::kResidual;
    if (weights && l.name.empty()) l.name = "torso/layer" + std::to_string(i);
    t.tag += std::string(" ") + KindName(l.kind);
    if (l.kind == Kind::kDense) t.tag += " " + std::to_string(l.units);
    if (l.kind == Kind::kConv) t.tag += " " + std::to_string(l.channels);
    if (l.kind == Kind::kConv || l.kind == Kind::kMaxPool) {
      t.tag += " " + std::to_string(l.kernel) + "/" + std::to_string(l.stride) + "/" + std::to_string(l.pad);
    }
  }
  t.layers = std::move(layers);
  return t;
}

base::StatusOr<std::vector<LayerIo>> TorsoShapes(const Torso& torso, const std::vector<int>& obs_shape) {
  std::vector<LayerIo> io;
  int size = 1;
  for (int d : obs_shape) size *= d;
  ImageShape cur = obs_shape.size() == 3   ? ImageShape{obs_shape[0], obs_shape[1], obs_shape[2]}
                   : obs_shape.size() == 2 ? ImageShape{1, obs_shape[0], obs_shape[1]}
                                           : ImageShape{size, 1, 1};
  bool image = obs_shape.size() == 2 || obs_shape.size() == 3;
  if (torso.images() && !image) {
    return base::InvalidArgument(torso.where + " takes image observations ([H, W] or [C, H, W]), but the env's observation has rank " +
             std::to_string(obs_shape.size()));
  }
  for (size_t i = 0; i < torso.layers.size(); ++i) {
    const LayerSpec& l = torso.layers[i];
    LayerIo x;
    x.in = cur, x.in_image = image;
    const std::string what = l.where + (torso.where == "net.layers" ? " (" + std::string(KindName(l.kind)) + ")" : "");
    if (TakesImage(l.kind) && !image) {
      return base::InvalidArgument(what + ": a " + KindName(l.kind) + " layer needs an image, but its input is a flat vector of " +
               std::to_string(cur.size()) + " (after a dense layer)");
    }
    switch (l.kind) {
      case Kind::kDense:
        if (l.units <= 0) {
          return base::InvalidArgument(what + ": " + std::to_string(l.units) + " is not a positive width");
        }
        cur = ImageShape{l.units, 1, 1}, image = false;
        break;
      case Kind::kConv:
      case Kind::kMaxPool: {
        const int ch = l.kind == Kind::kConv ? l.channels : cur.c;
        if (ch <= 0 || l.kernel <= 0 || l.stride <= 0 || l.pad < 0) {
          return base::InvalidArgument(what + ": channels, kernel and stride must be positive and padding not negative");
        }
        const ImageShape out = ConvShape(cur, ch, l.kernel, l.stride, l.pad);
        if (out.h < 1 || out.w < 1) {
          return base::InvalidArgument(what + ": a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) + " window with stride " +
                   std::to_string(l.stride) + " does not fit the image " + ShapeText(cur) +
                   " (observation shape too small for this torso)");
        }
        cur = out;
        break;
      }
      case Kind::kResidual:  // 3x3 convolutions with padding 1: the shape is kept
      case Kind::kRelu:
      case Kind::kTanh:
        break;
    }
    x.out = cur, x.out_image = image;
    io.push_back(x);
  }
  return io;
}

}  // namespace stampede::net
