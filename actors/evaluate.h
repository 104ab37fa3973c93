// Episodes of a policy on envs of their own, feeding no learner: the evaluator process
// (config `evaluation`, `stampede evaluator`) runs them every evaluation round with the
// newest parameters from the PS, and `stampede eval` with a checkpoint's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "net/layout.h"

namespace stampede::config {
class Config;
}
namespace stampede::wire {
struct StepShape;
}

namespace stampede::actors {

struct EpisodeOptions {
  int episodes = 10;
  // Envs stepped together (at most `episodes`). Each env runs its own share of the
  // episodes (episodes / num_envs, the first ones one more), so short episodes are not
  // counted ahead of long ones.
  int num_envs = 8;
  bool greedy = false;  // the most likely action instead of a sample
  uint64_t seed = 12345;
  // An episode still running after this many agent steps ends there (counted as capped).
  int max_steps = 10000;
  // Called once per batch step; false ends the episodes early (RunEpisodes then fails
  // with "stopped").
  std::function<bool()> keep_going;
  // Called before each step while env 0's first episode lasts, with that env's
  // observation in the task's own shape (a recording).
  std::function<void(const wire::StepShape& task_shape, const std::byte* obs)> on_frame;
};

struct EpisodeResult {
  double mean = 0, std = 0;       // of the episodes' returns
  double mean_length = 0;         // agent steps
  int episodes = 0;
  int capped = 0;                 // ended by max_steps, not by the env
};

// One task's envs and the run's network (the joint spec for a suite), kept across rounds.
class EpisodeRunner {
 public:
  // `cfg`: the run's resolved config; `task`: the task index (0 without a suite).
  static base::StatusOr<std::unique_ptr<EpisodeRunner>> Create(const config::Config& cfg, int task, int num_envs);
  ~EpisodeRunner();
  // The network's parameter layout (what `params` must hold).
  const net::ParamLayout& layout() const;
  // Runs opt.episodes episodes from a fresh reset with `params`. An error with the reason
  // (an env's, converted from its exception), or Cancelled when keep_going said stop.
  [[nodiscard]] base::Status Run(const float* params, const EpisodeOptions& opt, EpisodeResult* out);

 private:
  struct Impl;
  explicit EpisodeRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The evaluator process: waits for the coordinator's evaluation requests (on its control
// socket), runs each task's episodes with the newest parameters the PS has, and reports
// the round in its statuses. Ok when stopped; otherwise why it ended, as an actor's.
base::Status RunEvaluator(const config::Config& cfg, int index, std::atomic<bool>& stop);

}  // namespace stampede::actors
