#include "wire/trajectory.h"

#include <cmath>
#include <cstring>

#include "wire/zmq_util.h"

namespace stampede::wire {

void TrajectoryBatch::Resize(int unroll_length, int num_unrolls, int obs_size, int num_actions) {
  Unrolls::Resize(unroll_length, num_unrolls, obs_size, num_actions);
  meta.set_unroll_length(unroll_length);
  meta.set_num_unrolls(num_unrolls);
  meta.set_obs_size(obs_size);
  meta.set_num_actions(num_actions);
}

int64_t TrajectoryBytes(int T, int n, int D, int A) {
  const int64_t tn = int64_t(T) * n;
  return (tn + n) * D * 4 + tn * (4 + 4 + 1 + 1 + 4) + tn * A * 4;
}

bool SendTrajectory(zmq::socket_t& socket, const TrajectoryBatch& b) {
  const Frame frames[] = {AsFrame(b.observations), AsFrame(b.actions),   AsFrame(b.rewards),
                          AsFrame(b.terminated),   AsFrame(b.truncated), AsFrame(b.behaviour_logits),
                          AsFrame(b.truncation_values)};
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
    default: return "unknown";
  }
}

namespace {
template <class T>
bool CopyFrame(const zmq::message_t& part, size_t count, std::vector<T>* out) {
  if (part.size() != count * sizeof(T)) return false;
  out->resize(count);
  if (count) std::memcpy(out->data(), part.data(), part.size());
  return true;
}

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
  if (parts.size() != size_t(kTrajectoryFrames)) {
    *detail = "expected " + std::to_string(kTrajectoryFrames) + " frames, got " +
              std::to_string(parts.size());
    return DropReason::kMalformed;
  }
  if (!ParseFrame(parts[0], &out->meta)) {
    *detail = "header frame is not a valid Trajectory message";
    return DropReason::kMalformed;
  }
  const Trajectory& m = out->meta;
  if (std::string err = CheckProtocol(m.sender()); !err.empty()) {
    *detail = err;
    return DropReason::kProtocol;
  }
  if (m.unroll_length() != expect.unroll_length) {
    *detail = "unroll length " + std::to_string(m.unroll_length()) + ", expected " +
              std::to_string(expect.unroll_length) + " (actors.unroll_length)";
    return DropReason::kShape;
  }
  if (m.obs_size() != expect.obs_size || m.num_actions() != expect.num_actions) {
    *detail = "observation size " + std::to_string(m.obs_size()) + " and " +
              std::to_string(m.num_actions()) + " actions, expected " +
              std::to_string(expect.obs_size) + " and " + std::to_string(expect.num_actions) +
              " (the env's spec)";
    return DropReason::kShape;
  }
  if (m.num_unrolls() <= 0 || m.num_unrolls() > 1 << 20) {
    *detail = "num_unrolls " + std::to_string(m.num_unrolls()) + " is not in [1, 2^20]";
    return DropReason::kShape;
  }
  const size_t T = size_t(m.unroll_length()), n = size_t(m.num_unrolls());
  const size_t D = size_t(m.obs_size()), A = size_t(m.num_actions());
  out->unroll_length = m.unroll_length();
  out->num_unrolls = m.num_unrolls();
  out->obs_size = m.obs_size();
  out->num_actions = m.num_actions();
  const size_t tn = T * n;
  if (!CopyFrame(parts[1], (T + 1) * n * D, &out->observations) ||
      !CopyFrame(parts[2], tn, &out->actions) || !CopyFrame(parts[3], tn, &out->rewards) ||
      !CopyFrame(parts[4], tn, &out->terminated) || !CopyFrame(parts[5], tn, &out->truncated) ||
      !CopyFrame(parts[6], tn * A, &out->behaviour_logits) ||
      !CopyFrame(parts[7], tn, &out->truncation_values)) {
    *detail = "array frame sizes do not match T=" + std::to_string(T) + ", n=" +
              std::to_string(n) + ", obs_size=" + std::to_string(D) + ", actions=" +
              std::to_string(A);
    return DropReason::kShape;
  }
  if (!AllFinite(out->observations) || !AllFinite(out->rewards) ||
      !AllFinite(out->behaviour_logits) || !AllFinite(out->truncation_values)) {
    *detail = "non-finite number (NaN or infinity) in observations, rewards or logits";
    return DropReason::kNonFinite;
  }
  for (size_t i = 0; i < tn; ++i) {
    if (out->actions[i] < 0 || size_t(out->actions[i]) >= A) {
      *detail = "action " + std::to_string(out->actions[i]) + " at index " + std::to_string(i) +
                " is outside [0, " + std::to_string(A) + ")";
      return DropReason::kBadAction;
    }
  }
  for (auto& ep : m.episodes()) {
    if (!std::isfinite(ep.episode_return())) {
      *detail = "non-finite episode return";
      return DropReason::kNonFinite;
    }
  }
  if (m.policy_version() > expect.newest_policy_version || m.policy_version() < 0) {
    *detail = "policy version " + std::to_string(m.policy_version()) +
              " is newer than the learner's " + std::to_string(expect.newest_policy_version);
    return DropReason::kFutureVersion;
  }
  return DropReason::kNone;
}

}  // namespace stampede::wire
