// Experience replay: a table of items (the learner's unrolls) as Reverb builds one
// (Cassirer et al. 2021): storage bounded by items and bytes, an injected Selector that
// picks what to sample, removal of the oldest item past the bounds or of an item sampled
// max_times_sampled times, and a RateLimiter that is a plain counter object. Waiting
// (with a deadline) and Close belong to the table. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace stampede::replay {

// Picks keys to sample. Keys are unique; the table inserts, updates and deletes them.
class Selector {
 public:
  virtual ~Selector() = default;
  virtual void Insert(uint64_t key, double priority) = 0;
  virtual void Update(uint64_t key, double priority) = 0;
  virtual void Delete(uint64_t key) = 0;
  // One key (the selector holds at least one) and the probability it had of being
  // picked; `u` is uniform in [0, 1).
  virtual std::pair<uint64_t, double> Sample(double u) = 0;
  virtual const char* name() const = 0;
};

// The oldest key (the smallest: the table numbers keys in insertion order), always.
std::unique_ptr<Selector> MakeFifoSelector();
// Every key with probability 1/n.
std::unique_ptr<Selector> MakeUniformSelector();
// Key i with probability p_i^exponent / sum_j p_j^exponent (Schaul et al. 2016), from a
// sum tree: O(log n) per insert, update, delete and sample. Priorities below 1e-6 count
// as 1e-6, so nothing is never sampled.
std::unique_ptr<Selector> MakePrioritizedSelector(double exponent);
// "fifo", "uniform" or "prioritized"; nullptr for any other name.
std::unique_ptr<Selector> MakeSelector(const std::string& name, double priority_exponent);

// Reverb's SampleToInsertRatio: sampling waits for min_size items; past that, the
// samples taken stay within error_buffer of samples_per_insert x inserts (an insert
// waits while samples lag behind, a sample while they run ahead). samples_per_insert
// 0: no ratio, only the minimum size.
struct RateLimiterOptions {
  int64_t min_size = 1;
  double samples_per_insert = 0;
  double error_buffer = 0;
};

class RateLimiter {
 public:
  explicit RateLimiter(RateLimiterOptions o) : o_(o) {}
  bool CanInsert(int64_t size) const;
  bool CanSample(int64_t size) const;
  void Inserted() { ++inserts_; }
  void Sampled() { ++samples_; }
  int64_t inserts() const { return inserts_; }
  int64_t samples() const { return samples_; }
  const RateLimiterOptions& options() const { return o_; }

 private:
  RateLimiterOptions o_;
  int64_t inserts_ = 0, samples_ = 0;
};

struct TableOptions {
  int64_t capacity = 1000;        // items; the oldest goes when a new one would exceed it
  int64_t max_bytes = 0;          // > 0: the same for the items' bytes
  int64_t max_times_sampled = 0;  // > 0: an item goes after this many samples
  RateLimiterOptions limiter;
};

struct TableStats {
  int64_t size = 0, bytes = 0;
  int64_t inserts = 0, samples = 0;
  int64_t removed_oldest = 0, removed_sampled = 0;  // by the bounds, by max_times_sampled
  int64_t insert_waits = 0, sample_waits = 0;       // calls the limiter made wait
  bool can_sample = false;                          // the limiter allows one sample now
  std::string selector;
};

template <class T>
class Table {
 public:
  struct Sampled {
    uint64_t key = 0;
    std::shared_ptr<const T> item;
    double probability = 0;   // the selector's probability of this pick
    int64_t table_size = 0;   // items when it was picked (importance weights need it)
    int64_t times_sampled = 0;  // including this one
  };

  Table(TableOptions o, std::unique_ptr<Selector> selector, uint64_t seed = 1)
      : o_(o), selector_(std::move(selector)), limiter_(o.limiter), rng_(seed) {}

