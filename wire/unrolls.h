// n unrolls of T steps as time-major arrays: the layout shared by the trajectory an
// actor sends (n = its envs) and the batch a learner trains on (n = B). Row index
// t * n + i; observations have T+1 rows (row T is the bootstrap observation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stampede::wire {

// Element types; the numbers are messages.proto's DType and envs::DType.
enum class DType : int { kFloat32 = 1, kUint8 = 2, kInt32 = 3 };
inline int DTypeSize(DType d) { return d == DType::kUint8 ? 1 : 4; }
inline const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kUint8: return "uint8";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

// Action spaces; the numbers are config.proto's ActionKind and envs::ActionKind.
enum class ActionKind : int { kDiscrete = 1, kMultiDiscrete = 2, kBox = 3 };

// The shape of one unroll step: what the resolved env spec (and the network's core) says.
struct StepShape {
  std::vector<int> obs_shape;
  DType obs_dtype = DType::kFloat32;
  // Policy outputs per step, the width of behaviour_logits: A (discrete), the sum of
  // action_nvec (multi-discrete) or 2 D (box: means, then log-stds).
  int num_actions = 0;
  // Floats of recurrent network state per unroll (0 without a core): each unroll
  // carries the state the actor's network had before its first step.
  int core_state_size = 0;
  ActionKind action_kind = ActionKind::kDiscrete;
  std::vector<int> action_nvec;                // multi-discrete: actions per component
  std::vector<float> action_low, action_high;  // box: bounds per component
  // Values per action: 1 (discrete), K components, or D box dimensions.
  int action_size() const {
    if (action_kind == ActionKind::kMultiDiscrete) return int(action_nvec.size());
    if (action_kind == ActionKind::kBox) return int(action_low.size());
    return 1;
  }
  bool box() const { return action_kind == ActionKind::kBox; }
  int obs_size() const {
    int n = 1;
    for (int d : obs_shape) n *= d;
    return n;
  }
  size_t obs_bytes() const { return size_t(obs_size()) * DTypeSize(obs_dtype); }
  bool operator==(const StepShape&) const = default;
};

struct Unrolls {
  int unroll_length = 0;  // T
  int num_unrolls = 0;    // n
  StepShape shape;
  int obs_size = 0;       // shape.obs_size()
  int num_actions = 0;    // shape.num_actions
  // [T+1, n, obs_size] in the spec's dtype: exactly one of these is used.
  std::vector<float> observations;        // float32 observations
  std::vector<uint8_t> observations_u8;   // uint8 observations (pixels)
  std::vector<int32_t> actions;           // [T, n, action_size] (discrete kinds)
  std::vector<float> box_actions;         // [T, n, D] (box): the policy's unclipped samples
  std::vector<float> rewards;             // [T, n]
  std::vector<uint8_t> terminated;        // [T, n]
  std::vector<uint8_t> truncated;         // [T, n]
  std::vector<uint8_t> valid;             // [T, n]: 0 where the step only reset the env
  std::vector<float> behaviour_logits;    // [T, n, num_actions]
  std::vector<float> truncation_values;   // [T, n]: behaviour value of the final
                                          // observation where truncated, else 0
  std::vector<float> initial_core_state;  // [n, core_state_size] (empty without a core)

  int T() const { return unroll_length; }
  int n() const { return num_unrolls; }
  bool uint8_obs() const { return shape.obs_dtype == DType::kUint8; }
  // 1 where observation row t * n + i starts an episode (the step before it ended one or
  // only reset the env), for rows 1 .. T; row 0 starts from initial_core_state.
  void EpisodeStarts(std::vector<uint8_t>* first) const {
    first->assign(size_t(T() + 1) * n(), 0);
    for (size_t i = 0; i < size_t(T()) * n(); ++i) {
      (*first)[i + n()] = terminated[i] | truncated[i] | uint8_t(!valid[i]);
    }
  }
  // Steps that are transitions (valid), i.e. agent steps taken.
  int64_t valid_steps() const {
    int64_t k = 0;
    for (uint8_t v : valid) k += v;
    return k;
  }
  // Start of observation row `row` (0 .. (T+1)*n-1) as bytes.
  std::byte* obs_row(size_t row) {
    return uint8_obs() ? reinterpret_cast<std::byte*>(&observations_u8[row * obs_size])
                       : reinterpret_cast<std::byte*>(&observations[row * obs_size]);
  }
  const std::byte* obs_row(size_t row) const { return const_cast<Unrolls*>(this)->obs_row(row); }

  // Sizes every array for the given shape and zeroes it (valid set to 1).
  void Resize(int T, int n, const StepShape& s) {
    unroll_length = T, num_unrolls = n, shape = s;
    obs_size = s.obs_size(), num_actions = s.num_actions;
    const size_t tn = size_t(T) * n, obs = (tn + n) * size_t(obs_size);
    if (uint8_obs()) {
      observations.clear();
      observations_u8.assign(obs, 0);
    } else {
      observations_u8.clear();
      observations.assign(obs, 0.f);
    }
    const size_t K = size_t(s.action_size());
    actions.assign(s.box() ? 0 : tn * K, 0);
    box_actions.assign(s.box() ? tn * K : 0, 0.f);
    rewards.assign(tn, 0.f);
    terminated.assign(tn, 0);
    truncated.assign(tn, 0);
    valid.assign(tn, 1);
    behaviour_logits.assign(tn * num_actions, 0.f);
    truncation_values.assign(tn, 0.f);
    initial_core_state.assign(size_t(n) * s.core_state_size, 0.f);
  }
  // Float32 vector observations: the layout of protocol 1's tests and built-in envs.
  void Resize(int T, int n, int obs_size_, int num_actions_) {
    Resize(T, n, StepShape{{obs_size_}, DType::kFloat32, num_actions_});
  }
};

}  // namespace stampede::wire
