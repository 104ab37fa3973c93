// One conformance suite over every registered env, plus CartPole against gymnasium's
// equations and the rules of Catch.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "envs/cartpole.h"
#include "envs/catch.h"
#include "envs/env.h"
#include "tests/status_testing.h"

// Not `using namespace`: envs::Catch would make Catch2's own `Catch::` ambiguous.
using stampede::envs::AsBytes;
using stampede::envs::CartPole;
using stampede::envs::DType;
using stampede::envs::Env;
using stampede::envs::EnvOptions;
using stampede::envs::MakeEnv;
using stampede::envs::RegisteredEnvs;
using stampede::envs::ActionKind;
using stampede::envs::EnvSpec;
using stampede::envs::StepResult;

namespace {
std::span<std::byte> B(std::vector<float>& v) { return AsBytes(v); }
// The first obs_bytes() bytes of a float buffer of obs_size() floats: an observation
// buffer for an env of any dtype.
std::span<std::byte> B(const EnvSpec& spec, std::vector<float>& v) {
  return AsBytes(v).first(size_t(spec.obs_bytes()));
}

std::unique_ptr<Env> Make(const std::string& name, int max_steps = 0) {
  std::string error;
  EnvOptions o;
  o.max_episode_steps = max_steps;
  auto env = ::stampede::testing::ValueOr(MakeEnv(name, o), &error);
  INFO(error);
  REQUIRE(env);
  return env;
}

// One step with a random action of the env's kind (an index, or values within the box).
StepResult StepRandom(Env& env, std::mt19937& rng, std::vector<float>& obs) {
  const EnvSpec& spec = env.spec();
  if (spec.action_kind == ActionKind::kBox) {
    std::vector<float> a(spec.action_low.size());
    for (size_t k = 0; k < a.size(); ++k) {
      a[k] = std::uniform_real_distribution<float>(spec.action_low[k], spec.action_high[k])(rng);
    }
    return env.StepBox(a, B(spec, obs));
  }
  return env.Step(std::uniform_int_distribution<int>(0, spec.num_actions - 1)(rng), B(spec, obs));
}

// A seeded rollout with seeded random actions; returns every observation and reward.
std::vector<float> Rollout(Env& env, uint64_t seed, int steps) {
  const EnvSpec& spec = env.spec();
  std::vector<float> obs(spec.obs_size()), trace;
  std::mt19937 rng(seed);
  env.Reset(seed, B(spec, obs));
  uint64_t episode = 0;
  for (int i = 0; i < steps; ++i) {
    auto r = StepRandom(env, rng, obs);
    if (spec.obs_dtype == DType::kUint8) {
      const auto bytes = B(spec, obs);
      for (std::byte x : bytes) trace.push_back(float(uint8_t(x)));
    } else {
      trace.insert(trace.end(), obs.begin(), obs.end());
    }
    trace.push_back(r.reward);
    trace.push_back(r.terminated + 2 * r.truncated);
    if (r.terminated || r.truncated) env.Reset(seed + 1000 * ++episode, B(spec, obs));
  }
  return trace;
}
}  // namespace

TEST_CASE("envs: CartPole-v1 and Catch are registered", "[envs]") {
  auto names = RegisteredEnvs();
  CHECK(std::count(names.begin(), names.end(), "CartPole-v1") == 1);
  CHECK(std::count(names.begin(), names.end(), "Catch") == 1);
  std::string error;
  CHECK(::stampede::testing::ValueOr(MakeEnv("NoSuchEnv", {}), &error) == nullptr);
  CHECK_THAT(error, Catch::Contains("NoSuchEnv") && Catch::Contains("CartPole-v1"));
}

TEST_CASE("envs: conformance of every registered env", "[envs]") {
  for (const auto& name : RegisteredEnvs()) {
    SECTION(name) {
      auto env = Make(name);
      const EnvSpec& spec = env->spec();
      REQUIRE(spec.obs_size() > 0);
      REQUIRE(spec.Check() == "");
      const bool box = spec.action_kind == ActionKind::kBox;
      // Seeded runs repeat exactly; another seed differs.
      auto a = Rollout(*env, 17, 300);
      auto b = Rollout(*Make(name), 17, 300);
      CHECK(a == b);
      CHECK(a != Rollout(*env, 18, 300));
      // Random rollouts terminate or truncate.
      std::vector<float> obs(spec.obs_size());
      env->Reset(3, B(spec, obs));
      std::mt19937 rng(3);
      bool ended = false;
      for (int i = 0; i < 100000 && !ended; ++i) {
        auto r = StepRandom(*env, rng, obs);
        ended = r.terminated || r.truncated;
        for (float x : obs) REQUIRE((spec.obs_dtype != DType::kFloat32 || std::isfinite(x)));
      }
      CHECK(ended);
      // Bad input is refused, not acted on.
      env->Reset(3, B(spec, obs));
      if (box) {
        std::vector<float> high(spec.action_high), nan(spec.action_low.size(), NAN), longer(spec.action_low);
        high[0] += 1;
        longer.push_back(0);
        CHECK_THROWS_AS(env->StepBox(high, B(spec, obs)), std::out_of_range);
        CHECK_THROWS_AS(env->StepBox(nan, B(spec, obs)), std::out_of_range);
        CHECK_THROWS_AS(env->StepBox(longer, B(spec, obs)), std::out_of_range);
        CHECK_THROWS_AS(env->Step(0, B(spec, obs)), std::logic_error);  // the wrong kind
      } else {
        CHECK_THROWS_AS(env->Step(-1, B(spec, obs)), std::out_of_range);
        CHECK_THROWS_AS(env->Step(spec.num_actions, B(spec, obs)), std::out_of_range);
      }
      std::vector<float> wrong(spec.obs_size() + 1);
      CHECK_THROWS_AS(env->Reset(3, AsBytes(wrong).first(size_t(spec.obs_bytes()) + 1)), std::invalid_argument);
      auto fresh = Make(name);
      std::mt19937 rng2(1);
      CHECK_THROWS_AS(StepRandom(*fresh, rng2, obs), std::logic_error);
    }
  }
}

