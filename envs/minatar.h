// MinAtar (Young & Tian 2019) in C++: the five games of the `minatar` package (1.0.15),
// rule for rule, each in its own file (minatar_<game>.cc), and one Env that wraps any of
// them with the package's sticky actions and action sets.
//
// A game draws its randomness only through MinAtarDraws, the two calls the package makes
// on numpy's RandomState (rand() and randint(lo, hi)), in the package's order. The
// built-in envs feed it from SplitMix64; tests/minatar_test.cc feeds it the draws the
// package made (recorded by tools/minatar_trace.py) and checks that both games then
// agree step by step.
//
// Observations are [C, 10, 10] uint8 (the package's [10, 10, C] booleans, channels
// first as the network wants them), 255 where the package has True: the networks scale
// uint8 input by 1/255 as for every image env, so they see the package's 0/1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"
#include "envs/rng.h"

namespace stampede::envs {

class MinAtarDraws {
 public:
  virtual ~MinAtarDraws() = default;
  // Uniform in [0, 1): numpy's rand().
  virtual double Rand() = 0;
  // Uniform integer in [lo, hi): numpy's randint(lo, hi).
  virtual int64_t RandInt(int64_t lo, int64_t hi) = 0;
};

class SplitMixDraws : public MinAtarDraws {
 public:
  void Seed(uint64_t seed) { rng_.seed(seed); }
  double Rand() override { return rng_.Uniform(0.0, 1.0); }
  int64_t RandInt(int64_t lo, int64_t hi) override;

 private:
  SplitMix64 rng_;
};

// The package's actions: 0 n(oop), 1 l(eft), 2 u(p), 3 r(ight), 4 d(own), 5 f(ire).
enum MinAtarAction : int { kNoop = 0, kLeft = 1, kUp = 2, kRight = 3, kDown = 4, kFire = 5 };

class MinAtarGame {
 public:
  static constexpr int kSize = 10;
  virtual ~MinAtarGame() = default;
  virtual const char* name() const = 0;  // the package's module name, e.g. "space_invaders"
  virtual int channels() const = 0;
  virtual std::vector<int> minimal_action_set() const = 0;
  virtual void Reset(MinAtarDraws& draws) = 0;
  // The package's env.act(a) for a full action 0..5: reward and terminal.
  virtual std::pair<int, bool> Act(int action, MinAtarDraws& draws) = 0;
  // The package's env.state() as [C, 10, 10], `on` where it is True, 0 elsewhere.
  virtual void State(uint8_t* chw, uint8_t on) const = 0;
  // The package's difficulty_ramp(): the ramp index, or -1 where the game has none.
  virtual int difficulty_ramp() const { return -1; }
};

// The games, one per file.
std::unique_ptr<MinAtarGame> MakeMinAtarBreakout(bool ramping);
std::unique_ptr<MinAtarGame> MakeMinAtarAsterix(bool ramping);
std::unique_ptr<MinAtarGame> MakeMinAtarFreeway(bool ramping);
std::unique_ptr<MinAtarGame> MakeMinAtarSeaquest(bool ramping);
std::unique_ptr<MinAtarGame> MakeMinAtarSpaceInvaders(bool ramping);
// `game`: breakout, asterix, freeway, seaquest or space_invaders. nullptr if unknown.
std::unique_ptr<MinAtarGame> MakeMinAtarGame(const std::string& game, bool ramping);
// The five module names, in the paper's order.
const std::vector<std::string>& MinAtarGames();

// The package's Environment + gym BaseEnv: with probability sticky_action_prob an
// action is replaced by the previous one (drawn before the game moves, as the package
// does), and the agent's action k is the k-th of the action set (minimal by default, as
// MinAtar/<Game>-v1; all six with kwarg minimal_action_set=0, as -v0).
// Registered as MinAtar-Breakout, MinAtar-Asterix, MinAtar-Freeway, MinAtar-Seaquest
// and MinAtar-SpaceInvaders; kwargs minimal_action_set (1), sticky_action_prob (0.1),
// difficulty_ramping (1).
class MinAtarEnv : public Env {
 public:
  MinAtarEnv(const std::string& env_name, const std::string& game, const EnvOptions& options);
  const MinAtarGame& game() const { return *game_; }
  const std::vector<int>& action_set() const { return action_set_; }
  // Tests: take every draw from `draws` (not owned; nullptr: the env's own again).
  void UseDraws(MinAtarDraws* draws);

 protected:
  void DoReset(uint64_t seed, void* obs) override;
  StepResult DoStep(int action, void* obs) override;

 private:
  MinAtarEnv(const std::string& env_name, std::unique_ptr<MinAtarGame> game,
             const EnvOptions& options);
  MinAtarDraws& draws() { return external_ ? *external_ : draws_; }
  std::unique_ptr<MinAtarGame> game_;
  std::vector<int> action_set_;
  double sticky_ = 0.1;
  int last_action_ = 0;
  SplitMixDraws draws_;
  MinAtarDraws* external_ = nullptr;
};

}  // namespace stampede::envs
