// Private to coordinator/core*.cc: the helpers both halves of the core use.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

#include "wire/messages.pb.h"
#include "wire/zmq_util.h"

namespace stampede::coordinator::core_detail {

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string Printf(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}
inline std::string Who(wire::Role role, int index) { return std::string(wire::RoleName(role)) + " " + std::to_string(index); }

}  // namespace stampede::coordinator::core_detail
