#include "coordinator/local_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "wire/auth.h"
#include "wire/zmq_util.h"

namespace stampede::coordinator {

LocalLauncher::LocalLauncher(std::string self_exe, std::string config_path, std::string run_dir)
    : self_exe_(std::move(self_exe)), config_path_(std::move(config_path)), run_dir_(std::move(run_dir)) {}

std::string LocalLauncher::LogPath(wire::Role role, int index) const {
  return run_dir_ + "/logs/" + wire::RoleName(role) + "-" + std::to_string(index) + ".log";
}

std::string LocalLauncher::LogTail(wire::Role role, int index, size_t max_bytes) const {
  std::ifstream in(LogPath(role, index), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

ProcessId SpawnLogged(const std::vector<std::string>& argv, const std::string& log,
                      const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A child never outlives the coordinator.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    // Its own process group: a terminal's Ctrl-C reaches only the coordinator, which
    // stops the children in order.
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid > 0 ? ProcessId(pid) : -1;
}

std::vector<std::string> RoleCommand(const std::string& self_exe, const std::string& config_path, wire::Role role,
                                     int index, int restarts) {
  return {self_exe, wire::RoleName(role), "--config", config_path, "--task-index", std::to_string(index),
          "--restarts", std::to_string(restarts)};
}

ProcessId LocalLauncher::Start(wire::Role role, int index, int restarts) {
  // Its identity, for the ZAP handlers of ipc:// servers (wire/auth.h).
  return SpawnLogged(RoleCommand(self_exe_, config_path_, role, index, restarts), LogPath(role, index),
                     {{wire::kIdentityEnv, wire::Identity(wire::RoleName(role), index)}});
}

void LocalLauncher::Terminate(ProcessId id) {
  if (id > 0) ::kill(pid_t(id), SIGTERM);
}

void LocalLauncher::Kill(ProcessId id) {
  if (id > 0) ::kill(pid_t(id), SIGKILL);
}

void ReapExitedChildren(const std::function<void(ProcessId, ExitStatus)>& on_exit) {
  int wstatus = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &wstatus, WNOHANG)) > 0) {
    ExitStatus how;
    how.exited = WIFEXITED(wstatus);
    how.code = how.exited ? WEXITSTATUS(wstatus) : 0;
    how.signal = how.exited ? 0 : WTERMSIG(wstatus);
    on_exit(ProcessId(pid), how);
  }
}

}  // namespace stampede::coordinator
