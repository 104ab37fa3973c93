#include "actors/env_source.h"

#include <google/protobuf/util/message_differencer.h>

#include "config/config.h"

namespace stampede::actors {

envs::EnvSource EnvSourceFromConfig(const config::Config& cfg) {
  const config::EnvConfig& e = cfg.env();
  envs::EnvSource s;
  s.name = e.name();
  if (!e.plugin().empty()) {
    s.kind = envs::EnvSource::Kind::kPlugin;
    s.plugin_path = e.plugin();
  } else if (!e.gym_id().empty()) {
    s.kind = envs::EnvSource::Kind::kGym;
    s.gym_id = e.gym_id();
    s.gym_modules.assign(e.gym_module().begin(), e.gym_module().end());
    s.gym_vectorization = e.gym_vectorization();
    s.gym_channels_first = e.gym_channels_first();
    s.python_venv = e.python_venv();
  }
  s.options.max_episode_steps = e.max_episode_steps();
  for (const auto& [k, v] : e.kwargs()) s.options.kwargs[k] = v;
  return s;
}

config::EnvSpec SpecToProto(const envs::EnvSpec& spec) {
  config::EnvSpec p;
  p.set_name(spec.name);
  for (int d : spec.obs_shape) p.add_obs_shape(d);
  p.set_obs_dtype(spec.obs_dtype == envs::DType::kUint8 ? config::UINT8 : config::FLOAT32);
  p.set_action_kind(config::ActionKind(int(spec.action_kind)));
  p.set_num_actions(spec.num_actions);
  for (int k : spec.action_nvec) p.add_action_nvec(k);
  for (float x : spec.action_low) p.add_action_low(x);
  for (float x : spec.action_high) p.add_action_high(x);
  p.set_max_episode_steps(spec.max_episode_steps);
  p.set_frames_per_step(spec.frames_per_step);
  return p;
}

std::string SpecMismatch(const config::EnvSpec& resolved, const config::EnvSpec& actual) {
  google::protobuf::util::MessageDifferencer diff;
  std::string report;
  diff.ReportDifferencesToString(&report);
  if (diff.Compare(resolved, actual)) return "";
  return "the env's spec differs from env.resolved_spec: " + report;
}

}  // namespace stampede::actors
