#include "ps/placement.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "config/config.pb.h"

namespace stampede::ps {

int64_t Placement::Count(int shard) const {
  int64_t n = 0;
  for (const auto& r : shards[size_t(shard)]) n += r.count;
  return n;
}

int64_t Placement::Start(int shard) const {
  int64_t n = 0;
  for (int s = 0; s < shard; ++s) n += Count(s);
  return n;
}

double Placement::Imbalance() const {
  if (shards.empty() || total_size == 0) return 1;
  int64_t most = 0;
  for (int s = 0; s < num_shards(); ++s) most = std::max(most, Count(s));
  return double(most) / (double(total_size) / double(num_shards()));
}

void Placement::Gather(int shard, const float* params, float* out) const {
  for (const auto& r : shards[size_t(shard)]) {
    std::memcpy(out, params + r.offset, size_t(r.count) * sizeof(float));
    out += r.count;
  }
}

void Placement::Scatter(int shard, const float* in, float* params) const {
  for (const auto& r : shards[size_t(shard)]) {
    std::memcpy(params + r.offset, in, size_t(r.count) * sizeof(float));
    in += r.count;
  }
}

Placement ContiguousPlacement(int64_t total_size, int num_shards) {
  Placement p;
  p.strategy = "contiguous";
  p.total_size = total_size;
  p.shards.resize(size_t(num_shards));
  for (int s = 0; s < num_shards; ++s) {
    const net::Slice sl = net::ShardSlice(total_size, s, num_shards);
    p.shards[size_t(s)].push_back({"", sl.offset, sl.count});
  }
  return p;
}

Placement PlaceTensors(const net::ParamLayout& layout, int S, const std::string& strategy, int64_t partition_floats) {
  if (strategy == "contiguous") return ContiguousPlacement(layout.total_size(), S);
  Placement p;
  p.strategy = strategy;
  p.total_size = layout.total_size();
  p.shards.resize(size_t(S));
  std::vector<int64_t> load(size_t(S), 0);
  std::vector<const net::TensorInfo*> order;
  for (const auto& t : layout.tensors()) order.push_back(&t);
  if (strategy == "greedy") {
    // Largest first (stable: layout order among equals).
    std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->size > b->size; });
  }
  int next = 0;  // round robin
  for (const net::TensorInfo* t : order) {
    if (partition_floats > 0 && t->size > partition_floats && S > 1) {
      // Partitioned: near-equal parts, one per shard (the first ones one larger).
      int64_t at = t->offset;
      for (int s = 0; s < S; ++s) {
        const int64_t n = t->size / S + (s < t->size % S ? 1 : 0);
        p.shards[size_t(s)].push_back({t->name + " part " + std::to_string(s + 1) + "/" + std::to_string(S), at, n});
        load[size_t(s)] += n;
        at += n;
      }
      continue;
    }
    int s = 0;
    if (strategy == "greedy") {
      s = int(std::min_element(load.begin(), load.end()) - load.begin());  // lightest, lowest index
    } else {
      s = next;
      next = (next + 1) % S;
    }
    p.shards[size_t(s)].push_back({t->name, t->offset, t->size});
    load[size_t(s)] += t->size;
  }
  return p;
}

Placement PlacementFromConfig(const config::Config& cfg, const net::ParamLayout& layout) {
  return PlaceTensors(layout, cfg.ps().num_shards(), cfg.ps().placement(), cfg.ps().partition_bytes() / 4);
}

std::string PlacementText(const Placement& p) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "placement \"%s\" of %lld floats (%lld bytes) on %d shards\n", p.strategy.c_str(),
                (long long)p.total_size, (long long)p.total_size * 4, p.num_shards());
  out += buf;
  for (int s = 0; s < p.num_shards(); ++s) {
    for (const auto& r : p.shards[size_t(s)]) {
      std::snprintf(buf, sizeof buf, "  %-32s -> ps %d  [%lld, %lld)  %lld bytes\n",
                    r.tensor.empty() ? "(slice)" : r.tensor.c_str(), s, (long long)r.offset,
                    (long long)(r.offset + r.count), (long long)r.count * 4);
      out += buf;
    }
  }
  for (int s = 0; s < p.num_shards(); ++s) {
    std::snprintf(buf, sizeof buf, "ps %d: %lld bytes in %zu ranges\n", s, (long long)p.Count(s) * 4,
                  p.shards[size_t(s)].size());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "imbalance (max / mean bytes per shard): %.3f\n", p.Imbalance());
  out += buf;
  return out;
}

}  // namespace stampede::ps