TEST_CASE("envs: CartPole follows gymnasium's equations on fixed states", "[envs]") {
  // gymnasium cartpole.py step(), written out independently here.
  auto reference = [](std::array<double, 4> s, int action) {
    const double g = 9.8, mc = 1.0, mp = 0.1, l = 0.5, f = action == 1 ? 10.0 : -10.0, tau = 0.02;
    const double total = mc + mp, pml = mp * l;
    const double ct = std::cos(s[2]), st = std::sin(s[2]);
    const double temp = (f + pml * s[3] * s[3] * st) / total;
    const double tacc = (g * st - ct * temp) / (l * (4.0 / 3.0 - mp * ct * ct / total));
    const double xacc = temp - pml * tacc * ct / total;
    return std::array<double, 4>{s[0] + tau * s[1], s[1] + tau * xacc, s[2] + tau * s[3],
                                 s[3] + tau * tacc};
  };
  const std::array<double, 4> states[] = {
      {0, 0, 0, 0}, {0.1, -0.5, 0.05, 0.3}, {-1.5, 1.2, -0.15, -1.1}, {2.3, 0.9, 0.2, 2.0}};
  for (const auto& s : states) {
    for (int action : {0, 1}) {
      CartPole env({});
      std::vector<float> obs(4);
      env.Reset(1, B(obs));
      env.set_state(s);
      auto r = env.Step(action, B(obs));
      const auto want = reference(s, action);
      for (int i = 0; i < 4; ++i) {
        CHECK(env.state()[i] == Approx(want[i]).epsilon(1e-12));
        CHECK(obs[i] == Approx(float(want[i])));
      }
      const bool done = std::abs(want[0]) > 2.4 || std::abs(want[2]) > 12 * 2 * M_PI / 360;
      CHECK(r.terminated == done);
      CHECK(r.reward == 1.f);
    }
  }
  // Reset draws every state variable from U(-0.05, 0.05).
  CartPole env({});
  std::vector<float> obs(4);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    env.Reset(seed, B(obs));
    for (float x : obs) CHECK(std::abs(x) <= 0.05f);
  }
}

TEST_CASE("envs: CartPole truncates at 500 steps", "[envs]") {
  CartPole env({});
  std::vector<float> obs(4);
  env.Reset(1, B(obs));
  StepResult r;
  int steps = 0;
  // Balance by pushing toward the pole's lean: a simple controller survives 500 steps.
  do {
    const auto& s = env.state();
    r = env.Step(s[2] + 0.5 * s[3] > 0 ? 1 : 0, B(obs));
    ++steps;
  } while (!r.terminated && !r.truncated);
  CHECK(steps == 500);
  CHECK(r.truncated);
  CHECK_FALSE(r.terminated);
  CHECK(env.episode_return() == 500.0);
  CHECK(env.spec().max_episode_steps == 500);
}

TEST_CASE("envs: Catch rules", "[envs]") {
  stampede::envs::Catch env({});
  std::vector<float> obs(50);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    env.Reset(seed, B(obs));
    CHECK(env.ball_y() == 0);
    CHECK(env.paddle_x() == 2);
    CHECK(obs[env.ball_x()] == 1.f);
    CHECK(obs[9 * 5 + 2] == 1.f);
    CHECK(std::count(obs.begin(), obs.end(), 1.f) == 2);
    const int target = env.ball_x();
    StepResult r;
    int steps = 0;
    do {
      const int before = env.paddle_x();
      const int action = env.paddle_x() < target ? 2 : env.paddle_x() > target ? 0 : 1;
      r = env.Step(action, B(obs));
      ++steps;
      CHECK(env.paddle_x() == std::clamp(before + action - 1, 0, 4));
      CHECK(env.ball_y() == steps);
      CHECK(env.ball_x() == target);
    } while (!r.terminated);
    CHECK(steps == 9);
    CHECK(r.reward == 1.f);
  }
  // Moving away from the ball loses; the paddle stops at the wall.
  env.Reset(4, B(obs));
  const int away = env.ball_x() <= 2 ? 2 : 0;
  StepResult r;
  for (int i = 0; i < 9; ++i) r = env.Step(away, B(obs));
  CHECK(r.terminated);
  CHECK(r.reward == -1.f);
  CHECK(env.paddle_x() == (away == 2 ? 4 : 0));
}
