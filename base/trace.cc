#include "base/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/mutex.h"
#include "base/durable_file.h"

namespace stampede::base {

std::atomic<bool> Trace::enabled_{false};

namespace {
struct State {
  base::Mutex mu;
  std::FILE* file GUARDED_BY(mu) = nullptr;
  int pid GUARDED_BY(mu) = 0;
  int64_t events GUARDED_BY(mu) = 0;
  int64_t dropped GUARDED_BY(mu) = 0;
  bool first GUARDED_BY(mu) = true;
  std::string buffer GUARDED_BY(mu);
};
State& S() {
  static State* s = new State;  // never destroyed: spans may end during exit
  return *s;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

void FlushLocked(State& s) REQUIRES(s.mu) {
  if (s.file && !s.buffer.empty()) {
    std::fwrite(s.buffer.data(), 1, s.buffer.size(), s.file);
    std::fflush(s.file);
  }
  s.buffer.clear();
}

void Append(State& s, const std::string& event) REQUIRES(s.mu) {
  s.buffer += s.first ? "[\n" : ",\n";
  s.first = false;
  s.buffer += event;
  if (s.buffer.size() > (1 << 16)) FlushLocked(s);
}
}  // namespace

base::Status Trace::Open(const std::string& path, const std::string& process) {
  State& s = S();
  base::MutexLock lock(s.mu);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  s.file = std::fopen(path.c_str(), "w");
  if (!s.file) return base::Internal("cannot write the trace " + path + ": " + std::strerror(errno));
  s.pid = int(::getpid());
  Append(s, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(s.pid) +
                ",\"tid\":0,\"args\":{\"name\":\"" + Escape(process) + "\"}}");
  FlushLocked(s);
  enabled_ = true;
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit(Trace::Close);
  }
  return base::OkStatus();
}

void Trace::Close() {
  State& s = S();
  base::MutexLock lock(s.mu);
  if (!s.file) return;
  enabled_ = false;
  if (s.dropped > 0) {
    Append(s, "{\"name\":\"trace_events_not_recorded\",\"ph\":\"C\",\"pid\":" + std::to_string(s.pid) +
                  ",\"ts\":" + std::to_string(NowUs()) + ",\"args\":{\"events\":" + std::to_string(s.dropped) + "}}");
  }
  s.buffer += s.first ? "[]\n" : "\n]\n";
  FlushLocked(s);
  std::fclose(s.file);
  s.file = nullptr;
}

void Trace::Complete(const char* name, const char* category, int64_t start_us, int64_t dur_us) {
  State& s = S();
  const long tid = ::syscall(SYS_gettid);
  base::MutexLock lock(s.mu);
  if (!s.file) return;
  char event[320];
  std::snprintf(event, sizeof event,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%ld}", name,
                category, (long long)start_us, (long long)std::max<int64_t>(0, dur_us), s.pid, tid);
  if (s.events >= kMaxEvents) {
    ++s.dropped;
    return;
  }
  ++s.events;
  Append(s, event);
}

base::Status MergeTraces(const std::string& dir, const std::string& out) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  if (ec) return base::Internal("cannot read " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::string merged = "[\n";
  bool first = true;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    std::string body = text.str();
    // Strip the array's brackets (the closing one is missing after a kill) and the
    // trailing comma a torn write may leave.
    const size_t open = body.find('[');
    if (open == std::string::npos) continue;
    body = body.substr(open + 1);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ' || body.back() == ']' || body.back() == ',')) {
      body.pop_back();
    }
    // A torn last event (killed mid-write) is cut at the last complete one.
    const size_t last = body.rfind('}');
    if (last == std::string::npos) continue;
    body.resize(last + 1);
    while (!body.empty() && (body.front() == '\n' || body.front() == ' ')) body.erase(body.begin());
    if (body.empty()) continue;
    merged += (first ? "" : ",\n") + body;
    first = false;
  }
  merged += "\n]\n";
  return WriteFileAtomically(out, merged);
}

}  // namespace stampede::base
