// A bounded FIFO shared between threads (producer: the learner's receiver; consumer:
// its trainer). When full, Push waits (the wait is measured and returned, never a
// silent drop); when empty, PopExactly waits up to a deadline. Close() wakes everyone.
#pragma once

#include <chrono>
#include <deque>
#include <vector>

#include "base/mutex.h"

namespace stampede::replay {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // Waits while full. Returns false if the queue was closed (the item is not queued).
  // Adds the seconds spent waiting to *waited_s.
  bool Push(T item, double* waited_s = nullptr) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    if (items_.size() >= capacity_ && !closed_) {
      const auto start = std::chrono::steady_clock::now();
      ++waiting_producers_;
      while (items_.size() >= capacity_ && !closed_) not_full_.Wait(mu_);
      --waiting_producers_;
      if (waited_s != nullptr) {
        *waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.NotifyOne();
    return true;
  }

  // Takes exactly n items, waiting until that many are queued or `timeout` passes.
  // Returns false (taking nothing) on timeout or close.
  template <class Rep, class Period>
  bool PopExactly(size_t n, std::vector<T>* out, std::chrono::duration<Rep, Period> timeout) EXCLUDES(mu_) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    base::MutexLock lock(mu_);
    while (items_.size() < n && !closed_) {
      if (!not_empty_.WaitUntil(mu_, deadline)) break;
    }
    if (closed_ || items_.size() < n) return false;
    out->clear();
    for (size_t i = 0; i < n; ++i) {
      out->push_back(std::move(items_.front()));
      items_.pop_front();
    }
    not_full_.NotifyAll();
    return true;
  }

  void Close() EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    closed_ = true;
    not_full_.NotifyAll();
    not_empty_.NotifyAll();
  }

  size_t size() const EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  // Producers waiting in Push for room right now.
  int waiting_producers() const EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    return waiting_producers_;
  }

 private:
  const size_t capacity_;
  mutable base::Mutex mu_;
  base::CondVar not_full_, not_empty_;
  std::deque<T> items_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  int waiting_producers_ GUARDED_BY(mu_) = 0;
};

}  // namespace stampede::replay
