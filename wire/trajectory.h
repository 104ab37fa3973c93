// The trajectory message: an actor's batch of n unrolls, time-major, whose frames
// describe themselves (name, dtype, shape in the header), and the checks a learner
// applies before it accepts one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "wire/messages.pb.h"
#include "wire/unrolls.h"

namespace stampede::wire {

// An actor's trajectory message: the unroll arrays plus the header (sender, policy
// version, episodes, array descriptions). The actor fills one in place and sends it;
// the learner decodes received frames into one.
// Frame-stacked observations as they travel (SEED RL's trick): where an env's
// observation is its previous one shifted along axis 0 by one new frame, only that frame;
// elsewhere (an episode's first observation) the whole observation.
struct StackedFrames {
  std::vector<uint8_t> frames;        // [T, n, H, W]: each row's newest frame
  std::vector<int32_t> restack_rows;  // rows (n .. (T+1) n - 1, increasing) sent whole
  std::vector<uint8_t> restack_obs;   // [K, C, H, W]: those rows' observations
};

// Whether observations of this shape can travel as single frames: uint8 [C, H, W] with
// C >= 2 frames stacked along axis 0 (channels first, the oldest frame first).
bool FrameStackable(const StepShape& shape);

struct TrajectoryBatch : Unrolls {
  Trajectory meta;
  // Send frame-stacked observations as single frames (wire.stack_frames) where the shape
  // allows it and at most half the rows must go whole; otherwise whole observations.
  // The learner decodes both.
  bool stack_frames = false;
  mutable StackedFrames stacked;  // scratch of the last send (or decode)
  // Sizes the arrays and describes them in the header.
  void Resize(int unroll_length, int num_unrolls, const StepShape& shape);
  void Resize(int unroll_length, int num_unrolls, int obs_size, int num_actions) {
    Resize(unroll_length, num_unrolls, StepShape{{obs_size}, DType::kFloat32, num_actions});
  }
};

// One array of an Unrolls as it travels: a name, element type, shape and bytes.
struct ArrayView {
  const char* name;
  DType dtype;
  std::vector<int64_t> shape;
  void* data;
  size_t bytes;
};
// Every array of `u`, in frame order (the names messages.proto lists).
std::vector<ArrayView> Arrays(Unrolls& u);

// Bytes of the array frames of one trajectory message (the header adds a little).
int64_t TrajectoryBytes(int unroll_length, int num_unrolls, const StepShape& shape);

[[nodiscard]] bool SendTrajectory(zmq::socket_t& socket, const TrajectoryBatch& batch);

// What the learner expects of every trajectory (from the config's resolved env spec).
struct TrajectoryExpectations {
  int unroll_length = 0;
  int num_unrolls = 0;  // > 0: exactly this many unrolls (actors.envs_per_actor)
  StepShape shape;
  int64_t newest_policy_version = 0;  // a trajectory may not claim a newer one
  double max_abs_observation = 0;     // > 0: bound on |float observation|
  double max_abs_reward = 0;          // > 0: bound on |reward|
  int max_episode_length = 0;         // > 0: bound on an episode record's length
};

enum class DropReason {
  kNone = 0,
  kMalformed,       // unparsable header, frames that disagree with the header's arrays
  kProtocol,        // another protocol version
  kShape,           // unroll length / observation dtype or shape / actions differ from the spec
  kNonFinite,       // NaN or infinity in observations, rewards or logits
  kBadAction,       // action outside [0, num_actions)
  kFutureVersion,   // policy version newer than the learner's
  kOutOfRange,      // an observation or reward beyond wire.max_abs_*, an impossible episode record
  kStale,           // policy older than learner.max_policy_lag versions (the learner checks this)
  kCount
};
const char* DropReasonName(DropReason reason);

// Decodes and checks one received message. On failure returns the reason and fills
// `detail` with a message naming what was wrong; `out` is then unspecified.
DropReason DecodeTrajectory(const std::vector<zmq::message_t>& parts,
                            const TrajectoryExpectations& expect, TrajectoryBatch* out,
                            std::string* detail);

}  // namespace stampede::wire
