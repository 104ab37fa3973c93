// The model spec a config asks for, for the trajectory shape of its resolved env spec.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "net/kernel_math.h"
#include "net/model.h"

namespace stampede::config {
class Config;
class OptimizerConfig;
}
namespace stampede::wire {
struct StepShape;
}

namespace stampede::net {

ModelSpec ModelSpecFromConfig(const config::Config& cfg, const wire::StepShape& shape);

// The CPU model for a config, or an error naming the problem (an image torso on a vector
// observation, an image too small for the torso, a conv or GEMM backend this build lacks).
base::StatusOr<std::unique_ptr<Model<float>>> MakeModelFromConfig(const config::Config& cfg,
                                                                  const wire::StepShape& shape);

// learner.optimizer's kind and constants, for every place the optimizer runs (the CPU
// learner, the CUDA trainer, the PS shards in sync and async mode).
OptimizerHyper OptimizerHyperFromConfig(const config::OptimizerConfig& oc);

// The learning rate at `frames` env frames (counted globally) of a run whose budget is
// `total_env_frames`: warm-up, then learner.optimizer.schedule over schedule_frames (the
// budget where 0).
double ScheduledLearningRate(const config::OptimizerConfig& oc, int64_t total_env_frames, double frames);

}  // namespace stampede::net
