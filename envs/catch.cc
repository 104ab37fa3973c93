#include "envs/catch.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace stampede::envs {

namespace {
std::shared_ptr<const EnvSpec> CatchSpec(const EnvOptions& options, int scale = 0) {
  auto spec = std::make_shared<EnvSpec>();
  spec->name = scale > 0 ? "CatchPixels" : "Catch";
  spec->obs_shape = {Catch::kRows, Catch::kColumns};
  if (scale > 0) {
    spec->obs_shape = {1, Catch::kRows * scale, Catch::kColumns * scale};
    spec->obs_dtype = DType::kUint8;
  }
  spec->num_actions = 3;
  spec->max_episode_steps = options.max_episode_steps;  // episodes end by themselves
  return spec;
}
}  // namespace

Catch::Catch(const EnvOptions& options) : Env(CatchSpec(options)) {
  options.RefuseUnknown("Catch", {});
}

Catch::Catch(const EnvOptions& options, int scale) : Env(CatchSpec(options, scale)), scale_(scale) {
  options.RefuseUnknown("CatchPixels", {"scale"});
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
  if (scale_ > 0) {
    const int W = kColumns * scale_;
    uint8_t* img = static_cast<uint8_t*>(out);
    std::memset(img, 0, size_t(kRows) * scale_ * W);
    auto fill = [&](int row, int col) {
      for (int y = row * scale_; y < (row + 1) * scale_; ++y) {
        std::memset(img + size_t(y) * W + size_t(col) * scale_, 255, size_t(scale_));
      }
    };
    fill(ball_y_, ball_x_);
    fill(kRows - 1, paddle_x_);
    return;
  }
  float* obs = static_cast<float*>(out);
  std::memset(obs, 0, sizeof(float) * kRows * kColumns);
  obs[ball_y_ * kColumns + ball_x_] = 1.f;
  obs[(kRows - 1) * kColumns + paddle_x_] = 1.f;
}

STAMPEDE_REGISTER_ENV("Catch", [](const EnvOptions& o) { return std::make_unique<Catch>(o); });
STAMPEDE_REGISTER_ENV("CatchPixels", [](const EnvOptions& o) {
  const int64_t scale = o.GetInt("scale", 4);
  if (scale < 1 || scale > 64) {
    throw std::invalid_argument("CatchPixels: kwarg scale = " + std::to_string(scale) +
                                " is out of range, expected pixels per cell in [1, 64]");
  }
  return std::make_unique<Catch>(o, int(scale));
});

}  // namespace stampede::envs
