// Frame-stacked observations on the wire: single frames out, the stacks back, episode
// starts sent whole, forged restack rows and specs without a stack refused.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "tests/wire_helpers.h"
#include "wire/trajectory.h"
#include "wire/zmq_util.h"

using namespace stampede;
using testing::Copy;
using testing::Expect;
using testing::MakeGood;
using testing::Pipe;
using wire::DropReason;

TEST_CASE("wire: frame-stacked observations travel as single frames and are stacked again", "[wire]") {
  Pipe pipe;
  const int C = 4, H = 6, W = 5, T = 9, n = 3;
  const size_t HW = H * W, D = C * HW;
  const wire::StepShape stack{{C, H, W}, wire::DType::kUint8, 3};
  REQUIRE(wire::FrameStackable(stack));
  auto sent = MakeGood(stack, T, n, 0);
  // Each row is the env's previous one shifted by a new frame, except after a step that
  // ended an episode: the reset frame repeated C times (the Atari wrappers' rule).
  std::mt19937_64 rng(5);
  int restarts = 0;
  for (size_t r = n; r < size_t(T + 1) * n; ++r) {
    uint8_t* cur = &sent.observations_u8[r * D];
    const uint8_t* prev = cur - n * D;
    std::vector<uint8_t> frame(HW);
    for (auto& v : frame) v = uint8_t(rng());
    if (sent.terminated[r - n]) {
      for (int c = 0; c < C; ++c) std::copy(frame.begin(), frame.end(), cur + c * HW);
      ++restarts;
    } else {
      std::memcpy(cur, prev + HW, (C - 1) * HW);
      std::copy(frame.begin(), frame.end(), cur + (C - 1) * HW);
    }
  }
  REQUIRE(restarts > 0);
  sent.stack_frames = true;
  auto parts = pipe.RoundTrip(sent);
  wire::Trajectory header;
  REQUIRE(wire::ParseFrame(parts[0], &header));
  REQUIRE(header.arrays_size() == sent.meta.arrays_size() + 3);
  CHECK(header.arrays(0).name() == "first_observations");
  CHECK(header.arrays(1).name() == "frames");
  CHECK(header.arrays(2).name() == "restack_rows");
  CHECK(header.arrays(3).name() == "restack_observations");
  CHECK(parts[1].size() == n * D);            // the first row whole
  CHECK(parts[2].size() == size_t(T) * n * HW);  // one frame per later row
  CHECK(parts[3].size() == size_t(restarts) * 4);
  CHECK(parts[4].size() == size_t(restarts) * D);  // episode starts whole
  const size_t plain = size_t(T + 1) * n * D;
  CHECK(parts[1].size() + parts[2].size() + parts[3].size() + parts[4].size() < plain / 2);
  wire::TrajectoryBatch got;
  std::string detail;
  REQUIRE(wire::DecodeTrajectory(parts, Expect(T, stack, 0), &got, &detail) == DropReason::kNone);
  CHECK(got.observations_u8 == sent.observations_u8);
  CHECK(got.actions == sent.actions);
  CHECK(got.terminated == sent.terminated);
  CHECK(got.behaviour_logits == sent.behaviour_logits);

  // A restack row outside [n, (T+1) n) is refused, naming it.
  auto forged = Copy(parts);
  int32_t bad = 1;
  std::memcpy(forged[3].data(), &bad, sizeof bad);
  CHECK(wire::DecodeTrajectory(forged, Expect(T, stack, 0), &got, &detail) == DropReason::kMalformed);
  CHECK_THAT(detail, Catch::Contains("restack row 1"));
  // Single frames where the spec has no frame stack are refused.
  const wire::StepShape flat{{C, H * W}, wire::DType::kUint8, 3};
  CHECK(wire::DecodeTrajectory(parts, Expect(T, flat, 0), &got, &detail) == DropReason::kShape);
  CHECK_THAT(detail, Catch::Contains("not a uint8 [C, H, W] frame stack"));

  // Observations that are not a frame stack go whole, stack_frames or not.
  auto random = MakeGood(stack, T, n, 0);
  random.stack_frames = true;
  auto whole = pipe.RoundTrip(random);
  REQUIRE(wire::ParseFrame(whole[0], &header));
  CHECK(header.arrays(0).name() == "observations");
  CHECK(whole[1].size() == plain);
  REQUIRE(wire::DecodeTrajectory(whole, Expect(T, stack, 0), &got, &detail) == DropReason::kNone);
  CHECK(got.observations_u8 == random.observations_u8);
  // And with stack_frames off, the stack goes whole too.
  sent.stack_frames = false;
  REQUIRE(wire::ParseFrame(pipe.RoundTrip(sent)[0], &header));
  CHECK(header.arrays(0).name() == "observations");
}

