// The exit codes of a role's process, as the coordinator reads them (documented in the
// docs/diagnostics.md, "Exit codes").
#pragma once

#include "base/status.h"

namespace stampede::base {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // anything else: restarted within the budget
inline constexpr int kExitRefused = 2;       // refused its config or input: a restart cannot help
inline constexpr int kExitDeviceError = 3;   // a GPU error (out of memory, a failed launch): not restarted
inline constexpr int kExitInterrupted = 130;  // the coordinator itself, stopped by SIGINT/SIGTERM

// A role's Status as its exit code, the one place the two meet: bad input is refused (not
// restarted), a device error is not restarted, anything else is restarted within the budget.
// A role stopped on request returns ok.
inline int ExitCode(const base::Status& status) {
  switch (status.code()) {
    case base::Code::kOk: return kExitOk;
    case base::Code::kInvalidArgument: return kExitRefused;
    case base::Code::kDevice: return kExitDeviceError;
    case base::Code::kUnavailable:
    case base::Code::kCancelled:
    case base::Code::kInternal: return kExitFailed;
  }
  return kExitFailed;
}

}  // namespace stampede::base
