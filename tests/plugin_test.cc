// Env plug-ins through the C ABI: the example loads with its kwargs; a library built for
// another ABI version, one without the entry point, a missing file, an unknown env name
// and an unknown kwarg are each refused with a message that names the problem.
#include <catch2/catch.hpp>

#include "envs/plugin_env.h"
#include "envs/vector_env.h"
#include "tests/status_testing.h"

using namespace stampede::envs;

namespace {
EnvSource Plugin(const std::string& path, const std::string& name = "Corridor") {
  EnvSource s;
  s.kind = EnvSource::Kind::kPlugin;
  s.plugin_path = path;
  s.name = name;
  return s;
}
}  // namespace

TEST_CASE("plugin: the example corridor loads, takes its kwargs and steps", "[plugin]") {
  EnvOptions o;
  o.kwargs = {{"length", "5"}, {"step_cost", "0.5"}};
  std::string error;
  auto env = ::stampede::testing::ValueOr(MakePluginEnv(STAMPEDE_EXAMPLE_PLUGIN, "Corridor", o), &error);
  INFO(error);
  REQUIRE(env);
  CHECK(env->spec().obs_shape == std::vector<int>{5});
  CHECK(env->spec().num_actions == 2);
  CHECK(env->spec().max_episode_steps == 20);  // 4 * length
  std::vector<float> obs(5);
  env->Reset(7, AsBytes(obs));
  const int start = int(std::find(obs.begin(), obs.end(), 1.f) - obs.begin());
  REQUIRE(start < 2);  // the left half of 5 cells
  // Walking right reaches the end after 4 - start steps: -0.5 per step, +1 at the end.
  StepResult r;
  int steps = 0;
  do {
    r = env->Step(1, AsBytes(obs));
    ++steps;
  } while (!r.terminated && !r.truncated);
  CHECK(r.terminated);
  CHECK(steps == 4 - start);
  CHECK(obs[4] == 1.f);
  CHECK(env->episode_return() == Approx(1.0 - 0.5 * (steps - 1)));
  CHECK_THROWS_AS(env->Step(2, AsBytes(obs)), std::out_of_range);
}

TEST_CASE("plugin: bad libraries and arguments are refused with a clear message", "[plugin]") {
  std::string error;
  SECTION("another ABI version") {
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(Plugin(STAMPEDE_OTHER_ABI_PLUGIN), 2), &error));
    CHECK_THAT(error, Catch::Contains("built against plug-in ABI version 42") &&
                          Catch::Contains("loads version 1") &&
                          Catch::Contains(STAMPEDE_OTHER_ABI_PLUGIN));
  }
  SECTION("no entry point") {
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(Plugin(STAMPEDE_NO_ENTRY_PLUGIN), 2), &error));
    CHECK_THAT(error, Catch::Contains("no symbol stampede_plugin_entry"));
  }
  SECTION("a missing file") {
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(Plugin("/nonexistent/libnothing.so"), 2), &error));
    CHECK_THAT(error, Catch::Contains("/nonexistent/libnothing.so: cannot load"));
  }
  SECTION("an env the library does not have") {
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(Plugin(STAMPEDE_EXAMPLE_PLUGIN, "Hallway"), 2), &error));
    CHECK_THAT(error, Catch::Contains("no env named \"Hallway\" (it has: Corridor)"));
  }
  SECTION("an unknown kwarg, refused by the env itself") {
    auto source = Plugin(STAMPEDE_EXAMPLE_PLUGIN);
    source.options.kwargs["lenght"] = "5";
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(source, 2), &error));
    CHECK_THAT(error, Catch::Contains("create failed: unknown kwarg \"lenght\""));
  }
  SECTION("a built-in env refuses kwargs it does not know") {
    EnvSource source;
    source.name = "CartPole-v1";
    source.options.kwargs["gravity"] = "3";
    CHECK_FALSE(::stampede::testing::ValueOr(MakeVectorEnv(source, 2), &error));
    CHECK_THAT(error, Catch::Contains("CartPole-v1: unknown kwarg \"gravity\""));
  }
}
