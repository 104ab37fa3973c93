// The decisions of a parameter fetcher (ps::ParamsFetcher) without its sockets: which
// version to assemble from the shards' slices it holds, and what to ask each shard for
// next. The tests drive it through a simulated network with delays, drops and reordered
// replies (tests/fetch_state_test.cc).
//
// Relay (one version numbering for all shards). A version is taken only when every
// shard's held slice has that same version. While they differ, the newest held version
// is the target: each shard behind it is asked for exactly that version (a shard that
// no longer keeps it answers with its newest, which then becomes the target), and a
// shard that already has the target is asked for nothing. Asking it for "anything
// newer" meanwhile (as the fetcher once did) let that shard's answer overtake the
// target again whenever the learner put a new version between two polls: the fetcher
// chased one version behind for good, while its actor acted on the last version it had
// assembled (seen as an actor whose policy lag grew by one per learner step).
//
// Exact catch-up needs the target still kept by the shards behind when their request
// arrives. A fetcher that polls less often than a shard's window of versions lasts (a
// fast learner, many actors, an actor starved of CPU) can miss it again and again; after
// kMaxMisses misses, or kCatchUpLimit of catching up, while every shard holds something
// newer than the caller's version, the fetcher takes what it holds as one mixed
// assembly (each shard's newest slice, reported as the oldest of their versions, as
// TensorFlow's asynchronous workers read variables and as sync/async mode always does;
// the trajectories carry the behaviour logits, so V-trace is unaffected) and counts it.
//
// Mixed (sync/async: each shard numbers its own versions): every shard is asked for
// anything newer than its held slice, and each new slice is taken as it comes.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace stampede::ps {

struct FetchRequest {
  int shard = 0;
  int64_t min_version = 0;    // answer with the shard's newest once it is at least this
  int64_t exact_version = 0;  // > 0: this version, if the shard still keeps it
};

class FetchState {
 public:
  using Clock = std::chrono::steady_clock;
  // `request_timeout`: a request with no answer for this long is sent again (a lost
  // request or reply; the shard replaces the held request with the new one).
  FetchState(int num_shards, bool mixed_versions, Clock::duration request_timeout);

  // A reply from `shard` arrived, with parameters of `version` (or, has_params false,
  // "nothing for you now"). `current` is the version the caller has assembled. True
  // when the caller is to keep the reply's slice as the shard's held slice.
  bool OnReply(int shard, bool has_params, int64_t version, int64_t current);
  struct Assembly {
    int64_t version = -1;  // -1: nothing to take now
    bool mixed = false;    // the held slices differ in version (relay fallback)
  };
  // Relay: the version every held slice has, when newer than `current`, or the mixed
  // fallback (above); the caller copies the held slices out when version >= 0.
  // Sync/async: use held() directly.
  Assembly Take(Clock::time_point now, int64_t current);
  // The requests to send at `now`; report each one that was sent with Sent.
  std::vector<FetchRequest> Due(Clock::time_point now, int64_t current) const;
  void Sent(int shard, Clock::time_point now);
  // Forgets the held slices and the requests in flight: the next Due asks every shard
  // for anything newer than the caller's version.
  void Reset();

  static constexpr int kMaxMisses = 2;
  static constexpr std::chrono::milliseconds kCatchUpLimit{1000};

  int num_shards() const { return int(shards_.size()); }
  int64_t mixed_assemblies() const { return mixed_assemblies_; }
  int64_t held(int shard) const { return shards_[size_t(shard)].held; }
  // The newest version any shard has answered with since the last Reset (-1: none).
  int64_t newest_heard() const;

 private:
  struct Shard {
    int64_t held = -1;  // version of the held slice, -1: none
    bool outstanding = false;
    Clock::time_point sent_at{};
  };
  bool CatchingUp(int64_t current) const;
  std::vector<Shard> shards_;
  bool mixed_;
  Clock::duration timeout_;
  // Relay catch-up: when it began (epoch: not catching up) and how often the target
  // moved because a shard behind no longer had it.
  Clock::time_point catch_up_since_{};
  int misses_ = 0;
  int64_t mixed_assemblies_ = 0;
};

}  // namespace stampede::ps
