// The local launcher: each role a child process of the coordinator on this machine
// (fork + exec of `stampede ROLE --config C --task-index I --restarts R`), its output in
// RUN_DIR/logs/ROLE-I.log, stopped with SIGTERM and SIGKILL.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/launcher.h"

namespace stampede::coordinator {

class LocalLauncher : public Launcher {
 public:
  // `self_exe`: the stampede executable; `config_path`: the run's resolved config.
  LocalLauncher(std::string self_exe, std::string config_path, std::string run_dir);

  ProcessId Start(wire::Role role, int index, int restarts) override;
  void Terminate(ProcessId id) override;
  void Kill(ProcessId id) override;
  int Pid(ProcessId id) const override { return int(id); }
  std::string LogPath(wire::Role role, int index) const override;
  std::string LogTail(wire::Role role, int index, size_t max_bytes) const override;

 protected:
  std::string self_exe_, config_path_, run_dir_;
};

// Forks and execs `argv` (argv[0] looked up on PATH) in its own process group, with
// `env` added, stdout and stderr appended to `log`, and SIGTERM to it should the
// coordinator die; its pid, or -1.
ProcessId SpawnLogged(const std::vector<std::string>& argv, const std::string& log,
                      const std::vector<std::pair<std::string, std::string>>& env);
// `SELF ROLE --config C --task-index I --restarts R`.
std::vector<std::string> RoleCommand(const std::string& self_exe, const std::string& config_path, wire::Role role,
                                     int index, int restarts);

// Reaps every child that has exited, without blocking; `on_exit(pid, how)` for each.
// Called from the status server's thread (waitpid is thread-safe and holds no state).
void ReapExitedChildren(const std::function<void(ProcessId, ExitStatus)>& on_exit);

}  // namespace stampede::coordinator
