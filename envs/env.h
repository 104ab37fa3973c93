// The environment API: an Env is one class plus an immutable, shared spec. The base
// class validates actions and keeps the books (episode return, length, time-limit
// truncation); a subclass writes only the dynamics (DoReset, DoStep).
// An Env is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace stampede::envs {

struct EnvSpec {
  std::string name;
  std::vector<int> obs_shape;  // e.g. {4} or {10, 5}
  int num_actions = 0;         // discrete actions 0 .. num_actions-1
  int max_episode_steps = 0;   // time limit; 0 = none
  int obs_size() const;        // product of obs_shape
};

struct StepResult {
  float reward = 0.f;
  bool terminated = false;  // the MDP reached a terminal state
  bool truncated = false;   // the episode was cut by the time limit
};

struct EnvOptions {
  int max_episode_steps = 0;  // 0: the env's own limit
};

class Env {
 public:
  explicit Env(std::shared_ptr<const EnvSpec> spec);
  virtual ~Env();
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  const EnvSpec& spec() const { return *spec_; }
  // Starts an episode from `seed`; writes the first observation (spec().obs_size() floats).
  void Reset(uint64_t seed, std::span<float> obs);
  // Applies `action` and writes the next observation. Throws std::out_of_range for an
  // action outside the spec and std::logic_error when called before Reset or after
  // the episode ended.
  StepResult Step(int action, std::span<float> obs);

  double episode_return() const { return episode_return_; }
  int episode_length() const { return episode_length_; }

 protected:
  virtual void DoReset(uint64_t seed, float* obs) = 0;
  // Returns reward and termination; truncation is the base class's business.
  virtual StepResult DoStep(int action, float* obs) = 0;

 private:
  std::shared_ptr<const EnvSpec> spec_;
  double episode_return_ = 0;
  int episode_length_ = 0;
  bool needs_reset_ = true;
};

using EnvFactory = std::function<std::unique_ptr<Env>(const EnvOptions&)>;

// Registers a factory under `name`; returns true (for static initialisers). A second
// registration of the same name is a programming error and aborts with a message.
bool RegisterEnv(const std::string& name, EnvFactory factory);
// nullptr and `error` set when `name` is not registered.
std::unique_ptr<Env> MakeEnv(const std::string& name, const EnvOptions& options,
                             std::string* error);
std::vector<std::string> RegisteredEnvs();

}  // namespace stampede::envs

#define STAMPEDE_ENV_CONCAT2(a, b) a##b
#define STAMPEDE_ENV_CONCAT(a, b) STAMPEDE_ENV_CONCAT2(a, b)
// One line in an env's own file registers it: STAMPEDE_REGISTER_ENV("Catch", MakeCatch);
#define STAMPEDE_REGISTER_ENV(name, factory)                                   \
  [[maybe_unused]] static const bool STAMPEDE_ENV_CONCAT(stampede_env_reg_, __LINE__) = \
      ::stampede::envs::RegisterEnv(name, factory)