  // Stores `item` (`bytes` counted against max_bytes), removing the oldest items past the
  // bounds. Waits up to `timeout` while the limiter refuses; false on timeout or close
  // (the item is not stored).
  template <class Rep, class Period>
  bool Insert(std::shared_ptr<const T> item, int64_t bytes, double priority,
              std::chrono::duration<Rep, Period> timeout) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    if (!WaitReady(/*sample=*/false, timeout, &stats_.insert_waits)) return false;
    const uint64_t key = next_key_++;
    items_.emplace(key, Entry{std::move(item), bytes, 0});
    order_.push_back(key);
    bytes_ += bytes;
    selector_->Insert(key, priority);
    limiter_.Inserted();
    ++stats_.inserts;
    while (size() > o_.capacity || (o_.max_bytes > 0 && bytes_ > o_.max_bytes && size() > 1)) {
      RemoveOldest();
      ++stats_.removed_oldest;
    }
    changed_.NotifyAll();
    return true;
  }

  // Samples one item; waits up to `timeout` while the table is empty or the limiter
  // refuses. False on timeout or close.
  template <class Rep, class Period>
  bool Sample(Sampled* out, std::chrono::duration<Rep, Period> timeout) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    if (!WaitReady(/*sample=*/true, timeout, &stats_.sample_waits)) return false;
    const double u = double(Next() >> 11) * 0x1.0p-53;
    const auto [key, probability] = selector_->Sample(u);
    Entry& e = items_.at(key);
    ++e.times_sampled;
    out->key = key;
    out->item = e.item;
    out->probability = probability;
    out->table_size = size();
    out->times_sampled = e.times_sampled;
    limiter_.Sampled();
    ++stats_.samples;
    if (o_.max_times_sampled > 0 && e.times_sampled >= o_.max_times_sampled) {
      Remove(key);
      ++stats_.removed_sampled;
    }
    changed_.NotifyAll();
    return true;
  }

  // New priority for an item still in the table; ignored for one that has gone.
  void UpdatePriority(uint64_t key, double priority) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    if (items_.count(key)) selector_->Update(key, priority);
  }

  // Whether a Sample would return at once.
  bool CanSample() const EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    return !closed_ && size() > 0 && limiter_.CanSample(size());
  }

  // Wakes every waiting call; later calls return false at once.
  void Close() EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    closed_ = true;
    changed_.NotifyAll();
  }

  TableStats stats() const EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    TableStats s = stats_;
    s.size = size();
    s.bytes = bytes_;
    s.can_sample = size() > 0 && limiter_.CanSample(size());
    s.selector = selector_->name();
    return s;
  }
  const TableOptions& options() const { return o_; }

 private:
  struct Entry {
    std::shared_ptr<const T> item;
    int64_t bytes = 0;
    int64_t times_sampled = 0;
  };
  int64_t size() const REQUIRES(mu_) { return int64_t(items_.size()); }
  // Whether an insert (sample false) or a sample may go ahead now.
  bool Ready(bool sample) const REQUIRES(mu_) {
    return sample ? size() > 0 && limiter_.CanSample(size()) : limiter_.CanInsert(size());
  }
  // Waits up to `timeout` until Ready(sample) or the table closes (counted in *waits if
  // it had to wait); true if the call may go ahead.
  template <class Rep, class Period>
  bool WaitReady(bool sample, std::chrono::duration<Rep, Period> timeout, int64_t* waits) REQUIRES(mu_) {
    if (closed_) return false;
    if (Ready(sample)) return true;
    ++*waits;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && !Ready(sample)) {
      if (!changed_.WaitUntil(mu_, deadline)) break;
    }
    return !closed_ && Ready(sample);
  }
  void Remove(uint64_t key) REQUIRES(mu_) {
    auto it = items_.find(key);
    bytes_ -= it->second.bytes;
    selector_->Delete(key);
    items_.erase(it);
    // order_ may keep keys removed by sampling; those at its front go now.
    while (!order_.empty() && !items_.count(order_.front())) order_.pop_front();
  }
  void RemoveOldest() REQUIRES(mu_) { Remove(order_.front()); }
  uint64_t Next() REQUIRES(mu_) {  // SplitMix64
    uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  const TableOptions o_;
  mutable base::Mutex mu_;
  base::CondVar changed_;
  const std::unique_ptr<Selector> selector_ PT_GUARDED_BY(mu_);
  RateLimiter limiter_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Entry> items_ GUARDED_BY(mu_);
  std::deque<uint64_t> order_ GUARDED_BY(mu_);  // keys in insertion order (some already removed)
  int64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t next_key_ GUARDED_BY(mu_) = 0;
  uint64_t rng_ GUARDED_BY(mu_);
  TableStats stats_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace stampede::replay
