// The per-process roles as `stampede` runs them. Each returns the process exit code.
#pragma once

#include "wire/config.pb.h"

namespace stampede::tools {

// `restarts`: how many times the coordinator restarted this process after it died.
int RunLearnerRole(const config::Config& cfg, int task_index, int restarts = 0);
int RunPsRole(const config::Config& cfg, int task_index, int restarts = 0);
int RunActorRole(const config::Config& cfg, int task_index);

}  // namespace stampede::tools
