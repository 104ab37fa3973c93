// A parameter-server shard process as `stampede role ps` runs it: restores its slice from
// the newest complete checkpoint, serves gets and puts until `stop`, reports to the
// coordinator every second and leaves its version mark on a clean stop. Ok when stopped;
// kInvalidArgument when its endpoint, keys or checkpoint part are refused.
#pragma once

#include <atomic>

#include "base/status.h"
#include "config/config.pb.h"

namespace stampede::ps {

// `restarts`: how many times the coordinator restarted this process after it died.
base::Status RunPsRole(const config::Config& cfg, int task_index, int restarts, std::atomic<bool>& stop);

}  // namespace stampede::ps
