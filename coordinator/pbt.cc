#include "coordinator/pbt.h"

#include <algorithm>
#include <cmath>

namespace stampede::coordinator {

const char* KindName(PbtDecision::Kind k) {
  switch (k) {
    case PbtDecision::Kind::kKeep: return "keep";
    case PbtDecision::Kind::kExploit: return "exploit";
    case PbtDecision::Kind::kRestart: return "restart";
    case PbtDecision::Kind::kReplace: return "replace";
    case PbtDecision::Kind::kGiveUp: return "give_up";
  }
  return "?";
}

std::chrono::milliseconds PbtCore::RestartBackoff(int restarts) {
  const int shift = std::clamp(restarts, 0, 5);
  return std::min(std::chrono::milliseconds(1000 << shift), std::chrono::milliseconds(30000));
}

PbtCore::PbtCore(config::PbtConfig cfg, std::vector<Hyper> start, uint64_t seed)
    : cfg_(std::move(cfg)), rng_(seed ^ 0x9e3779b97f4a7c15ULL) {
  members_.resize(start.size());
  for (size_t m = 0; m < start.size(); ++m) {
    members_[m].hyper = std::move(start[m]);
    members_[m].next_decision = std::max(cfg_.start_frames(), cfg_.interval_frames());
  }
}

bool PbtCore::AllEnded() const {
  for (const Member& m : members_) {
    if (m.state != State::kFinished && m.state != State::kGivenUp) return false;
  }
  return true;
}

void PbtCore::OnFigures(int m, int64_t frames, std::optional<double> objective) {
  Member& mb = members_[size_t(m)];
  mb.frames = std::max(mb.frames, frames);
  if (objective && std::isfinite(*objective)) mb.objective = objective;
}

std::vector<int> PbtCore::Ranking() const {
  std::vector<int> ranked;
  for (int m = 0; m < size(); ++m) {
    const Member& mb = members_[size_t(m)];
    if (mb.objective && mb.state != State::kGivenUp) ranked.push_back(m);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](int a, int b) { return *members_[size_t(a)].objective > *members_[size_t(b)].objective; });
  return ranked;
}

Hyper PbtCore::Mutate(const Hyper& h) {
  Hyper out = h;
  std::uniform_real_distribution<double> u(0, 1);
  for (const config::PbtField& f : cfg_.evolve()) {
    auto it = out.find(f.path());
    if (it == out.end()) continue;
    // A complement field mutates 1 - x, in [1 - high, 1 - low].
    const double lo = f.complement() ? 1 - f.high() : f.low();
    const double hi = f.complement() ? 1 - f.low() : f.high();
    double x = f.complement() ? 1 - it->second : it->second;
    if (u(rng_) < f.resample_probability()) {
      const double r = u(rng_);
      x = f.log_scale() ? std::exp(std::log(lo) + r * (std::log(hi) - std::log(lo))) : lo + r * (hi - lo);
    } else {
      x = u(rng_) < 0.5 ? x * f.perturb_factor() : x / f.perturb_factor();
    }
    x = std::clamp(x, lo, hi);
    it->second = f.complement() ? 1 - x : x;
  }
  return out;
}

int PbtCore::LeaderForReplace(int m) const {
  for (int l : Ranking()) {
    if (l != m) return l;
  }
  int best = -1;
  for (int l = 0; l < size(); ++l) {
    if (l == m || members_[size_t(l)].state == State::kGivenUp || members_[size_t(l)].frames == 0) continue;
    if (best < 0 || members_[size_t(l)].frames > members_[size_t(best)].frames) best = l;
  }
  return best;
}

PbtDecision PbtCore::Replace(int m) {
  Member& mb = members_[size_t(m)];
  PbtDecision d;
  d.member = m;
  d.frames = mb.frames;
  d.old_hyper = mb.hyper;
  d.leader = mb.replacements < std::max(1, cfg_.max_member_restarts()) ? LeaderForReplace(m) : -1;
  if (d.leader < 0) {
    d.kind = PbtDecision::Kind::kGiveUp;
    d.why = mb.replacements > 0 ? "cannot resume, and was replaced " + std::to_string(mb.replacements) + " time(s) already"
                                : "cannot resume, and no other member has a checkpoint to copy";
    mb.state = State::kGivenUp;
    return d;
  }
  d.kind = PbtDecision::Kind::kReplace;
  const Member& leader = members_[size_t(d.leader)];
  if (leader.objective) d.leader_objective = *leader.objective;
  d.new_hyper = Mutate(leader.hyper);
  d.why = "cannot resume: replaced by a copy of member " + std::to_string(d.leader);
  ++mb.replacements;
  mb.restarts = 0;
  mb.state = State::kHeld;
  return d;
}

