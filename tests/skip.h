// Catch2 v2 has no SKIP: a test that cannot run here prints why and exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "envs/python_env.h"

namespace stampede::testing {

[[noreturn]] inline void Skip(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

// Skips unless the project venv has gymnasium (CI makes it: tools/setup.sh).
inline void RequirePythonVenv() {
  const std::string why = envs::PythonUnavailableReason(envs::PythonVenvPath(""));
  if (!why.empty()) Skip("needs the Python venv: " + why);
}

}  // namespace stampede::testing
