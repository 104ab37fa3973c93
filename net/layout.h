// Parameters are one flat float buffer plus this layout table (name, shape, offset):
// sharding is slicing, serialization is a copy, the optimizer is elementwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stampede::net {

struct TensorInfo {
  std::string name;
  std::vector<int> shape;
  int64_t offset = 0;
  int64_t size = 0;
};

class ParamLayout {
 public:
  // Appends a tensor after the last one; returns its offset.
  int64_t Add(const std::string& name, std::vector<int> shape);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& Find(const std::string& name) const;  // throws std::out_of_range
  int64_t total_size() const { return total_; }
  // What else about the network the parameters depend on (the MLP's activation): part
  // of the fingerprint, so a checkpoint or peer for a relu network is refused by a tanh one.
  void set_tag(std::string tag) { tag_ = std::move(tag); }
  const std::string& tag() const { return tag_; }
  // A fingerprint of names, shapes and offsets (FNV-1a), to refuse a checkpoint or
  // peer built for another network.
  uint64_t Fingerprint() const;

 private:
  std::vector<TensorInfo> tensors_;
  int64_t total_ = 0;
  std::string tag_;
};

// The contiguous slice [offset, offset + count) of a buffer of `total` floats that
// shard `shard` of `num_shards` owns (sizes differ by at most one).
struct Slice {
  int64_t offset;
  int64_t count;
};
Slice ShardSlice(int64_t total, int shard, int num_shards);

}  // namespace stampede::net
