// Envs from shared libraries built against envs/plugin_api.h (the C plug-in ABI).
#pragma once

#include <memory>
#include <string>

#include "envs/env.h"

namespace stampede::envs {

// Loads `path` (once per process), finds env `name` in it and creates one instance
// with `options.kwargs`. nullptr and `error` naming the library on a missing file or
// entry point, another ABI version, an unknown env name, a bad spec or create's error.
base::StatusOr<std::unique_ptr<Env>> MakePluginEnv(const std::string& path, const std::string& name,
                                                   const EnvOptions& options);

}  // namespace stampede::envs
