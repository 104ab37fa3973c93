// Pendulum-v1 from gymnasium (classic_control/pendulum.py): swing a pendulum up and keep
// it upright with a torque in [-2, 2] (a box action space of one component).
// Observation [cos theta, sin theta, theta_dot]; reward -(theta^2 + 0.1 theta_dot^2 +
// 0.001 torque^2) with theta normalised to [-pi, pi); never terminates, 200-step limit.
#pragma once

#include "envs/env.h"
#include "envs/rng.h"

namespace stampede::envs {

class Pendulum : public Env {
 public:
  static constexpr double kMaxSpeed = 8, kMaxTorque = 2, kDt = 0.05, kMass = 1, kLength = 1;
  explicit Pendulum(const EnvOptions& options);
  void set_state(double theta, double theta_dot) { theta_ = theta, theta_dot_ = theta_dot; }

 protected:
  void DoReset(uint64_t seed, void* obs) override;
  StepResult DoStep(int action, void* obs) override;
  StepResult DoStepBox(const float* action, void* obs) override;

 private:
  void Write(void* obs) const;
  double g_ = 10.0;
  double theta_ = 0, theta_dot_ = 0;
  SplitMix64 rng_;
};

}  // namespace stampede::envs
