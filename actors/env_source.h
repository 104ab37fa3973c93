// The config's env section in envs' terms, and the env spec in the config's terms:
// where the actor (which runs envs) and `stampede spec` meet the wire.
#pragma once

#include <string>

#include "envs/env.h"
#include "envs/vector_env.h"
#include "config/config.pb.h"

namespace stampede::actors {

envs::EnvSource EnvSourceFromConfig(const config::Config& cfg);
config::EnvSpec SpecToProto(const envs::EnvSpec& spec);
// Empty when `actual` is what `resolved` says, else the first difference.
std::string SpecMismatch(const config::EnvSpec& resolved, const config::EnvSpec& actual);

}  // namespace stampede::actors
