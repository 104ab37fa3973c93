// SIGINT and SIGTERM set one process-wide stop flag; every role polls it.
#pragma once

#include <atomic>

namespace stampede::base {

// Installs the handlers (without SA_RESTART, so blocking calls return early).
void InstallStopHandlers();
std::atomic<bool>& StopFlag();
// The signal that set the flag (0 if none).
int StopSignal();

}  // namespace stampede::base
