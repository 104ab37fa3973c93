// A mutex, its scoped lock and a condition variable that clang's thread-safety analysis
// understands (libstdc++'s std::mutex carries no annotations). Thin wrappers over
// std::mutex and std::condition_variable: no cost beyond them.
//
//   base::Mutex mu_;
//   int64_t count_ GUARDED_BY(mu_) = 0;
//   void Add() EXCLUDES(mu_) { base::MutexLock lock(mu_); ++count_; cv_.NotifyAll(); }
//   while (count_ < n) if (!cv_.WaitUntil(mu_, deadline)) break;   // mu_ held
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace stampede::base {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

class CondVar {
 public:
  // Each releases `mu` while waiting and holds it again on return; wake-ups may be
  // spurious, so callers wait in a loop on their condition.
  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False once `deadline` has passed.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
    const bool in_time = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return in_time;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace stampede::base
