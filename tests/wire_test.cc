// Wire messages round-trip through real ZeroMQ sockets; bad trajectories are rejected
// with the right reason, and a live learner counts them while it keeps training.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "learner/learner.h"
#include "ps/shard.h"
#include "tests/in_process_shards.h"
#include "tests/resolved_spec.h"
#include "tests/wire_helpers.h"
#include "wire/trajectory.h"
#include "wire/zmq_util.h"
#include "tests/wait.h"

using namespace stampede;
using wire::DropReason;

using testing::Copy;
using testing::Expect;
using testing::MakeGood;
using testing::Pipe;
using testing::Vector;

TEST_CASE("wire: a trajectory round-trips through ZeroMQ unchanged", "[wire]") {
  Pipe pipe;
  const auto sent = MakeGood(5, 3, 4, 2, 7);
  auto parts = pipe.RoundTrip(sent);
  CHECK(parts.size() == 9);  // header + 8 arrays
  wire::TrajectoryBatch got;
  std::string detail;
  REQUIRE(wire::DecodeTrajectory(parts, Expect(5, 4, 2, 7), &got, &detail) == DropReason::kNone);
  CHECK(got.observations == sent.observations);
  CHECK(got.valid == sent.valid);
  CHECK(got.valid_steps() == 12);  // hand-computed: i % 5 != 1 for i in [0, 15)
  CHECK(got.actions == sent.actions);
  CHECK(got.rewards == sent.rewards);
  CHECK(got.terminated == sent.terminated);
  CHECK(got.truncated == sent.truncated);
  CHECK(got.behaviour_logits == sent.behaviour_logits);
  CHECK(got.truncation_values == sent.truncation_values);
  CHECK(got.meta.SerializeAsString() == sent.meta.SerializeAsString());
}

TEST_CASE("wire: uint8 pixel trajectories travel as uint8 and round-trip", "[wire]") {
  Pipe pipe;
  const wire::StepShape pixels{{4, 6, 5}, wire::DType::kUint8, 3};
  const auto sent = MakeGood(pixels, 5, 2, 0);
  REQUIRE(sent.observations.empty());
  REQUIRE(sent.observations_u8.size() == size_t(6 * 2 * 4 * 6 * 5));
  auto parts = pipe.RoundTrip(sent);
  // The observation frame is one byte per pixel: 4x fewer bytes than float32.
  CHECK(parts[1].size() == size_t(6 * 2 * 120));
  const auto as_float = MakeGood(wire::StepShape{{4, 6, 5}, wire::DType::kFloat32, 3}, 5, 2, 0);
  CHECK(pipe.RoundTrip(as_float)[1].size() == 4 * parts[1].size());
  wire::TrajectoryBatch got;
  std::string detail;
  REQUIRE(wire::DecodeTrajectory(parts, Expect(5, pixels, 0), &got, &detail) == DropReason::kNone);
  CHECK(got.observations_u8 == sent.observations_u8);
  CHECK(got.shape == pixels);
  CHECK(got.behaviour_logits == sent.behaviour_logits);
  // The header names each array's dtype and shape.
  const auto& obs_header = sent.meta.arrays(0);
  CHECK(obs_header.name() == "observations");
  CHECK(obs_header.dtype() == wire::ARRAY_UINT8);
  CHECK(std::vector<int64_t>(obs_header.shape().begin(), obs_header.shape().end()) ==
        std::vector<int64_t>{6, 2, 4, 6, 5});
  // A float32 trajectory where the resolved spec says uint8 is refused, naming both.
  CHECK(wire::DecodeTrajectory(pipe.RoundTrip(as_float), Expect(5, pixels, 0), &got, &detail) ==
        DropReason::kShape);
  CHECK_THAT(detail, Catch::Contains("float32 [6, 2, 4, 6, 5], expected uint8 [6, 2, 4, 6, 5]"));
  // So is another observation shape.
  const auto wide = MakeGood(wire::StepShape{{4, 6, 6}, wire::DType::kUint8, 3}, 5, 2, 0);
  CHECK(wire::DecodeTrajectory(pipe.RoundTrip(wide), Expect(5, pixels, 0), &got, &detail) ==
        DropReason::kShape);
}

