// libFuzzer target: one PS shard's request handling (decoding, checks, puts, gets and
// held gets) on arbitrary frames. The shard keeps its state across inputs, as a real
// one does across messages; replies go to an unbound socket and are dropped.
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
  shard->Handle(fuzz::SplitFrames(data, size));
  return 0;
}
