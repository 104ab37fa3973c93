// Skips for tests that need the Python venv (Skip itself: tests/skip_only.h).
#pragma once

#include <string>

#include "envs/python_env.h"
#include "tests/skip_only.h"

namespace stampede::testing {

// Skips unless the project venv has gymnasium (CI makes it: tools/setup.sh).
inline void RequirePythonVenv() {
  const std::string why = envs::PythonUnavailableReason(envs::PythonVenvPath(""));
  if (!why.empty()) Skip("needs the Python venv: " + why);
}

}  // namespace stampede::testing
