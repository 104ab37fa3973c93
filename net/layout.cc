#include "net/layout.h"

#include <stdexcept>

namespace stampede::net {

int64_t ParamLayout::Add(const std::string& name, std::vector<int> shape) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.size = 1;
  for (int d : t.shape) t.size *= d;
  t.offset = total_;
  total_ += t.size;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

const TensorInfo& ParamLayout::Find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("no parameter tensor named " + name);
}

uint64_t ParamLayout::Fingerprint() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& t : tensors_) {
    for (char c : t.name) mix(uint64_t(uint8_t(c)));
    for (int d : t.shape) mix(uint64_t(d));
    mix(uint64_t(t.offset));
  }
  mix(uint64_t(total_));
  for (char c : tag_) mix(uint64_t(uint8_t(c)));
  return h;
}

Slice ShardSlice(int64_t total, int shard, int num_shards) {
  const int64_t begin = total * shard / num_shards;
  const int64_t end = total * (shard + 1) / num_shards;
  return Slice{begin, end - begin};
}

}  // namespace stampede::net
