// The environment API: an Env is one class plus an immutable, shared spec. The base
// class validates actions and keeps the books (episode return, length, time-limit
// truncation); a subclass writes only the dynamics (DoReset, DoStep).
// An Env is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::envs {

// Element types of observations. The numbers are the wire's (wire/unrolls.h DType).
enum class DType : int { kFloat32 = 1, kUint8 = 2 };
int DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

enum class ActionKind : int { kDiscrete = 1, kMultiDiscrete = 2, kBox = 3 };
const char* ActionKindName(ActionKind kind);

struct EnvSpec {
  std::string name;
  std::vector<int> obs_shape;       // rank 1 to 3, e.g. {4}, {10, 5} or {4, 84, 84}
  DType obs_dtype = DType::kFloat32;
  ActionKind action_kind = ActionKind::kDiscrete;
  int num_actions = 0;              // discrete: actions 0 .. num_actions-1
  std::vector<int> action_nvec;     // multi-discrete: one count per component
  std::vector<float> action_low, action_high;  // box: bounds, one per component
  int max_episode_steps = 0;        // time limit; 0 = none
  // Emulator frames per agent step (Atari's frame skip: 4); every frame figure counts these.
  int frames_per_step = 1;

  int obs_size() const;             // elements: product of obs_shape
  int64_t obs_bytes() const;        // obs_size() * DTypeSize(obs_dtype)
  // Empty when the spec is well formed, else what is wrong with it.
  std::string Check() const;
};

struct StepResult {
  float reward = 0.f;
  bool terminated = false;  // the MDP reached a terminal state
  bool truncated = false;   // the episode was cut by the time limit
};

// Constructor arguments of an env: config's env.kwargs, as text. An env reads the keys
// it knows with the Get* helpers and calls RefuseUnknown, so a misspelt key is an error.
struct EnvOptions {
  int max_episode_steps = 0;  // 0: the env's own limit
  std::map<std::string, std::string> kwargs;

  // The value of `key` or `fallback`; throws std::invalid_argument naming the key when
  // the text is not a number of that kind.
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetDouble(const std::string& key, double fallback) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  // Throws std::invalid_argument naming `env` and every key not in `known`.
  void RefuseUnknown(const std::string& env, const std::vector<std::string>& known) const;
};

class Env {
 public:
  explicit Env(std::shared_ptr<const EnvSpec> spec);
  virtual ~Env();
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  const EnvSpec& spec() const { return *spec_; }
  // Starts an episode from `seed`; writes the first observation (spec().obs_bytes()).
  void Reset(uint64_t seed, std::span<std::byte> obs);
  // Applies `action` and writes the next observation. Throws std::out_of_range for an
  // action outside the spec and std::logic_error when called before Reset or after
  // the episode ended.
  StepResult Step(int action, std::span<std::byte> obs);
  // The same for a box action space: one float per component, within the bounds (the
  // actor clips its samples). Throws std::out_of_range for a wrong size, a non-finite
  // value or one outside the bounds.
  StepResult StepBox(std::span<const float> action, std::span<std::byte> obs);

  double episode_return() const { return episode_return_; }
  int episode_length() const { return episode_length_; }

 protected:
  // `obs` has room for one observation of the spec's dtype and shape.
  virtual void DoReset(uint64_t seed, void* obs) = 0;
  // Returns reward and termination; truncation is the base class's business.
  virtual StepResult DoStep(int action, void* obs) = 0;
  // Box action spaces: `action` has spec().action_low.size() floats within the bounds.
  virtual StepResult DoStepBox(const float* action, void* obs);

 private:
  void CheckBuffer(std::span<std::byte> obs) const;
  StepResult Book(StepResult r);  // return, length, time limit
  std::shared_ptr<const EnvSpec> spec_;
  double episode_return_ = 0;
  int episode_length_ = 0;
  bool needs_reset_ = true;
};

// A float observation buffer as the bytes Env::Reset and Env::Step take.
inline std::span<std::byte> AsBytes(std::span<float> obs) { return std::as_writable_bytes(obs); }

// Builds an env; may throw std::invalid_argument (bad kwargs) or std::runtime_error.
using EnvFactory = std::function<std::unique_ptr<Env>(const EnvOptions&)>;

// Registers a factory under `name`; returns true (for static initialisers). A second
// registration of the same name is a programming error and aborts with a message.
bool RegisterEnv(const std::string& name, EnvFactory factory);
// An error when `name` is not registered or its factory refused `options` (the factory's
// exception is converted here: envs throw, callers get a Status).
base::StatusOr<std::unique_ptr<Env>> MakeEnv(const std::string& name, const EnvOptions& options);
std::vector<std::string> RegisteredEnvs();

}  // namespace stampede::envs

#define STAMPEDE_ENV_CONCAT2(a, b) a##b
#define STAMPEDE_ENV_CONCAT(a, b) STAMPEDE_ENV_CONCAT2(a, b)
// One line in an env's own file registers it: STAMPEDE_REGISTER_ENV("Catch", MakeCatch);
#define STAMPEDE_REGISTER_ENV(name, factory)                                   \
  [[maybe_unused]] static const bool STAMPEDE_ENV_CONCAT(stampede_env_reg_, __LINE__) = \
      ::stampede::envs::RegisterEnv(name, factory)
