// Population-based training's decision core (config `pbt`, docs/pbt.md): no processes,
// no files. The population's shell (pbt_run.cc) tells it each member's frames and
// objective and how its fleet ended; it answers with what to do: keep a member as it is,
// have it exploit a leader (copy the leader's checkpoint and its perturbed
// hyperparameters), resume a member whose fleet died, or replace one that cannot resume
// by a copy of a leader. Time comes in with every call, and randomness from its own seeded
// stream, so tests/pbt_test.cc runs it on a fake clock.
//
// The rule is truncation selection (Jaderberg et al. 2017; Ray Tune's
// PopulationBasedTraining): each time a member's own frames pass another
// pbt.interval_frames (after pbt.start_frames) and it has an objective, the members that
// have one are ranked (best first; a tie goes to the lower index). If it is in the bottom
// quantile (ceil(quantile x ranked), at least 1, at most half), it exploits a member drawn
// from the top quantile whose objective is ahead of its own by more than pbt.min_gap (a
// tie is no loss: it keeps); its new hyperparameters are the leader's, each field mutated
// (resampled with resample_probability, else multiplied or divided by perturb_factor, in
// 1 - x for a complement field, clamped to [low, high]). Members elsewhere keep.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "config/config.pb.h"

namespace stampede::coordinator {

// Field path -> value, the evolving fields of one member.
using Hyper = std::map<std::string, double>;

struct PbtDecision {
  enum class Kind {
    kKeep,      // ranked, not in the bottom (or no leader ahead): goes on as it is
    kExploit,   // stop, take `leader`'s checkpoint and `hyper`, resume
    kRestart,   // its fleet died: resume from its own checkpoint (after a backoff)
    kReplace,   // it cannot resume: take `leader`'s checkpoint and `hyper`, resume
    kGiveUp,    // it cannot resume and no member has a checkpoint to copy
  };
  Kind kind = Kind::kKeep;
  int member = -1;
  int leader = -1;  // exploit/replace: whose checkpoint
  int64_t frames = 0;
  double objective = 0, leader_objective = 0;  // exploit/keep: as ranked
  int rank = -1, ranked = 0;                   // exploit/keep: its place (0: best) among `ranked`
  Hyper old_hyper, new_hyper;
  std::string why;  // a line for the console and the lineage
};
const char* KindName(PbtDecision::Kind k);  // "keep", "exploit", ...

class PbtCore {
 public:
  using Clock = std::chrono::steady_clock;
  // Backoff before a died member's n-th resume: 1 s, 2 s, 4 s ... at most 30 s.
  static std::chrono::milliseconds RestartBackoff(int restarts);

  PbtCore(config::PbtConfig cfg, std::vector<Hyper> start, uint64_t seed);

  int size() const { return int(members_.size()); }
  const Hyper& hyper(int m) const { return members_[size_t(m)].hyper; }
  int64_t frames(int m) const { return members_[size_t(m)].frames; }
  std::optional<double> objective(int m) const { return members_[size_t(m)].objective; }
  bool finished(int m) const { return members_[size_t(m)].state == State::kFinished; }
  bool AllEnded() const;  // every member finished or given up

  // A member's newest frames (never going back) and objective (none: not enough episodes
  // since its last start).
  void OnFigures(int m, int64_t frames, std::optional<double> objective);
  // The decisions due at `now`: a decision point for each running member whose frames
  // passed it (with an objective), and the resumes whose backoff has passed. An exploit,
  // restart or replace holds the member (no more decisions for it) until OnResumed.
  std::vector<PbtDecision> Decide(Clock::time_point now);
  // A member's fleet ended on its own: `ok` (exit 0) finishes it; else it is resumed after
  // a backoff while it has restarts left (a decision from Decide), else replaced by a copy
  // of a leader (returned at once; kGiveUp when no member can be copied).
  std::optional<PbtDecision> OnExit(int m, bool ok, Clock::time_point now);
  // The shell could not resume a member (no checkpoint of its own, or the resume refused):
  // a replace from a leader, or kGiveUp.
  PbtDecision CannotResume(int m, Clock::time_point now);
  // The shell carried out an exploit, restart or replace: the member runs again with
  // `hyper` (its objective is cleared until its new episodes count).
  void OnResumed(int m, const Hyper& hyper);
  // Mutates every evolving field of `h` (exposed for the tests).
  Hyper Mutate(const Hyper& h);

 private:
  enum class State { kRunning, kHeld, kDead, kFinished, kGivenUp };
  struct Member {
    State state = State::kRunning;
    int64_t frames = 0;
    std::optional<double> objective;
    Hyper hyper;
    int64_t next_decision = 0;  // frames at which its next decision is due
    int restarts = 0;
    int replacements = 0;
    Clock::time_point restart_due;
  };
  // Members with an objective, best first (ties: lower index first).
  std::vector<int> Ranking() const;
  // A leader for a member that cannot go on: the best ranked member that is not it (else
  // any other with frames, which has written a checkpoint); -1: none.
  int LeaderForReplace(int m) const;
  PbtDecision Replace(int m);

  config::PbtConfig cfg_;
  std::vector<Member> members_;
  std::mt19937_64 rng_;
};

}  // namespace stampede::coordinator
