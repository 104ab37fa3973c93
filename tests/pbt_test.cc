// Population-based training's decision core (coordinator/pbt.h) on a fake clock: who is
// ready, who exploits whom, what mutates and how, ties, members that die.
#include <catch2/catch.hpp>

#include <cmath>

#include "coordinator/pbt.h"

namespace stampede::coordinator {
namespace {

using Kind = PbtDecision::Kind;
using namespace std::chrono_literals;
const PbtCore::Clock::time_point t0{};
const char* kLr = "learner.optimizer.learning_rate";

config::PbtConfig Cfg(int n, double resample = 0) {
  config::PbtConfig p;
  p.set_population(n);
  p.set_interval_frames(1000);
  p.set_start_frames(3000);
  p.set_quantile(0.25);
  auto* f = p.add_evolve();
  f->set_path(kLr);
  f->set_low(1e-6);
  f->set_high(1e-2);
  f->set_perturb_factor(1.2);
  f->set_resample_probability(resample);
  return p;
}

std::vector<Hyper> Start(std::vector<double> lrs) {
  std::vector<Hyper> h;
  for (double lr : lrs) h.push_back({{kLr, lr}});
  return h;
}

// Every member at `frames` with objectives `obj`.
void Figures(PbtCore* core, int64_t frames, std::vector<double> obj) {
  for (int m = 0; m < int(obj.size()); ++m) core->OnFigures(m, frames, obj[size_t(m)]);
}

const PbtDecision* Of(const std::vector<PbtDecision>& ds, int m) {
  for (const auto& d : ds) {
    if (d.member == m) return &d;
  }
  return nullptr;
}

TEST_CASE("pbt: a member decides once its own frames pass start_frames and each interval after, with an objective") {
  PbtCore core(Cfg(4), Start({1e-3, 1e-3, 1e-3, 1e-3}), 7);
  Figures(&core, 2999, {1, 2, 3, 4});
  CHECK(core.Decide(t0).empty());  // before start_frames
  core.OnFigures(0, 3000, 1.0);
  auto ds = core.Decide(t0);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].member == 0);
  // Member 0 exploited: it is held, no more decisions until it runs again.
  REQUIRE(ds[0].kind == Kind::kExploit);
  core.OnFigures(0, 9000, 1.0);
  CHECK(core.Decide(t0).empty());
  core.OnResumed(0, ds[0].new_hyper);
  CHECK_FALSE(core.objective(0).has_value());  // the copy's episodes have not counted yet
  core.OnFigures(0, 9500, std::nullopt);
  CHECK(core.Decide(t0).empty());  // no objective, no decision
  // A member that jumped several intervals decides once, then at the next multiple.
  core.OnFigures(1, 7400, 5.0);  // the best: it keeps
  ds = core.Decide(t0);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].member == 1);
  CHECK(ds[0].kind == Kind::kKeep);
  core.OnFigures(1, 7900, 5.0);
  CHECK(core.Decide(t0).empty());
  core.OnFigures(1, 8000, 5.0);
  CHECK(core.Decide(t0).size() == 1);
  // Frames never go back.
  core.OnFigures(1, 10, 5.0);
  CHECK(core.frames(1) == 8000);
}

TEST_CASE("pbt: the bottom quantile exploits the top, with the leader's hyperparameters perturbed, and the rest keep") {
  PbtCore core(Cfg(4), Start({1e-5, 2e-5, 3e-5, 1e-3}), 1);
  Figures(&core, 3000, {0.1, 0.5, 0.7, 0.9});
  const auto ds = core.Decide(t0);
  REQUIRE(ds.size() == 4);
  const PbtDecision* worst = Of(ds, 0);
  REQUIRE(worst->kind == Kind::kExploit);
  CHECK(worst->leader == 3);  // ceil(0.25 x 4) = 1: the top member alone
  CHECK(worst->rank == 3);
  CHECK(worst->ranked == 4);
  CHECK(worst->objective == 0.1);
  CHECK(worst->leader_objective == 0.9);
  CHECK(worst->old_hyper.at(kLr) == 1e-5);
  const double lr = worst->new_hyper.at(kLr);
  CHECK((lr == Approx(1e-3 * 1.2) || lr == Approx(1e-3 / 1.2)));
  for (int m : {1, 2, 3}) {
    CHECK(Of(ds, m)->kind == Kind::kKeep);
    CHECK(Of(ds, m)->new_hyper == Of(ds, m)->old_hyper);
  }
  CHECK(Of(ds, 1)->why == "not in the bottom quantile");
}

