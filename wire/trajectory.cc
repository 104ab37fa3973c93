#include "wire/trajectory.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "wire/zmq_util.h"

namespace stampede::wire {

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kUint8: return "uint8";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

namespace {
template <class T>
ArrayView View(const char* name, DType dtype, std::vector<int64_t> shape, std::vector<T>& v) {
  return ArrayView{name, dtype, std::move(shape), v.data(), v.size() * sizeof(T)};
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <class Repeated>
std::vector<int64_t> ToVector(const Repeated& r) {
  return std::vector<int64_t>(r.begin(), r.end());
}
}  // namespace

std::vector<ArrayView> Arrays(Unrolls& u) {
  const int64_t T = u.T(), n = u.n(), A = u.num_actions;
  std::vector<int64_t> obs_shape{T + 1, n};
  for (int d : u.shape.obs_shape) obs_shape.push_back(d);
  std::vector<ArrayView> v;
  if (u.uint8_obs()) {
    v.push_back(View("observations", DType::kUint8, obs_shape, u.observations_u8));
  } else {
    v.push_back(View("observations", DType::kFloat32, obs_shape, u.observations));
  }
  const int64_t K = u.shape.action_size();
  if (u.shape.box()) {
    v.push_back(View("actions", DType::kFloat32, {T, n, K}, u.box_actions));
  } else if (u.shape.action_kind == ActionKind::kMultiDiscrete) {
    v.push_back(View("actions", DType::kInt32, {T, n, K}, u.actions));
  } else {
    v.push_back(View("actions", DType::kInt32, {T, n}, u.actions));
  }
  v.push_back(View("rewards", DType::kFloat32, {T, n}, u.rewards));
  v.push_back(View("terminated", DType::kUint8, {T, n}, u.terminated));
  v.push_back(View("truncated", DType::kUint8, {T, n}, u.truncated));
  v.push_back(View("valid", DType::kUint8, {T, n}, u.valid));
  v.push_back(View("behaviour_logits", DType::kFloat32, {T, n, A}, u.behaviour_logits));
  v.push_back(View("truncation_values", DType::kFloat32, {T, n}, u.truncation_values));
  if (u.shape.core_state_size > 0) {
    v.push_back(View("initial_core_state", DType::kFloat32, {n, u.shape.core_state_size},
                     u.initial_core_state));
  }
  return v;
}

void TrajectoryBatch::Resize(int T, int n, const StepShape& s) {
  Unrolls::Resize(T, n, s);
  meta.clear_arrays();
  for (const ArrayView& a : Arrays(*this)) {
    ArrayHeader* h = meta.add_arrays();
    h->set_name(a.name);
    h->set_dtype(ArrayType(int(a.dtype)));
    for (int64_t d : a.shape) h->add_shape(d);
  }
}

int64_t TrajectoryBytes(int T, int n, const StepShape& s) {
  const int64_t tn = int64_t(T) * n;
  return (tn + n) * int64_t(s.obs_bytes()) + tn * (4 * s.action_size() + 4 + 1 + 1 + 1 + 4) +
         tn * s.num_actions * 4 +
         int64_t(n) * s.core_state_size * 4;
}

bool SendTrajectory(zmq::socket_t& socket, const TrajectoryBatch& b) {
  std::vector<Frame> frames;
  for (const ArrayView& a : Arrays(const_cast<TrajectoryBatch&>(b))) frames.push_back({a.data, a.bytes});
  return SendMessage(socket, b.meta, frames);
}

const char* DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kNone: return "none";
    case DropReason::kMalformed: return "malformed";
    case DropReason::kProtocol: return "protocol";
    case DropReason::kShape: return "shape";
    case DropReason::kNonFinite: return "non_finite";
    case DropReason::kBadAction: return "bad_action";
    case DropReason::kFutureVersion: return "future_version";
    case DropReason::kOutOfRange: return "out_of_range";
    case DropReason::kStale: return "stale";
    default: return "unknown";
  }
}

namespace {
bool AllFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}
}  // namespace

