// Catch2 checks of a Status or StatusOr that print its message when it fails.
#pragma once

#include <string>

#include "base/status.h"

namespace stampede::testing {
inline std::string StatusText(const base::Status& s) { return s.ToString(); }
template <class T>
std::string StatusText(const base::StatusOr<T>& s) {
  return s.status().ToString();
}
// The value of `s`, or T{} with *message set to why there is none: for tests that assert on
// what a failed call says.
template <class T>
T ValueOr(base::StatusOr<T> s, std::string* message) {
  if (s.ok()) return std::move(s).value();
  *message = s.status().message();
  return T{};
}
// *out gets the value of `s`; false (with *message) when there is none.
template <class T>
bool Assign(base::StatusOr<T> s, T* out, std::string* message) {
  if (!s.ok()) {
    *message = s.status().message();
    return false;
  }
  *out = std::move(s).value();
  return true;
}
}  // namespace stampede::testing

// ASSERTION is REQUIRE or CHECK.
#define STAMPEDE_STATUS_ASSERT(ASSERTION, expr)          \
  do {                                                   \
    const auto& _stampede_st = (expr);                   \
    INFO(::stampede::testing::StatusText(_stampede_st)); \
    ASSERTION(_stampede_st.ok());                        \
  } while (false)
#define REQUIRE_OK(expr) STAMPEDE_STATUS_ASSERT(REQUIRE, expr)
#define CHECK_OK(expr) STAMPEDE_STATUS_ASSERT(CHECK, expr)
