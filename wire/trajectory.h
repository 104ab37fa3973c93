// The trajectory message: an actor's batch of n unrolls, time-major, and the checks a
// learner applies before it accepts one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "wire/messages.pb.h"
#include "wire/unrolls.h"

namespace stampede::wire {

// An actor's trajectory message: the unroll arrays plus the header (sender, policy
// version, episodes). The actor fills one in place and sends it; the learner decodes
// received frames into one.
struct TrajectoryBatch : Unrolls {
  Trajectory meta;
  // Sizes the arrays and sets the header's shape fields to match.
  void Resize(int unroll_length, int num_unrolls, int obs_size, int num_actions);
};

inline constexpr int kTrajectoryFrames = 8;  // header + 7 arrays

// Bytes of the array frames of one trajectory message (the header adds a little).
int64_t TrajectoryBytes(int unroll_length, int num_unrolls, int obs_size, int num_actions);

[[nodiscard]] bool SendTrajectory(zmq::socket_t& socket, const TrajectoryBatch& batch);

// What the learner expects of every trajectory.
struct TrajectoryExpectations {
  int unroll_length = 0;
  int obs_size = 0;
  int num_actions = 0;
  int64_t newest_policy_version = 0;  // a trajectory may not claim a newer one
};

enum class DropReason {
  kNone = 0,
  kMalformed,       // wrong frame count, unparsable header, array sizes that do not match
  kProtocol,        // another protocol version
  kShape,           // unroll length / obs size / actions differ from the spec
  kNonFinite,       // NaN or infinity in observations, rewards or logits
  kBadAction,       // action outside [0, num_actions)
  kFutureVersion,   // policy version newer than the learner's
  kCount
};
const char* DropReasonName(DropReason reason);

// Decodes and checks one received message. On failure returns the reason and fills
// `detail` with a message naming what was wrong; `out` is then unspecified.
DropReason DecodeTrajectory(const std::vector<zmq::message_t>& parts,
                            const TrajectoryExpectations& expect, TrajectoryBatch* out,
                            std::string* detail);

}  // namespace stampede::wire
