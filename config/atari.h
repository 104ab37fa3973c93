// The Atari protocol as one preset (env.atari), the Atari recipe it brings, the random
// and human scores of the Atari-57 games, and the Atari-5 estimate of the 57-game median.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace stampede::config {
class Config;
class EnvConfig;
}

namespace stampede::atari {

// One game of the Atari-57 benchmark: its ale-py name and the random and human scores of
// DQN Zoo's table (dqn_zoo/atari_data.py: episodes of at most 108,000 frames after 1-30
// no-ops; the columns the human-normalised scores of IMPALA, R2D2 and Agent57 use).
struct GameScores {
  std::string_view game;
  double random;
  double human;
};

// The 57 games in alphabetical order.
std::span<const GameScores> Atari57();

// A game of the 57 by ale-py's name ("SpaceInvaders"), or by the same letters in any case
// with or without underscores ("space_invaders"); nullptr for a game outside them.
const GameScores* FindGame(std::string_view game);

// The Atari-57 game an env runs: its env.atari.game, or an "ALE/<game>-v5" gym id (the id
// the preset gives, or one written by hand); nullptr for any other env.
const GameScores* GameOf(const config::EnvConfig& env);

// 100 (score - random) / (human - random).
double HumanNormalisedPercent(const GameScores& g, double score);

// Atari-5 (Aitchison, Sweetser and Hutter 2023): five games whose human-normalised scores
// predict the Atari-57 median, with the regression's weights (no intercept; fitted on
// agents above a 40% median).
struct Atari5Game {
  std::string_view game;
  double weight;
};
inline constexpr std::array<Atari5Game, 5> kAtari5 = {{{"BattleZone", 0.38198},
                                                        {"DoubleDunk", 0.06791},
                                                        {"NameThisGame", 0.31080},
                                                        {"Phoenix", 0.12413},
                                                        {"Qbert", 0.08049}}};

// The estimate of the Atari-57 median human-normalised score, in percent:
// 10^(sum_i w_i log10(1 + max(0, hns_i))) - 1, with hns_i in percent in kAtari5's order.
double Atari5MedianPercent(const std::array<double, 5>& hns_percent);

// The recipe an Atari env gets for each net, actors, learner and ps field a config leaves
// unset (protobuf text; `stampede config` prints it applied).
std::string_view RecipeText();

// Expands env.atari (and each task's) into gym_id, gym_module and ale-py's kwargs (a
// kwarg already given wins), fills each Atari task's random and human scores where the
// config gives none, and, unless atari.recipe is false, the recipe's fields the config
// leaves unset. Doing it twice changes nothing, so a run's written config.textproto loads
// to the same config. Errors name the field path.
base::Status ApplyPresets(config::Config* cfg);

}  // namespace stampede::atari
