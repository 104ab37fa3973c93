// gymnasium envs through embedded CPython (pybind11): E envs as ONE gymnasium vector env
// (the env's own vector env where it has one, e.g. CartPole's numpy one or ale-py's
// AtariVectorEnv; else gymnasium's SyncVectorEnv), so Python is crossed once per batch
// step. Python packages come from the project venv (tools/setup.sh).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace stampede::envs {

struct EnvSource;
class VectorEnv;

// An error (with the Python traceback where there is one) on failure: Python's exceptions
// are converted here.
base::StatusOr<std::unique_ptr<VectorEnv>> MakePythonVectorEnv(const EnvSource& source, int num_envs);

// The venv Python uses: `configured` if set, else $STAMPEDE_VENV, else <source tree>/.venv.
std::string PythonVenvPath(const std::string& configured);

// Empty when the venv has gymnasium importable, else why not (for tests that skip).
std::string PythonUnavailableReason(const std::string& venv);

}  // namespace stampede::envs
