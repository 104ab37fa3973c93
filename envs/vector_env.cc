#include "envs/vector_env.h"

#include <cstring>
#include <stdexcept>

#include "envs/plugin_env.h"
#include "envs/python_env.h"
#include "envs/rng.h"

namespace stampede::envs {

LoopVectorEnv::LoopVectorEnv(std::vector<std::unique_ptr<Env>> envs)
    : VectorEnv(envs.at(0)->spec(), int(envs.size())), envs_(std::move(envs)) {
  episodes_started_.assign(envs_.size(), 0);
}

uint64_t LoopVectorEnv::NextSeed(int e) {
  return SplitMix(seed_ ^ SplitMix(uint64_t(e)) ^ SplitMix(episodes_started_[e]++ + 0x5151));
}

void LoopVectorEnv::Reset(uint64_t seed, std::byte* obs) {
  seed_ = seed;
  const size_t bytes = size_t(spec().obs_bytes());
  std::fill(episodes_started_.begin(), episodes_started_.end(), 0);
  for (int e = 0; e < num_envs(); ++e) envs_[e]->Reset(NextSeed(e), {obs + e * bytes, bytes});
  started_ = true;
}

void VectorEnv::StepBox(const float*, const VectorStep&) {
  throw std::logic_error(spec_.name + ": box actions for an env whose action space is " +
                         ActionKindName(spec_.action_kind));
}

void LoopVectorEnv::Step(const int32_t* actions, const VectorStep& out) {
  if (spec().action_kind != ActionKind::kDiscrete) {
    throw std::logic_error(spec().name + ": C++ envs take discrete or box actions, not " +
                           ActionKindName(spec().action_kind));
  }
  StepEach(out, [&](int e, std::span<std::byte> row) { return envs_[e]->Step(actions[e], row); });
}

void LoopVectorEnv::StepBox(const float* actions, const VectorStep& out) {
  const size_t D = spec().action_low.size();
  StepEach(out, [&](int e, std::span<std::byte> row) {
    return envs_[e]->StepBox({actions + e * D, D}, row);
  });
}

template <class F>
void LoopVectorEnv::StepEach(const VectorStep& out, F&& step_one) {
  if (!started_) throw std::logic_error(spec().name + ": Step before Reset");
  const size_t bytes = size_t(spec().obs_bytes());
  for (int e = 0; e < num_envs(); ++e) {
    std::span<std::byte> row(out.obs + e * bytes, bytes);
    const StepResult r = step_one(e, row);
    out.rewards[e] = r.reward;
    out.terminated[e] = r.terminated;
    out.truncated[e] = r.truncated;
    out.valid[e] = 1;
    if (r.terminated || r.truncated) {
      std::memcpy(out.final_obs + e * bytes, row.data(), bytes);
      envs_[e]->Reset(NextSeed(e), row);
    }
  }
}

std::string EnvSource::Describe() const {
  switch (kind) {
    case Kind::kBuiltin: return name;
    case Kind::kPlugin: return "plug-in " + plugin_path + " (env " + name + ")";
    case Kind::kGym: return "gymnasium " + gym_id;
  }
  return name;
}

base::StatusOr<std::unique_ptr<VectorEnv>> MakeVectorEnv(const EnvSource& source, int num_envs) {
  if (num_envs <= 0) {
    return base::InvalidArgument(source.Describe() + ": " + std::to_string(num_envs) + " envs requested");
  }
  if (source.kind == EnvSource::Kind::kGym) return MakePythonVectorEnv(source, num_envs);
  std::vector<std::unique_ptr<Env>> envs;
  for (int e = 0; e < num_envs; ++e) {
    base::StatusOr<std::unique_ptr<Env>> env = source.kind == EnvSource::Kind::kPlugin
                                                   ? MakePluginEnv(source.plugin_path, source.name, source.options)
                                                   : MakeEnv(source.name, source.options);
    if (!env.ok()) {
      if (source.kind != EnvSource::Kind::kBuiltin) return env.status();
      return base::InvalidArgument(source.Describe() + ": " + env.status().message());
    }
    envs.push_back(std::move(env).value());
  }
  if (std::string bad = envs[0]->spec().Check(); !bad.empty()) {
    return base::InvalidArgument(source.Describe() + ": bad spec: " + bad);
  }
  return std::make_unique<LoopVectorEnv>(std::move(envs));
}

base::StatusOr<EnvSpec> ResolveSpec(const EnvSource& source) {
  ASSIGN_OR_RETURN(auto env, MakeVectorEnv(source, 1));
  return env->spec();
}

}  // namespace stampede::envs
