// The learner process as `stampede role learner` runs it: binds its trajectory endpoint,
// trains until `stop` (or a device error), reports to the coordinator every
// learner.status_interval_s and writes the final checkpoint. Returns the process exit
// code (wire/exit_codes.h).
#pragma once

#include <atomic>

#include "wire/config.pb.h"

namespace stampede::learner {

// `restarts`: how many times the coordinator restarted this process after it died.
int RunLearnerRole(const config::Config& cfg, int task_index, int restarts, std::atomic<bool>& stop);

}  // namespace stampede::learner
