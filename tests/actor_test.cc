// The actor's unrolls: continuity between unrolls, behaviour logits equal to the
// network's output on the recorded observation, episode books, and the value of the
// final observation recorded where an episode is truncated.
#include <catch2/catch.hpp>

#include <cmath>

#include "actors/acting.h"
#include "actors/actor.h"
#include "envs/cartpole.h"
#include "net/model.h"
#include "tests/status_testing.h"

using namespace stampede;

namespace {
config::Config ActorConfig(const std::string& env, int E, int T, int max_steps = 0) {
  config::Config cfg;
  cfg.mutable_env()->set_name(env);
  cfg.mutable_env()->set_max_episode_steps(max_steps);
  cfg.mutable_net()->add_hidden_sizes(8);
  cfg.mutable_actors()->set_envs_per_actor(E);
  cfg.mutable_actors()->set_unroll_length(T);
  // The plain value head SpecOf builds (PopArt's denormalised values are the suite tests').
  cfg.mutable_learner()->set_popart(false);
  cfg.set_seed(5);
  return cfg;
}

net::ModelSpec SpecOf(const actors::ActorCore& core) {
  net::ModelSpec s;
  s.obs_shape = {core.obs_size()};
  s.hidden_sizes = {8};
  s.policy = net::CategoricalPolicy(core.num_actions());
  return s;
}
}  // namespace

TEST_CASE("actor: unrolls are continuous, logits are the policy's, episodes are booked", "[actors]") {
  const int E = 3, T = 5, D = 50, A = 3;
  std::string error;
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(ActorConfig("Catch", E, T), 0), &error);
  REQUIRE(core);
  const auto spec = SpecOf(*core);
  auto model = net::MakeCpuModel<float>(spec);
  auto& mlp = *model;
  std::vector<float> params(mlp.layout().total_size());
  net::InitParams(spec, 3, params);
  for (auto& p : params) p *= 20;  // a decisive policy, so logits differ across states
  wire::TrajectoryBatch batch, previous;
  int terminals = 0, episodes = 0;
  for (int u = 0; u < 6; ++u) {
    core->CollectUnroll(params, 40 + u, &batch);
    REQUIRE(batch.T() == T);
    REQUIRE(batch.n() == E);
    CHECK(batch.meta.policy_version() == 40 + u);
    if (u > 0) {
      // This unroll starts where the last one's bootstrap observation left off.
      CHECK(std::equal(batch.observations.begin(), batch.observations.begin() + E * D,
                       previous.observations.begin() + T * E * D));
    }
    std::vector<float> logits(E * A);
    for (int t = 0; t < T; ++t) {
      mlp.Step(params.data(), &batch.observations[size_t(t) * E * D], E, nullptr, nullptr, nullptr,
               logits.data(), nullptr);
      for (int i = 0; i < E * A; ++i) {
        CHECK(batch.behaviour_logits[size_t(t) * E * A + i] == Approx(logits[i]).margin(1e-5));
      }
      for (int e = 0; e < E; ++e) {
        const size_t i = size_t(t) * E + e;
        CHECK(batch.actions[i] >= 0);
        CHECK(batch.actions[i] < A);
        CHECK_FALSE(batch.truncated[i]);
        // Catch pays +-1 exactly on its terminal (9th) step.
        CHECK((batch.terminated[i] ? std::abs(batch.rewards[i]) == 1.f : batch.rewards[i] == 0.f));
        terminals += batch.terminated[i];
        if (batch.terminated[i]) {
          // The next row is a fresh episode: ball on the top row.
          const float* next = &batch.observations[(size_t(t + 1) * E + e) * D];
          CHECK(std::count(next, next + 5, 1.f) == 1);
        }
      }
    }
    for (const auto& ep : batch.meta.episodes()) {
      CHECK(ep.length() == 9);
      CHECK(std::abs(ep.episode_return()) == 1.f);
    }
    episodes += batch.meta.episodes_size();
    previous = batch;
  }
  // 30 steps per env = 3 whole episodes of 9 steps each.
  CHECK(terminals == 3 * E);
  CHECK(episodes == 3 * E);
  CHECK(core->frames() == 6 * T * E);
}

TEST_CASE("actor: a truncated step records the value of the final observation", "[actors]") {
  const int E = 2, T = 8, D = 4;
  std::string error;
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(ActorConfig("CartPole-v1", E, T, 3), 0), &error);
  REQUIRE(core);
  const auto spec = SpecOf(*core);
  auto model = net::MakeCpuModel<float>(spec);
  auto& mlp = *model;
  std::vector<float> params(mlp.layout().total_size());
  net::InitParams(spec, 4, params);
  for (auto& p : params) p += 0.3f;  // non-zero value head
  wire::TrajectoryBatch batch;
  core->CollectUnroll(params, 0, &batch);
  int truncations = 0;
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      const size_t i = size_t(t) * E + e;
      CHECK(batch.truncated[i] == ((t + 1) % 3 == 0));  // the 3-step limit
      CHECK_FALSE(batch.terminated[i]);
      if (!batch.truncated[i]) {
        CHECK(batch.truncation_values[i] == 0.f);
        continue;
      }
      ++truncations;
      // Rebuild the final observation (overwritten by the reset) from the dynamics.
      envs::CartPole env({});
      std::vector<float> obs(D);
      env.Reset(1, envs::AsBytes(obs));
      const float* o = &batch.observations[i * D];
      env.set_state({o[0], o[1], o[2], o[3]});
      env.Step(batch.actions[i], envs::AsBytes(obs));
      float value = 0;
      mlp.Step(params.data(), obs.data(), 1, nullptr, nullptr, nullptr, nullptr, &value);
      CHECK(batch.truncation_values[i] == Approx(value).margin(1e-4));
      CHECK(value != 0.f);
    }
  }
  CHECK(truncations == 2 * E);
}

