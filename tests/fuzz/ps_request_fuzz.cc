// libFuzzer target: PS shards' request handling (decoding, checks, puts, gradient
// pushes, checkpoint requests, gets and held gets) on arbitrary frames, for a relay-mode
// shard and one that owns the optimizer. The shards keep their state across inputs, as
// real ones do across messages; replies go to an unbound socket and are dropped.
#include <cmath>
#include <cstdint>

#include "ps/shard.h"
#include "tests/fuzz/frames.h"

using namespace stampede;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Both live until exit, never destroyed (terminating a context with an open socket
  // would wait forever).
  static zmq::context_t* ctx = new zmq::context_t(1);
  static ps::Shard* shard = [] {
    ps::ShardOptions opt;
    opt.shard = 0;
    opt.num_shards = 2;
    opt.versions_kept = 4;
    return new ps::Shard(*ctx, opt);
  }();
  // A shard that owns the optimizer (sync, two learners), without a run directory.
  static ps::Shard* sync = [] {
    ps::ShardOptions opt;
    opt.shard = 0;
    opt.num_shards = 2;
    opt.versions_kept = 4;
    opt.mode = ps::UpdateMode::kSync;
    opt.num_learners = 2;
    opt.replicas_to_aggregate = 2;
    return new ps::Shard(*ctx, opt);
  }();
  const auto parts = fuzz::SplitFrames(data, size);
  shard->Handle(parts);
  sync->Handle(parts);
  return 0;
}
