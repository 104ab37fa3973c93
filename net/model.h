// The model interface the actor, the learner and the loss use: torso -> optional LSTM
// core -> policy and baseline heads, over one flat parameter buffer whose layout and
// initialisation depend only on the ModelSpec (the same on every backend, so a learner's
// parameters load into any actor bit-for-bit).
//
// The torso is a list of layer specs (net/network.h): a named preset from the registry
// there (net.torso, with its arguments hidden_sizes, activation and fc_size) or a list of
// the user's own (net.layers). uint8 observations are scaled by 1/255 inside the model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/distribution.h"
#include "net/layout.h"
#include "net/network.h"

namespace stampede::net {

enum class Activation { kRelu, kTanh };

struct ModelSpec {
  std::vector<int> obs_shape;  // [D], [H, W] or [C, H, W]
  bool uint8_obs = false;
  // A preset's name (net/network.h's registry); empty: the registry's default. Ignored
  // when `layers` is given.
  std::string torso;
  std::vector<int> hidden_sizes{64, 64};  // the presets' arguments (PresetArgs)
  Activation activation = Activation::kRelu;
  int fc_size = 256;
  std::vector<LayerSpec> layers;  // a torso of the user's own (net.layers)
  int lstm_size = 0;                      // 0: no core
  PolicyShape policy;
  // Value outputs per row: 1, or one per task with PopArt (values are [n, num_values],
  // normalised; the tensor "popart/stats" [2, num_values] holds each output's mean and
  // scale, which the network itself does not use).
  int num_values = 1;
  bool popart = false;
  // net.center_frames: each image channel of each observation has its mean over the
  // image subtracted after scaling (no parameters; every backend does the same).
  bool center_frames = false;
  // net.init ("glorot", "torch" or "orthogonal") and net.policy_init_scale (resolved).
  std::string init = "glorot";
  double policy_init_scale = 0.01;

  int obs_size() const;
  // Empty when the spec builds a network, else what is wrong (names the field).
  std::string Check() const;
};

// The spec's torso as a layer list (the preset's, or `layers`); throws
// std::invalid_argument for a preset name the registry lacks.
Torso TorsoOf(const ModelSpec& spec);
// The preset's name (the default one's for an empty net.torso), or "net.layers".
std::string TorsoName(const ModelSpec& spec);

// A categorical policy over A actions.
PolicyShape CategoricalPolicy(int num_actions);

// The parameter layout of a spec (the same tensors every backend uses).
ParamLayout ModelLayout(const ModelSpec& spec);
// Seeded initialisation: weights uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot; a
// conv's fans are channels x k x k), the policy head's weights scaled by 0.01 so the
// first policy is near uniform, biases and log-std zero, LSTM forget-gate bias 1.
void InitParams(const ModelSpec& spec, uint64_t seed, std::span<float> params);

constexpr double kUint8InputScale = 1.0 / 255.0;

// net.center_frames on one observation's channel of `area` values, in place.
// The sum runs in eight independent lanes (kept in vector registers), not as one chain of
// dependent additions: an 84x84 channel took about 10 us that way, 18% of a Pong learner
// step and 7% of an actor's frame.
template <class S>
inline void CenterChannel(S* x, int64_t area) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= area; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += double(x[i + k]);
  }
  double sum = 0;
  for (; i < area; ++i) sum += double(x[i]);
  for (double v : lane) sum += v;
  const S mean = S(sum / double(area));
  for (int64_t i = 0; i < area; ++i) x[i] -= mean;
}

// Bytes to S (times kUint8InputScale) and centred, in one pass over the output: the mean
// comes from the bytes' exact integer sum, read from the 7 KB input first, instead of a
// second pass over the 28 KB of floats and a third to subtract (the centred input of a
// Pong learner batch is 38 MB). Equal to CenterChannel on the converted channel to float
// rounding.
template <class S>
inline void ConvertCenterChannel(const uint8_t* u, S* x, int64_t area) {
  uint32_t lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= area; i += 16) {
    for (int k = 0; k < 16; ++k) lane[k] += u[i + k];
  }
  uint64_t sum = 0;
  for (; i < area; ++i) sum += u[i];
  for (uint32_t v : lane) sum += v;
  const S scale = S(kUint8InputScale);
  const S mean = S(double(sum) * double(scale) / double(area));
  for (int64_t j = 0; j < area; ++j) x[j] = S(u[j]) * scale - mean;
}

// Task `task`'s value in one row of values [num_values] (output 0 when there is one),
// unnormalised with the PopArt statistics the parameters carry where `popart_stats` (the
// offset of "popart/stats" [2, num_values]) is not -1.
inline double TaskValue(const float* row, int num_values, int task, const float* params, int64_t popart_stats) {
  double v = row[num_values == 1 ? 0 : task];
  if (popart_stats >= 0) v = v * params[popart_stats + num_values + task] + params[popart_stats + task];
  return v;
}

template <class S>
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;
  virtual const ParamLayout& layout() const = 0;
  int obs_size() const { return spec().obs_size(); }
  int policy_size() const { return spec().policy.output_size(); }
  // Floats of recurrent state per row (0 without a core): [h, c].
  int state_size() const { return 2 * spec().lstm_size; }
  int num_values() const { return spec().num_values; }
  // Floating-point operations of one row's forward pass (multiply-add = 2; convolutions,
  // dense layers and the LSTM's products; elementwise work not counted).
  virtual double ForwardFlops() const = 0;

  // Acting: one step of n rows. `obs` is n observations in the spec's dtype; the rows
  // whose `first` is set (may be null: none) start from a zero state, the others from
  // state_in [n, state_size]. Writes state_out (may alias state_in, may be null),
  // policy outputs [n, policy_size] and values [n, num_values] (either may be null).
  virtual void Step(const S* params, const void* obs, int n, const uint8_t* first,
                    const S* state_in, S* state_out, S* policy, S* values) = 0;

  // Learning: T1 x B time-major rows (index t * B + b) starting from initial_state
  // [B, state_size] (null: zeros), with the state reset to zero before rows whose
  // `first` is set. Writes policy [T1 * B, policy_size] and values [T1 * B]; keeps the
  // activations for Backward.
  virtual void Forward(const S* params, const void* obs, int T1, int B, const uint8_t* first,
                       const S* initial_state, S* policy, S* values) = 0;
  // Given dLoss/dpolicy and dLoss/dvalues for the last Forward, ADDS dLoss/dparams.
  virtual void Backward(const S* params, const S* dpolicy, const S* dvalues, S* grad) = 0;
};

// The CPU (Eigen) model.
template <class S>
std::unique_ptr<Model<S>> MakeCpuModel(const ModelSpec& spec);

}  // namespace stampede::net
