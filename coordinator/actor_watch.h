// Per-actor policy versions and lags, as the coordinator keeps them: what each progress
// line, metrics.jsonl row and summary.json shows per actor, and the findings it warns
// about (an actor far behind the others; an actor whose version has not moved for
// actors.max_params_age_s while the learner's has). No sockets, no JSON: tested alone
// (tests/actor_watch_test.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stampede::coordinator {

struct ActorView {
  // From the actor's own statuses.
  int64_t version = -1;       // the parameters it acts with
  int64_t heard = -1;         // the newest version the PS has answered it with
  int64_t fetcher_resets = 0;
  int64_t mixed_assemblies = 0;
  int64_t frames = 0;    // env frames it made, as its newest status says
  bool retired = false;  // taken out of the fleet (`stampede scale`): kept for its figures, never warned about
  // From the learners: its newest trajectory's version and lag on arrival, the mean and
  // largest lag since the last row, and the largest over the run.
  int64_t trajectory_version = -1;
  int64_t lag = -1;  // -1: no trajectory yet
  double lag_mean = 0;
  int64_t lag_max = 0, lag_max_run = 0, trajectories = 0;
  double row_lag_sum = 0;  // lag x trajectories since the last row (for lag_mean)
  int64_t row_trajectories = 0;
  // When `version` last changed, and the learner's version then.
  std::chrono::steady_clock::time_point moved;
  int64_t learner_version_when_moved = -1;
  bool warned_stale = false, warned_far = false, warned_reset = false;
};

struct ActorFinding {
  std::string event;  // "actor_params_stale", "actor_lag_far_behind" or "actor_fetcher_reset"
  int actor = 0;
  int64_t version = 0, lag = 0;
  double unchanged_s = 0;
  std::string message;  // one line for the console
};

class ActorWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // `max_params_age_s` <= 0: the stale check is off.
  explicit ActorWatch(double max_params_age_s) : max_age_s_(max_params_age_s) {}

  void OnActorStatus(int actor, int64_t version, int64_t heard, int64_t fetcher_resets, int64_t mixed_assemblies,
                     Clock::time_point now);
  // One learner's per-actor report (wire::ActorLag), from its status.
  void OnLearnerActorLag(int actor, int64_t trajectory_version, int64_t lag, double lag_mean, int64_t lag_max,
                         int64_t trajectories);
  void OnLearnerVersion(int64_t version) { learner_version_ = std::max(learner_version_, version); }
  void OnActorFrames(int actor, int64_t frames) { actors_[actor].frames = frames; }
  // An actor taken out of the fleet (true) or added back (false): a retired actor's
  // figures stay (its last trajectories still arrive), but it is no longer checked or
  // counted among the others.
  void SetRetired(int actor, bool retired) { actors_[actor].retired = retired; }

  // What went wrong since the last call, each actor and kind said once until it recovers.
  // Far behind: an actor's lag exceeds 4 x the median of the other actors' lags + 10.
  // An actor's first fetcher reset (actors.max_policy_lag) is said once; later ones are
  // only counted.
  std::vector<ActorFinding> Check(Clock::time_point now);

  // The actor with the largest lag since the last row (or newest lag; -1: none known),
  // and that lag.
  int worst_actor() const;
  int64_t worst_lag() const;
  const std::map<int, ActorView>& actors() const { return actors_; }
  // A new progress row begins: the per-row lag figures start again.
  void EndRow();

 private:
  double max_age_s_;
  int64_t learner_version_ = -1;
  std::map<int, ActorView> actors_;
};

}  // namespace stampede::coordinator
