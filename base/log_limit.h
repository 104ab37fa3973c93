// Rate-limited log lines per reason, for anything a peer can trigger at will (a
// dropped trajectory, a refused request or connection): the first line of a reason,
// then at most one per interval, which says how many were not logged. Reasons are
// the code's own names, never a sender's claims, so the table stays small.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace stampede::base {

class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::steady_clock::duration interval = std::chrono::seconds(10))
      : interval_(interval) {}
  // True if a line for `reason` may be written now; *unlogged is then how many were
  // suppressed since the previous line of that reason.
  bool Allow(const std::string& reason, int64_t* unlogged) {
    const auto now = std::chrono::steady_clock::now();
    Entry& e = entries_[reason];
    if (e.logged && now - e.last < interval_) {
      ++e.suppressed;
      return false;
    }
    *unlogged = e.suppressed;
    e.suppressed = 0;
    e.last = now;
    e.logged = true;
    return true;
  }
  // " (and N more since the last line)" or "".
  static std::string More(int64_t unlogged) {
    return unlogged > 0 ? " (and " + std::to_string(unlogged) + " more of this reason since the last line)" : "";
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point last;
    int64_t suppressed = 0;
    bool logged = false;
  };
  std::chrono::steady_clock::duration interval_;
  std::map<std::string, Entry> entries_;
};

}  // namespace stampede::base
