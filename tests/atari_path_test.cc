// The whole Atari path on real ALE frames, end to end: ale-py's vector env (Pong) ->
// the actor's unrolls -> the single-frame wire -> the learner's decoder -> its batch ->
// the learner's forward pass. What the learner trains on must be what the actor acted on:
// observations byte for byte, every frame stack the env's previous one shifted by one new
// frame except where an episode starts, each unroll's row 0 the previous one's bootstrap
// row, and the learner's logits the behaviour logits (log rho = 0 to float tolerance) on
// every row, with the actor and the learner on either convolution backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "actors/actor.h"
#include "learner/batch.h"
#include "net/distribution.h"
#include "net/layers.h"
#include "net/model.h"
#include "tests/skip.h"
#include "tests/wire_helpers.h"
#include "wire/trajectory.h"
#include "tests/status_testing.h"

using namespace stampede;

namespace {
// configs/atari_pong.textproto's env, with episodes cut at 240 frames (60 agent steps)
// so truncations fall inside 20-step unrolls.
config::Config PongConfig(int E, int T) {
  config::Config cfg;
  auto* env = cfg.mutable_env();
  env->set_gym_id("ALE/Pong-v5");
  env->add_gym_module("ale_py");
  const std::pair<const char*, const char*> kwargs[] = {
      {"frameskip", "4"},          {"maxpool", "true"},        {"img_height", "84"},
      {"img_width", "84"},         {"grayscale", "true"},      {"stack_num", "4"},
      {"repeat_action_probability", "0.25"}, {"full_action_space", "false"}, {"noop_max", "30"},
      {"max_num_frames_per_episode", "240"}, {"episodic_life", "false"}, {"reward_clipping", "false"},
      {"autoreset_mode", "SameStep"}, {"num_threads", "1"}};
  for (const auto& [k, v] : kwargs) (*env->mutable_kwargs())[k] = v;
  cfg.mutable_net()->set_torso("shallow_cnn");
  cfg.mutable_net()->set_fc_size(64);
  cfg.mutable_actors()->set_envs_per_actor(E);
  cfg.mutable_actors()->set_unroll_length(T);
  cfg.set_seed(11);
  return cfg;
}
}  // namespace

