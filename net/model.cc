#include "net/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <type_traits>

#include "net/layers.h"
#include "net/onednn_stack.h"

namespace stampede::net {

int ModelSpec::obs_size() const {
  int n = 1;
  for (int d : obs_shape) n *= d;
  return n;
}

PolicyShape CategoricalPolicy(int num_actions) {
  PolicyShape p;
  p.kind = PolicyKind::kCategorical;
  p.num_components = 1;
  p.nvec[0] = num_actions;
  return p;
}

namespace {
ImageShape ImageOf(const std::vector<int>& shape) {
  if (shape.size() == 3) return ImageShape{shape[0], shape[1], shape[2]};
  if (shape.size() == 2) return ImageShape{1, shape[0], shape[1]};
  return ImageShape{};
}

}  // namespace

template <class S>
base::StatusOr<std::vector<std::unique_ptr<Layer<S>>>> BuildTorso(const Torso& torso, const std::vector<int>& obs_shape,
                                                                  ParamLayout* layout, bool per_layer) {
  ASSIGN_OR_RETURN(const std::vector<LayerIo> io, TorsoShapes(torso, obs_shape));
  layout->set_tag(torso.tag);
  std::vector<std::unique_ptr<Layer<S>>> L;
  for (size_t i = 0; i < torso.layers.size(); ++i) {
    const LayerSpec& l = torso.layers[i];
    const LayerIo& x = io[i];
    if constexpr (std::is_same_v<S, float>) {
      // A run of image layers with a convolution in it, as one layer on oneDNN.
      if (!per_layer && GetConvBackend() == ConvBackend::kOneDnn) {
        const size_t end = StackableRunEnd(torso, io, i);
        const bool conv = std::any_of(torso.layers.begin() + i, torso.layers.begin() + end, [](const LayerSpec& s) {
          return s.kind == LayerSpec::Kind::kConv || s.kind == LayerSpec::Kind::kResidual;
        });
        if (conv) {
          auto stack = MakeOneDnnStack(torso, io, i, end, layout);
          if (stack.ok()) {
            L.push_back(std::move(stack).value());
            i = end - 1;
            continue;
          }
        }
      }
    }
    switch (l.kind) {
      case LayerSpec::Kind::kDense:
        L.push_back(MakeDense<S>(layout, l.name, x.in.size(), l.units));
        break;
      case LayerSpec::Kind::kConv:
        L.push_back(MakeConv<S>(layout, l.name, x.in, l.channels, l.kernel, l.stride, l.pad));
        break;
      case LayerSpec::Kind::kMaxPool:
        L.push_back(MakeMaxPool<S>(x.in, l.kernel, l.stride, l.pad));
        break;
      case LayerSpec::Kind::kResidual:
        L.push_back(MakeResidual<S>(layout, l.name, x.in));
        break;
      case LayerSpec::Kind::kRelu:
        L.push_back(MakeRelu<S>(x.in.size()));
        break;
      case LayerSpec::Kind::kTanh:
        L.push_back(MakeTanh<S>(x.in.size()));
        break;
    }
  }
  return L;
}
template base::StatusOr<std::vector<std::unique_ptr<Layer<float>>>> BuildTorso<float>(const Torso&,
                                                                                    const std::vector<int>&,
                                                                                    ParamLayout*, bool);
template base::StatusOr<std::vector<std::unique_ptr<Layer<double>>>> BuildTorso<double>(const Torso&,
                                                                                      const std::vector<int>&,
                                                                                      ParamLayout*, bool);

namespace {

template <class S>
class CpuModel : public Model<S> {
 public:
  explicit CpuModel(const ModelSpec& spec) : spec_(spec) {
    if (std::string e = spec.Check(); !e.empty()) throw std::invalid_argument(e);
    const Torso torso = TorsoOf(spec_);
    images_ = torso.images();
    auto built = BuildTorso<S>(torso, spec_.obs_shape, &layout_);
    if (!built.ok()) throw std::invalid_argument(built.status().message());
    torso_ = std::move(built).value();
    feature_ = torso_.empty() ? spec_.obs_size() : torso_.back()->out_size();
    if (spec_.lstm_size > 0) {
      core_ = std::make_unique<Lstm<S>>(&layout_, "core", feature_, spec_.lstm_size);
      feature_ = spec_.lstm_size;
    }
    const bool gaussian = spec_.policy.kind == PolicyKind::kGaussian;
    head_outputs_ = gaussian ? spec_.policy.num_components : spec_.policy.output_size();
    policy_ = MakeDense<S>(&layout_, "policy", feature_, head_outputs_);
    if (gaussian) log_std_ = layout_.Add("policy/log_std", {spec_.policy.num_components});
    baseline_ = MakeDense<S>(&layout_, "baseline", feature_, spec_.num_values);
    if (spec_.popart) layout_.Add("popart/stats", {2, spec_.num_values});
    acts_.resize(torso_.size() + 1);
  }
  const ModelSpec& spec() const override { return spec_; }
  const ParamLayout& layout() const override { return layout_; }
  double ForwardFlops() const override {
    double f = policy_->flops() + baseline_->flops() + (core_ ? core_->flops() : 0);
    for (const auto& l : torso_) f += l->flops();
    return f;
  }

