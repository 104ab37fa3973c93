#include "base/log.h"

#include "base/mutex.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace stampede::base {
namespace {

// The role is set once at start-up, before threads log; the mutex keeps a late change safe.
Mutex role_mu;
std::string role GUARDED_BY(role_mu) = "stampede";

int LevelFromEnvironment() {
  const char* v = std::getenv("STAMPEDE_LOG_LEVEL");
  if (v == nullptr) return int(LogLevel::kInfo);
  if (std::strcmp(v, "debug") == 0) return int(LogLevel::kDebug);
  if (std::strcmp(v, "warning") == 0) return int(LogLevel::kWarning);
  if (std::strcmp(v, "error") == 0) return int(LogLevel::kError);
  return int(LogLevel::kInfo);
}

std::atomic<int>& Threshold() {
  static std::atomic<int> threshold{LevelFromEnvironment()};
  return threshold;
}

double UnixNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void WriteAll(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(2, line.data() + done, line.size() - done);
    if (n <= 0) return;  // stderr is gone: nothing else to tell
    done += size_t(n);
  }
}

void VLog(LogLevel level, const char* format, va_list args) {
  if (!LogEnabled(level)) return;
  char buf[4096];
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(buf, sizeof buf, format, copy);
  va_end(copy);
  std::string message;
  if (n >= 0 && size_t(n) < sizeof buf) {
    message.assign(buf, size_t(n));
  } else if (n >= 0) {
    message.resize(size_t(n) + 1);
    std::vsnprintf(message.data(), message.size(), format, args);
    message.resize(size_t(n));
  }
  std::string who;
  {
    MutexLock lock(role_mu);
    who = role;
  }
  WriteAll(FormatLogLine(level, who, message, UnixNow()) + "\n");
}

}  // namespace

void SetLogRole(const std::string& r) {
  MutexLock lock(role_mu);
  role = r;
}

void SetLogLevel(LogLevel level) { Threshold().store(int(level)); }

bool LogEnabled(LogLevel level) { return int(level) >= Threshold().load(std::memory_order_relaxed); }

std::string FormatLogLine(LogLevel level, const std::string& role, const std::string& message, double unix_seconds) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  const time_t secs = time_t(unix_seconds);
  tm local{};
  localtime_r(&secs, &local);
  const int millis = int((unix_seconds - double(secs)) * 1000.0) % 1000;
  char head[64];
  std::snprintf(head, sizeof head, "%c %02d:%02d:%02d.%03d ", kLetters[int(level)], local.tm_hour, local.tm_min,
                local.tm_sec, millis < 0 ? 0 : millis);
  std::string line = head + role + "] " + message;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

#define STAMPEDE_LOG_AT(name, level)        \
  void name(const char* format, ...) {      \
    va_list args;                           \
    va_start(args, format);                 \
    VLog(level, format, args);              \
    va_end(args);                           \
  }
STAMPEDE_LOG_AT(LogDebug, LogLevel::kDebug)
STAMPEDE_LOG_AT(LogInfo, LogLevel::kInfo)
STAMPEDE_LOG_AT(LogWarning, LogLevel::kWarning)
STAMPEDE_LOG_AT(LogError, LogLevel::kError)
#undef STAMPEDE_LOG_AT

}  // namespace stampede::base
