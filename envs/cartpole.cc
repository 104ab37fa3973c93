#include "envs/cartpole.h"

#include <cmath>

namespace stampede::envs {

namespace {
std::shared_ptr<const EnvSpec> CartPoleSpec(const EnvOptions& options) {
  auto spec = std::make_shared<EnvSpec>();
  spec->name = "CartPole-v1";
  spec->obs_shape = {4};
  spec->num_actions = 2;
  spec->max_episode_steps = options.max_episode_steps > 0 ? options.max_episode_steps : 500;
  return spec;
}
}  // namespace

CartPole::CartPole(const EnvOptions& options) : Env(CartPoleSpec(options)) {
  options.RefuseUnknown("CartPole-v1", {});
}

void CartPole::DoReset(uint64_t seed, void* obs) {
  rng_.seed(seed);
  for (double& s : state_) s = rng_.Uniform(-0.05, 0.05);
  Write(obs);
}

StepResult CartPole::DoStep(int action, void* obs) {
  // gymnasium/envs/classic_control/cartpole.py, kinematics_integrator = "euler".
  constexpr double total_mass = kMassPole + kMassCart;
  constexpr double polemass_length = kMassPole * kLength;
  auto& [x, x_dot, theta, theta_dot] = state_;
  const double force = action == 1 ? kForceMag : -kForceMag;
  const double costheta = std::cos(theta), sintheta = std::sin(theta);
  const double temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass;
  const double thetaacc = (kGravity * sintheta - costheta * temp) /
                          (kLength * (4.0 / 3.0 - kMassPole * costheta * costheta / total_mass));
  const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
  x = x + kTau * x_dot;
  x_dot = x_dot + kTau * xacc;
  theta = theta + kTau * theta_dot;
  theta_dot = theta_dot + kTau * thetaacc;
  Write(obs);
  StepResult r;
  r.reward = 1.f;
  r.terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold ||
                 theta > kThetaThreshold;
  return r;
}

void CartPole::Write(void* out) const {
  float* obs = static_cast<float*>(out);
  for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(state_[i]);
}

STAMPEDE_REGISTER_ENV("CartPole-v1",
                      [](const EnvOptions& o) { return std::make_unique<CartPole>(o); });

}  // namespace stampede::envs
