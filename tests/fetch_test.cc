// Assembling whole versions from several PS shards while the learner keeps putting new
// ones: the wedge seen in long Pong runs (an actor's fetcher chasing one version behind
// for good) reproduced with real shards, and the fetcher's decisions (ps/fetch_state.h)
// driven through a simulated network with random delays, drops, reordered replies,
// skipped puts and shards that move past the versions they keep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <thread>

#include "ps/client.h"
#include "ps/fetch_state.h"
#include "ps/shard.h"
#include "wire/zmq_util.h"
#include "tests/wait.h"

using namespace stampede;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Shards on loopback, each on its own thread that can be paused (its messages wait in
// its socket meanwhile): a shard process descheduled for a while.
struct PausableShards {
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<ps::Shard>> shards;
  std::vector<std::unique_ptr<std::atomic<bool>>> stops;
  std::vector<std::thread> threads;
  std::vector<std::string> endpoints;
  explicit PausableShards(int n) {
    for (int s = 0; s < n; ++s) {
      ps::ShardOptions so;
      so.shard = s;
      so.num_shards = n;
      shards.push_back(std::make_unique<ps::Shard>(ctx, so));
      REQUIRE(shards.back()->Bind("tcp://127.0.0.1:*").ok());
      endpoints.push_back(shards.back()->endpoint());
      stops.push_back(std::make_unique<std::atomic<bool>>(false));
      threads.emplace_back();
      Resume(s);
    }
  }
  ~PausableShards() {
    for (int s = 0; s < int(shards.size()); ++s) Pause(s);
  }
  void Pause(int s) {
    *stops[size_t(s)] = true;
    if (threads[size_t(s)].joinable()) threads[size_t(s)].join();
  }
  void Resume(int s) {
    *stops[size_t(s)] = false;
    threads[size_t(s)] = std::thread([this, s] { shards[size_t(s)]->Run(*stops[size_t(s)]); });
  }
  ps::ClientOptions Options(int64_t total, wire::Role role) const {
    ps::ClientOptions o;
    o.endpoints = endpoints;
    o.total_size = total;
    o.layout_fingerprint = 7;
    o.sender = wire::MakeSender(role, 0, 1);
    return o;
  }
};

// Between two of an actor's sends in the Pong fleet the fetcher polls once.
constexpr milliseconds kActorSendInterval{30};

std::vector<float> Pattern(int64_t total, int64_t version) {
  std::vector<float> v(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) v[size_t(i)] = float(version * 10000 + i);
  return v;
}

}  // namespace

TEST_CASE("fetch: a shard that answers late once does not leave the fetcher a version behind for good",
          "[ps][fetch]") {
  // The Pong wedge, step by step. Shard 1 is descheduled while the learner puts version
  // 2, so the fetcher holds shard 0's slice of 2 and shard 1's of 1. From then on the
  // learner puts one version between every two polls, as in a Pong fleet (one learner
  // step per actor send). The fetcher must be back on a version at most two behind the
  // learner's within a few polls, and stay there.
  const int64_t total = 1000;
  PausableShards fleet(2);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(total, wire::ROLE_LEARNER));
  ps::ParamsFetcher fetch(fleet.ctx, fleet.Options(total, wire::ROLE_ACTOR));
  std::vector<float> params(static_cast<size_t>(total));
  int64_t version = -1;
  REQUIRE(pub.PutAll(Pattern(total, 1), 1, nullptr));
  REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
  REQUIRE(version == 1);
  fetch.Poll(params, &version);  // whatever is due after the first version is asked now

  fleet.Pause(1);
  REQUIRE(pub.PutAll(Pattern(total, 2), 2, nullptr));  // waits in shard 1's socket
  REQUIRE(testing::WaitUntil([&] { return fleet.shards[0]->stats().newest_version.load() == 2; }));
  fetch.Poll(params, &version);  // shard 0's 2 is in; shard 1 says nothing yet
  CHECK(version == 1);
  fleet.Resume(1);
  REQUIRE(testing::WaitUntil([&] { return fleet.shards[1]->stats().newest_version.load() == 2; }));

  int64_t worst_late_lag = 0;
  const int64_t last = 40;
  for (int64_t v = 3; v <= last; ++v) {
    REQUIRE(pub.PutAll(Pattern(total, v), v, nullptr));
    std::this_thread::sleep_for(kActorSendInterval);  // the fleet's pace, not a wait
    const int64_t before = version;
    if (fetch.Poll(params, &version)) {
      REQUIRE(version > before);
      REQUIRE(params == Pattern(total, version));  // one whole version
    }
    if (v >= 8) worst_late_lag = std::max(worst_late_lag, v - version);
  }
  INFO("the fetcher ended on version " << version << " with the learner at " << last);
  CHECK(worst_late_lag <= 2);
  CHECK(fetch.mixed_assemblies() == 0);  // caught up whole, no fallback needed
}

