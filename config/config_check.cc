// ValidateConfig: every range, name and cross-field rule a config must satisfy, each
// failure naming the field and where the config set it (LoadedConfig::Where).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_detail.h"
#include "config/tasks.h"

namespace stampede {

using config_detail::FormatNumber;


namespace {
// The tasks of a multi-task config (config/tasks.h assigns actors to them).
base::Status ValidateTasks(const LoadedConfig& loaded) {
  const auto& c = loaded.config;
  if (c.tasks().empty()) return base::OkStatus();
  config::EnvConfig env = c.env();
  env.clear_resolved_spec();
  if (env.ByteSizeLong() > 0) {
    return base::InvalidArgument(loaded.Where("env") + ": env and tasks are both set: a multi-task config gives each task's env "
             "inside tasks { ... } (env alone is the one-task shorthand)");
  }
  std::set<std::string> names;
  int64_t fixed = 0, by_weight = 0;
  for (int i = 0; i < c.tasks_size(); ++i) {
    const auto& t = c.tasks(i);
    const std::string at = "tasks[" + std::to_string(i) + "]";
    auto fail = [&](const std::string& field, const std::string& what) {
      return base::InvalidArgument(loaded.Where(at + "." + field) + ": " + at + "." + field + " (task \"" + t.name() + "\"): " + what);
    };
    if (t.name().empty() || t.name().find_first_not_of(
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos) {
      return fail("name", "expected a non-empty name of letters, digits, '_', '.' or '-'");
    }
    if (!names.insert(t.name()).second) return fail("name", "another task has this name");
    if (!t.has_env()) return fail("env", "the task has no env");
    if (!t.env().plugin().empty() && !t.env().gym_id().empty()) {
      return fail("env", "both plugin and gym_id are set, expected one");
    }
    if (t.actors() < 0 || t.actors() > 1024) return fail("actors", std::to_string(t.actors()) + " is out of range, expected [0, 1024]");
    if (!(std::isfinite(t.weight()) && t.weight() > 0)) return fail("weight", FormatNumber(t.weight()) + " is not a positive number");
    if (!std::isfinite(t.random_score()) || !std::isfinite(t.reference_score()) || !std::isfinite(t.target_return())) {
      return fail("reference_score", "random_score, reference_score and target_return must be finite");
    }
    if (t.has_reference_score() && t.reference_score() == t.random_score()) {
      return fail("reference_score", "equals random_score, so scores cannot be normalised");
    }
    if (t.actors() > 0) {
      fixed += t.actors();
    } else {
      ++by_weight;
    }
  }
  const int64_t actors = c.actors().num_actors();
  if (fixed + by_weight > actors) {
    return base::InvalidArgument(loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             " actors cannot run the " + std::to_string(c.tasks_size()) + " tasks (" + std::to_string(fixed) +
             " named in tasks.actors, and at least one each for the " + std::to_string(by_weight) +
             " tasks shared by weight)");
  }
  if (by_weight == 0 && fixed != actors) {
    return base::InvalidArgument(loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             ", but the tasks' actors add up to " + std::to_string(fixed) + " (set them equal, or leave a task's actors at 0)");
  }
  return base::OkStatus();
}
}  // namespace

// Population-based training: the members' own starts, the evolving fields and what the
// members' fleets must offer (a checkpoint a leader's copy can be made from).
base::Status ValidatePbt(const LoadedConfig& loaded) {
  const auto& c = loaded.config;
  const auto& p = c.pbt();
  if (p.population() == 0) return base::OkStatus();
  auto bad = [&](const std::string& path, const std::string& what) {
    return base::InvalidArgument(loaded.Where(path) + ": " + path + ": " + what);
  };
  if (p.population() < 2) return bad("pbt.population", "1 member has no one to exploit, expected 0 (off) or at least 2");
  if (p.members_size() > p.population()) {
    return bad("pbt.members", std::to_string(p.members_size()) + " entries for a population of " +
                                  std::to_string(p.population()));
  }
  for (int m = 0; m < p.members_size(); ++m) {
    for (const std::string& set : p.members(m).set()) {
      config::Config probe = c;
      std::string path;
      if (const base::Status st = ApplyOverride(set, &probe, &path); !st.ok()) {
        return bad("pbt.members", "members[" + std::to_string(m) + "]: " + st.message());
      }
      if (path.rfind("pbt", 0) == 0 || path == "run_dir" || path == "seed") {
        return bad("pbt.members", "members[" + std::to_string(m) + "]: " + path + " is the population's to set");
      }
    }
  }
  if (p.evolve_size() == 0) return bad("pbt.evolve", "no field to evolve");
  for (int i = 0; i < p.evolve_size(); ++i) {
    const auto& f = p.evolve(i);
    const std::string at = "evolve[" + std::to_string(i) + "] (" + f.path() + "): ";
    const base::StatusOr<double> v = NumberAt(c, f.path());
    if (!v.ok()) return bad("pbt.evolve", at + v.status().message());
    if (f.path().rfind("pbt.", 0) == 0 || f.path() == "seed") return bad("pbt.evolve", at + "not a hyperparameter");
    if (!(f.low() < f.high())) {
      return bad("pbt.evolve", at + "low " + FormatNumber(f.low()) + " is not below high " + FormatNumber(f.high()));
    }
    const double lo = f.complement() ? 1 - f.high() : f.low();
    if (f.log_scale() && !(lo > 0)) {
      return bad("pbt.evolve", at + "log_scale draws need " + std::string(f.complement() ? "high below 1" : "low above 0"));
    }
  }
  if (ChoiceOf<config::UpdateMode>(c.learner().update_mode()) != config::UpdateMode::relay) {
    return bad("learner.update_mode", "a population's members copy a leader's learner checkpoint, which \"relay\" "
                                      "writes (sync and async keep the optimizer's state in the shards' checkpoints)");
  }
  const auto objective = ChoiceOf<config::PbtObjective>(p.objective());
  if (objective == config::PbtObjective::evaluation && c.evaluation().interval_frames() == 0) {
    return bad("pbt.objective", "\"evaluation\" needs evaluation rounds (set evaluation.interval_frames)");
  }
  if ((objective == config::PbtObjective::normalised_mean || objective == config::PbtObjective::normalised_median) &&
      c.tasks_size() == 0) {
    return bad("pbt.objective", "\"" + p.objective() + "\" ranks a suite's tasks; this config has no tasks");
  }
  if (c.cluster().launcher() == "slurm") {
    return bad("cluster.launcher", "a population runs its members on this machine or inside one allocation "
                                   "(stampede launch slurm); a member's fleet cannot submit job steps of its own");
  }
  return base::OkStatus();
}

base::Status ValidateConfig(const LoadedConfig& loaded) {
  if (const std::optional<config_detail::OutOfRange> bad = config_detail::FirstOutOfRange(loaded.config, "")) {
    return base::InvalidArgument(loaded.Where(bad->path) + ": " + bad->path + ": " + bad->what);
  }
  const auto& c = loaded.config;
  if (c.net().hidden_sizes_size() > 64) {
    return base::InvalidArgument(loaded.Where("net.hidden_sizes") + ": net.hidden_sizes: " +
             std::to_string(c.net().hidden_sizes_size()) + " layers, expected at most 64");
  }
  const std::string torso = c.net().torso();
  const int num_layers = c.net().layers_size();
  if (num_layers > 0 && c.net().has_torso()) {
    return base::InvalidArgument(loaded.Where("net.torso") + ": net.torso \"" + torso + "\" and net.layers both describe the torso; "
             "give one (net.layers: a torso of your own)");
  }
  if (num_layers > 64) {
    return base::InvalidArgument(loaded.Where("net.layers") + ": net.layers: " + std::to_string(num_layers) + " layers, expected at most 64");
  }
  for (int i = 0; i < num_layers; ++i) {
    const config::LayerConfig& l = c.net().layers(i);
    const std::string at = "net.layers[" + std::to_string(i) + "]";
    auto bad = [&](const std::string& what) {
      return base::InvalidArgument(loaded.Where("net.layers") + ": " + at + ": " + what);
    };
    // Each kind's ranges are declared in config.proto (checked above); these are the rules
    // between fields.
    switch (l.kind_case()) {
      case config::LayerConfig::KIND_NOT_SET:
        return bad("no layer kind; expected one of conv, max_pool, residual, dense, relu, tanh");
      case config::LayerConfig::kMaxPool:
        if (l.max_pool().padding() * 2 > l.max_pool().kernel()) {
          return bad("max_pool: padding " + std::to_string(l.max_pool().padding()) +
                     " is more than half the kernel (windows with no input)");
        }
        break;
      case config::LayerConfig::kConv:
      case config::LayerConfig::kDense:
      case config::LayerConfig::kResidual:
      case config::LayerConfig::kRelu:
      case config::LayerConfig::kTanh:
        break;
    }
  }
  const auto& oc = c.learner().optimizer();
  if (oc.kind() == "adam" && (oc.beta1() >= 1 || oc.beta2() >= 1)) {
    return base::InvalidArgument(loaded.Where(oc.beta1() >= 1 ? "learner.optimizer.beta1" : "learner.optimizer.beta2") +
             ": learner.optimizer.beta1 and beta2 must be below 1 (Adam's bias correction divides by 1 - beta^t)");
  }
  if (oc.has_linear_decay() && !oc.linear_decay() && oc.has_schedule() && oc.schedule() != "constant") {
    return base::InvalidArgument(loaded.Where("learner.optimizer.linear_decay") + ": learner.optimizer.linear_decay: false asks for a "
             "constant rate, but learner.optimizer.schedule is \"" + oc.schedule() + "\" (set only one)");
  }
  if (c.net().has_policy_init_scale() && !(c.net().policy_init_scale() > 0)) {
    return base::InvalidArgument(loaded.Where("net.policy_init_scale") + ": net.policy_init_scale: " +
             FormatNumber(c.net().policy_init_scale()) + " is out of range, expected a number in (0, 100]");
  }
  if (c.net().center_frames()) {
    // The first layer, or the preset's declaration, says whether the torso takes images.
    bool images = false;
    if (num_layers > 0) {
      const auto k = c.net().layers(0).kind_case();
      images = k == config::LayerConfig::kConv || k == config::LayerConfig::kMaxPool || k == config::LayerConfig::kResidual;
    } else {
      images = config::TorsoPreset::Name_descriptor()
                   ->FindValueByNumber(ChoiceOf<config::TorsoPreset>(torso))
                   ->options()
                   .GetExtension(config::images);
    }
    if (!images) {
      return base::InvalidArgument(loaded.Where("net.center_frames") + ": net.center_frames centres image channels, but the torso (" +
               (num_layers > 0 ? std::string("net.layers") : "net.torso \"" + torso + "\"") +
               ") does not take images (use an image torso, or leave center_frames off)");
    }
  }
  const std::string device = c.learner().device();
  if (device != "cpu" && device != "cuda" &&
      !(device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
        device.find_first_not_of("0123456789", 5) == std::string::npos)) {
    return base::InvalidArgument(loaded.Where("learner.device") + ": learner.device: \"" + device +
             "\" is not known, expected \"cpu\", \"cuda:N\" (N a GPU index) or \"cuda\" (learner i on GPU i mod the "
             "GPUs it sees)");
  }
  if (!c.env().plugin().empty() && !c.env().gym_id().empty()) {
    return base::InvalidArgument(loaded.Where("env.gym_id") + ": env: both plugin and gym_id are set, expected one "
             "(a plug-in library, a gymnasium id, or neither for a built-in env)");
  }
  if (c.learner().queue_capacity() < c.learner().batch_size()) {
    return base::InvalidArgument(loaded.Where("learner.queue_capacity") + ": learner.queue_capacity: " +
             std::to_string(c.learner().queue_capacity()) +
             " unrolls cannot hold one batch, expected at least learner.batch_size (" +
             std::to_string(c.learner().batch_size()) + ")");
  }
  RETURN_IF_ERROR(ValidateTasks(loaded));
  RETURN_IF_ERROR(ValidatePbt(loaded));
  if (c.cluster().inference_size() > 0 && c.cluster().inference_size() != c.learner().num_learners()) {
    return base::InvalidArgument(loaded.Where("cluster.inference") + ": cluster.inference has " +
             std::to_string(c.cluster().inference_size()) + " endpoint(s), but learner.num_learners is " +
             std::to_string(c.learner().num_learners()) + " (one inference server per learner)");
  }
  if (c.cluster().actors_per_node() < 1) {
    return base::InvalidArgument(loaded.Where("cluster.actors_per_node") + ": cluster.actors_per_node: " +
             std::to_string(c.cluster().actors_per_node()) + " is not at least 1");
  }
  if (c.cluster().host().empty() || c.cluster().host().find_first_of(":/ ") != std::string::npos) {
    return base::InvalidArgument(loaded.Where("cluster.host") + ": cluster.host: \"" + c.cluster().host() +
             "\" is not a host name or IPv4 address");
  }
  {
    const auto& lc = c.learner();
    const std::string mode = lc.update_mode();
    const auto update_mode = ChoiceOf<config::UpdateMode>(mode);
    if (update_mode == config::UpdateMode::relay && lc.num_learners() > 1) {
      return base::InvalidArgument(loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners need learner.update_mode \"sync\", \"async\" or \"allreduce\" (in \"relay\" one learner "
               "owns the optimizer)");
    }
    if (c.cluster().allreduce_size() != 0 && c.cluster().allreduce_size() != lc.num_learners()) {
      return base::InvalidArgument(loaded.Where("cluster.allreduce") + ": cluster.allreduce: " + std::to_string(c.cluster().allreduce_size()) +
               " endpoints given, expected one per learner (learner.num_learners = " + std::to_string(lc.num_learners()) + ")");
    }
    if (lc.replicas_to_aggregate() > lc.num_learners()) {
      return base::InvalidArgument(loaded.Where("learner.replicas_to_aggregate") + ": learner.replicas_to_aggregate: " +
               std::to_string(lc.replicas_to_aggregate()) + " is more than learner.num_learners (" +
               std::to_string(lc.num_learners()) + ")");
    }
    if (update_mode != config::UpdateMode::relay && PopArtOn(c)) {
      // The shards apply the steps; PopArt's statistics and head rescaling are a step
      // applied by the learner itself.
      return base::InvalidArgument(loaded.Where("learner.update_mode") + ": learner.update_mode \"" + mode +
               "\" runs without PopArt (learner.popart false)");
    }
    const auto& rc = lc.replay();
    if (rc.fraction() >= 1) {
      return base::InvalidArgument(loaded.Where("learner.replay.fraction") + ": learner.replay.fraction: " + FormatNumber(rc.fraction()) +
               " leaves no fresh unrolls in a batch, expected less than 1 (LASER: 0.875 at most)");
    }
    if (rc.fraction() > 0 && lc.device() != "cpu" &&
        (ChoiceOf<config::Selector>(rc.selector()) == config::Selector::prioritized || rc.importance_exponent() > 0 ||
         rc.trust_region_kl() > 0 || rc.entropy_online_only())) {
      return base::InvalidArgument(loaded.Where("learner.replay") + ": learner.replay: priorities, importance weights, the trust region "
               "and entropy_online_only need the CPU learner's per-unroll loss; on learner.device \"" + lc.device() +
               "\" use selector \"uniform\" or \"fifo\" with entropy_online_only false");
    }
    if (lc.ppo_clip() > 0 && lc.device() != "cpu") {
      return base::InvalidArgument(loaded.Where("learner.ppo_clip") + ": learner.ppo_clip: " + FormatNumber(lc.ppo_clip()) +
               " needs the CPU learner's loss; on learner.device \"" + lc.device() + "\" leave it 0 (V-trace's policy gradient)");
    }
    if (lc.num_learners() > c.actors().num_actors()) {
      return base::InvalidArgument(loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners, but only " + std::to_string(c.actors().num_actors()) +
               " actors to feed them (actor a sends to learner a % num_learners)");
    }
    if (c.cluster().learners_size() != 0 && c.cluster().learners_size() != lc.num_learners()) {
      return base::InvalidArgument(loaded.Where("cluster.learners") + ": cluster.learners: " + std::to_string(c.cluster().learners_size()) +
               " endpoints given, expected one per learner (learner.num_learners = " +
               std::to_string(lc.num_learners()) + ")");
    }
  }
  if (c.cluster().ps_size() != 0 && c.cluster().ps_size() != c.ps().num_shards()) {
    return base::InvalidArgument(loaded.Where("cluster.ps") + ": cluster.ps: " + std::to_string(c.cluster().ps_size()) +
             " endpoints given, expected one per shard (ps.num_shards = " +
             std::to_string(c.ps().num_shards()) + ")");
  }
  return base::OkStatus();
}

}  // namespace stampede
