// The IMPALA network for vector observations: an MLP torso with a policy-logits head
// and a baseline (value) head, on the CPU with Eigen, batched. Parameters live in a
// flat buffer described by MlpLayout(); the class holds only scratch space, so one
// instance serves any parameter buffer but is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/layout.h"

namespace stampede::net {

enum class Activation { kRelu, kTanh };

struct MlpSpec {
  int obs_size = 0;
  std::vector<int> hidden_sizes;
  int num_actions = 0;
  Activation activation = Activation::kRelu;
};

// A spec from config values; `activation` is "relu" or "tanh" (checked by the config).
MlpSpec MakeMlpSpec(int obs_size, std::vector<int> hidden_sizes, int num_actions,
                    std::string_view activation);

// Tensors: torso/<i>/w [in, out], torso/<i>/b [out], policy/w [H, A], policy/b [A],
// baseline/w [H, 1], baseline/b [1].
ParamLayout MlpLayout(const MlpSpec& spec);

// Seeded initialisation: weights uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot),
// the policy head scaled by 0.01 so the first policy is near uniform, biases zero.
void InitMlp(const MlpSpec& spec, uint64_t seed, std::span<float> params);

// uint8 observations (pixels) enter every network scaled to [0, 1], as in DQN and IMPALA.
constexpr double kUint8InputScale = 1.0 / 255.0;
template <class S>
void Uint8ToInput(const uint8_t* in, size_t count, S* out) {
  for (size_t i = 0; i < count; ++i) out[i] = S(in[i]) * S(kUint8InputScale);
}

template <class S>
class Mlp {
 public:
  explicit Mlp(MlpSpec spec);
  ~Mlp();
  Mlp(Mlp&&) noexcept;

  const MlpSpec& spec() const { return spec_; }
  const ParamLayout& layout() const { return layout_; }

  // obs: [n, obs_size] row-major. Writes logits [n, num_actions] and values [n]
  // (either may be null). Keeps the activations for Backward.
  void Forward(const S* params, const S* obs, int n, S* logits, S* values);
  // Given dLoss/dlogits [n, A] and dLoss/dvalues [n] for the last Forward, ADDS
  // dLoss/dparams into grad (layout_.total_size() entries).
  void Backward(const S* params, const S* dlogits, const S* dvalues, S* grad);

 private:
  struct Scratch;
  MlpSpec spec_;
  ParamLayout layout_;
  std::unique_ptr<Scratch> scratch_;
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace stampede::net