DropReason DecodeTrajectory(const std::vector<zmq::message_t>& parts,
                            const TrajectoryExpectations& expect, TrajectoryBatch* out,
                            std::string* detail) {
  if (parts.empty() || !ParseFrame(parts[0], &out->meta)) {
    *detail = "header frame is not a valid Trajectory message";
    return DropReason::kMalformed;
  }
  const Trajectory& m = out->meta;
  if (std::string err = CheckProtocol(m.sender()); !err.empty()) {
    *detail = err;
    return DropReason::kProtocol;
  }
  if (parts.size() != size_t(m.arrays_size()) + 1) {
    *detail = "header describes " + std::to_string(m.arrays_size()) + " arrays, but " +
              std::to_string(parts.size() - 1) + " frames follow it";
    return DropReason::kMalformed;
  }
  // T and n from the rewards array; everything else must then match the spec exactly.
  int64_t T = -1, n = -1;
  for (const auto& h : m.arrays()) {
    if (h.name() == "rewards" && h.shape_size() == 2) T = h.shape(0), n = h.shape(1);
  }
  if (T < 0) {
    *detail = "header has no [T, n] \"rewards\" array";
    return DropReason::kMalformed;
  }
  if (T != expect.unroll_length) {
    *detail = "unroll length " + std::to_string(T) + ", expected " +
              std::to_string(expect.unroll_length) + " (actors.unroll_length)";
    return DropReason::kShape;
  }
  if (n <= 0 || n > 1 << 20) {
    *detail = "num_unrolls " + std::to_string(n) + " is not in [1, 2^20]";
    return DropReason::kShape;
  }
  if (expect.num_unrolls > 0 && n != expect.num_unrolls) {
    *detail = std::to_string(n) + " unrolls, expected " + std::to_string(expect.num_unrolls) +
              " (actors.envs_per_actor)";
    return DropReason::kShape;
  }
  out->Unrolls::Resize(int(T), int(n), expect.shape);
  std::vector<ArrayView> want = Arrays(*out);
  if (size_t(m.arrays_size()) != want.size()) {
    *detail = "header describes " + std::to_string(m.arrays_size()) + " arrays, expected " +
              std::to_string(want.size());
    return DropReason::kMalformed;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const ArrayHeader& h = m.arrays(int(i));
    const ArrayView& a = want[i];
    if (h.name() != a.name) {
      *detail = "array " + std::to_string(i) + " is \"" + h.name() + "\", expected \"" + a.name + "\"";
      return DropReason::kMalformed;
    }
    // What the header claims must agree with the frame's bytes...
    int64_t elements = 1;
    bool sane = h.shape_size() <= 8;
    for (int64_t d : h.shape()) {
      sane = sane && d >= 0 && d <= (int64_t(1) << 40);
      if (sane) elements *= d;
      sane = sane && elements <= (int64_t(1) << 40);
    }
    const int dsize = h.dtype() == ARRAY_UINT8 ? 1 : (h.dtype() == ARRAY_FLOAT32 || h.dtype() == ARRAY_INT32) ? 4 : 0;
    if (!sane || dsize == 0 || parts[i + 1].size() != size_t(elements) * dsize) {
      *detail = "\"" + h.name() + "\": header says " + ShapeText(ToVector(h.shape())) + " of dtype " +
                std::to_string(int(h.dtype())) + ", but the frame has " +
                std::to_string(parts[i + 1].size()) + " bytes";
      return DropReason::kMalformed;
    }
    // ...and with the resolved spec.
    if (int(h.dtype()) != int(a.dtype) || ToVector(h.shape()) != a.shape) {
      *detail = "\"" + h.name() + "\" is " + DTypeName(DType(int(h.dtype()))) + " " +
                ShapeText(ToVector(h.shape())) + ", expected " + DTypeName(a.dtype) + " " +
                ShapeText(a.shape) + " (the resolved env spec)";
      return DropReason::kShape;
    }
    if (a.bytes) std::memcpy(a.data, parts[i + 1].data(), a.bytes);
  }
  if (!AllFinite(out->observations) || !AllFinite(out->rewards) ||
      !AllFinite(out->behaviour_logits) || !AllFinite(out->truncation_values) ||
      !AllFinite(out->initial_core_state)) {
    *detail = "non-finite number (NaN or infinity) in observations, rewards, logits or core state";
    return DropReason::kNonFinite;
  }
  const size_t tn = size_t(T) * n;
  if (out->shape.box()) {
    if (!AllFinite(out->box_actions)) {
      *detail = "non-finite box action";
      return DropReason::kBadAction;
    }
  } else {
    const size_t K = size_t(out->shape.action_size());
    for (size_t i = 0; i < tn * K; ++i) {
      const int64_t limit = out->shape.action_kind == ActionKind::kMultiDiscrete
                                ? out->shape.action_nvec[i % K] : out->num_actions;
      if (out->actions[i] < 0 || out->actions[i] >= limit) {
        *detail = "action " + std::to_string(out->actions[i]) + " at index " + std::to_string(i) +
                  " is outside [0, " + std::to_string(limit) + ")";
        return DropReason::kBadAction;
      }
    }
  }
  for (auto& ep : m.episodes()) {
    if (!std::isfinite(ep.episode_return())) {
      *detail = "non-finite episode return";
      return DropReason::kNonFinite;
    }
    if (ep.length() < 1 || (expect.max_episode_length > 0 && ep.length() > expect.max_episode_length)) {
      *detail = "episode length " + std::to_string(ep.length()) + " is not in [1, " +
                (expect.max_episode_length > 0 ? std::to_string(expect.max_episode_length) : "inf") + "]";
      return DropReason::kOutOfRange;
    }
    if (expect.max_abs_reward > 0 &&
        std::abs(double(ep.episode_return())) > expect.max_abs_reward * std::max(1, ep.length())) {
      *detail = "episode return " + std::to_string(ep.episode_return()) + " over " +
                std::to_string(ep.length()) + " steps exceeds wire.max_abs_reward per step";
      return DropReason::kOutOfRange;
    }
  }
  auto beyond = [](const std::vector<float>& v, double bound, size_t* at) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::abs(double(v[i])) > bound) return *at = i, true;
    }
    return false;
  };
  size_t at = 0;
  if (expect.max_abs_observation > 0 && beyond(out->observations, expect.max_abs_observation, &at)) {
    *detail = "observation value " + std::to_string(out->observations[at]) + " at index " + std::to_string(at) +
              " exceeds wire.max_abs_observation (" + std::to_string(expect.max_abs_observation) + ")";
    return DropReason::kOutOfRange;
  }
  if (expect.max_abs_reward > 0 && beyond(out->rewards, expect.max_abs_reward, &at)) {
    *detail = "reward " + std::to_string(out->rewards[at]) + " at index " + std::to_string(at) +
              " exceeds wire.max_abs_reward (" + std::to_string(expect.max_abs_reward) + ")";
    return DropReason::kOutOfRange;
  }
  if (m.policy_version() > expect.newest_policy_version || m.policy_version() < 0) {
    *detail = "policy version " + std::to_string(m.policy_version()) +
              " is newer than the learner's " + std::to_string(expect.newest_policy_version);
    return DropReason::kFutureVersion;
  }
  return DropReason::kNone;
}

}  // namespace stampede::wire
