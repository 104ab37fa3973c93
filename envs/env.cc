#include "envs/env.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

namespace stampede::envs {

int EnvSpec::obs_size() const {
  int n = 1;
  for (int d : obs_shape) n *= d;
  return n;
}

Env::Env(std::shared_ptr<const EnvSpec> spec) : spec_(std::move(spec)) {}
Env::~Env() = default;

void Env::Reset(uint64_t seed, std::span<float> obs) {
  if (obs.size() != size_t(spec_->obs_size())) {
    throw std::invalid_argument(spec_->name + ": observation buffer of " +
                                std::to_string(obs.size()) + " floats, expected " +
                                std::to_string(spec_->obs_size()));
  }
  DoReset(seed, obs.data());
  episode_return_ = 0;
  episode_length_ = 0;
  needs_reset_ = false;
}

StepResult Env::Step(int action, std::span<float> obs) {
  if (action < 0 || action >= spec_->num_actions) {
    throw std::out_of_range(spec_->name + ": action " + std::to_string(action) +
                            " is outside [0, " + std::to_string(spec_->num_actions) + ")");
  }
  if (needs_reset_) throw std::logic_error(spec_->name + ": Step called before Reset");
  if (obs.size() != size_t(spec_->obs_size())) {
    throw std::invalid_argument(spec_->name + ": observation buffer has the wrong size");
  }
  StepResult r = DoStep(action, obs.data());
  episode_return_ += r.reward;
  ++episode_length_;
  if (!r.terminated && spec_->max_episode_steps > 0 &&
      episode_length_ >= spec_->max_episode_steps) {
    r.truncated = true;
  }
  if (r.terminated || r.truncated) needs_reset_ = true;
  return r;
}

namespace {
std::map<std::string, EnvFactory>& Registry() {
  static std::map<std::string, EnvFactory> registry;
  return registry;
}
std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
}  // namespace

bool RegisterEnv(const std::string& name, EnvFactory factory) {
  std::lock_guard lock(RegistryMutex());
  if (!Registry().emplace(name, std::move(factory)).second) {
    std::fprintf(stderr, "stampede: environment \"%s\" registered twice\n", name.c_str());
    std::abort();
  }
  return true;
}

std::unique_ptr<Env> MakeEnv(const std::string& name, const EnvOptions& options,
                             std::string* error) {
  EnvFactory factory;
  {
    std::lock_guard lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : RegisteredEnvs()) known += (known.empty() ? "" : ", ") + n;
    *error = "unknown environment \"" + name + "\" (registered: " + known + ")";
    return nullptr;
  }
  return factory(options);
}

std::vector<std::string> RegisteredEnvs() {
  std::lock_guard lock(RegistryMutex());
  std::vector<std::string> names;
  for (const auto& [n, f] : Registry()) names.push_back(n);
  return names;
}

}  // namespace stampede::envs