TEST_CASE("actor: with an LSTM core, the learner's unroll from the sent initial state reproduces the behaviour", "[actors][net]") {
  // Catch episodes (9 steps) end inside 7-step unrolls, so states are reset mid-unroll
  // and carried across unrolls; the learner must see exactly what the actor saw.
  const int E = 3, T = 7;
  config::Config cfg = ActorConfig("Catch", E, T);
  cfg.mutable_net()->set_lstm_size(6);
  std::string error;
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(cfg, 0), &error);
  INFO(error);
  REQUIRE(core);
  const net::ModelSpec& spec = core->net_spec();
  REQUIRE(spec.lstm_size == 6);
  auto model = net::MakeCpuModel<float>(spec);
  std::vector<float> params(model->layout().total_size());
  net::InitParams(spec, 3, params);
  for (auto& p : params) p *= 3;  // a state-dependent policy
  wire::TrajectoryBatch batch;
  int starts_inside = 0;
  bool carried = false;
  for (int u = 0; u < 5; ++u) {
    core->CollectUnroll(params, u, &batch);
    REQUIRE(batch.initial_core_state.size() == size_t(E) * 12);
    for (float s : batch.initial_core_state) carried = carried || s != 0.f;
    std::vector<uint8_t> first;
    batch.EpisodeStarts(&first);
    for (int i = E; i < T * E; ++i) starts_inside += first[i];
    std::vector<float> policy(size_t(T + 1) * E * 3), values(size_t(T + 1) * E);
    model->Forward(params.data(), batch.observations.data(), T + 1, E, first.data(),
                   batch.initial_core_state.data(), policy.data(), values.data());
    for (int i = 0; i < T * E * 3; ++i) {
      CHECK(policy[i] == Approx(batch.behaviour_logits[i]).margin(1e-5));
    }
  }
  CHECK(starts_inside > 0);  // episodes began inside unrolls
  CHECK(carried);            // and some unroll began mid-episode with a non-zero state
}

TEST_CASE("acting: a task's missing actions are never chosen, sampled or greedy, and greedy takes the argmax", "[actor][acting]") {
  net::PolicyShape pol;  // categorical over 5 actions; the task has the first 3
  pol.nvec[0] = 5;
  const int E = 4, A = 5;
  std::vector<float> logits(size_t(E) * A);
  for (int e = 0; e < E; ++e) {
    for (int a = 0; a < A; ++a) logits[size_t(e) * A + a] = a == 3 || a == 4 ? 50.f : float(a == e % 3);
  }
  actors::MaskMissingActions(pol, logits.data(), E, A, 3);
  std::mt19937_64 rng(7);
  std::vector<int32_t> actions(E);
  actors::ActionOut out;
  out.actions = actions.data();
  for (int draw = 0; draw < 2000; ++draw) {
    actors::ChooseActions(pol, logits.data(), E, A, false, rng, out);
    for (int e = 0; e < E; ++e) REQUIRE(actions[size_t(e)] < 3);
  }
  actors::ChooseActions(pol, logits.data(), E, A, true, rng, out);
  for (int e = 0; e < E; ++e) CHECK(actions[size_t(e)] == e % 3);
  // A box: the env gets the sample clipped to its bounds, the learner the sample itself.
  net::PolicyShape box;
  box.kind = net::PolicyKind::kGaussian;
  box.num_components = 1;
  const float mean_logstd[] = {5.f, -10.f};  // mean 5, std ~0
  const float low[] = {-1.f}, high[] = {1.f};
  float raw = 0, clipped = 0;
  actors::ActionOut bout;
  bout.box_raw = &raw;
  bout.box_clipped = &clipped;
  bout.low = low;
  bout.high = high;
  actors::ChooseActions(box, mean_logstd, 1, 2, false, rng, bout);
  CHECK(raw == Approx(5.f).margin(1e-3));
  CHECK(clipped == 1.f);
}

TEST_CASE("acting: only the envs that start an episode get a zero state, and the books hand back each finished episode",
          "[actor][acting]") {
  std::vector<float> state = {1, 2, 3, 4, 5, 6};  // 3 envs x 2
  const uint8_t start[] = {0, 1, 0};
  actors::ResetStartingStates(state.data(), 2, start, 3);
  CHECK(state == std::vector<float>{1, 2, 0, 0, 5, 6});
  actors::EpisodeBooks books(2);
  double ret = 0;
  int len = 0;
  CHECK_FALSE(books.Step(0, 1.5, false, &ret, &len));
  CHECK_FALSE(books.Step(1, -1.0, false, &ret, &len));
  CHECK(books.Step(0, 2.0, true, &ret, &len));
  CHECK(ret == 3.5);
  CHECK(len == 2);
  CHECK(books.length(0) == 0);  // afresh
  CHECK(books.length(1) == 1);
  CHECK(books.Step(1, 0.5, true, &ret, &len));
  CHECK(ret == -0.5);
  CHECK(len == 2);
}
