// The model spec a config asks for, for the trajectory shape of its resolved env spec.
#pragma once

#include <memory>
#include <string>

#include "net/model.h"

namespace stampede::config {
class Config;
}
namespace stampede::wire {
struct StepShape;
}

namespace stampede::net {

ModelSpec ModelSpecFromConfig(const config::Config& cfg, const wire::StepShape& shape);

// The CPU model for a config; nullptr with `error` naming the problem (an image torso
// on a vector observation, an image too small for the torso).
std::unique_ptr<Model<float>> MakeModelFromConfig(const config::Config& cfg,
                                                  const wire::StepShape& shape,
                                                  std::string* error);

}  // namespace stampede::net
