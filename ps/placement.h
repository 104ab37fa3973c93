// Placement of the network's named tensors on PS shards, as distributed TensorFlow's
// replica_device_setter does it: "greedy" puts each tensor, largest first, on the shard
// holding the fewest bytes so far; "round_robin" deals them out in layout order;
// "contiguous" cuts the flat vector into S equal slices (tensors straddle shards). A
// tensor above the partition threshold is cut into S near-equal parts, one per shard.
// Shard s's message is the concatenation of its ranges, in plan order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net/layout.h"

namespace stampede::config {
class Config;
}

namespace stampede::ps {

struct PlacedRange {
  std::string tensor;  // the tensor (or "<tensor> part k/S", or "" for contiguous slices)
  int64_t offset = 0;  // in the flat parameter vector
  int64_t count = 0;
};

struct Placement {
  std::string strategy;
  std::vector<std::vector<PlacedRange>> shards;  // per shard, its ranges in order
  int64_t total_size = 0;

  int num_shards() const { return int(shards.size()); }
  int64_t Count(int shard) const;
  // Where shard s's values start in the concatenation of all shards (its wire offset).
  int64_t Start(int shard) const;
  // max / mean of the shards' sizes (1 = perfectly even).
  double Imbalance() const;
  // Copies shard s's values out of / into the flat vector.
  void Gather(int shard, const float* params, float* out) const;
  void Scatter(int shard, const float* in, float* params) const;
  bool contiguous_single(int shard) const { return shards[size_t(shard)].size() == 1; }
};

// `partition_floats`: tensors with more floats than this are partitioned (0: never).
Placement PlaceTensors(const net::ParamLayout& layout, int num_shards, const std::string& strategy,
                       int64_t partition_floats);
Placement ContiguousPlacement(int64_t total_size, int num_shards);
// The config's placement (ps.placement, ps.partition_bytes) of `layout`.
Placement PlacementFromConfig(const config::Config& cfg, const net::ParamLayout& layout);
// What `stampede ps-plan` prints: tensor -> shard(s), bytes per shard, imbalance.
std::string PlacementText(const Placement& p);

}  // namespace stampede::ps