TEST_CASE("atari path: the learner's batch and forward pass reproduce the actor's Pong unrolls", "[python][atari]") {
  testing::RequirePythonVenv();
  const int E = 3, T = 20, U = 8;
  std::string error;
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(PongConfig(E, T), 0), &error);
  INFO(error);
  REQUIRE(core);
  const wire::StepShape shape = core->shape();
  REQUIRE(shape.obs_shape == std::vector<int>{4, 84, 84});
  REQUIRE(shape.obs_dtype == wire::DType::kUint8);
  const int A = shape.num_actions;
  REQUIRE(A == 6);
  const size_t D = size_t(shape.obs_size()), HW = 84 * 84;
  const net::ModelSpec& spec = core->net_spec();
  auto learner_net = net::MakeCpuModel<float>(spec);
  std::vector<float> params(size_t(learner_net->layout().total_size()));
  net::InitParams(spec, 5, params);
  // A policy that depends on the frames: undo the head's small initial scale.
  const auto& head = learner_net->layout().Find("policy/w");
  for (int64_t i = 0; i < head.size; ++i) params[size_t(head.offset + i)] *= 300.f;

  testing::Pipe pipe;
  wire::TrajectoryBatch unroll, decoded, previous;
  *unroll.meta.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 7);  // as RunActor sets it
  const bool onednn = net::SetConvBackend(net::ConvBackend::kOneDnn);
  net::SetConvBackend(net::ConvBackend::kEigen);
  int starts = 0, truncations = 0, shifted = 0, single_frame_messages = 0;
  double max_abs_log_rho = 0, max_logit_gap = 0, logit_spread = 0;
  for (int u = 0; u < U; ++u) {
    // The actor and the learner each on one backend, crossed from unroll to unroll.
    const bool actor_onednn = onednn && u % 2 == 0, learner_onednn = onednn && u % 4 < 2;
    net::SetConvBackend(actor_onednn ? net::ConvBackend::kOneDnn : net::ConvBackend::kEigen);
    core->CollectUnroll(params, u, &unroll);
    unroll.stack_frames = true;
    auto parts = pipe.RoundTrip(unroll);
    wire::Trajectory header;
    REQUIRE(wire::ParseFrame(parts[0], &header));
    single_frame_messages += header.arrays(0).name() == "first_observations";
    std::string detail;
    INFO(detail);
    REQUIRE(wire::DecodeTrajectory(parts, testing::Expect(T, shape, u), &decoded, &detail) == wire::DropReason::kNone);
    // Byte for byte what the actor recorded.
    REQUIRE(decoded.observations_u8 == unroll.observations_u8);
    CHECK(decoded.actions == unroll.actions);
    CHECK(decoded.rewards == unroll.rewards);
    CHECK(decoded.terminated == unroll.terminated);
    CHECK(decoded.truncated == unroll.truncated);
    CHECK(decoded.behaviour_logits == unroll.behaviour_logits);
    if (u > 0) {
      // Row 0 is the previous unroll's bootstrap row.
      CHECK(std::memcmp(decoded.obs_row(0), previous.obs_row(size_t(T) * E), E * D) == 0);
    }
    // Each env's stack: the previous row shifted by one new frame, unless the previous
    // step ended an episode (then the new episode's first stack, which is not a shift).
    for (int t = 1; t <= T; ++t) {
      for (int e = 0; e < E; ++e) {
        const uint8_t* cur = reinterpret_cast<const uint8_t*>(decoded.obs_row(size_t(t) * E + e));
        const uint8_t* prev = reinterpret_cast<const uint8_t*>(decoded.obs_row(size_t(t - 1) * E + e));
        const size_t i = size_t(t - 1) * E + e;
        const bool ended = decoded.terminated[i] || decoded.truncated[i];
        const bool is_shift = std::memcmp(cur, prev + HW, 3 * HW) == 0;
        if (ended) {
          ++starts;
          truncations += decoded.truncated[i];
        } else {
          CHECK(is_shift);
          shifted += is_shift;
        }
      }
    }
    // The learner's batch (one column per env, as Assemble places unrolls) and forward.
    learner::Batch batch;
    batch.Resize(T, E, shape);
    for (int e = 0; e < E; ++e) learner::CopyUnroll(decoded, e, e, &batch);
    REQUIRE(batch.observations_u8 == decoded.observations_u8);  // E columns of one unroll: same layout
    net::SetConvBackend(learner_onednn ? net::ConvBackend::kOneDnn : net::ConvBackend::kEigen);
    std::vector<float> policy(size_t(T + 1) * E * A), values(size_t(T + 1) * E);
    std::vector<uint8_t> first;
    batch.EpisodeStarts(&first);
    learner_net->Forward(params.data(), batch.observations_u8.data(), T + 1, E, first.data(), nullptr,
                         policy.data(), values.data());
    const net::PolicyShape& pol = spec.policy;
    for (int i = 0; i < T * E; ++i) {
      const float action = float(batch.actions[size_t(i)]);
      const double log_rho = net::PolicyLogProb(pol, &policy[size_t(i) * A], &action) -
                             net::PolicyLogProb(pol, &batch.behaviour_logits[size_t(i) * A], &action);
      max_abs_log_rho = std::max(max_abs_log_rho, std::abs(log_rho));
      float lo = 1e30f, hi = -1e30f;
      for (int a = 0; a < A; ++a) {
        const float z = batch.behaviour_logits[size_t(i) * A + a];
        max_logit_gap = std::max(max_logit_gap, double(std::abs(policy[size_t(i) * A + a] - z)));
        lo = std::min(lo, z), hi = std::max(hi, z);
      }
      logit_spread = std::max(logit_spread, double(hi - lo));
    }
    previous = decoded;
  }
  net::SetConvBackend(onednn ? net::ConvBackend::kOneDnn : net::ConvBackend::kEigen);
  INFO("episode starts " << starts << ", truncations " << truncations << ", shifted rows " << shifted
                         << ", single-frame messages " << single_frame_messages << ", oneDNN " << onednn);
  CHECK(starts >= E);        // 60-step episodes end inside 160 steps per env
  CHECK(truncations >= E);   // at the frame limit: truncated, not terminated
  CHECK(shifted > T * E * U / 2);
  CHECK(single_frame_messages == U);  // the frames went as single frames
  CHECK(logit_spread > 0.1);          // the policy depends on the frames
  CHECK(max_abs_log_rho < 1e-4);
  CHECK(max_logit_gap < 1e-3);
}