TEST_CASE("wire: box and multi-discrete actions and an LSTM state travel and are checked", "[wire]") {
  Pipe pipe;
  wire::TrajectoryBatch got;
  std::string detail;
  SECTION("box actions: float32 [T, n, D], the unclipped samples; NaN is refused") {
    wire::StepShape box{{3}, wire::DType::kFloat32, 4, 6};
    box.action_kind = wire::ActionKind::kBox;
    box.action_low = {-2.f, -1.f};
    box.action_high = {2.f, 1.f};
    auto sent = MakeGood(box, 4, 2, 0);
    REQUIRE(sent.actions.empty());
    REQUIRE(sent.box_actions.size() == size_t(4 * 2 * 2));
    for (size_t i = 0; i < sent.box_actions.size(); ++i) sent.box_actions[i] = 0.7f * float(i) - 3.f;
    for (size_t i = 0; i < sent.initial_core_state.size(); ++i) sent.initial_core_state[i] = float(i);
    REQUIRE(wire::DecodeTrajectory(pipe.RoundTrip(sent), Expect(4, box, 0), &got, &detail) == DropReason::kNone);
    CHECK(got.box_actions == sent.box_actions);  // outside the bounds too: the env got them clipped
    CHECK(got.initial_core_state == sent.initial_core_state);
    CHECK(got.initial_core_state.size() == size_t(2 * 6));
    sent.box_actions[3] = NAN;
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(sent), Expect(4, box, 0), &got, &detail) == DropReason::kBadAction);
    // Integer actions where the spec says box are refused by shape.
    const wire::StepShape discrete{{3}, wire::DType::kFloat32, 4, 6};
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(MakeGood(discrete, 4, 2, 0)), Expect(4, box, 0), &got, &detail) ==
          DropReason::kShape);
    CHECK_THAT(detail, Catch::Contains("\"actions\" is int32 [4, 2], expected float32 [4, 2, 2]"));
  }
  SECTION("multi-discrete actions: int32 [T, n, K], each within its component") {
    wire::StepShape md{{3}, wire::DType::kFloat32, 5};
    md.action_kind = wire::ActionKind::kMultiDiscrete;
    md.action_nvec = {2, 3};
    auto sent = MakeGood(md, 4, 2, 0);
    REQUIRE(sent.actions.size() == size_t(4 * 2 * 2));
    for (size_t i = 0; i < sent.actions.size(); ++i) sent.actions[i] = int(i % 2 == 0 ? i % 2 : i % 3);
    REQUIRE(wire::DecodeTrajectory(pipe.RoundTrip(sent), Expect(4, md, 0), &got, &detail) == DropReason::kNone);
    CHECK(got.actions == sent.actions);
    sent.actions[2] = 2;  // component 0 has 2 actions
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(sent), Expect(4, md, 0), &got, &detail) == DropReason::kBadAction);
    CHECK_THAT(detail, Catch::Contains("outside [0, 2)"));
  }
}

TEST_CASE("wire: magnitudes, unroll counts and episode records are bounded", "[wire]") {
  Pipe pipe;
  wire::TrajectoryBatch got;
  std::string detail;
  auto expect = Expect(5, 4, 2, 7);
  expect.num_unrolls = 3;
  expect.max_abs_observation = 100;
  expect.max_abs_reward = 10;
  expect.max_episode_length = 50;
  REQUIRE(wire::DecodeTrajectory(pipe.RoundTrip(MakeGood(5, 3, 4, 2, 7)), expect, &got, &detail) ==
          DropReason::kNone);
  SECTION("a huge reward") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.rewards[4] = 3e38f;
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(b), expect, &got, &detail) == DropReason::kOutOfRange);
    CHECK_THAT(detail, Catch::Contains("exceeds wire.max_abs_reward"));
    CHECK(std::string(wire::DropReasonName(DropReason::kOutOfRange)) == "out_of_range");
  }
  SECTION("a huge observation") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.observations[7] = -101.f;
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(b), expect, &got, &detail) == DropReason::kOutOfRange);
    CHECK_THAT(detail, Catch::Contains("exceeds wire.max_abs_observation"));
  }
  SECTION("more unrolls than an actor has envs") {
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(MakeGood(5, 4, 4, 2, 7)), expect, &got, &detail) ==
          DropReason::kShape);
    CHECK_THAT(detail, Catch::Contains("4 unrolls, expected 3 (actors.envs_per_actor)"));
  }
  SECTION("impossible episode records") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.meta.mutable_episodes(0)->set_length(51);
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(b), expect, &got, &detail) == DropReason::kOutOfRange);
    CHECK_THAT(detail, Catch::Contains("episode length 51 is not in [1, 50]"));
    b.meta.mutable_episodes(0)->set_length(0);
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(b), expect, &got, &detail) == DropReason::kOutOfRange);
    b.meta.mutable_episodes(0)->set_length(10);
    b.meta.mutable_episodes(0)->set_episode_return(1e30f);  // more than 10 per step for 10 steps
    CHECK(wire::DecodeTrajectory(pipe.RoundTrip(b), expect, &got, &detail) == DropReason::kOutOfRange);
  }
}