std::vector<PbtDecision> PbtCore::Decide(Clock::time_point now) {
  std::vector<PbtDecision> out;
  for (int m = 0; m < size(); ++m) {
    Member& mb = members_[size_t(m)];
    if (mb.state == State::kDead && now >= mb.restart_due) {
      PbtDecision d;
      d.kind = PbtDecision::Kind::kRestart;
      d.member = m;
      d.frames = mb.frames;
      d.old_hyper = d.new_hyper = mb.hyper;
      d.why = "its fleet ended before its budget: resume " + std::to_string(mb.restarts) + " of " +
              std::to_string(cfg_.max_member_restarts());
      mb.state = State::kHeld;
      out.push_back(d);
    }
  }
  const std::vector<int> ranked = Ranking();
  const int n = int(ranked.size());
  const int q = std::min(n / 2, std::max(1, int(std::ceil(cfg_.quantile() * n - 1e-9))));
  for (int m = 0; m < size(); ++m) {
    Member& mb = members_[size_t(m)];
    if (mb.state != State::kRunning || mb.frames < mb.next_decision || !mb.objective) continue;
    // The next point: the first multiple of the interval past its frames (a member that
    // jumped several intervals decides once).
    const int64_t step = cfg_.interval_frames();
    while (mb.next_decision <= mb.frames) mb.next_decision += step;
    PbtDecision d;
    d.member = m;
    d.frames = mb.frames;
    d.objective = *mb.objective;
    d.ranked = n;
    d.rank = int(std::find(ranked.begin(), ranked.end(), m) - ranked.begin());
    d.old_hyper = d.new_hyper = mb.hyper;
    std::vector<int> leaders;
    if (n >= 2 && d.rank >= n - q) {
      for (int i = 0; i < q; ++i) {
        const int l = ranked[size_t(i)];
        if (l != m && *members_[size_t(l)].objective > *mb.objective + cfg_.min_gap()) leaders.push_back(l);
      }
    }
    if (leaders.empty()) {
      d.kind = PbtDecision::Kind::kKeep;
      d.why = n < 2 ? "no other member ranked yet"
                    : (d.rank >= n - q ? "in the bottom, but no top member is ahead by more than pbt.min_gap"
                                       : "not in the bottom quantile");
      out.push_back(d);
      continue;
    }
    d.kind = PbtDecision::Kind::kExploit;
    d.leader = leaders[std::uniform_int_distribution<size_t>(0, leaders.size() - 1)(rng_)];
    d.leader_objective = *members_[size_t(d.leader)].objective;
    d.new_hyper = Mutate(members_[size_t(d.leader)].hyper);
    d.why = "rank " + std::to_string(d.rank + 1) + " of " + std::to_string(n) + ": exploits member " +
            std::to_string(d.leader);
    mb.state = State::kHeld;
    out.push_back(d);
  }
  return out;
}

std::optional<PbtDecision> PbtCore::OnExit(int m, bool ok, Clock::time_point now) {
  Member& mb = members_[size_t(m)];
  if (ok) {
    mb.state = State::kFinished;
    return std::nullopt;
  }
  if (mb.restarts < cfg_.max_member_restarts()) {
    mb.restart_due = now + RestartBackoff(mb.restarts);
    ++mb.restarts;
    mb.state = State::kDead;
    return std::nullopt;
  }
  return Replace(m);
}

PbtDecision PbtCore::CannotResume(int m, Clock::time_point) { return Replace(m); }

void PbtCore::OnResumed(int m, const Hyper& hyper) {
  Member& mb = members_[size_t(m)];
  mb.state = State::kRunning;
  mb.hyper = hyper;
  mb.objective.reset();
}

}  // namespace stampede::coordinator
