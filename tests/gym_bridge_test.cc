// The gymnasium bridge against gymnasium itself: E CartPole-v1 envs through the bridge
// (SyncVectorEnv, same-step autoreset) give the observations, rewards, terminated and
// truncated flags and final observations that E single gymnasium envs give when stepped
// directly in Python (a separate interpreter, the venv's) from the same seeds.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "actors/env_source.h"
#include "envs/pendulum.h"
#include "envs/python_env.h"
#include "envs/vector_env.h"
#include "tests/skip.h"
#include "config/config.h"

using namespace stampede::envs;
using json = nlohmann::json;

namespace {
constexpr int kEnvs = 3, kSteps = 300;
constexpr uint64_t kSeed = 1234;

// Gymnasium stepped directly: env i seeded with kSeed + i (as a vector env seeds it),
// reset without a seed when an episode ends; action (t / 3 + i) % 2.
constexpr const char* kDirect = R"PY(
import json, sys
import gymnasium as gym
E, seed, steps = 3, 1234, 300
envs = [gym.make("CartPole-v1") for _ in range(E)]
for i, env in enumerate(envs):
    env.reset(seed=seed + i)
out = []
for t in range(steps):
    row = []
    for i, env in enumerate(envs):
        o, r, te, tr, _ = env.step((t // 3 + i) % 2)
        final = [float(x) for x in o] if (te or tr) else None
        if te or tr:
            o, _ = env.reset()
        row.append([[float(x) for x in o], float(r), bool(te), bool(tr), final])
    out.append(row)
json.dump(out, sys.stdout)
)PY";

json RunDirect() {
  const std::string script = "/tmp/stampede_gym_direct_" + std::to_string(::getpid()) + ".py";
  std::ofstream(script) << kDirect;
  const std::string cmd = PythonVenvPath("") + "/bin/python " + script;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  REQUIRE(::pclose(pipe) == 0);
  std::remove(script.c_str());
  return json::parse(text);
}
}  // namespace

TEST_CASE("gym bridge: a vector env matches gymnasium stepped directly from the same seeds", "[python]") {
  stampede::testing::RequirePythonVenv();
  const json direct = RunDirect();
  REQUIRE(direct.size() == size_t(kSteps));

  EnvSource source;
  source.kind = EnvSource::Kind::kGym;
  source.gym_id = "CartPole-v1";
  source.gym_vectorization = "sync";
  std::string error;
  auto env = ::stampede::testing::ValueOr(MakeVectorEnv(source, kEnvs), &error);
  INFO(error);
  REQUIRE(env);
  REQUIRE(env->spec().obs_shape == std::vector<int>{4});
  std::vector<float> obs(kEnvs * 4), final_obs(kEnvs * 4), rewards(kEnvs);
  std::vector<uint8_t> terminated(kEnvs), truncated(kEnvs), valid(kEnvs);
  std::vector<int32_t> actions(kEnvs);
  VectorStep out{reinterpret_cast<std::byte*>(obs.data()), rewards.data(), terminated.data(),
                 truncated.data(), valid.data(), reinterpret_cast<std::byte*>(final_obs.data())};
  env->Reset(kSeed, out.obs);
  int episodes = 0;
  for (int t = 0; t < kSteps; ++t) {
    for (int i = 0; i < kEnvs; ++i) actions[i] = (t / 3 + i) % 2;
    env->Step(actions.data(), out);
    for (int i = 0; i < kEnvs; ++i) {
      const json& want = direct[t][i];
      INFO("step " << t << ", env " << i);
      for (int k = 0; k < 4; ++k) CHECK(obs[i * 4 + k] == float(want[0][k].get<double>()));
      CHECK(rewards[i] == float(want[1].get<double>()));
      CHECK(bool(terminated[i]) == want[2].get<bool>());
      CHECK(bool(truncated[i]) == want[3].get<bool>());
      CHECK(valid[i] == 1);
      if (!want[4].is_null()) {
        ++episodes;
        for (int k = 0; k < 4; ++k) CHECK(final_obs[i * 4 + k] == float(want[4][k].get<double>()));
      }
    }
  }
  CHECK(episodes > 10);  // the comparison crossed many episode ends
}

TEST_CASE("gym bridge: Python errors and unsupported spaces are clear errors", "[python]") {
  stampede::testing::RequirePythonVenv();
  std::string error;
  EnvSource source;
  source.kind = EnvSource::Kind::kGym;
  source.gym_id = "NoSuchEnv-v9";
  CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(source, 2), &error));
  CHECK_THAT(error, Catch::Contains("gymnasium NoSuchEnv-v9") && Catch::Contains("NoSuchEnv"));
  source.gym_id = "FrozenLake-v1";  // Discrete observations
  CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(source, 2), &error));
  CHECK_THAT(error, Catch::Contains("observation space Discrete(16) is not supported"));
  source.gym_id = "CartPole-v1";
  source.options.kwargs["gravity_typo"] = "3";
  CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(source, 2), &error));
  CHECK_THAT(error, Catch::Contains("gravity_typo"));
}

