// The learner process as `stampede role learner` runs it: binds its trajectory endpoint,
// trains until `stop` (or a device error), reports to the coordinator every
// learner.status_interval_s and writes the final checkpoint. Ok when stopped with its final
// checkpoint written; kInvalidArgument when its config, keys or checkpoint are refused,
// kDevice on a device error (not restarted), kInternal when the final checkpoint failed.
#pragma once

#include <atomic>

#include "base/status.h"
#include "config/config.pb.h"

namespace stampede::learner {

// `restarts`: how many times the coordinator restarted this process after it died.
base::Status RunLearnerRole(const config::Config& cfg, int task_index, int restarts, std::atomic<bool>& stop);

}  // namespace stampede::learner
