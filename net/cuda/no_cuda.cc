// The CUDA backend's entry points in a build without CUDA (no toolkit found, or
// STAMPEDE_CUDA=OFF): there is no device to use, and asking for one says why.
#include "net/cuda/trainer.h"

namespace stampede::net::cuda {

bool Built() { return false; }

base::StatusOr<int> DeviceCount() {
  return base::Unavailable("this Stampede was built without CUDA (no toolkit found, or STAMPEDE_CUDA=OFF)");
}

namespace {
base::Status NotHere(int device) {
  return base::Unavailable("cuda:" + std::to_string(device) + " is not available: " + DeviceCount().status().message());
}
}  // namespace

base::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const ModelSpec&, int device, const TrainerOptions&) {
  return NotHere(device);
}

base::StatusOr<std::unique_ptr<Policy>> Policy::Create(const ModelSpec&, int device, bool) { return NotHere(device); }

}  // namespace stampede::net::cuda
