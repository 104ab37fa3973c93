#include "wire/trajectory.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "wire/zmq_util.h"

namespace stampede::wire {

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

namespace {
// Appends the header's description of each array (name, dtype, shape).
void Describe(const std::vector<ArrayView>& arrays, Trajectory* header) {
  for (const ArrayView& a : arrays) {
    ArrayHeader* h = header->add_arrays();
    h->set_name(a.name);
    h->set_dtype(ArrayType(int(a.dtype)));
    for (int64_t d : a.shape) h->add_shape(d);
  }
}
}  // namespace

void TrajectoryBatch::Resize(int T, int n, const StepShape& s) {
  Unrolls::Resize(T, n, s);
  meta.clear_arrays();
  Describe(Arrays(*this), &meta);
}

int64_t TrajectoryBytes(int T, int n, const StepShape& s) {
  const int64_t tn = int64_t(T) * n;
  return (tn + n) * int64_t(s.obs_bytes()) + tn * (4 * s.action_size() + 4 + 1 + 1 + 1 + 4) +
         tn * s.num_actions * 4 +
         int64_t(n) * s.core_state_size * 4;
}

bool FrameStackable(const StepShape& shape) {
  return shape.obs_dtype == DType::kUint8 && shape.obs_shape.size() == 3 && shape.obs_shape[0] >= 2;
}

namespace {
// Fills `s` from the observations of `u`; false if more than half the rows would go whole
// (the observations are then not a frame stack, and go whole).
bool EncodeStacked(const Unrolls& u, StackedFrames* s) {
  const size_t n = size_t(u.n()), rows = size_t(u.T() + 1) * n, C = size_t(u.shape.obs_shape[0]);
  const size_t HW = size_t(u.shape.obs_shape[1]) * u.shape.obs_shape[2], D = C * HW;
  s->frames.resize((rows - n) * HW);
  s->restack_rows.clear();
  s->restack_obs.clear();
  for (size_t r = n; r < rows; ++r) {
    const uint8_t* cur = &u.observations_u8[r * D];
    const uint8_t* prev = cur - n * D;
    std::memcpy(&s->frames[(r - n) * HW], cur + (C - 1) * HW, HW);
    if (std::memcmp(cur, prev + HW, (C - 1) * HW) != 0) {
      if (2 * (s->restack_rows.size() + 1) > rows - n) return false;
      s->restack_rows.push_back(int32_t(r));
      s->restack_obs.insert(s->restack_obs.end(), cur, cur + D);
    }
  }
  return true;
}

// The four arrays that replace "observations" when they travel as single frames.
std::vector<ArrayView> StackedViews(Unrolls& u, StackedFrames& s) {
  const int64_t T = u.T(), n = u.n(), K = int64_t(s.restack_rows.size());
  const int64_t C = u.shape.obs_shape[0], H = u.shape.obs_shape[1], W = u.shape.obs_shape[2];
  return {ArrayView{"first_observations", DType::kUint8, {n, C, H, W}, u.observations_u8.data(), size_t(n * C * H * W)},
          View("frames", DType::kUint8, {T, n, H, W}, s.frames),
          View("restack_rows", DType::kInt32, {K}, s.restack_rows),
          View("restack_observations", DType::kUint8, {K, C, H, W}, s.restack_obs)};
}
}  // namespace

bool SendTrajectory(zmq::socket_t& socket, const TrajectoryBatch& b) {
  auto& u = const_cast<TrajectoryBatch&>(b);
  std::vector<ArrayView> arrays = Arrays(u);
  if (b.stack_frames && FrameStackable(b.shape) && EncodeStacked(b, &b.stacked)) {
    std::vector<ArrayView> stacked = StackedViews(u, b.stacked);
    Trajectory header = b.meta;
    header.clear_arrays();
    Describe(stacked, &header);
    for (int i = 1; i < b.meta.arrays_size(); ++i) *header.add_arrays() = b.meta.arrays(i);
    std::vector<Frame> frames;
    for (const ArrayView& a : stacked) frames.push_back({a.data, a.bytes});
    for (size_t i = 1; i < arrays.size(); ++i) frames.push_back({arrays[i].data, arrays[i].bytes});
    return SendMessage(socket, header, frames);
  }
  std::vector<Frame> frames;
  for (const ArrayView& a : arrays) frames.push_back({a.data, a.bytes});
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
  // Observations as single frames: four arrays in place of "observations".
  const bool stacked = m.arrays_size() > 0 && m.arrays(0).name() == "first_observations";
  if (stacked) {
    if (!FrameStackable(expect.shape)) {
      *detail = "observations sent as single frames, but the resolved env spec's are not a uint8 [C, H, W] frame stack";
      return DropReason::kShape;
    }
    if (m.arrays_size() < 4 || m.arrays(2).name() != "restack_rows" || m.arrays(2).shape_size() != 1 ||
        m.arrays(2).shape(0) < 0 || m.arrays(2).shape(0) > T * n) {
      *detail = "single-frame observations without a \"restack_rows\" array of at most T x n rows";
      return DropReason::kMalformed;
    }
    out->stacked.frames.resize(size_t(T * n) * expect.shape.obs_shape[1] * expect.shape.obs_shape[2]);
    out->stacked.restack_rows.resize(size_t(m.arrays(2).shape(0)));
    out->stacked.restack_obs.resize(out->stacked.restack_rows.size() * expect.shape.obs_size());
    std::vector<ArrayView> views = StackedViews(*out, out->stacked);
    want.erase(want.begin());
    want.insert(want.begin(), views.begin(), views.end());
  }
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
  if (stacked) {
    // Rows after the first: the previous row shifted by the new frame, or sent whole.
    const StackedFrames& st = out->stacked;
    const size_t C = size_t(expect.shape.obs_shape[0]), HW = size_t(expect.shape.obs_size()) / C, D = C * HW;
    const size_t rows = size_t(T + 1) * n;
    size_t next = 0;
    for (size_t k = 0; k < st.restack_rows.size(); ++k) {
      const int64_t r = st.restack_rows[k];
      if (r < n || r >= int64_t(rows) || (k > 0 && r <= st.restack_rows[k - 1])) {
        *detail = "restack row " + std::to_string(r) + " at index " + std::to_string(k) +
                  " is not in [n, (T+1) n) or not increasing";
        return DropReason::kMalformed;
      }
    }
    for (size_t r = size_t(n); r < rows; ++r) {
      uint8_t* cur = &out->observations_u8[r * D];
      if (next < st.restack_rows.size() && size_t(st.restack_rows[next]) == r) {
        std::memcpy(cur, &st.restack_obs[next * D], D);
        ++next;
        continue;
      }
      std::memcpy(cur, cur - size_t(n) * D + HW, (C - 1) * HW);
      std::memcpy(cur + (C - 1) * HW, &st.frames[(r - size_t(n)) * HW], HW);
    }
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