TEST_CASE("wire: PS requests, parameter slices and status round-trip", "[wire]") {
  zmq::context_t ctx(1);
  zmq::socket_t a(ctx, zmq::socket_type::pair), b(ctx, zmq::socket_type::pair);
  wire::ConfigureReceiver(b, 1 << 20);
  b.bind("inproc://wire-msgs");
  a.connect("inproc://wire-msgs");
  std::vector<zmq::message_t> parts;

  wire::PsRequest get;
  *get.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 1, 5);
  get.mutable_get()->set_min_version(4);
  get.mutable_get()->set_exact_version(9);
  REQUIRE(wire::SendMessage(a, get));
  REQUIRE(wire::RecvMultipart(b, &parts, true));
  wire::PsRequest get_back;
  REQUIRE(wire::ParseFrame(parts[0], &get_back));
  CHECK(get_back.get().exact_version() == 9);
  CHECK(get_back.SerializeAsString() == get.SerializeAsString());

  wire::PsRequest put;
  *put.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 6);
  put.mutable_put()->set_version(3);
  put.mutable_put()->set_count(3);
  const std::vector<float> slice = {1.f, 2.f, 3.f};
  const wire::Frame frames[] = {wire::AsFrame(slice)};
  REQUIRE(wire::SendMessage(a, put, frames));
  REQUIRE(wire::RecvMultipart(b, &parts, true));
  REQUIRE(parts.size() == 2);
  wire::PsRequest put_back;
  REQUIRE(wire::ParseFrame(parts[0], &put_back));
  CHECK(put_back.SerializeAsString() == put.SerializeAsString());
  CHECK(std::memcmp(parts[1].data(), slice.data(), 12) == 0);

  wire::Status st;
  *st.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 6);
  st.set_env_frames(1000);
  st.set_mean_return_100(21.5);
  st.set_activity("training");
  REQUIRE(wire::SendMessage(a, st));
  REQUIRE(wire::RecvMultipart(b, &parts, true));
  wire::Status st_back;
  REQUIRE(wire::ParseFrame(parts[0], &st_back));
  CHECK(st_back.SerializeAsString() == st.SerializeAsString());

  wire::Status garbage;
  zmq::message_t junk("\xff\xff\xff", 3);
  CHECK_FALSE(wire::ParseFrame(junk, &garbage));
}

