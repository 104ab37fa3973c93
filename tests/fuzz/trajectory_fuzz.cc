// libFuzzer target: the learner's trajectory decoder and checks (wire::DecodeTrajectory)
// on arbitrary frames, against three expected shapes (a vector env, pixels with an
// LSTM core, box actions) chosen by the input's first byte.
#include <cstdint>

#include "tests/fuzz/frames.h"
#include "wire/trajectory.h"

using namespace stampede;

wire::TrajectoryExpectations Expectations(uint8_t which) {
  wire::TrajectoryExpectations e;
  e.unroll_length = 5;
  e.num_unrolls = 2;
  e.newest_policy_version = 100;
  e.max_abs_observation = 1e6;
  e.max_abs_reward = 1e6;
  e.max_episode_length = 500;
  switch (which % 3) {
    case 0: e.shape = wire::StepShape{{4}, wire::DType::kFloat32, 2}; break;
    case 1:
      e.shape = wire::StepShape{{1, 6, 5}, wire::DType::kUint8, 3};
      e.shape.core_state_size = 8;
      break;
    default:
      e.shape = wire::StepShape{{3}, wire::DType::kFloat32, 2};
      e.shape.action_kind = wire::ActionKind::kBox;
      e.shape.action_low = {-2.f};
      e.shape.action_high = {2.f};
  }
  return e;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto parts = fuzz::SplitFrames(data + 1, size - 1);
  wire::TrajectoryBatch out;
  std::string detail;
  const wire::DropReason r = wire::DecodeTrajectory(parts, Expectations(data[0]), &out, &detail);
  if (r == wire::DropReason::kNone) {
    // An accepted trajectory is exactly the expected size.
    if (out.T() != 5 || out.n() != 2) __builtin_trap();
  } else if (detail.empty()) {
    __builtin_trap();  // every drop names its problem
  }
  return 0;
}