TEST_CASE("net.center_frames: a constant added to a frame changes nothing the network outputs", "[net][atari]") {
  // Centring subtracts each channel's own mean, so a brighter or darker background (a
  // constant per channel) must leave the policy and the value exactly where they were,
  // while without centring it moves them.
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.torso = "shallow_cnn";
  spec.fc_size = 32;
  spec.policy = net::CategoricalPolicy(6);
  std::vector<float> params(size_t(net::ModelLayout(spec).total_size()));
  net::InitParams(spec, 3, params);
  const int n = 3, D = 4 * 84 * 84;
  std::vector<float> obs(size_t(n) * D), shifted(obs.size());
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (auto& x : obs) x = u(rng) < 0.05f ? u(rng) : 0.34f;  // a grey playfield with a few objects
  for (size_t i = 0; i < obs.size(); ++i) shifted[i] = obs[i] + 0.1f * float(1 + (i / (84 * 84)) % 4);
  auto outputs = [&](bool center, const std::vector<float>& x) {
    net::ModelSpec s = spec;
    s.center_frames = center;
    auto m = net::MakeCpuModel<float>(s);
    std::vector<float> out(size_t(n) * 7);
    m->Step(params.data(), x.data(), n, nullptr, nullptr, nullptr, out.data(), out.data() + n * 6);
    return out;
  };
  const auto a = outputs(true, obs), b = outputs(true, shifted);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-4));
  const auto c = outputs(false, obs), d = outputs(false, shifted);
  double moved = 0;
  for (size_t i = 0; i < c.size(); ++i) moved = std::max(moved, double(std::abs(c[i] - d[i])));
  CHECK(moved > 1e-3);
}

TEST_CASE("net.center_frames: bytes converted and centred in one pass equal the conversion then CenterChannel", "[net][atari]") {
  // The one-pass form takes its mean from the bytes' integer sum; the two-pass form from
  // the converted floats. They agree to float rounding, at lengths with and without a
  // tail past the sum's 16 lanes, and on all-255 bytes (the largest sum).
  std::mt19937_64 rng(11);
  for (const int64_t area : {int64_t(84 * 84), int64_t(17), int64_t(13), int64_t(1)}) {
    for (const bool full : {false, true}) {
      std::vector<uint8_t> u(static_cast<size_t>(area));
      for (auto& b : u) b = full ? 255 : uint8_t(rng() % 256);
      std::vector<float> two(u.size()), one(u.size());
      for (size_t i = 0; i < u.size(); ++i) two[i] = float(u[i]) * float(net::kUint8InputScale);
      net::CenterChannel(two.data(), area);
      net::ConvertCenterChannel(u.data(), one.data(), area);
      double worst = 0, sum = 0;
      for (size_t i = 0; i < u.size(); ++i) {
        worst = std::max(worst, double(std::abs(one[i] - two[i])));
        sum += one[i];
      }
      INFO("area " << area << (full ? ", all 255" : ", random bytes") << ": largest difference " << worst);
      CHECK(worst < 1e-6);
      CHECK(std::abs(sum / double(area)) < 1e-6);
    }
  }
}

TEST_CASE("net.center_frames: each channel loses its mean computed directly at every length", "[net][atari]") {
  // The laned sum against a plain double sum, at lengths with and without a tail past the
  // last full lane group (84x84 is a multiple of eight; 13 and 7 are not).
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (const int64_t area : {int64_t(84 * 84), int64_t(13), int64_t(7), int64_t(1)}) {
    std::vector<float> x(static_cast<size_t>(area));
    for (auto& v : x) v = u(rng);
    double sum = 0;
    for (float v : x) sum += double(v);
    const float mean = float(sum / double(area));
    std::vector<float> centred = x;
    net::CenterChannel(centred.data(), area);
    for (int64_t i = 0; i < area; ++i) CHECK(centred[size_t(i)] == x[size_t(i)] - mean);
    double after = 0;
    for (float v : centred) after += double(v);
    CHECK(std::abs(after / double(area)) < 1e-6);
  }
}