TEST_CASE("wire: bad trajectories are rejected with the reason", "[wire]") {
  Pipe pipe;
  const auto expect = Expect(5, 4, 2, 7);
  wire::TrajectoryBatch out;
  std::string detail;
  auto reason_for = [&](const std::vector<zmq::message_t>& parts) {
    detail.clear();
    return wire::DecodeTrajectory(parts, expect, &out, &detail);
  };
  const auto good = pipe.RoundTrip(MakeGood(5, 3, 4, 2, 7));

  SECTION("a missing frame") {
    auto parts = Copy(good);
    parts.pop_back();
    CHECK(reason_for(parts) == DropReason::kMalformed);
    CHECK_THAT(detail, Catch::Contains("header describes 8 arrays, but 7 frames follow it"));
  }
  SECTION("a truncated header") {
    auto parts = Copy(good);
    parts[0] = zmq::message_t(parts[0].data(), parts[0].size() - 3);
    CHECK(reason_for(parts) == DropReason::kMalformed);
  }
  SECTION("a truncated array: the frame disagrees with its header") {
    auto parts = Copy(good);
    parts[1] = zmq::message_t(parts[1].data(), parts[1].size() - 4);
    CHECK(reason_for(parts) == DropReason::kMalformed);
    CHECK_THAT(detail, Catch::Contains("\"observations\": header says [6, 3, 4]") &&
                           Catch::Contains("the frame has 284 bytes"));
  }
  SECTION("a header whose dtype disagrees with the frame") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.meta.mutable_arrays(1)->set_dtype(wire::ARRAY_UINT8);  // actions: 4-byte ints sent
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kMalformed);
  }
  SECTION("an array the protocol does not know") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.meta.mutable_arrays(3)->set_name("surprise");
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kMalformed);
    CHECK_THAT(detail, Catch::Contains("\"surprise\", expected \"terminated\""));
  }
  SECTION("another protocol version") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.meta.mutable_sender()->set_protocol_version(1);
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kProtocol);
    CHECK_THAT(detail, Catch::Contains("protocol version 1") && Catch::Contains("speaks version 3"));
  }
  SECTION("a wrong unroll length") {
    CHECK(reason_for(pipe.RoundTrip(MakeGood(6, 3, 4, 2, 7))) == DropReason::kShape);
    CHECK_THAT(detail, Catch::Contains("unroll length 6, expected 5"));
  }
  SECTION("a wrong observation size") {
    CHECK(reason_for(pipe.RoundTrip(MakeGood(5, 3, 5, 2, 7))) == DropReason::kShape);
  }
  SECTION("NaN in observations, rewards or logits") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.observations[17] = std::numeric_limits<float>::quiet_NaN();
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kNonFinite);
    b = MakeGood(5, 3, 4, 2, 7);
    b.rewards[2] = std::numeric_limits<float>::infinity();
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kNonFinite);
    b = MakeGood(5, 3, 4, 2, 7);
    b.behaviour_logits[0] = std::numeric_limits<float>::quiet_NaN();
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kNonFinite);
  }
  SECTION("an action outside the action space") {
    auto b = MakeGood(5, 3, 4, 2, 7);
    b.actions[4] = 2;
    CHECK(reason_for(pipe.RoundTrip(b)) == DropReason::kBadAction);
  }
  SECTION("a policy version from the future") {
    CHECK(reason_for(pipe.RoundTrip(MakeGood(5, 3, 4, 2, 8))) == DropReason::kFutureVersion);
    CHECK_THAT(detail, Catch::Contains("newer than the learner's 7"));
  }
}

namespace {
// A small Catch learner for the live-learner tests: T = 5, 2 unrolls per message, batches
// of 4, `shards` PS shards (endpoints added by the caller), a budget never reached.
config::Config LiveLearnerConfig(int shards) {
  config::Config cfg;
  cfg.mutable_env()->set_name("Catch");
  cfg.mutable_net()->add_hidden_sizes(16);
  cfg.mutable_actors()->set_unroll_length(5);
  cfg.mutable_actors()->set_envs_per_actor(2);
  cfg.mutable_learner()->set_batch_size(4);
  cfg.mutable_learner()->set_queue_capacity(16);
  cfg.mutable_stop()->set_total_env_frames(1000000000);
  cfg.mutable_ps()->set_num_shards(shards);
  return cfg;
}
}  // namespace

