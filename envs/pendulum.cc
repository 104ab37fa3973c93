#include "envs/pendulum.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace stampede::envs {

namespace {
std::shared_ptr<const EnvSpec> PendulumSpec(const EnvOptions& options) {
  auto spec = std::make_shared<EnvSpec>();
  spec->name = "Pendulum-v1";
  spec->obs_shape = {3};
  spec->action_kind = ActionKind::kBox;
  spec->action_low = {-float(Pendulum::kMaxTorque)};
  spec->action_high = {float(Pendulum::kMaxTorque)};
  spec->max_episode_steps = options.max_episode_steps > 0 ? options.max_episode_steps : 200;
  return spec;
}

double AngleNormalize(double x) {
  const double two_pi = 2 * std::numbers::pi;
  double r = std::fmod(x + std::numbers::pi, two_pi);
  if (r < 0) r += two_pi;  // Python's % takes the divisor's sign
  return r - std::numbers::pi;
}
}  // namespace

Pendulum::Pendulum(const EnvOptions& options) : Env(PendulumSpec(options)) {
  options.RefuseUnknown("Pendulum-v1", {"g"});
  g_ = options.GetDouble("g", 10.0);
}

void Pendulum::DoReset(uint64_t seed, void* obs) {
  rng_.seed(seed);
  theta_ = rng_.Uniform(-std::numbers::pi, std::numbers::pi);
  theta_dot_ = rng_.Uniform(-1.0, 1.0);
  Write(obs);
}

StepResult Pendulum::DoStep(int, void*) {
  throw std::logic_error("Pendulum-v1 takes box actions");
}

StepResult Pendulum::DoStepBox(const float* action, void* obs) {
  const double u = std::clamp(double(action[0]), -kMaxTorque, kMaxTorque);
  const double th = AngleNormalize(theta_);
  const double cost = th * th + 0.1 * theta_dot_ * theta_dot_ + 0.001 * u * u;
  double new_dot = theta_dot_ + (3 * g_ / (2 * kLength) * std::sin(theta_) +
                                 3.0 / (kMass * kLength * kLength) * u) * kDt;
  new_dot = std::clamp(new_dot, -kMaxSpeed, kMaxSpeed);
  theta_ = theta_ + new_dot * kDt;
  theta_dot_ = new_dot;
  Write(obs);
  StepResult r;
  r.reward = float(-cost);
  return r;
}

void Pendulum::Write(void* out) const {
  float* obs = static_cast<float*>(out);
  obs[0] = float(std::cos(theta_));
  obs[1] = float(std::sin(theta_));
  obs[2] = float(theta_dot_);
}

STAMPEDE_REGISTER_ENV("Pendulum-v1", [](const EnvOptions& o) { return std::make_unique<Pendulum>(o); });

}  // namespace stampede::envs