TEST_CASE("gym bridge: box actions reach gymnasium's Pendulum, whose dynamics the built-in one shares", "[python]") {
  stampede::testing::RequirePythonVenv();
  EnvSource source;
  source.kind = EnvSource::Kind::kGym;
  source.gym_id = "Pendulum-v1";
  source.gym_vectorization = "sync";
  EnvSpec spec;
  std::string error;
  REQUIRE(::stampede::testing::Assign(ResolveSpec(source), &spec, &error));
  CHECK(spec.action_kind == ActionKind::kBox);
  CHECK(spec.action_low == std::vector<float>{-2.f});
  CHECK(spec.action_high == std::vector<float>{2.f});
  stampede::config::Config cfg;
  *cfg.mutable_env()->mutable_resolved_spec() = stampede::actors::SpecToProto(spec);
  stampede::wire::StepShape shape;
  REQUIRE_OK(stampede::ResolvedStepShape(cfg, &shape));
  CHECK(shape.box());
  CHECK(shape.num_actions == 2);  // a mean and a log-std per dimension
  // Step gymnasium with torques through the bridge; from each observation rebuild the
  // state in the built-in Pendulum, step it with the same torque and compare.
  const int E = 2;
  auto env = ::stampede::testing::ValueOr(MakeVectorEnv(source, E), &error);
  INFO(error);
  REQUIRE(env);
  std::vector<float> obs(E * 3), next(E * 3), final_obs(E * 3), rewards(E), actions(E);
  std::vector<uint8_t> terminated(E), truncated(E), valid(E);
  VectorStep out{reinterpret_cast<std::byte*>(next.data()), rewards.data(), terminated.data(),
                 truncated.data(), valid.data(), reinterpret_cast<std::byte*>(final_obs.data())};
  env->Reset(77, reinterpret_cast<std::byte*>(obs.data()));
  Pendulum mine({});
  std::vector<float> mine_obs(3);
  mine.Reset(1, AsBytes(mine_obs));
  double moved = 0;
  for (int t = 0; t < 60; ++t) {
    for (int i = 0; i < E; ++i) actions[i] = float((t % 5) - 2) * 0.8f + 0.2f * float(i);
    env->StepBox(actions.data(), out);
    for (int i = 0; i < E; ++i) {
      INFO("step " << t << ", env " << i);
      mine.set_state(std::atan2(double(obs[i * 3 + 1]), double(obs[i * 3])), obs[i * 3 + 2]);
      const StepResult r = mine.StepBox(std::span<const float>(&actions[i], 1), AsBytes(mine_obs));
      for (int k = 0; k < 3; ++k) CHECK(next[i * 3 + k] == Approx(mine_obs[k]).margin(1e-4));
      CHECK(rewards[i] == Approx(r.reward).margin(1e-3));
      moved += std::abs(next[i * 3 + 2] - obs[i * 3 + 2]);
    }
    obs = next;
  }
  CHECK(moved > 1.0);
  // And a config without a resolved spec tells how to get one.
  stampede::config::Config bare;
  const stampede::base::Status st = stampede::ResolvedStepShape(bare, &shape);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("stampede spec CONFIG"));
}
