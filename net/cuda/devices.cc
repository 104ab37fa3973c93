// LearnerDevice (trainer.h): which GPU a learner's config names, in builds with and
// without CUDA (DeviceCount says which).
#include <string>

#include "net/cuda/trainer.h"

namespace stampede::net::cuda {

base::StatusOr<int> LearnerDevice(const std::string& device, int learner_index) {
  if (device.rfind("cuda:", 0) == 0) return std::stoi(device.substr(5));  // the config checked the number
  const base::StatusOr<int> count = DeviceCount();
  if (!count.ok()) return base::Unavailable("learner.device \"" + device + "\": " + count.status().message());
  return learner_index % *count;
}

}  // namespace stampede::net::cuda
