#include "tools/signals.h"

#include <signal.h>

namespace stampede::tools {

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
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

std::atomic<bool>& StopFlag() { return g_stop; }
int StopSignal() { return g_signal.load(); }

}  // namespace stampede::tools
