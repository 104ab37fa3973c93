#include "ps/fetch_state.h"

#include <algorithm>

namespace stampede::ps {

FetchState::FetchState(int num_shards, bool mixed_versions, Clock::duration request_timeout)
    : shards_(size_t(std::max(0, num_shards))), mixed_(mixed_versions), timeout_(request_timeout) {}

bool FetchState::CatchingUp(int64_t current) const {
  if (mixed_ || shards_.empty()) return false;
  const int64_t target = newest_heard();
  if (target <= current) return false;
  for (const Shard& s : shards_) {
    if (s.held != target) return true;
  }
  return false;
}

bool FetchState::OnReply(int shard, bool has_params, int64_t version, int64_t current) {
  Shard& s = shards_[size_t(shard)];
  // Any answer ends the wait: a duplicate or late one too, at worst one request more.
  s.outstanding = false;
  if (!has_params || version <= s.held || (!mixed_ && version <= current)) return false;
  // A shard behind the target answering beyond it no longer had the target.
  const int64_t target = newest_heard();
  if (CatchingUp(current) && s.held < target && version > target) ++misses_;
  s.held = version;
  return true;
}

FetchState::Assembly FetchState::Take(Clock::time_point now, int64_t current) {
  Assembly a;
  if (mixed_ || shards_.empty()) return a;
  const int64_t target = newest_heard();
  if (target <= current) return a;
  int64_t oldest = target;
  for (const Shard& s : shards_) oldest = std::min(oldest, s.held);
  if (oldest == target) {
    a.version = target;
  } else {
    if (catch_up_since_ == Clock::time_point{}) catch_up_since_ = now;
    const bool stuck = misses_ >= kMaxMisses || now - catch_up_since_ >= kCatchUpLimit;
    if (!stuck || oldest <= current) return a;
    a.version = oldest;
    a.mixed = true;
    ++mixed_assemblies_;
  }
  catch_up_since_ = {};
  misses_ = 0;
  return a;
}

int64_t FetchState::newest_heard() const {
  int64_t v = -1;
  for (const Shard& s : shards_) v = std::max(v, s.held);
  return v;
}

std::vector<FetchRequest> FetchState::Due(Clock::time_point now, int64_t current) const {
  std::vector<FetchRequest> out;
  const int64_t target = newest_heard();
  const bool catching_up = CatchingUp(current);
  for (int i = 0; i < int(shards_.size()); ++i) {
    const Shard& s = shards_[size_t(i)];
    if (s.outstanding && now - s.sent_at < timeout_) continue;
    if (mixed_) {
      out.push_back({i, s.held + 1, 0});
    } else if (!catching_up) {
      out.push_back({i, std::max(current, target) + 1, 0});  // anything newer
    } else if (s.held < target) {
      out.push_back({i, target, target});  // this shard's slice of the target
    }
    // else: this shard has the target; nothing is asked of it until the others do.
  }
  return out;
}

void FetchState::Sent(int shard, Clock::time_point now) {
  Shard& s = shards_[size_t(shard)];
  s.outstanding = true;
  s.sent_at = now;
}

void FetchState::Reset() {
  for (Shard& s : shards_) s = Shard{};
  catch_up_since_ = {};
  misses_ = 0;
}

}  // namespace stampede::ps
