// The CUDA backend's entry points in a build without CUDA (no toolkit found, or
// STAMPEDE_CUDA=OFF): there is no device to use, and asking for one says why.
#include "net/cuda/trainer.h"

namespace stampede::net::cuda {

bool Built() { return false; }

int DeviceCount(std::string* why) {
  *why = "this Stampede was built without CUDA (no toolkit found, or STAMPEDE_CUDA=OFF)";
  return 0;
}

std::unique_ptr<Trainer> Trainer::Create(const ModelSpec&, int device, const TrainerOptions&,
                                         std::string* error) {
  std::string why;
  DeviceCount(&why);
  *error = "cuda:" + std::to_string(device) + " is not available: " + why;
  return nullptr;
}

}  // namespace stampede::net::cuda
