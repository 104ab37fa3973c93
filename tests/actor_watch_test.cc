// The coordinator's per-actor view (coordinator/actor_watch.h): an actor whose parameters stop
// moving while the learner's do, or whose lag is far beyond the other actors', is found
// once; lags are weighted by trajectories and the worst actor is the row's largest lag.
#include <catch2/catch.hpp>

#include "coordinator/actor_watch.h"

using stampede::coordinator::ActorWatch;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

TEST_CASE("actor watch: an actor whose version stays while the learner moves is found once, again after it recovers",
          "[coordinator][actors]") {
  ActorWatch w(30);
  const auto t0 = Clock::now();
  w.OnLearnerVersion(100);
  w.OnActorStatus(0, 99, 99, 0, 0, t0);
  w.OnActorStatus(1, 99, 99, 0, 0, t0);
  for (int s = 1; s <= 29; ++s) {
    w.OnLearnerVersion(100 + s);
    w.OnActorStatus(0, 99 + s, 99 + s, 0, 0, t0 + seconds(s));
    w.OnActorStatus(1, 99, 120, 0, 0, t0 + seconds(s));  // frozen
    CHECK(w.Check(t0 + seconds(s)).empty());
  }
  w.OnLearnerVersion(130);
  const auto found = w.Check(t0 + seconds(30));
  REQUIRE(found.size() == 1);
  CHECK(found[0].event == "actor_params_stale");
  CHECK(found[0].actor == 1);
  CHECK(found[0].version == 99);
  CHECK(found[0].lag == 130 - 99);
  CHECK(found[0].unchanged_s == Approx(30));
  CHECK(w.Check(t0 + seconds(40)).empty());  // said once
  // It recovers, then freezes again: said again after another 30 s.
  w.OnActorStatus(0, 131, 131, 0, 0, t0 + seconds(41));
  w.OnActorStatus(1, 131, 131, 0, 0, t0 + seconds(41));
  w.OnLearnerVersion(140);
  CHECK(w.Check(t0 + seconds(70)).empty());
  const auto again = w.Check(t0 + seconds(71));
  REQUIRE(again.size() == 2);  // both actors now sit still while the learner moved
  CHECK(again[0].event == "actor_params_stale");
  CHECK(again[1].event == "actor_params_stale");
}

TEST_CASE("actor watch: an actor's first fetcher reset is said once, later ones are counted", "[coordinator][actors]") {
  ActorWatch w(0);
  const auto t0 = Clock::now();
  w.OnActorStatus(0, 10, 10, 0, 0, t0);
  CHECK(w.Check(t0).empty());
  w.OnActorStatus(0, 10, 70, 1, 0, t0);
  const auto found = w.Check(t0);
  REQUIRE(found.size() == 1);
  CHECK(found[0].event == "actor_fetcher_reset");
  CHECK(found[0].lag == 60);
  w.OnActorStatus(0, 80, 80, 5, 0, t0);
  CHECK(w.Check(t0).empty());
  CHECK(w.actors().at(0).fetcher_resets == 5);
}

TEST_CASE("actor watch: a version that stays while the learner stays too is not stale", "[coordinator][actors]") {
  ActorWatch w(5);
  const auto t0 = Clock::now();
  w.OnLearnerVersion(10);
  w.OnActorStatus(0, 10, 10, 0, 0, t0);
  CHECK(w.Check(t0 + seconds(60)).empty());  // the learner never moved (waiting, stopping)
  ActorWatch off(0);
  off.OnLearnerVersion(10);
  off.OnActorStatus(0, 1, 1, 0, 0, t0);
  off.OnLearnerVersion(1000);
  CHECK(off.Check(t0 + seconds(3600)).empty());  // actors.max_params_age_s 0: never
}

TEST_CASE("actor watch: one actor far behind the others is found, lags are weighted and the worst is the row largest",
          "[coordinator][actors]") {
  ActorWatch w(0);
  const auto t0 = Clock::now();
  for (int a = 0; a < 4; ++a) w.OnActorStatus(a, 50, 50, 0, 0, t0);
  w.OnLearnerActorLag(0, 48, 2, 2.0, 3, 10);
  w.OnLearnerActorLag(1, 47, 3, 2.5, 4, 10);
  w.OnLearnerActorLag(2, 48, 2, 2.0, 2, 10);
  w.OnLearnerActorLag(3, 45, 18, 10.0, 18, 10);  // 4 x median 2 + 10 = 18: not beyond
  CHECK(w.Check(t0).empty());
  CHECK(w.worst_actor() == 3);
  CHECK(w.worst_lag() == 18);
  w.OnLearnerActorLag(3, 40, 19, 19.0, 19, 30);
  const auto found = w.Check(t0);
  REQUIRE(found.size() == 1);
  CHECK(found[0].event == "actor_lag_far_behind");
  CHECK(found[0].actor == 3);
  CHECK(found[0].lag == 19);
  CHECK(w.Check(t0).empty());  // said once
  // Weighted mean over the row: 10 trajectories at 10, then 20 at 19.
  CHECK(w.actors().at(3).lag_mean == Approx((10 * 10.0 + 20 * 19.0) / 30));
  // A new row: the row's largest starts again, the run's largest stays.
  w.EndRow();
  w.OnLearnerActorLag(3, 60, 1, 1.0, 1, 40);
  w.OnLearnerActorLag(1, 60, 5, 5.0, 5, 20);
  CHECK(w.worst_actor() == 1);
  CHECK(w.worst_lag() == 5);
  CHECK(w.actors().at(3).lag_max_run == 19);
  CHECK(w.actors().at(3).lag_mean == Approx(1.0));
  // Recovered (lag well under the limit), then far behind again: said again.
  CHECK(w.Check(t0).empty());
  w.OnLearnerActorLag(3, 10, 200, 200.0, 200, 50);
  REQUIRE(w.Check(t0).size() == 1);
}
