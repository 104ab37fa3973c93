// The steps every acting loop takes, written once: the actors' unrolls (actor.cc), the
// evaluator's and `stampede eval`'s episodes (evaluate.cc) and the inference server's
// batches (inference.cc). Recurrent states are reset here for envs that start an episode,
// actions a task does not have are masked here, actions are chosen here (a sample, or the
// most likely), and the episodes' returns and lengths are kept here.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "net/distribution.h"

namespace stampede::actors {

// Envs whose previous step ended an episode (or that only reset) start from a zero
// recurrent state: `state` holds E rows of S floats; episode_start[e] != 0 zeroes row e.
void ResetStartingStates(float* state, int S, const uint8_t* episode_start, int E);

// The actions a task does not have get probability exactly zero: a categorical policy over
// A logits per env whose task has the first `limit` (0: all of them).
void MaskMissingActions(const net::PolicyShape& pol, float* logits, int E, int A, int limit);

// The most likely action of one env's head output: each component's argmax, or a Gaussian's mean.
void GreedyAction(const net::PolicyShape& pol, const float* out, float* a);

// One action per env from its row of A head outputs: a sample drawn with `rng`, or the most
// likely (`greedy`). Discrete kinds write K ints per env to `actions`; a box writes the
// sample to `box_raw` (what the learner scores; may be null) and the sample clipped to
// [low, high] to `box_clipped` (what the env gets).
struct ActionOut {
  int32_t* actions = nullptr;
  float* box_raw = nullptr;
  float* box_clipped = nullptr;
  const float* low = nullptr;
  const float* high = nullptr;
};
void ChooseActions(const net::PolicyShape& pol, const float* logits, int E, int A, bool greedy, std::mt19937_64& rng,
                   const ActionOut& out);

// Each env's episode so far: its return and length. Step() books one env step and says
// whether it ended an episode, and which.
class EpisodeBooks {
 public:
  explicit EpisodeBooks(int E = 0) : returns_(size_t(E), 0.0), lengths_(size_t(E), 0) {}
  void Clear() {
    std::fill(returns_.begin(), returns_.end(), 0.0);
    std::fill(lengths_.begin(), lengths_.end(), 0);
  }
  int length(int e) const { return lengths_[size_t(e)]; }
  // A valid step of env e with `reward`; `ends` when the step ends its episode. True with
  // the episode's return and length when it did (the env's books start afresh).
  bool Step(int e, double reward, bool ends, double* episode_return, int* episode_length) {
    returns_[size_t(e)] += reward;
    ++lengths_[size_t(e)];
    if (!ends) return false;
    *episode_return = returns_[size_t(e)];
    *episode_length = lengths_[size_t(e)];
    returns_[size_t(e)] = 0;
    lengths_[size_t(e)] = 0;
    return true;
  }

 private:
  std::vector<double> returns_;
  std::vector<int> lengths_;
};

}  // namespace stampede::actors
