// Tests that start a learner directly fill env.resolved_spec the way `stampede run`
// does: from the env itself.
#pragma once

#include <catch2/catch.hpp>

#include "actors/env_source.h"
#include "envs/vector_env.h"
#include "config/config.pb.h"
#include "tests/status_testing.h"

namespace stampede::testing {

inline void ResolveSpecInPlace(config::Config* cfg) {
  envs::EnvSpec spec;
  std::string error;
  const bool resolved = ::stampede::testing::Assign(envs::ResolveSpec(actors::EnvSourceFromConfig(*cfg)), &spec, &error);
  INFO(error);  // after the call: INFO copies the text when it is written
  REQUIRE(resolved);
  *cfg->mutable_env()->mutable_resolved_spec() = actors::SpecToProto(spec);
}

}  // namespace stampede::testing
