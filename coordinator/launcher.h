// The coordinator's launcher seam: how a decision to start or signal a role's process is
// carried out. The decision core (core.h) only calls this interface; `LocalLauncher`
// (local_launcher.h) forks and signals on this machine, and the cluster launchers plug
// in beside it. No CAF, no sockets.
#pragma once

#include <cstdint>
#include <string>

#include "wire/messages.pb.h"

namespace stampede::coordinator {

// How the launcher names a process it started (the local launcher: its pid); -1: none.
using ProcessId = int64_t;

// How a process ended, as the launcher saw it.
struct ExitStatus {
  bool exited = true;  // false: ended by a signal
  int code = 0;        // the exit status, when `exited`
  int signal = 0;      // the signal, when not
  bool ok() const { return exited && code == 0; }
  // "exited with status 3" / "was killed by signal 9".
  std::string Describe() const {
    return exited ? "exited with status " + std::to_string(code) : "was killed by signal " + std::to_string(signal);
  }
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts `role` `index` (its `restarts`-th restart; 0 at the first start). The id its
  // exit will be reported with, or -1 if it could not be started.
  virtual ProcessId Start(wire::Role role, int index, int restarts) = 0;
  // The first request to stop (SIGTERM locally): the process stops in its own order.
  virtual void Terminate(ProcessId id) = 0;
  // Ends it now (SIGKILL locally): a silent process, or one past the shutdown grace.
  virtual void Kill(ProcessId id) = 0;
  // The pid the process will report in its statuses, if the launcher knows it (0: not).
  virtual int Pid(ProcessId id) const = 0;
  // Where its output goes, and the end of that output (why it died), at most `max_bytes`.
  virtual std::string LogPath(wire::Role role, int index) const = 0;
  virtual std::string LogTail(wire::Role role, int index, size_t max_bytes) const = 0;
  // Why `role` `index` has no place to run ("" if it has one): a Slurm allocation's nodes
  // hold only so many actors (`stampede scale` asks before it adds any).
  virtual std::string NoRoom(wire::Role, int) const { return {}; }
};

}  // namespace stampede::coordinator
