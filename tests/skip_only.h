// Catch2 v2 has no SKIP: a test that cannot run here prints why and exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace stampede::testing {

[[noreturn]] inline void Skip(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace stampede::testing