TEST_CASE("pbt: with 8 members and quantile 0.25 the bottom two draw their leaders from the top two") {
  std::map<int, int> leaders;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    PbtCore core(Cfg(8), Start({1, 1, 1, 1, 1, 1, 1, 1}), seed);
    Figures(&core, 3000, {8, 7, 6, 5, 4, 3, 2, 1});
    for (const auto& d : core.Decide(t0)) {
      if (d.kind != Kind::kExploit) continue;
      CHECK((d.member == 6 || d.member == 7));
      ++leaders[d.leader];
    }
  }
  REQUIRE(leaders.size() == 2);  // members 0 and 1 only, both drawn
  CHECK(leaders[0] + leaders[1] == 80);
  CHECK(leaders[0] > 20);
  CHECK(leaders[1] > 20);
}

TEST_CASE("pbt: ties and pbt.min_gap: a bottom member not behind the leader by more than the gap keeps") {
  SECTION("a tie with the top is no loss; ties rank the lower index first") {
    PbtCore core(Cfg(4), Start({1, 1, 1, 1}), 3);
    Figures(&core, 3000, {0.5, 0.5, 0.5, 0.5});
    const auto ds = core.Decide(t0);
    for (const auto& d : ds) CHECK(d.kind == Kind::kKeep);
    CHECK(Of(ds, 3)->rank == 3);  // the highest index is last among equals
    CHECK(Of(ds, 3)->why == "in the bottom, but no top member is ahead by more than pbt.min_gap");
  }
  SECTION("a gap of 0.3 lets a member 0.25 behind keep, and one 0.35 behind exploit") {
    config::PbtConfig p = Cfg(4);
    p.set_min_gap(0.3);
    PbtCore a(p, Start({1, 1, 1, 1}), 3);
    Figures(&a, 3000, {1.0, 0.9, 0.8, 0.75});
    CHECK(Of(a.Decide(t0), 3)->kind == Kind::kKeep);
    PbtCore b(p, Start({1, 1, 1, 1}), 3);
    Figures(&b, 3000, {1.0, 0.9, 0.8, 0.65});
    CHECK(Of(b.Decide(t0), 3)->kind == Kind::kExploit);
  }
  SECTION("a member ranked alone keeps") {
    PbtCore core(Cfg(4), Start({1, 1, 1, 1}), 3);
    core.OnFigures(2, 3000, 0.1);
    const auto ds = core.Decide(t0);
    REQUIRE(ds.size() == 1);
    CHECK(ds[0].kind == Kind::kKeep);
    CHECK(ds[0].why == "no other member ranked yet");
  }
}

TEST_CASE("pbt: mutation perturbs by the factor either way, clamps to the range, resamples within it") {
  SECTION("perturbation: x 1.2 or / 1.2 at even odds, clamped at high") {
    PbtCore core(Cfg(2), Start({1, 1}), 11);
    int up = 0;
    for (int i = 0; i < 2000; ++i) {
      const double lr = core.Mutate({{kLr, 1e-3}}).at(kLr);
      REQUIRE((lr == Approx(1.2e-3) || lr == Approx(1e-3 / 1.2)));
      up += lr > 1e-3;
    }
    CHECK(up > 900);
    CHECK(up < 1100);
    for (int i = 0; i < 50; ++i) CHECK(core.Mutate({{kLr, 1e-2}}).at(kLr) <= 1e-2);
  }
  SECTION("a complement field mutates 1 - x: a discount of 0.99 becomes 0.988 or 0.99167") {
    config::PbtConfig p = Cfg(2);
    auto* f = p.add_evolve();
    f->set_path("learner.discount");
    f->set_low(0.9);
    f->set_high(0.999);
    f->set_perturb_factor(1.2);
    f->set_resample_probability(0);
    f->set_complement(true);
    PbtCore core(p, Start({1, 1}), 5);
    for (int i = 0; i < 100; ++i) {
      const double g = core.Mutate({{"learner.discount", 0.99}}).at("learner.discount");
      REQUIRE((g == Approx(1 - 0.01 * 1.2) || g == Approx(1 - 0.01 / 1.2)));
    }
  }
  SECTION("resampling is log-uniform in [low, high]: half the draws below the geometric middle") {
    PbtCore core(Cfg(2, /*resample=*/1), Start({1, 1}), 13);
    int below = 0;
    for (int i = 0; i < 4000; ++i) {
      const double lr = core.Mutate({{kLr, 1e-3}}).at(kLr);
      REQUIRE(lr >= 1e-6);
      REQUIRE(lr <= 1e-2);
      below += lr < 1e-4;  // sqrt(1e-6 x 1e-2)
    }
    CHECK(below > 1800);
    CHECK(below < 2200);
  }
  SECTION("fields not evolved are left alone") {
    PbtCore core(Cfg(2), Start({1, 1}), 1);
    const Hyper h = core.Mutate({{kLr, 1e-3}, {"learner.entropy_cost", 0.01}});
    CHECK(h.at("learner.entropy_cost") == 0.01);
  }
}

