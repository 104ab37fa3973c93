// A batch of E environments stepped together: what an actor acts on. Built-in and
// plug-in envs are looped over in C++ (LoopVectorEnv); a gymnasium env is one Python
// vector env, so Python is crossed once per batch step, not once per env step.
// A VectorEnv is used by one thread at a time. Failures (a plug-in's error, a Python
// exception) are thrown as std::runtime_error with a message that names the env.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"

namespace stampede::envs {

// Where one step's results go; every pointer has room for E rows.
struct VectorStep {
  std::byte* obs = nullptr;        // [E, obs_bytes]: next observations; where an episode
                                   // ended, the next episode's first (if already reset)
  float* rewards = nullptr;        // [E]
  uint8_t* terminated = nullptr;   // [E]
  uint8_t* truncated = nullptr;    // [E]
  // [E]: 0 where the step was only an automatic reset (gymnasium's NEXT_STEP
  // autoreset: the action was ignored, there is no transition to learn from).
  uint8_t* valid = nullptr;
  std::byte* final_obs = nullptr;  // [E, obs_bytes]: the last observation where an episode ended
};

class VectorEnv {
 public:
  VectorEnv(EnvSpec spec, int num_envs) : spec_(std::move(spec)), num_envs_(num_envs) {}
  virtual ~VectorEnv() = default;
  VectorEnv(const VectorEnv&) = delete;
  VectorEnv& operator=(const VectorEnv&) = delete;

  const EnvSpec& spec() const { return spec_; }
  int num_envs() const { return num_envs_; }
  // Starts every env (seeds derived from `seed`); writes E first observations.
  virtual void Reset(uint64_t seed, std::byte* obs) = 0;
  // Steps every env with actions [E, K] (discrete: K = 1; multi-discrete: K components).
  virtual void Step(const int32_t* actions, const VectorStep& out) = 0;
  // Steps every env with box actions [E, D], within the spec's bounds.
  virtual void StepBox(const float* actions, const VectorStep& out);

 private:
  EnvSpec spec_;
  int num_envs_;
};

// E C++ envs (built-in or plug-in) stepped one after another; an env whose episode
// ended is reset at once (its next episode's seed derived from the reset seed, the env
// index and its episode count), so `valid` is always 1.
class LoopVectorEnv : public VectorEnv {
 public:
  explicit LoopVectorEnv(std::vector<std::unique_ptr<Env>> envs);
  void Reset(uint64_t seed, std::byte* obs) override;
  void Step(const int32_t* actions, const VectorStep& out) override;
  void StepBox(const float* actions, const VectorStep& out) override;

 private:
  template <class F>
  void StepEach(const VectorStep& out, F&& step_one);
  uint64_t NextSeed(int e);
  std::vector<std::unique_ptr<Env>> envs_;
  std::vector<uint64_t> episodes_started_;
  uint64_t seed_ = 0;
  bool started_ = false;
};

// Where an env comes from: config's env section, in envs' own terms.
struct EnvSource {
  enum class Kind { kBuiltin, kPlugin, kGym };
  Kind kind = Kind::kBuiltin;
  std::string name;                      // built-in name, or the env's name inside a plug-in
  std::string plugin_path;               // kPlugin: the shared library
  std::string gym_id;                    // kGym: a registered gymnasium id
  std::vector<std::string> gym_modules;  // kGym: imported first (third-party registrations)
  std::string gym_vectorization;         // kGym: "" (the env's own vector env if it has one), "sync"
  bool gym_channels_first = false;       // kGym: [H, W, C] observations become [C, H, W]
  std::string python_venv;               // kGym: venv whose site-packages Python uses
  EnvOptions options;
  // "CartPole-v1", "plug-in libfoo.so (env Foo)", "gymnasium Acrobot-v1".
  std::string Describe() const;
};

// Builds E envs from `source` as one VectorEnv, or an error naming the env and the problem
// (unknown name, missing file or symbol, ABI mismatch, bad kwargs, Python exception with
// its traceback, unsupported space).
base::StatusOr<std::unique_ptr<VectorEnv>> MakeVectorEnv(const EnvSource& source, int num_envs);

// Only the spec (one env, created and dropped): what `stampede spec` prints.
base::StatusOr<EnvSpec> ResolveSpec(const EnvSource& source);

}  // namespace stampede::envs