TEST_CASE("wire: a live learner drops and counts bad trajectories and keeps training", "[wire][learner]") {
  zmq::context_t ctx(1);
  config::Config cfg = LiveLearnerConfig(2);  // the good messages carry 2 unrolls
  testing::ResolveSpecInPlace(&cfg);
  testing::InProcessShards servers(ctx, 2);
  auto& shards = servers.shards;
  for (const auto& ep : servers.endpoints) cfg.mutable_cluster()->add_ps(ep);

  learner::Learner learner(cfg, ctx, "tcp://127.0.0.1:*", 1);
  std::string error;
  REQUIRE_OK(learner.Start());
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.connect(learner.endpoint());

  const wire::StepShape catch_shape{{10, 5}, wire::DType::kFloat32, 3};
  auto good = [&](uint64_t seed) {
    auto b = MakeGood(catch_shape, 5, 2, 0, seed);
    std::fill(b.valid.begin(), b.valid.end(), 1);
    return b;
  };
  int sent_bad = 0;
  for (int round = 0; round < 30; ++round) {
    REQUIRE(wire::SendTrajectory(push, good(round)));
    auto nan = good(round);
    nan.rewards[1] = std::numeric_limits<float>::quiet_NaN();
    REQUIRE(wire::SendTrajectory(push, nan));
    auto shape = MakeGood(catch_shape, 4, 2, 0, round);
    REQUIRE(wire::SendTrajectory(push, shape));
    auto version = good(round);
    version.meta.mutable_sender()->set_protocol_version(9);
    REQUIRE(wire::SendTrajectory(push, version));
    // A truncated message: header only.
    const std::string head = good(round).meta.SerializeAsString();
    REQUIRE(push.send(zmq::message_t(head.data(), head.size()), zmq::send_flags::none));
    sent_bad += 4;
  }
  // 30 good messages of 2 unrolls = 60 unrolls = 15 batches of 4.
  REQUIRE(testing::WaitUntil([&] { return learner.learner_steps() >= 15 && learner.dropped_total() >= sent_bad; },
                              std::chrono::seconds(30)));
  CHECK(learner.learner_steps() == 15);
  CHECK(learner.env_frames() == 30 * 2 * 5);
  CHECK(learner.dropped(DropReason::kNonFinite) == 30);
  CHECK(learner.dropped(DropReason::kShape) == 30);
  CHECK(learner.dropped(DropReason::kProtocol) == 30);
  CHECK(learner.dropped(DropReason::kMalformed) == 30);
  CHECK(learner.policy_version() == 15);
  wire::Status status;
  learner.FillStatus(&status);
  CHECK(status.dropped_trajectories() == sent_bad);
  CHECK(status.dropped_by_reason().at("non_finite") == 30);
  CHECK(status.dropped_by_reason().at("malformed") == 30);
  CHECK(status.episodes() == 30);
  CHECK(status.mean_return_100() == Approx(12.5));
  // The newest version reaches every shard, even if a put found a full queue.
  CHECK(testing::WaitUntil([&] {
    return shards[0]->stats().newest_version.load() >= 15 && shards[1]->stats().newest_version.load() >= 15;
  }));
  learner.Stop();
  servers.Stop();
  // The shards hold the learner's newest published version.
  CHECK(shards[0]->stats().newest_version.load() == 15);
  CHECK(shards[1]->stats().newest_version.load() == 15);
}

