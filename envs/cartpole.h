// CartPole-v1 with gymnasium's dynamics (Euler integration, tau = 0.02) and its
// 500-step limit. Reward 1 on every step, including the one that terminates.
#pragma once

#include <array>

#include "envs/env.h"
#include "envs/rng.h"

namespace stampede::envs {

class CartPole : public Env {
 public:
  explicit CartPole(const EnvOptions& options);
  // State (x, x_dot, theta, theta_dot), in double as gymnasium keeps it.
  const std::array<double, 4>& state() const { return state_; }
  void set_state(const std::array<double, 4>& s) { state_ = s; }

  static constexpr double kGravity = 9.8, kMassCart = 1.0, kMassPole = 0.1;
  static constexpr double kLength = 0.5, kForceMag = 10.0, kTau = 0.02;
  static constexpr double kThetaThreshold = 12 * 2 * 3.14159265358979323846 / 360;
  static constexpr double kXThreshold = 2.4;

 protected:
  void DoReset(uint64_t seed, void* obs) override;
  StepResult DoStep(int action, void* obs) override;

 private:
  void Write(void* obs) const;
  std::array<double, 4> state_{};
  SplitMix64 rng_;
};

}  // namespace stampede::envs
