#include "net/mlp.h"

#include <Eigen/Core>
#include <cmath>
#include <random>

namespace stampede::net {

MlpSpec MakeMlpSpec(int obs_size, std::vector<int> hidden_sizes, int num_actions,
                    std::string_view activation) {
  MlpSpec spec;
  spec.obs_size = obs_size;
  spec.hidden_sizes = std::move(hidden_sizes);
  spec.num_actions = num_actions;
  spec.activation = activation == "tanh" ? Activation::kTanh : Activation::kRelu;
  return spec;
}

ParamLayout MlpLayout(const MlpSpec& spec) {
  ParamLayout layout;
  int in = spec.obs_size;
  for (size_t i = 0; i < spec.hidden_sizes.size(); ++i) {
    const int out = spec.hidden_sizes[i];
    layout.Add("torso/" + std::to_string(i) + "/w", {in, out});
    layout.Add("torso/" + std::to_string(i) + "/b", {out});
    in = out;
  }
  layout.Add("policy/w", {in, spec.num_actions});
  layout.Add("policy/b", {spec.num_actions});
  layout.Add("baseline/w", {in, 1});
  layout.Add("baseline/b", {1});
  return layout;
}

void InitMlp(const MlpSpec& spec, uint64_t seed, std::span<float> params) {
  const ParamLayout layout = MlpLayout(spec);
  std::mt19937_64 rng(seed);
  std::fill(params.begin(), params.end(), 0.f);
  for (const auto& t : layout.tensors()) {
    if (t.shape.size() != 2) continue;  // biases stay zero
    const double fan_in = t.shape[0], fan_out = t.shape[1];
    double limit = std::sqrt(6.0 / (fan_in + fan_out));
    if (t.name == "policy/w") limit *= 0.01;
    std::uniform_real_distribution<double> u(-limit, limit);
    for (int64_t i = 0; i < t.size; ++i) params[t.offset + i] = static_cast<float>(u(rng));
  }
}

template <class S>
struct Mlp<S>::Scratch {
  using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<Mat> acts;  // acts[0] = input, acts[i+1] = output of hidden layer i
  Mat dh, dh_next;
  int n = 0;
};

template <class S>
Mlp<S>::Mlp(MlpSpec spec)
    : spec_(std::move(spec)), layout_(MlpLayout(spec_)), scratch_(std::make_unique<Scratch>()) {
  scratch_->acts.resize(spec_.hidden_sizes.size() + 1);
}
template <class S>
Mlp<S>::~Mlp() = default;
template <class S>
Mlp<S>::Mlp(Mlp&&) noexcept = default;

namespace {
template <class S>
using MatMap = Eigen::Map<const Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class S>
using MutMatMap = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class S>
using RowMap = Eigen::Map<const Eigen::Matrix<S, 1, Eigen::Dynamic>>;
template <class S>
using MutRowMap = Eigen::Map<Eigen::Matrix<S, 1, Eigen::Dynamic>>;
}  // namespace

template <class S>
void Mlp<S>::Forward(const S* params, const S* obs, int n, S* logits, S* values) {
  Scratch& s = *scratch_;
  s.n = n;
  s.acts[0] = MatMap<S>(obs, n, spec_.obs_size);
  const auto& tensors = layout_.tensors();
  const size_t L = spec_.hidden_sizes.size();
  for (size_t i = 0; i < L; ++i) {
    const TensorInfo& w = tensors[2 * i];
    const TensorInfo& b = tensors[2 * i + 1];
    auto& out = s.acts[i + 1];
    out.noalias() = s.acts[i] * MatMap<S>(params + w.offset, w.shape[0], w.shape[1]);
    out.rowwise() += RowMap<S>(params + b.offset, b.size);
    if (spec_.activation == Activation::kRelu) {
      out = out.cwiseMax(S(0));
    } else {
      out = out.array().tanh().matrix();
    }
  }
  const auto& h = s.acts[L];
  const TensorInfo& pw = tensors[2 * L];
  const TensorInfo& pb = tensors[2 * L + 1];
  const TensorInfo& vw = tensors[2 * L + 2];
  const TensorInfo& vb = tensors[2 * L + 3];
  if (logits != nullptr) {
    MutMatMap<S> out(logits, n, spec_.num_actions);
    out.noalias() = h * MatMap<S>(params + pw.offset, pw.shape[0], pw.shape[1]);
    out.rowwise() += RowMap<S>(params + pb.offset, pb.size);
  }
  if (values != nullptr) {
    MutMatMap<S> out(values, n, 1);
    out.noalias() = h * MatMap<S>(params + vw.offset, vw.shape[0], 1);
    out.array() += params[vb.offset];
  }
}

template <class S>
void Mlp<S>::Backward(const S* params, const S* dlogits, const S* dvalues, S* grad) {
  Scratch& s = *scratch_;
  const int n = s.n;
  const auto& tensors = layout_.tensors();
  const size_t L = spec_.hidden_sizes.size();
  const TensorInfo& pw = tensors[2 * L];
  const TensorInfo& pb = tensors[2 * L + 1];
  const TensorInfo& vw = tensors[2 * L + 2];
  const TensorInfo& vb = tensors[2 * L + 3];
  const auto& h = s.acts[L];
  MatMap<S> dl(dlogits, n, spec_.num_actions);
  MatMap<S> dv(dvalues, n, 1);
  MutMatMap<S>(grad + pw.offset, pw.shape[0], pw.shape[1]).noalias() += h.transpose() * dl;
  MutRowMap<S>(grad + pb.offset, pb.size) += dl.colwise().sum();
  MutMatMap<S>(grad + vw.offset, vw.shape[0], 1).noalias() += h.transpose() * dv;
  grad[vb.offset] += dv.sum();
  s.dh.noalias() = dl * MatMap<S>(params + pw.offset, pw.shape[0], pw.shape[1]).transpose();
  s.dh.noalias() += dv * MatMap<S>(params + vw.offset, vw.shape[0], 1).transpose();
  for (size_t i = L; i-- > 0;) {
    const auto& out = s.acts[i + 1];
    if (spec_.activation == Activation::kRelu) {
      s.dh = (out.array() > S(0)).select(s.dh, S(0));
    } else {
      s.dh = (s.dh.array() * (S(1) - out.array().square())).matrix();
    }
    const TensorInfo& w = tensors[2 * i];
    const TensorInfo& b = tensors[2 * i + 1];
    MutMatMap<S>(grad + w.offset, w.shape[0], w.shape[1]).noalias() +=
        s.acts[i].transpose() * s.dh;
    MutRowMap<S>(grad + b.offset, b.size) += s.dh.colwise().sum();
    if (i > 0) {
      s.dh_next.noalias() = s.dh * MatMap<S>(params + w.offset, w.shape[0], w.shape[1]).transpose();
      std::swap(s.dh, s.dh_next);
    }
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace stampede::net