TEST_CASE("pbt: the same seed makes the same decisions") {
  auto run = [](uint64_t seed) {
    PbtCore core(Cfg(4, 0.5), Start({1e-4, 1e-4, 1e-4, 1e-4}), seed);
    Figures(&core, 3000, {0.1, 0.2, 0.3, 0.4});
    std::vector<double> out;
    for (const auto& d : core.Decide(t0)) out.push_back(d.new_hyper.at(kLr));
    return out;
  };
  CHECK(run(9) == run(9));
}

TEST_CASE("pbt: a member whose fleet died resumes after a growing backoff, then is replaced by the best other") {
  config::PbtConfig p = Cfg(3);
  p.set_max_member_restarts(2);
  PbtCore core(p, Start({1e-4, 2e-4, 3e-4}), 2);
  Figures(&core, 2000, {0.9, 0.5, 0.1});
  // A budget spent (exit 0) finishes a member: no more decisions, but it stays a leader.
  CHECK_FALSE(core.OnExit(0, true, t0).has_value());
  CHECK(core.finished(0));
  // Member 2 dies: resumed after 1 s, then 2 s.
  CHECK_FALSE(core.OnExit(2, false, t0).has_value());
  CHECK(core.Decide(t0 + 999ms).empty());
  auto ds = core.Decide(t0 + 1000ms);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].kind == Kind::kRestart);
  CHECK(ds[0].member == 2);
  CHECK(ds[0].new_hyper == ds[0].old_hyper);
  core.OnResumed(2, ds[0].new_hyper);
  CHECK_FALSE(core.OnExit(2, false, t0 + 5s).has_value());
  CHECK(core.Decide(t0 + 6999ms).empty());
  ds = core.Decide(t0 + 7s);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].kind == Kind::kRestart);
  core.OnResumed(2, ds[0].new_hyper);
  // Its restarts spent: a copy of the best member (the finished one), hyperparameters perturbed.
  const auto replace = core.OnExit(2, false, t0 + 9s);
  REQUIRE(replace.has_value());
  CHECK(replace->kind == Kind::kReplace);
  CHECK(replace->leader == 0);
  CHECK((replace->new_hyper.at(kLr) == Approx(1.2e-4) || replace->new_hyper.at(kLr) == Approx(1e-4 / 1.2)));
  // The shell could not resume it from the copy either: replaced from the next best...
  const PbtDecision again = core.CannotResume(2, t0 + 10s);
  CHECK(again.kind == Kind::kReplace);
  // ... and past max_member_restarts replacements it is given up.
  const PbtDecision last = core.CannotResume(2, t0 + 11s);
  CHECK(last.kind == Kind::kGiveUp);
  CHECK_FALSE(core.AllEnded());  // member 1 still runs
  CHECK_FALSE(core.OnExit(1, true, t0 + 12s).has_value());
  CHECK(core.AllEnded());
}

TEST_CASE("pbt: a member that cannot resume with no other member to copy is given up") {
  PbtCore core(Cfg(2), Start({1e-4, 1e-4}), 2);
  core.OnFigures(0, 500, std::nullopt);  // member 1 has made no frames: no checkpoint to copy
  const PbtDecision d = core.CannotResume(0, t0);
  CHECK(d.kind == Kind::kGiveUp);
  CHECK(d.why == "cannot resume, and no other member has a checkpoint to copy");
}

}  // namespace
}  // namespace stampede::coordinator
