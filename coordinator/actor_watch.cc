#include "coordinator/actor_watch.h"

#include <algorithm>
#include <cstdio>

namespace stampede::coordinator {

void ActorWatch::OnActorStatus(int actor, int64_t version, int64_t heard, int64_t fetcher_resets,
                               int64_t mixed_assemblies, Clock::time_point now) {
  ActorView& a = actors_[actor];
  if (version != a.version || a.learner_version_when_moved < 0) {
    a.moved = now;
    a.learner_version_when_moved = learner_version_;
    if (version != a.version) a.warned_stale = false;
  }
  a.version = version;
  a.heard = heard;
  a.fetcher_resets = fetcher_resets;
  a.mixed_assemblies = mixed_assemblies;
}

void ActorWatch::OnLearnerActorLag(int actor, int64_t trajectory_version, int64_t lag, double lag_mean,
                                   int64_t lag_max, int64_t trajectories) {
  ActorView& a = actors_[actor];
  a.trajectory_version = trajectory_version;
  a.lag = lag;
  // The status's mean covers its trajectories since the learner's previous status.
  const int64_t fresh = trajectories > a.trajectories ? trajectories - a.trajectories : 0;
  a.row_lag_sum += lag_mean * double(fresh);
  a.row_trajectories += fresh;
  if (a.row_trajectories > 0) a.lag_mean = a.row_lag_sum / double(a.row_trajectories);
  a.lag_max = std::max(a.lag_max, lag_max);
  a.lag_max_run = std::max(a.lag_max_run, lag_max);
  a.trajectories = trajectories;
}

std::vector<ActorFinding> ActorWatch::Check(Clock::time_point now) {
  std::vector<ActorFinding> out;
  char buf[400];
  for (auto& [index, a] : actors_) {
    if (a.version < 0 || a.retired) continue;  // still waiting for its first parameters, or gone
    if (a.fetcher_resets > 0 && !a.warned_reset) {
      a.warned_reset = true;
      std::snprintf(buf, sizeof buf,
                    "actor %d reset its parameter fetcher (its version %lld was actors.max_policy_lag behind the "
                    "newest the PS had answered it with, %lld); %lld reset(s) so far, later ones are only counted",
                    index, (long long)a.version, (long long)a.heard, (long long)a.fetcher_resets);
      out.push_back({"actor_fetcher_reset", index, a.version, a.heard - a.version, 0, buf});
    }
    const double unchanged = std::chrono::duration<double>(now - a.moved).count();
    if (max_age_s_ > 0 && unchanged >= max_age_s_ && learner_version_ > a.learner_version_when_moved &&
        !a.warned_stale) {
      a.warned_stale = true;
      std::snprintf(buf, sizeof buf,
                    "actor %d has acted on policy version %lld for %.0f s while the learner moved from %lld to %lld "
                    "(actors.max_params_age_s = %g): its parameters are not refreshing",
                    index, (long long)a.version, unchanged, (long long)a.learner_version_when_moved,
                    (long long)learner_version_, max_age_s_);
      out.push_back({"actor_params_stale", index, a.version, learner_version_ - a.version, unchanged, buf});
    }
    if (a.lag < 0) continue;
    std::vector<int64_t> others;
    for (const auto& [j, b] : actors_) {
      if (j != index && b.lag >= 0 && !b.retired) others.push_back(b.lag);
    }
    if (others.empty()) continue;
    std::nth_element(others.begin(), others.begin() + long(others.size() / 2), others.end());
    const int64_t median = others[others.size() / 2];
    const int64_t limit = 4 * median + 10;
    if (a.lag > limit) {
      if (!a.warned_far) {
        a.warned_far = true;
        std::snprintf(buf, sizeof buf,
                      "actor %d's trajectories are %lld versions behind the learner, the other actors' %lld "
                      "(median): far behind them",
                      index, (long long)a.lag, (long long)median);
        out.push_back({"actor_lag_far_behind", index, a.version, a.lag, unchanged, buf});
      }
    } else if (a.lag * 2 <= limit) {
      a.warned_far = false;  // recovered: a later fall behind is said again
    }
  }
  return out;
}

namespace {
// An actor's lag for the row: the largest since the last row, or its newest.
int64_t RowLag(const ActorView& a) { return a.lag < 0 ? -1 : std::max(a.lag, a.lag_max); }
}  // namespace

int ActorWatch::worst_actor() const {
  int worst = -1;
  int64_t lag = -1;
  for (const auto& [index, a] : actors_) {
    if (!a.retired && RowLag(a) > lag) {
      lag = RowLag(a);
      worst = index;
    }
  }
  return worst;
}

int64_t ActorWatch::worst_lag() const {
  const int w = worst_actor();
  return w < 0 ? -1 : RowLag(actors_.at(w));
}

void ActorWatch::EndRow() {
  for (auto& [index, a] : actors_) {
    a.lag_max = 0;
    a.row_lag_sum = 0;
    a.row_trajectories = 0;
  }
}

}  // namespace stampede::coordinator
