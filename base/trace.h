// A per-process timeline in the Chrome/Perfetto trace-event format (JSON array of
// complete events, "ph": "X"): `stampede run --trace` (config `trace: true`) makes every
// process write RUN_DIR/trace/<role>-<index>.json, and the coordinator merges them into
// RUN_DIR/trace.json at the end (open it in ui.perfetto.dev or chrome://tracing).
// Timestamps are wall-clock microseconds, so the processes of one machine line up.
// Off (the default), a span costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace stampede::base {

class Trace {
 public:
  // Starts recording into `path` for the process named `process` ("actor 3"). Fails with
  // the OS's reason when the file cannot be made.
  static base::Status Open(const std::string& path, const std::string& process);
  // Flushes and closes (also done at exit).
  static void Close();
  static bool on() { return enabled_.load(std::memory_order_relaxed); }
  // One complete event: `name` from `start_us` for `dur_us` on this thread.
  static void Complete(const char* name, const char* category, int64_t start_us, int64_t dur_us);
  static int64_t NowUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  // Events after this many in one process (about 35 MB of JSON) are not recorded; a
  // counter event at the end says how many.
  static constexpr int64_t kMaxEvents = 300000;

 private:
  static std::atomic<bool> enabled_;
};

// Records the enclosing scope as one event when tracing is on.
class TraceSpan {
 public:
  TraceSpan(const char* name, const char* category)
      : name_(name), category_(category), start_(Trace::on() ? Trace::NowUs() : -1) {}
  ~TraceSpan() {
    if (start_ >= 0) Trace::Complete(name_, category_, start_, Trace::NowUs() - start_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  const char* category_;
  int64_t start_;
};

// Merges per-process trace files (each a JSON array, possibly without its closing
// bracket after a kill) into one JSON array at `out`. False with the reason.
base::Status MergeTraces(const std::string& dir, const std::string& out);

}  // namespace stampede::base
