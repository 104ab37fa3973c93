// One conformance suite over every env source a config can name: every built-in env, the
// example plug-in and (with the venv) gymnasium envs through the bridge, both through the
// env's own vector env and gymnasium's SyncVectorEnv. What must hold: the spec is well
// formed and matches what Reset and Step write, seeded runs repeat exactly, random
// rollouts end, out-of-range actions are refused, and `valid` is 0 exactly on the
// automatic-reset steps of an env that resets on the next step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "envs/vector_env.h"
#include "tests/skip.h"
#include "tests/status_testing.h"

using namespace stampede::envs;

namespace {
constexpr int kEnvs = 3;

struct Trace {
  std::vector<std::byte> obs;
  std::vector<float> rewards;
  std::vector<uint8_t> flags;
  int episodes = 0;
  bool operator==(const Trace&) const = default;
};

std::unique_ptr<VectorEnv> Make(const EnvSource& source) {
  std::string error;
  auto env = ::stampede::testing::ValueOr(MakeVectorEnv(source, kEnvs), &error);
  INFO(source.Describe() << ": " << error);
  REQUIRE(env);
  return env;
}

void CheckFinite(const EnvSpec& spec, const std::byte* obs, size_t rows) {
  if (spec.obs_dtype != DType::kFloat32) return;
  const size_t n = rows * size_t(spec.obs_size());
  for (size_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, obs + i * 4, 4);
    REQUIRE(std::isfinite(x));
  }
}

// Seeded random actions for `steps` batch steps; checks the books as it goes.
Trace Rollout(VectorEnv& env, uint64_t seed, int steps) {
  const EnvSpec& spec = env.spec();
  const size_t bytes = size_t(spec.obs_bytes());
  std::vector<std::byte> obs(kEnvs * bytes), final_obs(kEnvs * bytes);
  std::vector<float> rewards(kEnvs);
  std::vector<uint8_t> terminated(kEnvs), truncated(kEnvs), valid(kEnvs), ended_before(kEnvs, 0);
  std::vector<int32_t> actions(kEnvs);
  const bool box = spec.action_kind == ActionKind::kBox;
  const size_t D = spec.action_low.size();
  std::vector<float> box_actions(box ? kEnvs * D : 0);
  VectorStep out{obs.data(), rewards.data(), terminated.data(), truncated.data(), valid.data(),
                 final_obs.data()};
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_int_distribution<int> pick(0, std::max(1, spec.num_actions) - 1);
  Trace trace;
  env.Reset(seed, obs.data());
  CheckFinite(spec, obs.data(), kEnvs);
  trace.obs.insert(trace.obs.end(), obs.begin(), obs.end());
  for (int s = 0; s < steps; ++s) {
    if (box) {
      for (size_t i = 0; i < box_actions.size(); ++i) {
        box_actions[i] = std::uniform_real_distribution<float>(spec.action_low[i % D], spec.action_high[i % D])(rng);
      }
      env.StepBox(box_actions.data(), out);
    } else {
      for (auto& a : actions) a = pick(rng);
      env.Step(actions.data(), out);
    }
    CheckFinite(spec, obs.data(), kEnvs);
    for (int e = 0; e < kEnvs; ++e) {
      // An invalid step is an automatic reset: only right after an episode ended, and then
      // nothing happened in it.
      if (!valid[e]) {
        CHECK(ended_before[e]);
        CHECK(rewards[e] == 0.f);
        CHECK_FALSE(terminated[e] | truncated[e]);
      }
      ended_before[e] = terminated[e] | truncated[e];
      trace.episodes += ended_before[e];
      trace.flags.push_back(uint8_t(terminated[e] + 2 * truncated[e] + 4 * valid[e]));
    }
    trace.obs.insert(trace.obs.end(), obs.begin(), obs.end());
    trace.rewards.insert(trace.rewards.end(), rewards.begin(), rewards.end());
  }
  return trace;
}

void Conformance(const EnvSource& source) {
  INFO(source.Describe());
  auto env = Make(source);
  const EnvSpec& spec = env->spec();
  CHECK(spec.Check() == "");
  CHECK(env->num_envs() == kEnvs);
  REQUIRE(spec.action_kind != ActionKind::kMultiDiscrete);
  // Seeded runs repeat exactly (a fresh env, the same seed); another seed differs.
  // 400 steps end several episodes of every env but MinAtar Freeway, whose episodes last
  // 2501 steps by the game's own clock.
  const int steps = spec.name == "MinAtar-Freeway" ? 2600 : 400;
  const Trace a = Rollout(*env, 17, steps);
  CHECK(a == Rollout(*Make(source), 17, steps));
  CHECK_FALSE(a == Rollout(*Make(source), 18, steps));
  // Random rollouts end.
  CHECK(a.episodes > 0);
  // Bad actions are refused, not acted on.
  std::vector<std::byte> obs(kEnvs * spec.obs_bytes()), final_obs(obs.size());
  std::vector<float> rewards(kEnvs);
  std::vector<uint8_t> flags(3 * kEnvs);
  VectorStep out{obs.data(), rewards.data(), &flags[0], &flags[kEnvs], &flags[2 * kEnvs], final_obs.data()};
  if (spec.action_kind == ActionKind::kBox) {
    auto fresh = Make(source);
    fresh->Reset(3, obs.data());
    std::vector<float> high(kEnvs * spec.action_low.size(), spec.action_high[0] + 1);
    CHECK_THROWS(fresh->StepBox(high.data(), out));
    return;
  }
  auto fresh = Make(source);
  fresh->Reset(3, obs.data());
  std::vector<int32_t> bad(kEnvs, spec.num_actions);
  CHECK_THROWS(fresh->Step(bad.data(), out));
  auto fresh2 = Make(source);
  fresh2->Reset(3, obs.data());
  std::vector<int32_t> negative(kEnvs, -1);
  CHECK_THROWS(fresh2->Step(negative.data(), out));
}

EnvSource Gym(const std::string& id, const std::string& vectorization) {
  EnvSource s;
  s.kind = EnvSource::Kind::kGym;
  s.gym_id = id;
  s.gym_vectorization = vectorization;
  return s;
}
}  // namespace

TEST_CASE("conformance: every built-in env", "[envs][conformance]") {
  for (const auto& name : RegisteredEnvs()) {
    SECTION(name) {
      EnvSource s;
      s.name = name;
      Conformance(s);
    }
  }
}

TEST_CASE("conformance: the example plug-in", "[envs][conformance][plugin]") {
  EnvSource s;
  s.kind = EnvSource::Kind::kPlugin;
  s.plugin_path = STAMPEDE_EXAMPLE_PLUGIN;
  s.name = "Corridor";
  Conformance(s);
}

TEST_CASE("conformance: gymnasium envs through the bridge", "[envs][conformance][python]") {
  stampede::testing::RequirePythonVenv();
  SECTION("CartPole-v1, its own numpy vector env (resets on the next step)") {
    Conformance(Gym("CartPole-v1", ""));
  }
  SECTION("CartPole-v1, SyncVectorEnv (resets on the same step)") { Conformance(Gym("CartPole-v1", "sync")); }
  SECTION("MountainCar-v0") { Conformance(Gym("MountainCar-v0", "")); }
}
