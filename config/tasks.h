// The tasks of a run (config.tasks; a config with only `env` is one task): which actor
// runs which task, each task's env as a one-task config, and how the tasks' specs join
// into the one spec the shared network is built for (observations padded or resized to
// one shape; the union action space, each task masked to its own actions).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "config/config.pb.h"

namespace stampede::config {

// The most actors a run may have (actors.num_actors's bound), and the bound of any actor
// index a process accepts: `stampede scale` adds actors past actors.num_actors.
inline constexpr int kMaxActors = 1024;

int NumTasks(const config::Config& cfg);  // tasks_size(), or 1 for the `env` shorthand
std::string TaskName(const config::Config& cfg, int task);
// Task of every actor process (index = actor task index): the tasks that name a number
// of actors get it, in order; the actors left are shared by weight (largest remainder),
// at least one per task.
std::vector<int> AssignActors(const config::Config& cfg);
int TaskOfActor(const config::Config& cfg, int actor_index);
// `cfg` with env replaced by the task's env (cfg itself without tasks).
config::Config TaskEnvConfig(const config::Config& cfg, int task);
// The joint spec from every task's env.resolved_spec; false with an error naming the
// task and the mismatch when a task cannot join (other observation dtype or rank,
// non-discrete actions in a suite, other frames per step). "pad" across ranks flattens
// every observation to a vector of the largest size.
base::Status JoinTaskSpecs(const config::Config& cfg, config::EnvSpec* joint);
// Actions of each task (the policy head's width for non-discrete spaces): a task's
// actor never samples, and the learner never accepts, an action at or above its limit.
std::vector<int> TaskActionLimits(const config::Config& cfg);
// (score - random_score) / (reference_score - random_score), or NaN when the task sets
// no reference_score.
double NormalisedScore(const config::TaskConfig& task, double score);

// Mean and median of normalised scores (NaN, NaN for none): the suite's aggregate.
std::pair<double, double> MeanAndMedian(std::vector<double> scores);

// Brings one task's observations to the joint shape by the suite's rule.
class ObsAdapter {
 public:
  ObsAdapter() = default;
  ObsAdapter(std::vector<int> from, std::vector<int> to, bool uint8, const std::string& rule);
  bool identity() const { return identity_; }
  size_t from_bytes() const { return from_bytes_; }
  // n observations of the task's shape -> n of the joint shape.
  void Apply(const void* in, int n, void* out) const;

 private:
  bool identity_ = true;
  size_t elem_ = 4, from_bytes_ = 0, to_bytes_ = 0;
  // For every element of the joint observation, the task element it takes (-1: zero).
  std::vector<long> source_;
};

}  // namespace stampede::config
