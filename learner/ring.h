// learner.update_mode "allreduce": the learners average their gradients among themselves
// with Horovod's ring-allreduce over ZeroMQ (Sergeev & Del Balso, 2018; Patarasuk & Yuan's
// bandwidth-optimal ring). The buffer is cut into one chunk per member; in L - 1
// reduce-scatter steps each learner sends one chunk to the next member and adds the chunk
// it receives from the previous one into its own, so that each learner ends holding one
// chunk summed over all; in L - 1 all-gather steps those sums go round the ring. Each
// learner sends and receives 2 (L - 1) / L of the buffer per reduction, whatever L is.
//
// The order of the additions is fixed: chunk c is summed along the ring starting at
// member c, ((x_c + x_{c+1}) + x_{c+2}) + ... + x_{c-1} (positions in `members`, mod L),
// then divided by the number of contributing members, once, by the learner that holds the
// sum; the all-gather copies those bits to everyone. So every learner gets the same bits,
// and the same bits on every run.
//
// Messages carry the round (the learners' step), the ring's members, and what each sender
// has heard of the members' contributions (frames, weight, a parameter fingerprint), so
// every learner also ends knowing every member's. A message that is not the one expected
// (an older round, another ring, the wrong size, from a learner that is not the previous
// member) is dropped and counted, never added. A member that sends nothing for `timeout`
// makes the reduction end with an Unavailable status naming it, not hang.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace zmq {
class context_t;
}

namespace stampede::wire {
class Curve;
}

namespace stampede::learner {

struct RingOptions {
  std::vector<std::string> endpoints;  // cluster.allreduce: learner i binds endpoints[i]
  std::string bind;                    // where this learner binds (endpoints[rank], or 0.0.0.0)
  int rank = 0;                        // this learner's index
  uint64_t incarnation = 0;            // this process's (wire::Sender)
  std::shared_ptr<const wire::Curve> curve;  // null: CURVE off
  std::chrono::milliseconds timeout{60000};  // learner.allreduce_timeout_s
  int64_t max_message_bytes = int64_t(64) << 20;
  int64_t piece_elements = int64_t(1) << 20;  // floats per message (4 MiB)
};

// One member's contribution to a reduction, all-gathered with the sum.
struct RingContribution {
  int learner = 0;
  int64_t env_frames = 0;
  int weight = 1;            // 1: its data counts; 0: it had none (its data is taken as zeros)
  uint64_t fingerprint = 0;  // of its parameters, on check rounds; else 0
};

struct RingStats {
  int64_t reductions = 0;
  int64_t bytes_sent = 0, bytes_received = 0;
  int64_t dropped = 0;  // messages that were not the one expected
  double seconds = 0;   // inside AllReduce
};

// What a learner brings to a rendezvous: its parameters and optimizer state (N values
// each; a member with an older state than the newest gets the newest here), the version
// of that state, and its frame count.
struct RingMemberState {
  std::span<float> params, mean_square, momentum;
  int64_t version = 0;
  int64_t env_frames = 0;
};

// The chief's decision at a rendezvous.
struct RingPlan {
  int64_t generation = 0;
  std::vector<int> members;           // ascending
  int64_t version = 0;                // every member continues from this version
  int source = 0;                     // the member whose state the others with an older one took
  std::map<int, int64_t> env_frames;  // each member's frames as the chief knew them
};

// The ring as the trainer core uses it (learner/trainer.h); Ring below, or a fake in tests.
class RingLink {
 public:
  virtual ~RingLink() = default;
  [[nodiscard]] virtual base::Status AllReduce(int64_t round, const std::vector<int>& members, std::span<float> data,
                                               const RingContribution& own, std::vector<RingContribution>* all,
                                               const std::atomic<bool>* stop) = 0;
  [[nodiscard]] virtual base::Status Rendezvous(RingMemberState* state, int64_t floor, bool first, RingPlan* plan,
                                                const std::atomic<bool>* stop) = 0;
  virtual const RingStats& stats() const = 0;
};

class Ring : public RingLink {
 public:
  Ring(zmq::context_t& ctx, RingOptions options);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Binds this learner's endpoint and connects to every other learner's (any of them
  // may be the next member of a ring).
  [[nodiscard]] base::Status Start();

  // `data` becomes the mean over `members` (learner indices, ascending, this one among
  // them) of each contributing member's data: the sum in the ring's order divided by the
  // number of members with weight 1 (left zero where none has). Every member calls it with
  // the same round, members and data length. *all: every member's contribution, by
  // learner index order. Unavailable when a member sends nothing for the timeout (the
  // reduction is abandoned; `data` is then undefined); Cancelled when `stop` is set.
  [[nodiscard]] base::Status AllReduce(int64_t round, const std::vector<int>& members, std::span<float> data,
                                       const RingContribution& own, std::vector<RingContribution>* all,
                                       const std::atomic<bool>* stop = nullptr) override;

  // Forms the ring (Horovod Elastic's reset): at the start, and after a reduction ended
  // Unavailable. The chief (learner 0) asks every learner to join and takes those that do:
  // at the start all of them (or those there within the timeout), after a failure those that
  // join until none has for a second. It sends each the plan: the members, the version to
  // continue from (the newest any member's state has, or `floor` where higher: the chief's
  // numbering above what the PS served), and the member whose state the others with an
  // older one take (a restarted learner). Every member then holds the same parameters and
  // optimizer state, and state->version is the plan's. Unavailable when no plan comes within
  // the timeout (the chief gone: it is restarted, and the others join it then).
  [[nodiscard]] base::Status Rendezvous(RingMemberState* state, int64_t floor, bool first, RingPlan* plan,
                                        const std::atomic<bool>* stop = nullptr) override;

  const RingStats& stats() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stampede::learner