TEST_CASE("wire: a live learner skips and counts a step whose loss is not finite, and its parameters stay finite",
          "[wire][learner]") {
  zmq::context_t ctx(1);
  config::Config cfg = LiveLearnerConfig(1);
  // Bounds wide open, so rewards of 2e38 reach the loss: their discounted sums overflow float.
  cfg.mutable_wire()->set_max_abs_reward(3e38);
  testing::ResolveSpecInPlace(&cfg);
  testing::InProcessShards servers(ctx, 1);
  cfg.mutable_cluster()->add_ps(servers.endpoints[0]);
  learner::Learner learner(cfg, ctx, "tcp://127.0.0.1:*", 1);
  std::string error;
  REQUIRE_OK(learner.Start());
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.connect(learner.endpoint());
  const wire::StepShape catch_shape{{10, 5}, wire::DType::kFloat32, 3};
  auto make = [&](uint64_t seed, float reward) {
    auto b = MakeGood(catch_shape, 5, 2, 0, seed);
    std::fill(b.valid.begin(), b.valid.end(), 1);
    std::fill(b.terminated.begin(), b.terminated.end(), 0);
    std::fill(b.rewards.begin(), b.rewards.end(), reward);
    b.meta.clear_episodes();
    return b;
  };
  // 4 poisoned messages (2 batches of 4 unrolls), the first with an episode of return
  // 1e30; then 4 ordinary ones (2 batches) with 25 episodes of return 1 each.
  for (int i = 0; i < 4; ++i) {
    auto b = make(i, 2e38f);
    if (i == 0) {
      auto* ep = b.meta.add_episodes();
      ep->set_episode_return(1e30f);
      ep->set_length(5);
    }
    REQUIRE(wire::SendTrajectory(push, b));
  }
  for (int i = 0; i < 4; ++i) {
    auto b = make(10 + i, 0.5f);
    for (int e = 0; e < 25; ++e) {
      auto* ep = b.meta.add_episodes();
      ep->set_episode_return(1.f);
      ep->set_length(2);
    }
    REQUIRE(wire::SendTrajectory(push, b));
  }
  wire::Status status;
  REQUIRE(testing::WaitUntil([&] {
    learner.FillStatus(&status);
    return status.skipped_steps() + learner.learner_steps() >= 4;
  }, std::chrono::seconds(30)));
  learner.FillStatus(&status);
  CHECK(status.skipped_steps() == 2);
  CHECK(learner.learner_steps() == 2);
  CHECK(learner.policy_version() == 2);
  CHECK(learner.dropped_total() == 0);
  // The 1e30 episode has left the 100-episode window, and left no trace in its mean (a
  // running sum would have lost the 1s to rounding: 1e30 + 1 - 1e30 = 0).
  CHECK(status.episodes() == 101);
  CHECK(status.returns_counted() == 100);
  CHECK(status.mean_return_100() == 1.0);
  learner.Stop();
  // No non-finite parameters ever reached the PS (it would have refused and counted them).
  CHECK(servers.shards[0]->stats().newest_version.load() >= 0);
  CHECK(servers.shards[0]->stats().refused[size_t(ps::Refusal::kNonFinite)].load() == 0);
  servers.Stop();
}

TEST_CASE("wire: a live learner with replay mixes exactly fraction x B replayed unrolls into each batch",
          "[wire][learner][replay]") {
  zmq::context_t ctx(1);
  config::Config cfg = LiveLearnerConfig(2);
  auto* rc = cfg.mutable_learner()->mutable_replay();
  rc->set_fraction(0.5);  // 2 of each batch of 4
  rc->set_min_size(4);
  rc->set_capacity(100);
  testing::ResolveSpecInPlace(&cfg);
  testing::InProcessShards servers(ctx, 2);
  for (const auto& ep : servers.endpoints) cfg.mutable_cluster()->add_ps(ep);
  learner::Learner learner(cfg, ctx, "tcp://127.0.0.1:*", 1);
  std::string error;
  REQUIRE_OK(learner.Start());
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.connect(learner.endpoint());
  const wire::StepShape catch_shape{{10, 5}, wire::DType::kFloat32, 3};
  for (int round = 0; round < 30; ++round) {
    auto b = MakeGood(catch_shape, 5, 2, 0, uint64_t(round));
    std::fill(b.valid.begin(), b.valid.end(), 1);
    REQUIRE(wire::SendTrajectory(push, b));
  }
  // 60 fresh unrolls: the first batch is all fresh (the table is empty); once its 4 are
  // in the table, every batch is 2 fresh + 2 replayed: 1 + 56 / 2 = 29 steps.
  REQUIRE(testing::WaitUntil([&] { return learner.learner_steps() >= 29; }, std::chrono::seconds(30)));
  // No 30th step may come: there is no fresh unroll left for it.
  CHECK_FALSE(testing::WaitUntil([&] { return learner.learner_steps() > 29; }, std::chrono::milliseconds(50)));
  wire::Status status;
  learner.FillStatus(&status);
  learner.Stop();
  servers.Stop();
  CHECK(learner.learner_steps() == 29);
  CHECK(status.replay().inserts() == 60);
  CHECK(status.replay().samples() == 28 * 2);
  CHECK(status.replay().size() == 60);
  CHECK(status.replay().selector() == "uniform");
  CHECK(status.replay().replayed_fraction() == Approx(56.0 / (29 * 4)));
  CHECK(status.replay().bytes() == 60 * wire::TrajectoryBytes(5, 1, catch_shape));
  // Replayed unrolls were acted on by version 0 and trained on at versions 1..28.
  CHECK(status.replay().sampled_age_max() >= 1);
  CHECK(status.replay().sampled_age_max() <= 28);
}
