#include "envs/catch.h"

#include <algorithm>
#include <cstring>

namespace stampede::envs {

namespace {
std::shared_ptr<const EnvSpec> CatchSpec(const EnvOptions& options) {
  auto spec = std::make_shared<EnvSpec>();
  spec->name = "Catch";
  spec->obs_shape = {Catch::kRows, Catch::kColumns};
  spec->num_actions = 3;
  spec->max_episode_steps = options.max_episode_steps;  // episodes end by themselves
  return spec;
}
}  // namespace

Catch::Catch(const EnvOptions& options) : Env(CatchSpec(options)) {
  options.RefuseUnknown("Catch", {});
}

void Catch::DoReset(uint64_t seed, void* obs) {
  rng_.seed(seed);
  ball_x_ = int(rng_() % kColumns);  // modulo bias of 5 in 2^64: negligible
  ball_y_ = 0;
  paddle_x_ = kColumns / 2;
  Write(obs);
}

StepResult Catch::DoStep(int action, void* obs) {
  // bsuite/environments/catch.py: move the paddle, then the ball falls one row.
  paddle_x_ = std::clamp(paddle_x_ + (action - 1), 0, kColumns - 1);
  ++ball_y_;
  Write(obs);
  StepResult r;
  if (ball_y_ == kRows - 1) {
    r.terminated = true;
    r.reward = ball_x_ == paddle_x_ ? 1.f : -1.f;
  }
  return r;
}

void Catch::Write(void* out) const {
  float* obs = static_cast<float*>(out);
  std::memset(obs, 0, sizeof(float) * kRows * kColumns);
  obs[ball_y_ * kColumns + ball_x_] = 1.f;
  obs[(kRows - 1) * kColumns + paddle_x_] = 1.f;
}

STAMPEDE_REGISTER_ENV("Catch", [](const EnvOptions& o) { return std::make_unique<Catch>(o); });

}  // namespace stampede::envs
