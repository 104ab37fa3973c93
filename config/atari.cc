#include "config/atari.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "config/config.pb.h"
#include "config/config_detail.h"

namespace stampede::atari {

namespace pb = google::protobuf;

namespace {

// DQN Zoo's table (random, human), the games by ale-py's names.
constexpr GameScores kAtari57[] = {
    {"Alien", 227.8, 7127.7},
    {"Amidar", 5.8, 1719.5},
    {"Assault", 222.4, 742.0},
    {"Asterix", 210.0, 8503.3},
    {"Asteroids", 719.1, 47388.7},
    {"Atlantis", 12850.0, 29028.1},
    {"BankHeist", 14.2, 753.1},
    {"BattleZone", 2360.0, 37187.5},
    {"BeamRider", 363.9, 16926.5},
    {"Berzerk", 123.7, 2630.4},
    {"Bowling", 23.1, 160.7},
    {"Boxing", 0.1, 12.1},
    {"Breakout", 1.7, 30.5},
    {"Centipede", 2090.9, 12017.0},
    {"ChopperCommand", 811.0, 7387.8},
    {"CrazyClimber", 10780.5, 35829.4},
    {"Defender", 2874.5, 18688.9},
    {"DemonAttack", 152.1, 1971.0},
    {"DoubleDunk", -18.6, -16.4},
    {"Enduro", 0.0, 860.5},
    {"FishingDerby", -91.7, -38.7},
    {"Freeway", 0.0, 29.6},
    {"Frostbite", 65.2, 4334.7},
    {"Gopher", 257.6, 2412.5},
    {"Gravitar", 173.0, 3351.4},
    {"Hero", 1027.0, 30826.4},
    {"IceHockey", -11.2, 0.9},
    {"Jamesbond", 29.0, 302.8},
    {"Kangaroo", 52.0, 3035.0},
    {"Krull", 1598.0, 2665.5},
    {"KungFuMaster", 258.5, 22736.3},
    {"MontezumaRevenge", 0.0, 4753.3},
    {"MsPacman", 307.3, 6951.6},
    {"NameThisGame", 2292.3, 8049.0},
    {"Phoenix", 761.4, 7242.6},
    {"Pitfall", -229.4, 6463.7},
    {"Pong", -20.7, 14.6},
    {"PrivateEye", 24.9, 69571.3},
    {"Qbert", 163.9, 13455.0},
    {"Riverraid", 1338.5, 17118.0},
    {"RoadRunner", 11.5, 7845.0},
    {"Robotank", 2.2, 11.9},
    {"Seaquest", 68.4, 42054.7},
    {"Skiing", -17098.1, -4336.9},
    {"Solaris", 1236.3, 12326.7},
    {"SpaceInvaders", 148.0, 1668.7},
    {"StarGunner", 664.0, 10250.0},
    {"Surround", -10.0, 6.5},
    {"Tennis", -23.8, -8.3},
    {"TimePilot", 3568.0, 5229.2},
    {"Tutankham", 11.4, 167.6},
    {"UpNDown", 533.4, 11693.2},
    {"Venture", 0.0, 1187.5},
    {"VideoPinball", 16256.9, 17667.9},
    {"WizardOfWor", 563.5, 4756.5},
    {"YarsRevenge", 3092.9, 54576.9},
    {"Zaxxon", 32.5, 9173.3},
};

// The Atari recipe (docs/atari.md): what an Atari env gets
// for each field its config leaves unset.
constexpr std::string_view kRecipe = R"pb(
net { torso: "shallow_cnn" fc_size: 256 center_frames: true }
actors { num_actors: 2 envs_per_actor: 16 unroll_length: 20 }
learner {
  popart: false
  batch_size: 16
  queue_capacity: 16
  discount: 0.99
  baseline_cost: 0.5
  entropy_cost: 0.01
  max_grad_norm: 40
  reward_clip: 1
  optimizer { kind: "adam" learning_rate: 0.0006 schedule_frames: 200000000 }
  replay { fraction: 0.5 capacity: 1000 trust_region_kl: 0.5 }
}
ps { num_shards: 2 }
)pb";

std::string Folded(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_' && c != '-' && c != ' ') out += char(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// ale-py's id of a game: "ALE/<game>-v5".
constexpr std::string_view kIdPrefix = "ALE/", kIdSuffix = "-v5";

// The shortest of %.15g and %.17g that reads back as v ("0.25", not "0.25000000000000000").
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// `from`'s field f (all of it, where repeated) merged into `to`, through a copy of `from`
// with every other field cleared: the reflection has no generic per-type copy.
void CopyField(const pb::Message& from, const pb::FieldDescriptor* f, pb::Message* to) {
  std::unique_ptr<pb::Message> one(from.New());
  one->CopyFrom(from);
  std::vector<const pb::FieldDescriptor*> set;
  one->GetReflection()->ListFields(*one, &set);
  for (const pb::FieldDescriptor* o : set) {
    if (o != f) one->GetReflection()->ClearField(one.get(), o);
  }
  to->MergeFrom(*one);
}

// Copies every field `from` sets that `to` leaves unset, into submessages too; a repeated
// field only where `to`'s is empty. A config's own net.layers keeps the recipe's torso
// out (a torso of its own replaces the named one).
void MergeUnset(const pb::Message& from, pb::Message* to) {
  const pb::Reflection* rf = from.GetReflection();
  const pb::Reflection* rt = to->GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  rf->ListFields(from, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    if (f->is_repeated()) {
      if (rt->FieldSize(*to, f) == 0) CopyField(from, f, to);
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      MergeUnset(rf->GetMessage(from, f), rt->MutableMessage(to, f));
    } else if (!rt->HasField(*to, f)) {
      const bool own_layers = f->containing_type() == config::NetConfig::descriptor() &&
                              f->name() == "torso" && static_cast<config::NetConfig*>(to)->layers_size() > 0;
      if (!own_layers) CopyField(from, f, to);
    }
  }
}

const config::Config& Recipe() {
  static const config::Config recipe = [] {
    config::Config c;
    if (!pb::TextFormat::ParseFromString(std::string(kRecipe), &c)) std::abort();
    return c;
  }();
  return recipe;
}

// env.atari expanded in place; `path` is the env's field path for messages.
base::Status ExpandEnv(config::EnvConfig* env, const std::string& path) {
  const config::AtariConfig& a = env->atari();
  if (a.game().empty()) return base::InvalidArgument(path + ".atari.game: empty, expected a game such as \"Breakout\"");
  if (!env->plugin().empty()) return base::InvalidArgument(path + ".atari: an Atari game and a plug-in both set, expected one");
  std::string game = a.game();
  if (const GameScores* g = FindGame(game)) game = std::string(g->game);
  const std::string id = std::string(kIdPrefix) + game + std::string(kIdSuffix);
  if (!env->gym_id().empty() && env->gym_id() != id) {
    return base::InvalidArgument(path + ".gym_id: \"" + env->gym_id() + "\" beside atari.game \"" + a.game() +
                                 "\" (which is \"" + id + "\"), expected one of them");
  }
  // The ranges config.proto declares; the whole config's check (ValidateConfig) comes
  // after the presets, so a bad value must not reach the kwargs first.
  if (const auto bad = config_detail::FirstOutOfRange(a, path + ".atari.")) {
    return base::InvalidArgument(bad->path + ": " + bad->what);
  }
  env->set_gym_id(id);
  if (std::find(env->gym_module().begin(), env->gym_module().end(), "ale_py") == env->gym_module().end()) {
    env->add_gym_module("ale_py");
  }
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  const std::pair<const char*, std::string> kwargs[] = {
      {"frameskip", std::to_string(a.frame_skip())},
      {"maxpool", b(a.max_pool())},
      {"img_height", std::to_string(a.size())},
      {"img_width", std::to_string(a.size())},
      {"grayscale", b(a.grayscale())},
      {"stack_num", std::to_string(a.stack())},
      {"repeat_action_probability", Num(a.sticky_actions())},
      {"full_action_space", b(a.full_action_space())},
      {"noop_max", std::to_string(a.noop_max())},
      {"max_num_frames_per_episode", std::to_string(a.max_episode_frames())},
      {"episodic_life", b(a.life_loss_episodes())},
      // The learner clips (learner.reward_clip); the score stays the game's.
      {"reward_clipping", "false"},
      {"autoreset_mode", "SameStep"},
      {"num_threads", std::to_string(a.emulator_threads())},
  };
  auto& map = *env->mutable_kwargs();
  for (const auto& [k, v] : kwargs) map.insert({k, v});  // a kwarg the config gives wins
  return base::OkStatus();
}

}  // namespace

std::span<const GameScores> Atari57() { return kAtari57; }

const GameScores* FindGame(std::string_view game) {
  const std::string key = Folded(game);
  for (const GameScores& g : kAtari57) {
    if (Folded(g.game) == key) return &g;
  }
  return nullptr;
}

const GameScores* GameOf(const config::EnvConfig& env) {
  if (env.has_atari()) return FindGame(env.atari().game());
  const std::string_view id = env.gym_id();
  if (id.size() > kIdPrefix.size() + kIdSuffix.size() && id.starts_with(kIdPrefix) && id.ends_with(kIdSuffix)) {
    return FindGame(id.substr(kIdPrefix.size(), id.size() - kIdPrefix.size() - kIdSuffix.size()));
  }
  return nullptr;
}

double HumanNormalisedPercent(const GameScores& g, double score) {
  return 100.0 * (score - g.random) / (g.human - g.random);
}

double Atari5MedianPercent(const std::array<double, 5>& hns_percent) {
  double sum = 0;
  for (size_t i = 0; i < kAtari5.size(); ++i) {
    sum += kAtari5[i].weight * std::log10(1.0 + std::max(0.0, hns_percent[i]));
  }
  return std::pow(10.0, sum) - 1.0;
}

std::string_view RecipeText() { return kRecipe; }

base::Status ApplyPresets(config::Config* cfg) {
  bool any = false, recipe = false;
  if (cfg->env().has_atari()) {
    if (cfg->tasks_size() > 0) {
      return base::InvalidArgument("env.atari: a suite (tasks) names its games in each task's env, not in env");
    }
    if (base::Status s = ExpandEnv(cfg->mutable_env(), "env"); !s.ok()) return s;
    any = true;
    recipe = cfg->env().atari().recipe();
  }
  for (int t = 0; t < cfg->tasks_size(); ++t) {
    config::TaskConfig* task = cfg->mutable_tasks(t);
    if (!task->env().has_atari()) continue;
    const std::string path = "tasks[" + std::to_string(t) + "].env";
    if (base::Status s = ExpandEnv(task->mutable_env(), path); !s.ok()) return s;
    any = true;
    recipe = recipe || task->env().atari().recipe();
    const GameScores* g = FindGame(task->env().atari().game());
    if (task->name().empty()) task->set_name(g != nullptr ? std::string(g->game) : task->env().atari().game());
    if (g != nullptr && !task->has_reference_score() && !task->has_random_score()) {
      task->set_random_score(g->random);
      task->set_reference_score(g->human);
    }
  }
  if (any && recipe) {
    const config::Config& r = Recipe();
    MergeUnset(r.net(), cfg->mutable_net());
    MergeUnset(r.actors(), cfg->mutable_actors());
    MergeUnset(r.learner(), cfg->mutable_learner());
    MergeUnset(r.ps(), cfg->mutable_ps());
  }
  return base::OkStatus();
}

}  // namespace stampede::atari