TEST_CASE("fetch: a reset fetcher asks every shard afresh and keeps its parameters until a new version",
          "[ps][fetch]") {
  const int64_t total = 300;
  PausableShards fleet(3);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(total, wire::ROLE_LEARNER));
  ps::ParamsFetcher fetch(fleet.ctx, fleet.Options(total, wire::ROLE_ACTOR));
  std::vector<float> params(static_cast<size_t>(total));
  int64_t version = -1;
  REQUIRE(pub.PutAll(Pattern(total, 5), 5, nullptr));
  REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
  fetch.Reset();
  CHECK(fetch.resets() == 1);
  CHECK(fetch.newest_heard() == -1);
  CHECK_FALSE(fetch.Poll(params, &version));  // nothing newer than 5 yet
  CHECK(params == Pattern(total, 5));
  REQUIRE(pub.PutAll(Pattern(total, 6), 6, nullptr));
  REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
  CHECK(version == 6);
  CHECK(params == Pattern(total, 6));
}

namespace {

// A simulated PS (the shard's Pick and long-poll rules, ps/shard.cc), network and
// learner, in virtual time, around one FetchState.
struct Scenario {
  int shards = 2;
  int kept = 8;                  // versions each shard keeps
  double put_interval_ms = 5;    // learner step time
  double put_skew_ms = 2;        // a put reaches each shard up to this late
  double skip = 0;               // a shard misses a put (its queue was full)
  double poll_interval_ms = 20;  // actor unroll time (polls at [I/2, I])
  double drop = 0;               // a request or reply is lost (at most kMaxDrops in a row per link)
  double slow = 0;               // a reply takes 300-600 ms (slower than the request timeout)
  int64_t last_version = 400;
};
constexpr int kMaxDrops = 2;
constexpr double kMaxReplyMs = 600, kMaxRequestMs = 2, kTimeoutMs = 250;

struct Outcome {
  int64_t assemblies = 0, mixed = 0;
  double worst_gap_ms = 0;        // since the last assembly, at any poll while the learner puts
  double final_after_ms = -1;     // the last version, whole, this long after it reached every shard
  std::string violation;          // empty: every assembled version was sound
};

Outcome Simulate(const Scenario& sc, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto chance = [&](double p) { return p > 0 && uniform(0, 1) < p; };
  struct Request {
    int64_t min_version, exact_version;
  };
  struct SimShard {
    std::deque<int64_t> versions;
    std::optional<Request> held;
    int request_drops = 0, reply_drops = 0;
    std::deque<int64_t> mailbox;  // replies arrived at the fetcher's socket, unread
  };
  std::vector<SimShard> shard(size_t(sc.shards));
  enum Kind { kPut, kRequest, kReply };
  struct Event {
    double t;
    int64_t seq;
    Kind kind;
    int shard;
    int64_t version;
    Request req;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  int64_t seq = 0;
  auto at = [&](double t, Kind k, int s, int64_t v, Request r = {}) { events.push({t, seq++, k, s, v, r}); };

  auto reply = [&](double now, int s, int64_t v) {
    SimShard& sh = shard[size_t(s)];
    if (sh.reply_drops < kMaxDrops && chance(sc.drop)) {
      ++sh.reply_drops;
      return;
    }
    sh.reply_drops = 0;
    const double delay = chance(sc.slow) ? uniform(300, kMaxReplyMs) : uniform(0.05, 5);
    at(now + delay, kReply, s, v);
  };
  auto pick = [&](const SimShard& sh, const Request& r) -> int64_t {
    if (r.exact_version > 0 && std::find(sh.versions.begin(), sh.versions.end(), r.exact_version) != sh.versions.end()) {
      return r.exact_version;
    }
    if (!sh.versions.empty() && sh.versions.back() >= r.min_version) return sh.versions.back();
    return -1;
  };

  // The learner: version 1 reaches every shard; later ones may miss a shard, except the last.
  double last_arrival = 0, t = 0;
  for (int64_t v = 1; v <= sc.last_version; ++v) {
    if (v > 1) t += sc.put_interval_ms * uniform(0.5, 1.5);
    for (int s = 0; s < sc.shards; ++s) {
      if (v != 1 && v != sc.last_version && chance(sc.skip)) continue;
      const double arrive = t + uniform(0, sc.put_skew_ms);
      if (v == sc.last_version) last_arrival = std::max(last_arrival, arrive);
      at(arrive, kPut, s, v);
    }
  }
  // (With skew, a put can reach a shard after a newer one: the shard drops it as stale.)

  ps::FetchState state(sc.shards, false, milliseconds(int(kTimeoutMs)));
  const auto epoch = Clock::time_point{} + std::chrono::hours(1);
  auto clock_at = [&](double ms) { return epoch + std::chrono::microseconds(int64_t(ms * 1000)); };
  Outcome out;
  int64_t current = -1;
  double last_assembly = -1, now = 0;
  double next_poll = uniform(sc.poll_interval_ms / 2, sc.poll_interval_ms);
  const double end = 30000 + sc.last_version * sc.put_interval_ms * 1.5;
  std::vector<int64_t> held_data(size_t(sc.shards), -1);  // the slice's content: its version
  while (now < end) {
    if (!events.empty() && events.top().t <= next_poll) {
      const Event e = events.top();
      events.pop();
      now = e.t;
      SimShard& sh = shard[size_t(e.shard)];
      if (e.kind == kPut) {
        if (!sh.versions.empty() && e.version <= sh.versions.back()) continue;  // stale put
        sh.versions.push_back(e.version);
        while (int(sh.versions.size()) > sc.kept) sh.versions.pop_front();
        if (sh.held) {
          const int64_t v = pick(sh, *sh.held);
          if (v >= 0) {
            sh.held.reset();
            reply(now, e.shard, v);
          }
        }
      } else if (e.kind == kRequest) {
        const int64_t v = pick(sh, e.req);
        if (v >= 0) {
          reply(now, e.shard, v);  // (a request held before stays held, as in ps/shard.cc)
        } else {
          sh.held = e.req;  // replaces the one held for this peer
        }
      } else {
        sh.mailbox.push_back(e.version);
      }
      continue;
    }
    // A poll: read every reply in, assemble, send what is due.
    now = next_poll;
    next_poll = now + uniform(sc.poll_interval_ms / 2, sc.poll_interval_ms);
    for (int s = 0; s < sc.shards; ++s) {
      for (int64_t v : shard[size_t(s)].mailbox) {
        if (state.OnReply(s, true, v, current)) held_data[size_t(s)] = v;
      }
      shard[size_t(s)].mailbox.clear();
    }
    const ps::FetchState::Assembly a = state.Take(clock_at(now), current);
    // How long the caller has been on its version, at every poll while the learner puts.
    if (last_assembly >= 0 && now < last_arrival) out.worst_gap_ms = std::max(out.worst_gap_ms, now - last_assembly);
    if (a.version >= 0) {
      const int64_t lo = *std::min_element(held_data.begin(), held_data.end());
      const int64_t hi = *std::max_element(held_data.begin(), held_data.end());
      if (a.version <= current) out.violation = "version went from " + std::to_string(current) + " to " + std::to_string(a.version);
      if (!a.mixed && (lo != a.version || hi != a.version)) out.violation = "a whole version of mixed slices";
      if (a.mixed && (lo != a.version || lo <= current)) out.violation = "a mixed assembly not named by its oldest slice";
      if (!out.violation.empty()) return out;
      ++out.assemblies;
      out.mixed += a.mixed ? 1 : 0;
      last_assembly = now;
      current = a.version;
      if (current == sc.last_version && !a.mixed && out.final_after_ms < 0) {
        out.final_after_ms = now - last_arrival;
        return out;
      }
    }
    for (const ps::FetchRequest& r : state.Due(clock_at(now), current)) {
      state.Sent(r.shard, clock_at(now));
      SimShard& sh = shard[size_t(r.shard)];
      if (sh.request_drops < kMaxDrops && chance(sc.drop)) {
        ++sh.request_drops;
        continue;
      }
      sh.request_drops = 0;
      at(now + uniform(0.02, kMaxRequestMs), kRequest, r.shard, 0, {r.min_version, r.exact_version});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("fetch: random delays, drops, reordered replies and skipped puts always end on the newest version, whole",
          "[ps][fetch][property]") {
  // Bounds, from the rules: a round of requests is lost at most kMaxDrops times in a row
  // (each loss costs a request timeout) and a reply takes at most kMaxReplyMs; a whole
  // version is caught up with in one round, or after two misses or kCatchUpLimit a
  // mixed one is taken.
  const double round_ms = kTimeoutMs + kMaxReplyMs + kMaxRequestMs;
  const double catch_up_ms = double(ps::FetchState::kCatchUpLimit.count());
  int64_t total_mixed = 0, total_assemblies = 0, runs = 0;
  std::mt19937_64 pick(20261201);
  for (int i = 0; i < 600; ++i) {
    Scenario sc;
    sc.shards = 1 + int(pick() % 4);
    sc.kept = std::vector<int>{2, 4, 8}[pick() % 3];
    sc.put_interval_ms = std::vector<double>{0.5, 2, 10, 50}[pick() % 4];
    sc.put_skew_ms = std::vector<double>{0, 1, 5, 30}[pick() % 4];
    sc.poll_interval_ms = std::vector<double>{1, 10, 60, 300}[pick() % 4];
    sc.skip = std::vector<double>{0, 0.05, 0.3}[pick() % 3];
    sc.drop = std::vector<double>{0, 0.05, 0.2}[pick() % 3];
    sc.slow = std::vector<double>{0, 0.01, 0.1}[pick() % 3];
    sc.last_version = 300;
    const uint64_t seed = pick();
    const Outcome o = Simulate(sc, seed);
    INFO("scenario " << i << ": shards " << sc.shards << ", kept " << sc.kept << ", put every " << sc.put_interval_ms
                     << " ms (skew " << sc.put_skew_ms << ", skip " << sc.skip << "), poll every "
                     << sc.poll_interval_ms << " ms, drop " << sc.drop << ", slow " << sc.slow << ", seed " << seed);
    REQUIRE(o.violation.empty());
    const double poll_ms = sc.poll_interval_ms;
    // While the learner puts: never longer than a catch-up limit plus the rounds a lost
    // or slow answer can cost, plus the poll that reads it.
    REQUIRE(o.worst_gap_ms <= catch_up_ms + (kMaxDrops + 1) * round_ms + 2 * poll_ms);
    // After the last put: the newest version, whole, within two rounds of losses.
    REQUIRE(o.final_after_ms >= 0);
    REQUIRE(o.final_after_ms <= 2 * (kMaxDrops + 1) * round_ms + 2 * poll_ms);
    total_mixed += o.mixed;
    total_assemblies += o.assemblies;
    ++runs;
  }
  CHECK(runs == 600);
  // The fallback is the exception: most assemblies are whole versions.
  CHECK(total_mixed * 4 < total_assemblies);
}

TEST_CASE("fetch: a fetcher polling slower than the learner steps stays on fresh whole versions", "[ps][fetch][property]") {
  // The Pong fleet's rhythm (a learner step per actor send, two actors: at least one
  // step between two polls) with puts reaching the shards up to 3 ms apart, no losses:
  // every assembly is whole, and one comes at least every few polls (the fetcher that
  // asked the shard ahead for "anything newer" while catching up fails here).
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Scenario sc;
    sc.shards = 2;
    sc.kept = 8;
    sc.put_interval_ms = 8;  // [4, 12] ms: at least one put between two polls
    sc.put_skew_ms = 3;
    sc.poll_interval_ms = 30;  // [15, 30] ms
    sc.last_version = 500;
    const Outcome o = Simulate(sc, seed);
    INFO("seed " << seed);
    REQUIRE(o.violation.empty());
    CHECK(o.mixed == 0);
    CHECK(o.worst_gap_ms <= 3 * sc.poll_interval_ms);
    CHECK(o.final_after_ms >= 0);
  }
}
