// A bounded FIFO shared between threads (producer: the learner's receiver; consumer:
// its trainer). When full, Push waits (the wait is measured and returned, never a
// silent drop); when empty, PopUpTo waits up to a deadline. Close() wakes everyone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace stampede::replay {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // Waits while full. Returns false if the queue was closed (the item is not queued).
  // Adds the seconds spent waiting to *waited_s.
  bool Push(T item, double* waited_s = nullptr) {
    std::unique_lock lock(mu_);
    if (items_.size() >= capacity_ && !closed_) {
      const auto start = std::chrono::steady_clock::now();
      not_full_.wait(lock, [&] { return items_.size() < capacity_ || closed_; });
      if (waited_s != nullptr) {
        *waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  // Takes exactly n items, waiting until that many are queued or `timeout` passes.
  // Returns false (taking nothing) on timeout or close.
  template <class Rep, class Period>
  bool PopExactly(size_t n, std::vector<T>* out, std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lock(mu_);
    if (!not_empty_.wait_for(lock, timeout, [&] { return items_.size() >= n || closed_; })) {
      return false;
    }
    if (closed_ || items_.size() < n) return false;
    out->clear();
    for (size_t i = 0; i < n; ++i) {
      out->push_back(std::move(items_.front()));
      items_.pop_front();
    }
    not_full_.notify_all();
    return true;
  }

  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;  // guarded by mu_
  bool closed_ = false;  // guarded by mu_
};

}  // namespace stampede::replay
