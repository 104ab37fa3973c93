// Loading, overriding and checking the one Stampede config (config/config.proto).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "config/config.pb.h"
#include "wire/unrolls.h"


namespace stampede {

// A parsed config plus where each field came from, so that errors found after
// parsing (ranges, unknown env names) can still name file:line:col.
class LoadedConfig {
 public:
  LoadedConfig();
  ~LoadedConfig();
  LoadedConfig(LoadedConfig&&) noexcept;
  LoadedConfig& operator=(LoadedConfig&&) noexcept;

  config::Config config;
  std::string source;  // the file it was read from

  // "file:line:col" of the field at a dotted path ("learner.batch_size"), "--set" if a
  // command-line override set it last, or the file name if it was left at its default.
  [[nodiscard]] std::string Where(std::string_view path) const;

 private:
  friend base::Status LoadConfig(const std::string&, const std::vector<std::string>&, LoadedConfig*);
  struct Locations;
  std::unique_ptr<Locations> locations_;
  std::set<std::string> overridden_;
};

// A (choices) string field read as its enum: ChoiceOf<config::UpdateMode>(lc.update_mode())
// == config::UpdateMode::allreduce. A checked config holds a declared name or the field's
// default; an empty default reads as the enum's first value.
template <class Names>
typename Names::Name ChoiceOf(const std::string& name) {
  typename Names::Name v = static_cast<typename Names::Name>(Names::Name_descriptor()->value(0)->number());
  Names::Name_Parse(name, &v);
  return v;
}
// The two read most often.
inline config::UpdateMode::Name UpdateModeOf(const config::Config& cfg) {
  return ChoiceOf<config::UpdateMode>(cfg.learner().update_mode());
}
inline config::Inference::Name InferenceOf(const config::Config& cfg) {
  return ChoiceOf<config::Inference>(cfg.actors().inference());
}

// Reads `path` (protobuf text format), applies `overrides` ("a.b.c=value", in order)
// and checks every range. Fails (kInvalidArgument) with a message that names
// file:line:col (or the override), the field path and what was expected.
base::Status LoadConfig(const std::string& path, const std::vector<std::string>& overrides, LoadedConfig* out);

// Parses config text already in memory (`name` is used in messages); no checks.
base::Status ParseConfigText(const std::string& text, const std::string& name, config::Config* out);

// Applies one "a.b.c=value" override; fails on an unknown path or a bad value.
base::Status ApplyOverride(const std::string& assignment, config::Config* cfg, std::string* path_out = nullptr);

// The value of the numeric (not repeated) field at `path` ("learner.optimizer.learning_rate"),
// its default where unset; an error naming the path for another kind of field or none.
base::StatusOr<double> NumberAt(const config::Config& cfg, const std::string& path);

// Checks ranges and cross-field rules; messages use `where(path)` for locations.
base::Status ValidateConfig(const LoadedConfig& loaded);

// The config as protobuf text (what `stampede run` writes to RUN_DIR/config.textproto).
std::string ConfigToText(const config::Config& cfg);

// The config as the run takes it, every field written out: presets (env.atari) applied by
// LoadConfig already, each unset field at its default, and the fields whose unset meaning
// is not their default (learner.popart, net.policy_init_scale, Adam's epsilon) as the run
// resolves them (`stampede config`).
std::string ResolvedConfigText(const config::Config& cfg);

// The trajectory shape from the config's resolved env spec (env.resolved_spec, which
// `stampede run` fills in). Fails with a message that says how to get one when the
// config has none, or when the spec's action space has no network head yet.
base::Status ResolvedStepShape(const config::Config& cfg, wire::StepShape* out);

// The endpoint a role binds for `endpoint` (its own, as the config names it): the same,
// or with cluster.bind_any "tcp://0.0.0.0:PORT" (on Kubernetes an endpoint names a DNS
// name that resolves to the pod, which ZeroMQ cannot bind).
std::string BindEndpoint(const config::Config& cfg, const std::string& endpoint);

// Learner i's trajectory endpoint (cluster.learners[i], or cluster.learner for learner 0).
std::string LearnerEndpoint(const config::Config& cfg, int learner);
// actors.inference "central": learner `learner`'s inference server endpoint (empty if none).
std::string InferenceEndpoint(const config::Config& cfg, int learner);
// The learner actor `actor` sends to (actor % learner.num_learners).
int LearnerOfActor(const config::Config& cfg, int actor);
// learner.popart as the run uses it: the field where the config sets it, else on for the
// CPU learner in relay mode (where PopArt runs).
bool PopArtOn(const config::Config& cfg);
// net.policy_init_scale as the run uses it: the field where the config sets it, else 1 for
// net.init "torch" (PyTorch's own head) and 0.01 otherwise (CleanRL's policy gain).
double PolicyInitScale(const config::Config& cfg);
// learner.optimizer.epsilon as the run uses it: the field where the config sets it, else
// 1e-8 for Adam (PyTorch's) and the field's default for RMSProp.
double OptimizerEpsilon(const config::OptimizerConfig& oc);
// True where PS shards own the optimizer (learner.update_mode "sync" or "async").
bool ShardsOwnOptimizer(const config::Config& cfg);

// Hidden sizes with the default ([64, 64]) applied.
std::vector<int> HiddenSizes(const config::Config& cfg);

}  // namespace stampede
