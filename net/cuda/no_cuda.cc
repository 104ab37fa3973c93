// The CUDA backend's entry points in a build without CUDA (no toolkit found, or
// STAMPEDE_CUDA=OFF): there is no device to use, and asking for one says why.
#include "net/cuda/trainer.h"

namespace stampede::net::cuda {

bool Built() { return false; }

int DeviceCount(std::string* why) {
  *why = "this Stampede was built without CUDA (no toolkit found, or STAMPEDE_CUDA=OFF)";
  return 0;
}

namespace {
template <class T>
std::unique_ptr<T> Unavailable(int device, std::string* error) {
  std::string why;
  DeviceCount(&why);
  *error = "cuda:" + std::to_string(device) + " is not available: " + why;
  return nullptr;
}
}  // namespace

std::unique_ptr<Trainer> Trainer::Create(const ModelSpec&, int device, const TrainerOptions&, std::string* error) {
  return Unavailable<Trainer>(device, error);
}

std::unique_ptr<Policy> Policy::Create(const ModelSpec&, int device, bool, std::string* error) {
  return Unavailable<Policy>(device, error);
}

}  // namespace stampede::net::cuda