  void Step(const S* params, const void* obs, int n, const uint8_t* first, const S* state_in,
            S* state_out, S* policy, S* values) override {
    if (first == nullptr) {
      no_reset_.assign(size_t(n), 0);
      first = no_reset_.data();
    }
    Run(params, obs, 1, n, first, state_in, state_out, policy, values);
  }

  void Forward(const S* params, const void* obs, int T1, int B, const uint8_t* first,
               const S* initial_state, S* policy, S* values) override {
    Run(params, obs, T1, B, first, initial_state, nullptr, policy, values);
  }

  void Backward(const S* params, const S* dpolicy, const S* dvalues, S* grad) override {
    const int64_t rows = rows_;
    const int F = feature_, P = spec_.policy.output_size();
    const S* h = core_ ? core_out_.data() : acts_.back().data();
    const bool gaussian = spec_.policy.kind == PolicyKind::kGaussian;
    const S* dhead = dpolicy;
    if (gaussian) {
      const int D = spec_.policy.num_components;
      head_tmp_.resize(size_t(rows) * D);
      for (int64_t r = 0; r < rows; ++r) {
        for (int d = 0; d < D; ++d) {
          head_tmp_[r * D + d] = dpolicy[r * P + d];
          grad[log_std_ + d] += dpolicy[r * P + D + d];
        }
      }
      dhead = head_tmp_.data();
    }
    dfeat_.resize(size_t(rows) * F);
    dtmp_.resize(size_t(rows) * F);
    policy_->Backward(params, h, nullptr, dhead, int(rows), dfeat_.data(), grad);
    baseline_->Backward(params, h, nullptr, dvalues, int(rows), dtmp_.data(), grad);
    for (size_t i = 0; i < dfeat_.size(); ++i) dfeat_[i] += dtmp_[i];
    if (core_) {
      dtmp_.resize(size_t(rows) * core_->in_size());
      core_->Backward(params, dfeat_.data(), dtmp_.data(), grad);
      std::swap(dfeat_, dtmp_);
    }
    for (size_t i = torso_.size(); i-- > 0;) {
      S* din = nullptr;
      if (i > 0) {
        dtmp_.resize(size_t(rows) * torso_[i]->in_size());
        din = dtmp_.data();
      }
      torso_[i]->Backward(params, acts_[i].data(), acts_[i + 1].data(), dfeat_.data(), int(rows),
                          din, grad);
      if (din) std::swap(dfeat_, dtmp_);
    }
  }

 private:
  void Run(const S* params, const void* obs, int T1, int B, const uint8_t* first,
           const S* initial_state, S* final_state, S* policy, S* values) {
    const int64_t rows = int64_t(T1) * B;
    rows_ = rows;
    const int64_t D = spec_.obs_size();
    auto& in = acts_[0];
    in.resize(size_t(rows * D));
    // With net.center_frames, each channel is converted and centred while it is in cache
    // (a Pong batch's input is 38 MB of floats: converting all of it and then centring
    // channel by channel read it from memory twice more).
    const bool center = spec_.center_frames && images_;
    const ImageShape img = center ? ImageOf(spec_.obs_shape) : ImageShape{};
    const int64_t total = rows * D, block = center ? int64_t(img.h) * img.w : total;
    for (int64_t start = 0; start < total; start += block) {
      S* x = &in[size_t(start)];
      if (spec_.uint8_obs) {
        const uint8_t* u = static_cast<const uint8_t*>(obs) + start;
        if (center) {
          ConvertCenterChannel(u, x, block);
          continue;
        }
        for (int64_t i = 0; i < block; ++i) x[i] = S(u[i]) * S(kUint8InputScale);
      } else {
        const float* f = static_cast<const float*>(obs) + start;
        for (int64_t i = 0; i < block; ++i) x[i] = S(f[i]);
      }
      if (center) CenterChannel(x, block);
    }
    for (size_t i = 0; i < torso_.size(); ++i) {
      acts_[i + 1].resize(size_t(rows) * torso_[i]->out_size());
      torso_[i]->Forward(params, acts_[i].data(), int(rows), acts_[i + 1].data());
    }
    const S* h = acts_.back().data();
    if (core_) {
      core_out_.resize(size_t(rows) * spec_.lstm_size);
      core_->Forward(params, h, T1, B, first, initial_state, core_out_.data(), final_state);
      h = core_out_.data();
    }
    if (policy) {
      if (spec_.policy.kind == PolicyKind::kGaussian) {
        const int Dp = spec_.policy.num_components;
        head_tmp_.resize(size_t(rows) * Dp);
        policy_->Forward(params, h, int(rows), head_tmp_.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int d = 0; d < Dp; ++d) {
            policy[r * 2 * Dp + d] = head_tmp_[r * Dp + d];
            policy[r * 2 * Dp + Dp + d] = params[log_std_ + d];
          }
        }
      } else {
        policy_->Forward(params, h, int(rows), policy);
      }
    }
    if (values) baseline_->Forward(params, h, int(rows), values);
  }

