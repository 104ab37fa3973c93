// Where a run continues from: the newest complete checkpoint of a run directory, in
// either format (the learner's checkpoint.bin for relay runs, the shards' ckpt-<n>/ for
// sync and async). Used by `stampede run --resume` and `stampede checkpoints RUN_DIR`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/config.pb.h"

namespace stampede::learner {

struct ResumePoint {
  bool sharded = false;  // ckpt-<n>/ under RUN_DIR/checkpoints (else one checkpoint file)
  std::string from;      // that directory, or the file
  int64_t version = 0;
  int64_t env_frames = 0;  // every learner's frames summed
  // Sharded: the newest checkpoint directory there is (complete or not); a complete
  // newest checkpoint has `from` == `newest_dir`.
  std::string newest_dir;
};

// The run's newest complete checkpoint (`cfg.run_dir()`, or learner.restore_from for a
// relay run that sets it). Fails, with the reason, if there is none; each damaged or
// incomplete one skipped on the way adds a line to `warnings`.
base::Status FindResumePoint(const config::Config& cfg, ResumePoint* point, std::vector<std::string>* warnings);

}  // namespace stampede::learner
