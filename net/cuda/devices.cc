// LearnerDevice (trainer.h): which GPU a learner's config names, in builds with and
// without CUDA (DeviceCount says which).
#include <string>

#include "net/cuda/trainer.h"

namespace stampede::net::cuda {

int LearnerDevice(const std::string& device, int learner_index, std::string* why) {
  if (device.rfind("cuda:", 0) == 0) return std::stoi(device.substr(5));  // the config checked the number
  const int count = DeviceCount(why);
  if (count == 0) {
    *why = "learner.device \"" + device + "\": " + *why;
    return -1;
  }
  return learner_index % count;
}

}  // namespace stampede::net::cuda
