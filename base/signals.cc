#include "base/signals.h"

#include <signal.h>

#include <cstdlib>
#include <cstring>

namespace stampede::base {

namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}
}  // namespace

void InstallStopHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  const char* stop_signal = std::getenv("STAMPEDE_STOP_SIGNAL");
  if (stop_signal != nullptr && std::strcmp(stop_signal, "USR1") == 0) {
    // A role started as a Slurm job step (coordinator/slurm_launcher.h): `scancel`
    // sends SIGTERM to every step of the job at once, but the coordinator stops the
    // roles in order, with SIGUSR1 (srun forwards it), so SIGTERM is not a stop here.
    sigaction(SIGUSR1, &sa, nullptr);
    signal(SIGTERM, SIG_IGN);
  } else {
    sigaction(SIGTERM, &sa, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);
}

std::atomic<bool>& StopFlag() { return g_stop; }
int StopSignal() { return g_signal.load(); }

}  // namespace stampede::base
