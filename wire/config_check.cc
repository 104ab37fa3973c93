// ValidateConfig: every range, name and cross-field rule a config must satisfy, each
// failure naming the field and where the config set it (LoadedConfig::Where).
#include "wire/config.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "net/network.h"
#include "wire/config_detail.h"
#include "wire/tasks.h"

namespace stampede {

using config_detail::FormatNumber;


namespace {
// The tasks of a multi-task config (wire/tasks.h assigns actors to them).
bool ValidateTasks(const LoadedConfig& loaded, std::string* error) {
  const auto& c = loaded.config;
  const std::string rule = c.suite().obs_rule();
  if (rule != "pad" && rule != "resize") {
    *error = loaded.Where("suite.obs_rule") + ": suite.obs_rule: \"" + rule +
             "\" is not known, expected \"pad\" or \"resize\"";
    return false;
  }
  if (c.tasks().empty()) return true;
  config::EnvConfig env = c.env();
  env.clear_resolved_spec();
  if (env.ByteSizeLong() > 0) {
    *error = loaded.Where("env") + ": env and tasks are both set: a multi-task config gives each task's env "
             "inside tasks { ... } (env alone is the one-task shorthand)";
    return false;
  }
  std::set<std::string> names;
  int64_t fixed = 0, by_weight = 0;
  for (int i = 0; i < c.tasks_size(); ++i) {
    const auto& t = c.tasks(i);
    const std::string at = "tasks[" + std::to_string(i) + "]";
    auto fail = [&](const std::string& field, const std::string& what) {
      *error = loaded.Where(at + "." + field) + ": " + at + "." + field + " (task \"" + t.name() + "\"): " + what;
      return false;
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
    *error = loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             " actors cannot run the " + std::to_string(c.tasks_size()) + " tasks (" + std::to_string(fixed) +
             " named in tasks.actors, and at least one each for the " + std::to_string(by_weight) +
             " tasks shared by weight)";
    return false;
  }
  if (by_weight == 0 && fixed != actors) {
    *error = loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             ", but the tasks' actors add up to " + std::to_string(fixed) + " (set them equal, or leave a task's actors at 0)";
    return false;
  }
  return true;
}
}  // namespace

bool ValidateConfig(const LoadedConfig& loaded, std::string* error) {
  if (const std::optional<config_detail::OutOfRange> bad = config_detail::FirstOutOfRange(loaded.config, "")) {
    *error = loaded.Where(bad->path) + ": " + bad->path + ": " + bad->what;
    return false;
  }
  const auto& c = loaded.config;
  const std::string act = c.net().activation();
  if (act != "relu" && act != "tanh") {
    *error = loaded.Where("net.activation") + ": net.activation: \"" + act +
             "\" is not known, expected \"relu\" or \"tanh\"";
    return false;
  }
  if (c.net().hidden_sizes_size() > 64) {
    *error = loaded.Where("net.hidden_sizes") + ": net.hidden_sizes: " +
             std::to_string(c.net().hidden_sizes_size()) + " layers, expected at most 64";
    return false;
  }
  const std::string torso = c.net().torso();
  const int num_layers = c.net().layers_size();
  if (num_layers > 0 && c.net().has_torso()) {
    *error = loaded.Where("net.torso") + ": net.torso \"" + torso + "\" and net.layers both describe the torso; "
             "give one (net.layers: a torso of your own)";
    return false;
  }
  if (num_layers == 0 && !net::FindTorsoPreset(torso)) {
    *error = loaded.Where("net.torso") + ": net.torso: \"" + torso + "\" is not known, expected " +
             net::TorsoPresetNames() + " (or a torso of your own in net.layers)";
    return false;
  }
  if (num_layers > 64) {
    *error = loaded.Where("net.layers") + ": net.layers: " + std::to_string(num_layers) + " layers, expected at most 64";
    return false;
  }
  for (int i = 0; i < num_layers; ++i) {
    const config::LayerConfig& l = c.net().layers(i);
    const std::string at = "net.layers[" + std::to_string(i) + "]";
    auto bad = [&](const std::string& what) {
      *error = loaded.Where("net.layers") + ": " + at + ": " + what;
      return false;
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
  if (oc.kind() != "rmsprop" && oc.kind() != "rmsprop_torch" && oc.kind() != "adam") {
    *error = loaded.Where("learner.optimizer.kind") + ": learner.optimizer.kind: \"" + oc.kind() +
             "\" is not known, expected \"rmsprop\", \"rmsprop_torch\" or \"adam\"";
    return false;
  }
  if (oc.kind() == "adam" && (oc.beta1() >= 1 || oc.beta2() >= 1)) {
    *error = loaded.Where(oc.beta1() >= 1 ? "learner.optimizer.beta1" : "learner.optimizer.beta2") +
             ": learner.optimizer.beta1 and beta2 must be below 1 (Adam's bias correction divides by 1 - beta^t)";
    return false;
  }
  if (oc.schedule() != "linear" && oc.schedule() != "cosine" && oc.schedule() != "constant") {
    *error = loaded.Where("learner.optimizer.schedule") + ": learner.optimizer.schedule: \"" + oc.schedule() +
             "\" is not known, expected \"linear\", \"cosine\" or \"constant\"";
    return false;
  }
  if (oc.has_linear_decay() && !oc.linear_decay() && oc.has_schedule() && oc.schedule() != "constant") {
    *error = loaded.Where("learner.optimizer.linear_decay") + ": learner.optimizer.linear_decay: false asks for a "
             "constant rate, but learner.optimizer.schedule is \"" + oc.schedule() + "\" (set only one)";
    return false;
  }
  if (const std::string& init = c.net().init(); init != "glorot" && init != "torch" && init != "orthogonal") {
    *error = loaded.Where("net.init") + ": net.init: \"" + init +
             "\" is not known, expected \"glorot\", \"torch\" or \"orthogonal\"";
    return false;
  }
  if (c.net().has_policy_init_scale() && !(c.net().policy_init_scale() > 0)) {
    *error = loaded.Where("net.policy_init_scale") + ": net.policy_init_scale: " +
             FormatNumber(c.net().policy_init_scale()) + " is out of range, expected a number in (0, 100]";
    return false;
  }
  if (c.net().center_frames()) {
    // The first layer says whether the torso takes images.
    bool images = false;
    const net::TorsoPreset* preset = net::FindTorsoPreset(torso);  // checked above
    if (num_layers > 0) {
      const auto k = c.net().layers(0).kind_case();
      images = k == config::LayerConfig::kConv || k == config::LayerConfig::kMaxPool || k == config::LayerConfig::kResidual;
    } else {
      images = preset->build(net::PresetArgs{}).images();
    }
    if (!images) {
      *error = loaded.Where("net.center_frames") + ": net.center_frames centres image channels, but the torso (" +
               (num_layers > 0 ? std::string("net.layers") : "net.torso \"" + std::string(preset->name) + "\"") +
               ") does not take images (use an image torso, or leave center_frames off)";
      return false;
    }
  }
  const std::string device = c.learner().device();
  if (device != "cpu" && device != "cuda" &&
      !(device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
        device.find_first_not_of("0123456789", 5) == std::string::npos)) {
    *error = loaded.Where("learner.device") + ": learner.device: \"" + device +
             "\" is not known, expected \"cpu\", \"cuda:N\" (N a GPU index) or \"cuda\" (learner i on GPU i mod the "
             "GPUs it sees)";
    return false;
  }
  if (!c.env().plugin().empty() && !c.env().gym_id().empty()) {
    *error = loaded.Where("env.gym_id") + ": env: both plugin and gym_id are set, expected one "
             "(a plug-in library, a gymnasium id, or neither for a built-in env)";
    return false;
  }
  const std::string vec = c.env().gym_vectorization();
  if (vec != "" && vec != "sync") {
    *error = loaded.Where("env.gym_vectorization") + ": env.gym_vectorization: \"" + vec +
             "\" is not known, expected \"\" (the env's own vector env) or \"sync\"";
    return false;
  }
  if (c.learner().queue_capacity() < c.learner().batch_size()) {
    *error = loaded.Where("learner.queue_capacity") + ": learner.queue_capacity: " +
             std::to_string(c.learner().queue_capacity()) +
             " unrolls cannot hold one batch, expected at least learner.batch_size (" +
             std::to_string(c.learner().batch_size()) + ")";
    return false;
  }
  if (!ValidateTasks(loaded, error)) return false;
  const std::string placement = c.ps().placement();
  if (placement != "greedy" && placement != "round_robin" && placement != "contiguous") {
    *error = loaded.Where("ps.placement") + ": ps.placement: \"" + placement +
             "\" is not known, expected \"greedy\", \"round_robin\" or \"contiguous\"";
    return false;
  }
  if (const std::string b = c.net().conv_backend(); b != "auto" && b != "onednn" && b != "eigen") {
    *error = loaded.Where("net.conv_backend") + ": net.conv_backend: \"" + b +
             "\" is not known, expected \"auto\", \"onednn\" or \"eigen\"";
    return false;
  }
  if (const std::string b = c.net().gemm_backend();
      b != "auto" && b != "eigen" && b != "openblas" && b != "blis" && b != "onednn") {
    *error = loaded.Where("net.gemm_backend") + ": net.gemm_backend: \"" + b +
             "\" is not known, expected \"auto\", \"eigen\", \"openblas\", \"blis\" or \"onednn\"";
    return false;
  }
  if (const std::string mode = c.actors().inference(); mode != "local" && mode != "central") {
    *error = loaded.Where("actors.inference") + ": actors.inference: \"" + mode +
             "\" is not known, expected \"local\" or \"central\"";
    return false;
  }
  if (c.cluster().inference_size() > 0 && c.cluster().inference_size() != c.learner().num_learners()) {
    *error = loaded.Where("cluster.inference") + ": cluster.inference has " +
             std::to_string(c.cluster().inference_size()) + " endpoint(s), but learner.num_learners is " +
             std::to_string(c.learner().num_learners()) + " (one inference server per learner)";
    return false;
  }
  if (const std::string launcher = c.cluster().launcher(); launcher != "local" && launcher != "slurm") {
    *error = loaded.Where("cluster.launcher") + ": cluster.launcher: \"" + launcher +
             "\" is not known, expected \"local\" or \"slurm\"";
    return false;
  }
  if (const std::string t = c.cluster().local_transport(); t != "ipc" && t != "tcp") {
    *error = loaded.Where("cluster.local_transport") + ": cluster.local_transport: \"" + t +
             "\" is not known, expected \"ipc\" or \"tcp\"";
    return false;
  }
  if (c.cluster().actors_per_node() < 1) {
    *error = loaded.Where("cluster.actors_per_node") + ": cluster.actors_per_node: " +
             std::to_string(c.cluster().actors_per_node()) + " is not at least 1";
    return false;
  }
  if (c.cluster().host().empty() || c.cluster().host().find_first_of(":/ ") != std::string::npos) {
    *error = loaded.Where("cluster.host") + ": cluster.host: \"" + c.cluster().host() +
             "\" is not a host name or IPv4 address";
    return false;
  }
  {
    const auto& lc = c.learner();
    const std::string mode = lc.update_mode();
    if (mode != "relay" && mode != "sync" && mode != "async" && mode != "allreduce") {
      *error = loaded.Where("learner.update_mode") + ": learner.update_mode: \"" + mode +
               "\" is not known, expected \"relay\", \"sync\", \"async\" or \"allreduce\"";
      return false;
    }
    if (mode == "relay" && lc.num_learners() > 1) {
      *error = loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners need learner.update_mode \"sync\", \"async\" or \"allreduce\" (in \"relay\" one learner "
               "owns the optimizer)";
      return false;
    }
    if (c.cluster().allreduce_size() != 0 && c.cluster().allreduce_size() != lc.num_learners()) {
      *error = loaded.Where("cluster.allreduce") + ": cluster.allreduce: " + std::to_string(c.cluster().allreduce_size()) +
               " endpoints given, expected one per learner (learner.num_learners = " + std::to_string(lc.num_learners()) + ")";
      return false;
    }
    if (lc.replicas_to_aggregate() > lc.num_learners()) {
      *error = loaded.Where("learner.replicas_to_aggregate") + ": learner.replicas_to_aggregate: " +
               std::to_string(lc.replicas_to_aggregate()) + " is more than learner.num_learners (" +
               std::to_string(lc.num_learners()) + ")";
      return false;
    }
    if (mode != "relay" && PopArtOn(c)) {
      // The shards apply the steps; PopArt's statistics and head rescaling are a step
      // applied by the learner itself.
      *error = loaded.Where("learner.update_mode") + ": learner.update_mode \"" + mode +
               "\" runs without PopArt (learner.popart false)";
      return false;
    }
    const auto& rc = lc.replay();
    if (rc.fraction() >= 1) {
      *error = loaded.Where("learner.replay.fraction") + ": learner.replay.fraction: " + FormatNumber(rc.fraction()) +
               " leaves no fresh unrolls in a batch, expected less than 1 (LASER: 0.875 at most)";
      return false;
    }
    const std::string sel = rc.selector();
    if (sel != "uniform" && sel != "fifo" && sel != "prioritized") {
      *error = loaded.Where("learner.replay.selector") + ": learner.replay.selector: \"" + sel +
               "\" is not known, expected \"uniform\", \"fifo\" or \"prioritized\"";
      return false;
    }
    if (rc.fraction() > 0 && lc.device() != "cpu" &&
        (sel == "prioritized" || rc.importance_exponent() > 0 || rc.trust_region_kl() > 0 ||
         rc.entropy_online_only())) {
      *error = loaded.Where("learner.replay") + ": learner.replay: priorities, importance weights, the trust region "
               "and entropy_online_only need the CPU learner's per-unroll loss; on learner.device \"" + lc.device() +
               "\" use selector \"uniform\" or \"fifo\" with entropy_online_only false";
      return false;
    }
    if (lc.num_learners() > c.actors().num_actors()) {
      *error = loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners, but only " + std::to_string(c.actors().num_actors()) +
               " actors to feed them (actor a sends to learner a % num_learners)";
      return false;
    }
    if (c.cluster().learners_size() != 0 && c.cluster().learners_size() != lc.num_learners()) {
      *error = loaded.Where("cluster.learners") + ": cluster.learners: " + std::to_string(c.cluster().learners_size()) +
               " endpoints given, expected one per learner (learner.num_learners = " +
               std::to_string(lc.num_learners()) + ")";
      return false;
    }
  }
  if (c.cluster().ps_size() != 0 && c.cluster().ps_size() != c.ps().num_shards()) {
    *error = loaded.Where("cluster.ps") + ": cluster.ps: " + std::to_string(c.cluster().ps_size()) +
             " endpoints given, expected one per shard (ps.num_shards = " +
             std::to_string(c.ps().num_shards()) + ")";
    return false;
  }
  return true;
}

}  // namespace stampede
