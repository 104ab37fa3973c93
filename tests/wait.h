// The tests' one way to wait for something that happens on another thread or process:
// until `done` holds or `limit` passes. The result says which, and the test checks it
// (REQUIRE(WaitUntil(...)) for what must happen, CHECK_FALSE(WaitUntil(...)) for what must
// not happen within a bound), so a wait that runs out fails where it ran out.
#pragma once

#include <chrono>
#include <thread>

namespace stampede::testing {

// How often `done` is asked: often enough that no test waits noticeably longer than it must.
inline constexpr std::chrono::milliseconds kWaitPoll{2};

template <class Pred>
[[nodiscard]] bool WaitUntil(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(kWaitPoll);
  }
  return true;
}

}  // namespace stampede::testing
