#include "replay/table.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace stampede::replay {

bool RateLimiter::CanInsert(int64_t size) const {
  // As Reverb: inserts are free until the table can be sampled.
  if (size + 1 <= o_.min_size || o_.samples_per_insert <= 0) return true;
  const double diff = double(inserts_ + 1) * o_.samples_per_insert - double(samples_);
  return diff <= o_.samples_per_insert * double(o_.min_size) + o_.error_buffer;
}

bool RateLimiter::CanSample(int64_t size) const {
  if (size < o_.min_size) return false;
  if (o_.samples_per_insert <= 0) return true;
  const double diff = double(inserts_) * o_.samples_per_insert - double(samples_ + 1);
  return diff >= o_.samples_per_insert * double(o_.min_size) - o_.error_buffer;
}

namespace {

class Fifo : public Selector {
 public:
  void Insert(uint64_t key, double) override { keys_.insert(key); }
  void Update(uint64_t, double) override {}
  void Delete(uint64_t key) override { keys_.erase(key); }
  std::pair<uint64_t, double> Sample(double) override { return {*keys_.begin(), 1.0}; }
  const char* name() const override { return "fifo"; }

 private:
  std::set<uint64_t> keys_;
};

class Uniform : public Selector {
 public:
  void Insert(uint64_t key, double) override {
    where_[key] = keys_.size();
    keys_.push_back(key);
  }
  void Update(uint64_t, double) override {}
  void Delete(uint64_t key) override {
    const size_t i = where_.at(key);
    keys_[i] = keys_.back();
    where_[keys_[i]] = i;
    keys_.pop_back();
    where_.erase(key);
  }
  std::pair<uint64_t, double> Sample(double u) override {
    const size_t i = std::min(keys_.size() - 1, size_t(u * double(keys_.size())));
    return {keys_[i], 1.0 / double(keys_.size())};
  }
  const char* name() const override { return "uniform"; }

 private:
  std::vector<uint64_t> keys_;
  std::unordered_map<uint64_t, size_t> where_;
};

// A sum tree over slots: leaf i holds slot i's weight, every inner node the sum of its
// two children (recomputed from them on each change, so no rounding accumulates).
class Prioritized : public Selector {
 public:
  explicit Prioritized(double exponent) : exponent_(exponent) { Grow(16); }
  void Insert(uint64_t key, double priority) override {
    if (free_.empty()) Grow(leaves_ * 2);
    const size_t slot = free_.back();
    free_.pop_back();
    slot_of_[key] = slot;
    key_of_[slot] = key;
    Set(slot, Weight(priority));
  }
  void Update(uint64_t key, double priority) override { Set(slot_of_.at(key), Weight(priority)); }
  void Delete(uint64_t key) override {
    const size_t slot = slot_of_.at(key);
    Set(slot, 0);
    slot_of_.erase(key);
    free_.push_back(slot);
  }
  std::pair<uint64_t, double> Sample(double u) override {
    double target = u * tree_[1];
    size_t node = 1;
    while (node < leaves_) {
      const size_t left = 2 * node;
      // Never step into a subtree of weight 0 (rounding at the right edge).
      if (target < tree_[left] || tree_[left + 1] <= 0) {
        node = left;
      } else {
        target -= tree_[left];
        node = left + 1;
      }
    }
    const size_t slot = node - leaves_;
    return {key_of_[slot], tree_[node] / tree_[1]};
  }
  const char* name() const override { return "prioritized"; }

 private:
  double Weight(double priority) const {
    if (!std::isfinite(priority)) priority = 1e-6;
    return std::pow(std::max(priority, 1e-6), exponent_);
  }
  void Set(size_t slot, double w) {
    size_t node = slot + leaves_;
    tree_[node] = w;
    for (node /= 2; node >= 1; node /= 2) tree_[node] = tree_[2 * node] + tree_[2 * node + 1];
  }
  void Grow(size_t leaves) {
    std::vector<double> old(tree_.begin() + long(std::min(tree_.size(), leaves_)), tree_.end());
    const size_t old_leaves = leaves_;
    leaves_ = leaves;
    tree_.assign(2 * leaves_, 0.0);
    key_of_.resize(leaves_, 0);
    for (size_t s = leaves_; s-- > old_leaves;) free_.push_back(s);
    for (size_t s = 0; s < old.size(); ++s) tree_[leaves_ + s] = old[s];
    for (size_t node = leaves_ - 1; node >= 1; --node) tree_[node] = tree_[2 * node] + tree_[2 * node + 1];
  }
  double exponent_;
  size_t leaves_ = 0;
  std::vector<double> tree_;  // [1] is the root; leaves at [leaves_, 2 leaves_)
  std::vector<uint64_t> key_of_;
  std::unordered_map<uint64_t, size_t> slot_of_;
  std::vector<size_t> free_;  // free slots, the lowest last
};

}  // namespace

std::unique_ptr<Selector> MakeFifoSelector() { return std::make_unique<Fifo>(); }
std::unique_ptr<Selector> MakeUniformSelector() { return std::make_unique<Uniform>(); }
std::unique_ptr<Selector> MakePrioritizedSelector(double exponent) {
  return std::make_unique<Prioritized>(exponent);
}

std::unique_ptr<Selector> MakeSelector(const std::string& name, double priority_exponent) {
  if (name == "fifo") return MakeFifoSelector();
  if (name == "uniform") return MakeUniformSelector();
  if (name == "prioritized") return MakePrioritizedSelector(priority_exponent);
  return nullptr;
}

}  // namespace stampede::replay
