// The exit codes of a role's process, as the coordinator reads them (documented in the
// README, "Exit codes").
#pragma once

namespace stampede::wire {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // anything else: restarted within the budget
inline constexpr int kExitRefused = 2;       // refused its config or input: a restart cannot help
inline constexpr int kExitDeviceError = 3;   // a GPU error (out of memory, a failed launch): not restarted
inline constexpr int kExitInterrupted = 130;  // the coordinator itself, stopped by SIGINT/SIGTERM

}  // namespace stampede::wire
