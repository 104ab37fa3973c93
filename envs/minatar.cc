#include "envs/minatar.h"

#include <stdexcept>

namespace stampede::envs {

int64_t SplitMixDraws::RandInt(int64_t lo, int64_t hi) {
  // Modulo bias below 2^-59 for the ranges MinAtar draws from (at most 10).
  return lo + int64_t(rng_() % uint64_t(hi - lo));
}

const std::vector<std::string>& MinAtarGames() {
  static const std::vector<std::string> games = {"breakout", "asterix", "freeway", "seaquest",
                                                 "space_invaders"};
  return games;
}

std::unique_ptr<MinAtarGame> MakeMinAtarGame(const std::string& game, bool ramping) {
  if (game == "breakout") return MakeMinAtarBreakout(ramping);
  if (game == "asterix") return MakeMinAtarAsterix(ramping);
  if (game == "freeway") return MakeMinAtarFreeway(ramping);
  if (game == "seaquest") return MakeMinAtarSeaquest(ramping);
  if (game == "space_invaders") return MakeMinAtarSpaceInvaders(ramping);
  return nullptr;
}

namespace {
std::shared_ptr<const EnvSpec> MinAtarSpec(const std::string& env_name, const MinAtarGame& game,
                                           int num_actions, const EnvOptions& options) {
  auto spec = std::make_shared<EnvSpec>();
  spec->name = env_name;
  spec->obs_shape = {game.channels(), MinAtarGame::kSize, MinAtarGame::kSize};
  spec->obs_dtype = DType::kUint8;
  spec->num_actions = num_actions;
  spec->max_episode_steps = options.max_episode_steps;  // the games end by themselves
  return spec;
}

std::unique_ptr<MinAtarGame> GameFor(const std::string& env_name, const std::string& game,
                                     const EnvOptions& options) {
  options.RefuseUnknown(env_name, {"minimal_action_set", "sticky_action_prob", "difficulty_ramping"});
  const int64_t ramping = options.GetInt("difficulty_ramping", 1);
  if (ramping != 0 && ramping != 1) {
    throw std::invalid_argument(env_name + ": kwarg difficulty_ramping = " + std::to_string(ramping) +
                                ", expected 0 or 1");
  }
  auto g = MakeMinAtarGame(game, ramping == 1);
  if (!g) throw std::invalid_argument(env_name + ": no MinAtar game '" + game + "'");
  return g;
}

std::vector<int> ActionSet(const std::string& env_name, const MinAtarGame& game,
                           const EnvOptions& options) {
  const int64_t minimal = options.GetInt("minimal_action_set", 1);
  if (minimal != 0 && minimal != 1) {
    throw std::invalid_argument(env_name + ": kwarg minimal_action_set = " + std::to_string(minimal) +
                                ", expected 0 or 1");
  }
  if (minimal == 1) return game.minimal_action_set();
  return {0, 1, 2, 3, 4, 5};
}
}  // namespace

MinAtarEnv::MinAtarEnv(const std::string& env_name, const std::string& game, const EnvOptions& options)
    : MinAtarEnv(env_name, GameFor(env_name, game, options), options) {}

MinAtarEnv::MinAtarEnv(const std::string& env_name, std::unique_ptr<MinAtarGame> game,
                       const EnvOptions& options)
    : Env(MinAtarSpec(env_name, *game, int(ActionSet(env_name, *game, options).size()), options)),
      game_(std::move(game)),
      action_set_(ActionSet(env_name, *game_, options)) {
  sticky_ = options.GetDouble("sticky_action_prob", 0.1);
  if (!(sticky_ >= 0.0 && sticky_ <= 1.0)) {
    throw std::invalid_argument(env_name + ": kwarg sticky_action_prob = " + std::to_string(sticky_) +
                                ", expected a probability in [0, 1]");
  }
}

void MinAtarEnv::UseDraws(MinAtarDraws* draws) { external_ = draws; }

void MinAtarEnv::DoReset(uint64_t seed, void* obs) {
  draws_.Seed(seed);
  // As the package: the previous action, which sticky actions repeat, survives resets.
  game_->Reset(draws());
  game_->State(static_cast<uint8_t*>(obs), 255);
}

StepResult MinAtarEnv::DoStep(int action, void* obs) {
  int a = action_set_[size_t(action)];
  if (draws().Rand() < sticky_) a = last_action_;
  last_action_ = a;
  const auto [reward, terminal] = game_->Act(a, draws());
  game_->State(static_cast<uint8_t*>(obs), 255);
  StepResult r;
  r.reward = float(reward);
  r.terminated = terminal;
  return r;
}

}  // namespace stampede::envs
