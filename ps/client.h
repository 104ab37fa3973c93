// The PS client side, used by actors (get) and learners (put). Owns one DEALER socket
// per shard; used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps/fetch_state.h"
#include "wire/messages.pb.h"

namespace stampede::wire {
class Curve;
}

namespace stampede::ps {

struct Placement;

struct ClientOptions {
  std::vector<std::string> endpoints;  // one per shard, in shard order
  int64_t total_size = 0;              // floats in the flat parameter vector
  uint64_t layout_fingerprint = 0;
  int64_t max_message_bytes = 64 << 20;
  wire::Sender sender;
  // The run's keys (CURVE on), or null; shard i is the server "ps-i".
  std::shared_ptr<const wire::Curve> curve;
  // Which ranges of the vector each shard holds (ps/placement.h); null: equal contiguous
  // slices. Every client of a run must use the same plan (PlacementFromConfig).
  std::shared_ptr<const Placement> placement;
  // Shards that own the optimizer (sync/async) number their versions each on its own:
  // the fetcher then takes each shard's newest slice as it comes (as TensorFlow's
  // asynchronous workers read variables) and the assembled version is the smallest of
  // the shards' versions. Off: a version is reported only when every shard has it.
  bool mixed_versions = false;
  // Learners: the index and cumulative frame count puts and pushes carry (ps/shard.h).
  int learner_index = 0;
  // Fetchers: ask for bfloat16 slices (ps.wire_bfloat16).
  bool bfloat16 = false;
};

// Assembles whole versions from all shards without ever blocking the caller: Poll()
// reads what replies have arrived, reports a new version only when every shard's slice
// of that same version is in, and sends what requests are due (ps/fetch_state.h decides
// which).
class ParamsFetcher {
 public:
  ParamsFetcher(zmq::context_t& ctx, ClientOptions opt);
  ~ParamsFetcher();
  // Non-blocking. If a complete version newer than *version is assembled, copies it
  // into params (total_size floats), sets *version and returns true.
  bool Poll(std::span<float> params, int64_t* version);
  // Poll, then keep polling for up to `max_wait` while replies keep arriving: a learner
  // about to compute a gradient takes the newest version the shards have right now
  // (a reply read by Poll may be older than what its shard holds by then).
  bool PollFresh(std::span<float> params, int64_t* version, std::chrono::milliseconds max_wait);
  // Blocks until a reply from any shard is there to read (true) or `max_wait` passes: the
  // event a caller waiting for parameters waits on, instead of sleeping between polls.
  bool WaitForReply(std::chrono::milliseconds max_wait);
  // Blocks (waiting on the shards' replies) until a first complete version arrives,
  // `timeout` passes or *stop becomes true.
  bool WaitFirst(std::span<float> params, int64_t* version, std::chrono::duration<double> timeout,
                 const std::atomic<bool>* stop);
  int64_t rejected_replies() const { return rejected_; }
  // Forgets every held slice and request in flight and starts asking afresh (an actor
  // whose parameters fell too far behind, actors.max_policy_lag). Keeps the caller's
  // parameters and version.
  void Reset();
  int64_t resets() const { return resets_; }
  // Relay: mixed assemblies (ps/fetch_state.h: the shards' newest slices when a whole
  // version could not be caught up with).
  int64_t mixed_assemblies() const { return state_.mixed_assemblies(); }
  // The newest version any shard has answered with (-1: none yet).
  int64_t newest_heard() const { return state_.newest_heard(); }
  // Each shard's version of the parameters last copied out by Poll.
  const std::vector<int64_t>& shard_versions() const { return assembled_; }
  // The newest version each shard has answered with so far (-1: none yet), whether or
  // not a whole version could be assembled from them.
  std::vector<int64_t> newest_versions() const;
  // The counters of shard 0's newest reply: each learner's frames (empty: none yet).
  const std::vector<int64_t>& env_frames_by_learner() const { return frames_by_learner_; }
  // Each shard's process incarnation, from its newest valid reply (0: not heard yet): a
  // change means the shard was restarted (what it was asked before is lost).
  const std::vector<uint64_t>& shard_incarnations() const { return incarnations_; }
  // Non-empty once a shard has answered with another network's parameters (a layout
  // that can never fit): what differs.
  const std::string& layout_mismatch() const { return mismatch_; }

 private:
  struct ShardState;
  bool PollRelay(std::span<float> params, int64_t* version);
  bool PollMixed(std::span<float> params, int64_t* version);
  // Sends what FetchState says is due; `current` is the caller's version.
  void SendDue(int64_t current);
  bool Request(const FetchRequest& r);  // false if the socket would block
  std::string mismatch_;
  ClientOptions opt_;
  FetchState state_;
  std::vector<std::unique_ptr<ShardState>> shards_;
  int64_t rejected_ = 0;
  int64_t resets_ = 0;
  int64_t replies_ = 0;  // replies read, in all
  std::vector<int64_t> assembled_;
  std::vector<int64_t> frames_by_learner_;
  std::vector<uint64_t> incarnations_;
};

// Puts a new version of the whole vector to every shard (each gets its slice).
// Never blocks: a shard whose send queue is full does not get this version now; call
// Put again (with the same or a newer version) until it returns true, so the newest
// version always reaches every shard.
class ParamsPublisher {
 public:
  ParamsPublisher(zmq::context_t& ctx, ClientOptions opt);
  ~ParamsPublisher();
  // Sends `version` to every shard that has not taken it yet; true when all have.
  bool Put(std::span<const float> params, int64_t version);
  // Retries until every shard has accepted `version` into its send queue or *stop.
  bool PutAll(std::span<const float> params, int64_t version, const std::atomic<bool>* stop);
  // The frame count the next puts and pushes carry.
  void set_env_frames(int64_t frames) { env_frames_ = frames; }
  // Sync/async: pushes each shard its slice of `grad`, tagged with the version of that
  // shard's parameters it was computed on. Retries a full queue until *stop.
  bool PushGradient(std::span<const float> grad, const std::vector<int64_t>& shard_versions, double learning_rate,
                    const std::atomic<bool>* stop);
  // Asks `shard` for its part of checkpoint `sequence` (in its RUN_DIR/checkpoints);
  // false if its queue is full now.
  bool RequestCheckpoint(int64_t sequence, int shard);
  // Reads shards' answers to checkpoint requests (non-blocking); appends them to `done`.
  void PollCheckpointDone(std::vector<wire::CheckpointDone>* done);
  // Blocks until an answer from any shard is there to read (true) or `max_wait` passes.
  bool WaitForReply(std::chrono::milliseconds max_wait);

 private:
  // Fills a put's or push's geometry and counters for `shard`; returns its data
  // (gathered when the shard's ranges are not one block).
  const float* Slice(int shard, std::span<const float> values, int64_t version, wire::ParamsSlice* out);
  int64_t env_frames_ = 0;
  bool PutShard(int shard, std::span<const float> params, int64_t version);
  // Blocks until `shard`'s send queue has room (true) or `max_wait` passes.
  bool WaitWritable(int shard, std::chrono::milliseconds max_wait);
  ClientOptions opt_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<int64_t> sent_version_;  // per shard, the newest version queued to it
  std::vector<float> gather_;          // a shard's ranges, gathered for sending
};

}  // namespace stampede::ps
