// libFuzzer target: the checkpoint loader. Each input is parsed as it is, and again
// with a valid checksum appended, so the fuzzer reaches the header and array parsing
// behind the checksum.
#include <cmath>
#include <cstdint>
#include <string>

#include "learner/checkpoint.h"

using namespace stampede;

namespace {
void Parse(const std::string& bytes) {
  learner::CheckpointData d;
  const base::Status parsed = learner::ParseCheckpoint(bytes, "fuzz.bin", &d);
  if (parsed.ok()) {
    if (d.rms_mean_square.size() != d.params.size() || d.rms_momentum.size() != d.params.size()) __builtin_trap();
  } else if (parsed.message().empty()) {
    __builtin_trap();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Parse(bytes);
  const uint64_t sum = learner::CheckpointChecksum(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), 8);
  Parse(bytes);
  return 0;
}
