// Test helpers for trajectories on the wire: a well-formed batch, an inproc PUSH/PULL
// pipe, the learner's expectations, a deep copy of received frames.
#pragma once

#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "wire/trajectory.h"
#include "wire/zmq_util.h"

namespace stampede::testing {

inline wire::StepShape Vector(int D, int A) { return wire::StepShape{{D}, wire::DType::kFloat32, A}; }

inline wire::TrajectoryBatch MakeGood(const wire::StepShape& shape, int T, int n, int64_t version,
                               uint64_t seed = 1) {
  wire::TrajectoryBatch b;
  b.Resize(T, n, shape);
  const int A = shape.num_actions;
  *b.meta.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 3, 99);
  b.meta.set_policy_version(version);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  for (auto& x : b.observations) x = nd(rng);
  for (auto& x : b.observations_u8) x = uint8_t(rng());
  for (auto& x : b.behaviour_logits) x = nd(rng);
  for (auto& x : b.rewards) x = nd(rng);
  for (size_t i = 0; i < b.actions.size(); ++i) {
    b.actions[i] = int(i % A);
    b.terminated[i] = i % 7 == 3;
    b.valid[i] = i % 5 != 1;
  }
  auto* ep = b.meta.add_episodes();
  ep->set_episode_return(12.5f);
  ep->set_length(40);
  return b;
}

inline wire::TrajectoryBatch MakeGood(int T, int n, int D, int A, int64_t version, uint64_t seed = 1) {
  return MakeGood(Vector(D, A), T, n, version, seed);
}

struct Pipe {
  zmq::context_t ctx{1};
  zmq::socket_t push{ctx, zmq::socket_type::push};
  zmq::socket_t pull{ctx, zmq::socket_type::pull};
  Pipe() {
    wire::ConfigureReceiver(pull, 1 << 20);
    pull.bind("inproc://wire-test");
    push.connect("inproc://wire-test");
  }
  std::vector<zmq::message_t> RoundTrip(const wire::TrajectoryBatch& b) {
    REQUIRE(wire::SendTrajectory(push, b));
    std::vector<zmq::message_t> parts;
    REQUIRE(wire::RecvMultipart(pull, &parts, true));
    return parts;
  }
};

inline wire::TrajectoryExpectations Expect(int T, const wire::StepShape& shape, int64_t newest) {
  wire::TrajectoryExpectations e;
  e.unroll_length = T;
  e.shape = shape;
  e.newest_policy_version = newest;
  return e;
}
inline wire::TrajectoryExpectations Expect(int T, int D, int A, int64_t newest) {
  return Expect(T, Vector(D, A), newest);
}

inline std::vector<zmq::message_t> Copy(const std::vector<zmq::message_t>& parts) {
  std::vector<zmq::message_t> out;
  for (const auto& p : parts) out.emplace_back(p.data(), p.size());
  return out;
}

}  // namespace stampede::testing
