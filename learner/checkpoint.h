// Learner checkpoints: the flat parameters, the optimizer state, the version and the
// layout, in one file written by base::WriteFileAtomically (a crash leaves either the
// old file or the new one, never half of one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/layout.h"

namespace stampede::learner {

struct CheckpointData {
  uint64_t layout_fingerprint = 0;
  std::string layout_text;  // "name shape offset" lines, for humans and error messages
  int64_t version = 0;
  int64_t env_frames = 0;
  int64_t learner_steps = 0;
  std::vector<float> params;
  std::vector<float> rms_mean_square;
  std::vector<float> rms_momentum;
};

std::string LayoutText(const net::ParamLayout& layout);

// Internal (the OS error) when the file cannot be written.
base::Status SaveCheckpoint(const std::string& path, const CheckpointData& data);
// Refuses (invalid argument, naming the file and the problem) a file that is not a
// checkpoint, is truncated, fails its checksum, or has another format version.
base::Status LoadCheckpoint(const std::string& path, CheckpointData* data);
// Same, from the file's bytes (`path` names it in messages).
base::Status ParseCheckpoint(const std::string& bytes, const std::string& path, CheckpointData* data);
// The checksum that ends a checkpoint file (FNV-1a 64 over everything before it).
uint64_t CheckpointChecksum(const char* data, size_t n);

}  // namespace stampede::learner
