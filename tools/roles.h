// The per-process roles as `stampede` runs them. Each returns the process exit code.
#pragma once

#include "wire/config.pb.h"

namespace stampede::tools {

int RunLearnerRole(const config::Config& cfg, int task_index);
int RunPsRole(const config::Config& cfg, int task_index);
int RunActorRole(const config::Config& cfg, int task_index);

}  // namespace stampede::tools