  ModelSpec spec_;
  ParamLayout layout_;
  std::vector<std::unique_ptr<Layer<S>>> torso_;
  std::unique_ptr<Lstm<S>> core_;
  std::unique_ptr<Layer<S>> policy_, baseline_;
  int64_t log_std_ = -1;
  int feature_ = 0, head_outputs_ = 0;
  bool images_ = false;  // the torso takes images (net.center_frames applies)
  int64_t rows_ = 0;
  std::vector<std::vector<S>> acts_;  // acts_[0]: input; acts_[i+1]: output of torso layer i
  std::vector<S> core_out_, head_tmp_, dfeat_, dtmp_;
  std::vector<uint8_t> no_reset_;
};
}  // namespace

Torso TorsoOf(const ModelSpec& spec) {
  if (!spec.layers.empty()) return CustomTorso(spec.layers);
  const TorsoPreset* preset = FindTorsoPreset(spec.torso);
  if (!preset) {
    throw std::invalid_argument("net.torso: \"" + spec.torso + "\" is not known, expected " + TorsoPresetNames() +
                                " (or a list of your own in net.layers)");
  }
  PresetArgs args;
  args.hidden_sizes = spec.hidden_sizes;
  args.tanh = spec.activation == Activation::kTanh;
  args.fc_size = spec.fc_size;
  return preset->build(args);
}

std::string TorsoName(const ModelSpec& spec) {
  if (!spec.layers.empty()) return "net.layers";
  const TorsoPreset* preset = FindTorsoPreset(spec.torso);
  return preset ? std::string(preset->name) : spec.torso;
}

std::string ModelSpec::Check() const {
  Torso torso;
  try {
    torso = TorsoOf(*this);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (init != "glorot" && init != "torch" && init != "orthogonal") {
    return "net.init: \"" + init + "\" is not known, expected \"glorot\", \"torch\" or \"orthogonal\"";
  }
  if (!(policy_init_scale > 0 && policy_init_scale <= 100)) {
    return "net.policy_init_scale: " + std::to_string(policy_init_scale) + " is outside (0, 100]";
  }
  if (obs_shape.empty() || obs_size() <= 0) return "the observation shape is empty";
  if (const auto io = TorsoShapes(torso, obs_shape); !io.ok()) return io.status().message();
  if (lstm_size < 0) return "net.lstm_size: must be 0 (no core) or positive";
  if (num_values < 1 || (!popart && num_values != 1)) return "the value head needs 1 output (one per task with PopArt)";
  if (policy.num_components < 1 || policy.num_components > kMaxActionComponents) {
    return "the action space has " + std::to_string(policy.num_components) +
           " components, expected 1 to " + std::to_string(kMaxActionComponents);
  }
  if (policy.kind != PolicyKind::kGaussian) {
    for (int k = 0; k < policy.num_components; ++k) {
      if (policy.nvec[k] < 1) return "an action component has no actions";
    }
  }
  return "";
}

ParamLayout ModelLayout(const ModelSpec& spec) { return CpuModel<float>(spec).layout(); }

namespace {
// A matrix of `rows` x `cols` (row-major) with orthonormal rows (rows <= cols) or columns
// (rows > cols), times `gain`: Gram-Schmidt on Gaussian vectors, as torch.nn.init.orthogonal_.
std::vector<double> Orthogonal(int rows, int cols, double gain, std::mt19937_64& rng) {
  const bool transpose = rows > cols;
  const int n = transpose ? cols : rows, m = transpose ? rows : cols;  // n vectors of length m, n <= m
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> q(size_t(n) * m);
  for (auto& x : q) x = normal(rng);
  for (int i = 0; i < n; ++i) {
    double* v = &q[size_t(i) * m];
    for (int pass = 0; pass < 2; ++pass) {  // twice: orthogonal to float precision
      for (int j = 0; j < i; ++j) {
        const double* u = &q[size_t(j) * m];
        double dot = 0;
        for (int k = 0; k < m; ++k) dot += v[k] * u[k];
        for (int k = 0; k < m; ++k) v[k] -= dot * u[k];
      }
    }
    double norm = 0;
    for (int k = 0; k < m; ++k) norm += v[k] * v[k];
    norm = std::sqrt(norm);
    for (int k = 0; k < m; ++k) v[k] /= norm;
  }
  std::vector<double> out(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      out[size_t(r) * cols + c] = gain * (transpose ? q[size_t(c) * m + r] : q[size_t(r) * m + c]);
    }
  }
  return out;
}
// A weight tensor's fan-in and fan-out (dense [in, out], conv [out, in, kh, kw]); false
// for anything else (biases, log-std, PopArt's statistics).
bool Fans(const TensorInfo& t, double* fan_in, double* fan_out) {
  if (t.shape.size() == 2) {
    *fan_in = t.shape[0], *fan_out = t.shape[1];
    return true;
  }
  if (t.shape.size() == 4) {
    const double area = double(t.shape[2]) * t.shape[3];
    *fan_in = t.shape[1] * area, *fan_out = t.shape[0] * area;
    return true;
  }
  return false;
}
}  // namespace

