// One parameter-server shard: owns its slice of the flat parameter vector (the ranges
// the placement gives it) and the last few versions of it, as immutable snapshots. One
// thread (Run) owns its one ROUTER socket: learners put slices (PsRequest.put, relay
// mode) or push gradients that the shard applies with its own RMSProp state
// (PsRequest.push, sync and async modes), actors and learners get slices
// (PsRequest.get), the chief learner asks for checkpoint parts (PsRequest.checkpoint).
// A get for a version the shard does not have yet is held (long poll) and answered
// by the put that brings it. A reply is sent without copying the snapshot (the
// message holds a reference).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "net/kernel_math.h"
#include "base/log_limit.h"
#include "base/status.h"
#include "wire/messages.pb.h"

namespace stampede::wire {
class Curve;
}

namespace stampede::ps {

struct ShardPart;

enum class UpdateMode { kRelay, kSync, kAsync };
UpdateMode UpdateModeOf(const std::string& name);  // learner.update_mode

struct ShardOptions {
  int shard = 0;
  int num_shards = 1;
  int versions_kept = 8;
  int64_t max_message_bytes = 64 << 20;
  uint64_t incarnation = 1;
  // The run's keys (CURVE on: the socket is a CURVE server, and a put is taken only
  // from a connection ZAP identified as a learner), or null. The context's ZAP handler
  // belongs to the caller.
  const wire::Curve* curve = nullptr;
  // Who applies the optimizer (learner.update_mode); sync and async: this shard.
  UpdateMode mode = UpdateMode::kRelay;
  int num_learners = 1;
  int replicas_to_aggregate = 1;  // sync: gradients per step
  int max_staleness = 8;          // async
  net::OptimizerHyper optimizer;  // sync/async: learner.optimizer (net/kernel_math.h)
  // The version high-water mark file (ps/checkpoints.h); empty: none.
  std::string version_mark_path;
  // Where checkpoint parts go (RUN_DIR/checkpoints); empty: checkpoint requests are refused.
  std::string checkpoint_root;
  // A checkpoint part to start from (sync/async restarts); null: wait for the chief's put.
  std::shared_ptr<const ShardPart> restore;
};

// Why the shard refused a request.
enum class Refusal { kUnparsable, kWrongLayout, kNonFinite, kStalePut, kUnauthorisedPut, kWrongMode, kCount };
constexpr int kStalenessBuckets = 17;  // staleness 0..15, then everything beyond
const char* RefusalName(Refusal r);

struct ShardStats {
  std::atomic<int64_t> puts{0}, stale_puts{0}, bad_requests{0}, gets{0}, replies_with_params{0};
  std::atomic<int64_t> newest_version{-1};
  // Every refused request by reason (stale puts included; bad_requests is the rest).
  std::atomic<int64_t> refused[size_t(Refusal::kCount)] = {};
  // Sync/async: gradients applied, dropped as too old, staleness of the applied ones.
  std::atomic<int64_t> gradients_applied{0}, gradients_dropped{0};
  std::atomic<int64_t> staleness[kStalenessBuckets] = {};
  std::atomic<int64_t> checkpoint_parts{0}, checkpoint_failures{0};
};

class Shard {
 public:
  Shard(zmq::context_t& ctx, ShardOptions opt);
  ~Shard();
  // Binds the ROUTER socket; Unavailable if the endpoint is taken.
  [[nodiscard]] base::Status Bind(const std::string& endpoint);
  std::string endpoint() const;  // the bound endpoint (resolves "tcp://...:*")
  // Serves until `stop` is set (checked every 100 ms).
  void Run(const std::atomic<bool>& stop);
  const ShardStats& stats() const { return stats_; }
  // Sync/async: the shard's current parameters and optimizer state (tests).
  const std::vector<float>& current() const { return current_; }
  const std::vector<float>& mean_square() const { return ms_; }
  // Handles one received message (routing id, header, optional data frame); Run calls
  // it for every message. Public for the fuzzer (tests/fuzz).
  void Handle(const std::vector<zmq::message_t>& parts);

 private:
  struct Snapshot;
  void HandlePut(const wire::ParamsSlice& put, const zmq::message_t* data, const std::string& peer);
  void HandlePush(const wire::PushGradient& push, const zmq::message_t* data, const std::string& peer);
  void HandleCheckpoint(const zmq::message_t& identity, const wire::CheckpointRequest& req);
  // True if `peer` may send a learner's request (`what`, for the refusal), else refuses it.
  bool FromLearner(const std::string& peer, const char* what);
  // Null if `slice` (with its data frame) fits this shard, else why not.
  const char* CheckSlice(const wire::ParamsSlice& slice, const zmq::message_t* data) const;
  void CountFrames(const wire::ParamsSlice& slice);
  // Adds a snapshot of `values` as `version` and answers held gets.
  void Publish(int64_t version, const float* values);
  void Apply(const float* grad, double lr, int64_t staleness);
  void Refuse(Refusal why, const std::string& detail);
  void HandleGet(const zmq::message_t& identity, const wire::GetParams& get);
  std::shared_ptr<const Snapshot> Pick(const wire::GetParams& get) const;
  void AnswerWaiting();
  // Sends `pick` (or has_params = false when null) to the peer `identity`.
  void Reply(const std::string& identity, const std::shared_ptr<const Snapshot>& pick, bool bfloat16);

  struct Waiting {
    std::string identity;
    wire::GetParams get;
  };
  static constexpr size_t kMaxWaiting = 4096;  // held gets; beyond it, answered "not yet"
  ShardOptions opt_;
  zmq::socket_t socket_;
  std::deque<std::shared_ptr<const Snapshot>> versions_;  // oldest first
  std::vector<Waiting> waiting_;                          // held gets, one per peer
  int64_t total_size_ = -1;
  uint64_t layout_fingerprint_ = 0;
  int64_t offset_ = 0, count_ = 0;  // this shard's slice, as the first put set it
  std::vector<int64_t> learner_frames_;     // per learner, its newest frame count
  std::vector<float> current_, ms_, mom_;   // sync/async: the slice and its RMSProp state
  std::vector<float> sum_;                  // sync: gradients of the current version so far
  std::vector<int> contributed_;            // sync: learners in sum_
  double lr_sum_ = 0;
  int64_t version_mark_ = 0;
  int64_t restored_version_ = -1;  // restored: the version it came back with, until a newer one
  ShardStats stats_;
  base::LogLimiter log_limiter_;
};

}  // namespace stampede::ps