void InitParams(const ModelSpec& spec, uint64_t seed, std::span<float> params) {
  const ParamLayout layout = ModelLayout(spec);
  if (int64_t(params.size()) != layout.total_size()) {
    throw std::invalid_argument("InitParams: buffer of " + std::to_string(params.size()) +
                                " floats for a layout of " + std::to_string(layout.total_size()));
  }
  std::mt19937_64 rng(seed);
  std::fill(params.begin(), params.end(), 0.f);
  // Each weight tensor's fan-in (and the bias it feeds): PyTorch's bias bound is its layer's.
  std::map<std::string, double> fan_in_of_layer;
  for (const auto& t : layout.tensors()) {
    double fan_in = 0, fan_out = 0;
    if (Fans(t, &fan_in, &fan_out)) fan_in_of_layer[t.name.substr(0, t.name.rfind('/'))] = fan_in;
  }
  for (const auto& t : layout.tensors()) {
    if (t.name == "popart/stats") {  // mean 0, scale 1
      for (int k = 0; k < t.shape[1]; ++k) params[t.offset + t.shape[1] + k] = 1.f;
      continue;
    }
    const bool policy = t.name == "policy/w";
    if (t.shape.size() == 1 && spec.init == "torch" && t.name != "policy/log_std" && t.name != "core/b") {
      // PyTorch: a layer's bias uniform in +-1/sqrt(fan_in) of its weights.
      const auto it = fan_in_of_layer.find(t.name.substr(0, t.name.rfind('/')));
      if (it != fan_in_of_layer.end() && it->second > 0) {
        const double bound = 1.0 / std::sqrt(it->second) * (t.name == "policy/b" ? spec.policy_init_scale : 1.0);
        std::uniform_real_distribution<double> u(-bound, bound);
        for (int64_t i = 0; i < t.size; ++i) params[t.offset + i] = static_cast<float>(u(rng));
      }
    }
    if (t.name == "core/b") {  // forget gates start open
      const int H = t.shape[0] / 4;
      for (int j = H; j < 2 * H; ++j) params[t.offset + j] = 1.f;
      continue;
    }
    double fan_in = 0, fan_out = 0;
    if (!Fans(t, &fan_in, &fan_out)) continue;  // biases and log-std
    const double scale = policy ? spec.policy_init_scale : 1.0;
    if (spec.init == "orthogonal") {
      // Dense [in, out]: a weight is w[i * out + o]; torch's matrix is [out, in].
      const bool dense = t.shape.size() == 2;
      // The matrix orthogonal init works on: [out, in...].
      const int rows = dense ? t.shape[1] : t.shape[0];
      const int cols = int(t.size / rows);
      const bool core = t.name.rfind("core/", 0) == 0;
      const double gain = (policy || core || t.name == "baseline/w") ? 1.0 : std::sqrt(2.0);
      const std::vector<double> q = Orthogonal(rows, cols, gain * scale, rng);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const int64_t at = dense ? int64_t(c) * rows + r : int64_t(r) * cols + c;
          params[t.offset + at] = static_cast<float>(q[size_t(r) * cols + c]);
        }
      }
      continue;
    }
    double limit = spec.init == "torch" ? 1.0 / std::sqrt(fan_in) : std::sqrt(6.0 / (fan_in + fan_out));
    limit *= scale;
    std::uniform_real_distribution<double> u(-limit, limit);
    for (int64_t i = 0; i < t.size; ++i) params[t.offset + i] = static_cast<float>(u(rng));
  }
}

template <class S>
std::unique_ptr<Model<S>> MakeCpuModel(const ModelSpec& spec) {
  return std::make_unique<CpuModel<S>>(spec);
}
template std::unique_ptr<Model<float>> MakeCpuModel<float>(const ModelSpec&);
template std::unique_ptr<Model<double>> MakeCpuModel<double>(const ModelSpec&);

}  // namespace stampede::net
