// learner/ring.h: the ring-allreduce between learners. Each learner runs in its own thread,
// over inproc sockets of one context, as the learners of a run do over TCP.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include <zmq.hpp>

#include "learner/ring.h"
#include "wire/messages.pb.h"
#include "wire/zmq_util.h"

using namespace stampede;
using learner::Ring;
using learner::RingContribution;

namespace {

std::vector<std::string> Endpoints(const std::string& tag, int L) {
  std::vector<std::string> e;
  for (int l = 0; l < L; ++l) e.push_back("inproc://ring-" + tag + "-" + std::to_string(l));
  return e;
}

// Loopback TCP endpoints on free ports: a learner restarted on its endpoint is reconnected
// to (inproc does not reconnect). Below the kernel's ephemeral range (as `stampede run`
// picks them): a port from that range can be taken, before its ring binds it, as the
// local port of another ring's connection to it or to a neighbour.
std::vector<std::string> TcpEndpoints(int L) {
  std::vector<std::string> e;
  std::mt19937 rng(std::random_device{}());
  for (int l = 0; l < L; ++l) {
    zmq::context_t c(1);
    zmq::socket_t s(c, zmq::socket_type::pull);
    s.set(zmq::sockopt::linger, 0);
    for (int attempt = 0;; ++attempt) {
      const std::string ep = "tcp://127.0.0.1:" + std::to_string(std::uniform_int_distribution<int>(20000, 32000)(rng));
      try {
        s.bind(ep);
        e.push_back(ep);
        break;
      } catch (const zmq::error_t&) {
        REQUIRE(attempt < 100);
      }
    }
  }
  return e;
}

std::vector<std::unique_ptr<Ring>> MakeRings(zmq::context_t& ctx, const std::string& tag, int L, int64_t piece,
                                             std::chrono::milliseconds timeout = std::chrono::seconds(20),
                                             std::vector<std::string> endpoints = {}) {
  std::vector<std::unique_ptr<Ring>> rings;
  if (endpoints.empty()) endpoints = Endpoints(tag, L);
  for (int l = 0; l < L; ++l) {
    learner::RingOptions o;
    o.endpoints = endpoints;
    o.rank = l;
    o.incarnation = 100 + uint64_t(l);
    o.timeout = timeout;
    o.piece_elements = piece;
    rings.push_back(std::make_unique<Ring>(ctx, o));
    REQUIRE(rings.back()->Start().ok());
  }
  return rings;
}

// The ring's documented order: chunk c (position c's share of the buffer, the buffer cut
// at n * c / L) summed from member c onwards, then divided by the contributors.
std::vector<float> RingOrderMean(const std::vector<std::vector<float>>& x, const std::vector<int>& weights) {
  const int L = int(x.size());
  const int64_t n = int64_t(x[0].size());
  int W = 0;
  for (int w : weights) W += w;
  std::vector<float> out(static_cast<size_t>(n));
  for (int c = 0; c < L; ++c) {
    for (int64_t i = n * c / L; i < n * (c + 1) / L; ++i) {
      float s = weights[size_t(c)] ? x[size_t(c)][size_t(i)] : 0.f;
      for (int k = 1; k < L; ++k) {
        const int m = (c + k) % L;
        s = (weights[size_t(m)] ? x[size_t(m)][size_t(i)] : 0.f) + s;
      }
      out[size_t(i)] = W > 0 ? s / float(W) : s;
    }
  }
  return out;
}

struct Outcome {
  base::Status status;
  std::vector<float> data;
  std::vector<RingContribution> all;
};

// Runs one reduction on the given members (each in its own thread) with inputs x.
std::vector<Outcome> Reduce(std::vector<std::unique_ptr<Ring>>& rings, int64_t round, const std::vector<int>& members,
                            const std::vector<std::vector<float>>& x, const std::vector<int>& weights) {
  std::vector<Outcome> out(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      const int l = members[i];
      out[i].data = x[size_t(l)];
      RingContribution own;
      own.env_frames = 1000 * (l + 1);
      own.weight = weights[size_t(l)];
      own.fingerprint = 77;
      out[i].status = rings[size_t(l)]->AllReduce(round, members, out[i].data, own, &out[i].all);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<std::vector<float>> RandomInputs(int L, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<std::vector<float>> x(static_cast<size_t>(L), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : x) {
    for (auto& e : v) e = d(rng) * std::exp(3 * d(rng));  // magnitudes far apart: the order shows in the bits
  }
  return x;
}

}  // namespace

TEST_CASE("allreduce ring: 2, 3 and 4 learners and lengths that do not divide evenly give every learner the mean, bit for bit", "[ring]") {
  zmq::context_t ctx(1);
  int tag = 0;
  for (int L : {2, 3, 4}) {
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(1001), int64_t(100003)}) {
      INFO(L << " learners, " << n << " values");
      // Small pieces: a chunk goes as several messages.
      auto rings = MakeRings(ctx, "even" + std::to_string(tag++), L, 1000);
      const auto x = RandomInputs(L, n, uint64_t(L * 1000 + n));
      std::vector<int> members(static_cast<size_t>(L)), weights(static_cast<size_t>(L), 1);
      for (int l = 0; l < L; ++l) members[size_t(l)] = l;
      const auto expected = RingOrderMean(x, weights);
      for (int64_t round = 1; round <= 2; ++round) {
        const auto out = Reduce(rings, round, members, x, weights);
        for (int l = 0; l < L; ++l) {
          INFO("learner " << l << ", round " << round << ": " << out[size_t(l)].status.message());
          REQUIRE(out[size_t(l)].status.ok());
          // The same bits as the sum taken directly in the ring's order.
          REQUIRE(std::memcmp(out[size_t(l)].data.data(), expected.data(), size_t(n) * sizeof(float)) == 0);
          // Every member's contribution, in learner order.
          REQUIRE(out[size_t(l)].all.size() == size_t(L));
          for (int k = 0; k < L; ++k) {
            CHECK(out[size_t(l)].all[size_t(k)].learner == k);
            CHECK(out[size_t(l)].all[size_t(k)].env_frames == 1000 * (k + 1));
            CHECK(out[size_t(l)].all[size_t(k)].fingerprint == 77u);
          }
        }
      }
      // And the mean it is: against a double-precision mean, to float rounding.
      for (int64_t i = 0; i < n; ++i) {
        double s = 0, mag = 0;
        for (int l = 0; l < L; ++l) s += x[size_t(l)][size_t(i)], mag += std::abs(x[size_t(l)][size_t(i)]);
        REQUIRE(std::abs(double(expected[size_t(i)]) - s / L) <= 1e-6 * mag + 1e-30);
      }
    }
  }
}

TEST_CASE("allreduce ring: a learner with no gradient (weight 0) is left out of the mean, its values unread", "[ring]") {
  zmq::context_t ctx(1);
  auto rings = MakeRings(ctx, "weight", 3, 64);
  auto x = RandomInputs(3, 500, 5);
  for (auto& v : x[1]) v = std::nanf("");  // a non-finite gradient: sent as zeros
  const std::vector<int> weights = {1, 0, 1};
  const auto out = Reduce(rings, 1, {0, 1, 2}, x, weights);
  const auto expected = RingOrderMean(x, weights);
  for (const auto& o : out) {
    REQUIRE(o.status.ok());
    REQUIRE(std::memcmp(o.data.data(), expected.data(), expected.size() * sizeof(float)) == 0);
    CHECK(o.all[1].weight == 0);
  }
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(expected[i] == Approx((x[0][i] + x[2][i]) / 2).epsilon(1e-6));
}

TEST_CASE("allreduce ring: a learner that vanishes mid-reduction makes the others end at the deadline, and a ring of the rest goes on", "[ring]") {
  zmq::context_t ctx(1);
  auto rings = MakeRings(ctx, "vanish", 3, 64, std::chrono::milliseconds(300));
  const auto x = RandomInputs(3, 300, 9);
  const std::vector<int> weights = {1, 1, 1};
  // Learner 2 never takes part in round 1: the others end, naming whom they waited for.
  std::vector<Outcome> out(2);
  std::vector<std::thread> threads;
  for (int l = 0; l < 2; ++l) {
    threads.emplace_back([&, l] {
      out[size_t(l)].data = x[size_t(l)];
      out[size_t(l)].status = rings[size_t(l)]->AllReduce(1, {0, 1, 2}, out[size_t(l)].data, RingContribution{}, &out[size_t(l)].all);
    });
  }
  for (auto& t : threads) t.join();
  for (int l = 0; l < 2; ++l) {
    INFO(out[size_t(l)].status.message());
    CHECK(out[size_t(l)].status.code() == base::Code::kUnavailable);
    CHECK_THAT(out[size_t(l)].status.message(), Catch::Contains("sent nothing for") && Catch::Contains("allreduce_timeout_s"));
  }
  CHECK_THAT(out[0].status.message(), Catch::Contains("learner 2"));
  // The survivors form a ring of two and reduce the next round; the pieces of the
  // abandoned round still queued are dropped, never added.
  const auto again = Reduce(rings, 2, {0, 1}, x, weights);
  const auto expected = RingOrderMean({x[0], x[1]}, {1, 1});
  for (const auto& o : again) {
    INFO(o.status.message());
    REQUIRE(o.status.ok());
    REQUIRE(std::memcmp(o.data.data(), expected.data(), expected.size() * sizeof(float)) == 0);
    REQUIRE(o.all.size() == 2);
  }
}

TEST_CASE("allreduce ring: messages that are not the expected piece are dropped and counted, never added", "[ring]") {
  zmq::context_t ctx(1);
  auto rings = MakeRings(ctx, "rogue", 2, 64);
  // A peer that is no member: pieces of an older round, of the right round from the wrong
  // learner, of the wrong size, and garbage, all sent to learner 0 before the reduction.
  zmq::socket_t rogue(ctx, zmq::socket_type::push);
  rogue.connect("inproc://ring-rogue-0");
  const std::vector<float> junk(32, 1e30f);
  const wire::Frame f{junk.data(), junk.size() * sizeof(float)};
  auto part = [&](int64_t round, int sender, int64_t total) {
    wire::RingPart h;
    *h.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, sender, 5);
    h.set_round(round);
    h.set_total(total);
    h.add_members(0);
    h.add_members(1);
    REQUIRE(wire::SendMessage(rogue, h, std::span<const wire::Frame>(&f, 1)));
  };
  part(0, 1, 400);   // an older round
  part(3, 0, 400);   // this round, but from learner 0 itself, not the previous member
  part(3, 1, 9999);  // another buffer length
  {
    zmq::message_t garbage("not a header", 12), body(4);
    REQUIRE(rogue.send(garbage, zmq::send_flags::sndmore));
    REQUIRE(rogue.send(body, zmq::send_flags::none));
  }
  const auto x = RandomInputs(2, 400, 11);
  const auto out = Reduce(rings, 3, {0, 1}, x, {1, 1});
  const auto expected = RingOrderMean(x, {1, 1});
  for (const auto& o : out) {
    INFO(o.status.message());
    REQUIRE(o.status.ok());
    REQUIRE(std::memcmp(o.data.data(), expected.data(), expected.size() * sizeof(float)) == 0);
  }
  CHECK(rings[0]->stats().dropped == 4);
}

namespace {
// One learner's state for a rendezvous: N parameters, mean square and momentum, all
// filled with `fill` (its own), at `version`.
struct Held {
  std::vector<float> params, ms, mom;
  int64_t version = 0, frames = 0;
  Held(int64_t n, float fill, int64_t v, int64_t f)
      : params(static_cast<size_t>(n), fill), ms(static_cast<size_t>(n), fill + 1), mom(static_cast<size_t>(n), fill + 2),
        version(v), frames(f) {}
};

std::vector<std::pair<base::Status, learner::RingPlan>> Rendezvous(std::vector<std::unique_ptr<Ring>>& rings,
                                                                   const std::vector<int>& who, std::vector<Held>& held,
                                                                   bool first) {
  std::vector<std::pair<base::Status, learner::RingPlan>> out(who.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < who.size(); ++i) {
    threads.emplace_back([&, i] {
      Held& h = held[size_t(who[i])];
      learner::RingMemberState st;
      st.params = h.params;
      st.mean_square = h.ms;
      st.momentum = h.mom;
      st.version = h.version;
      st.env_frames = h.frames;
      out[i].first = rings[size_t(who[i])]->Rendezvous(&st, 0, first, &out[i].second);
      h.version = st.version;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}
}  // namespace

TEST_CASE("allreduce ring: the rendezvous gives every member the newest state, drops a vanished learner and takes a restarted one back", "[ring]") {
  zmq::context_t ctx(1);
  const int64_t N = 2500;  // several pieces of state (64 values each)
  const auto endpoints = TcpEndpoints(3);
  // 10 s: with a 2 s deadline the first rendezvous (about 117 pieces to each of two
  // learners) timed out in 3 of 4 CI runs on a loaded machine, alone or not.
  auto rings = MakeRings(ctx, "rendezvous", 3, 64, std::chrono::milliseconds(10000), endpoints);
  // Learner 1 holds the newest state (version 7); 0 and 2 older ones.
  std::vector<Held> held = {Held(N, 0.f, 5, 100), Held(N, 10.f, 7, 200), Held(N, 20.f, 6, 300)};
  auto out = Rendezvous(rings, {0, 1, 2}, held, true);
  for (const auto& [st, plan] : out) {
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(plan.members == std::vector<int>{0, 1, 2});
    CHECK(plan.version == 7);
    CHECK(plan.source == 1);
    CHECK(plan.env_frames.at(2) == 300);
  }
  for (const auto& h : held) {
    CHECK(h.version == 7);
    CHECK(h.params == held[1].params);
    CHECK(h.ms == held[1].ms);
    CHECK(h.mom == held[1].mom);
  }
  // Learner 2 vanishes: a reduction of the three ends at the timeout; the survivors form a
  // ring of two (the chief waits a second for more) and reduce in it.
  rings[2].reset();
  const auto x = RandomInputs(3, 300, 21);
  std::vector<Outcome> failed(2);
  {
    std::vector<std::thread> threads;
    for (int l = 0; l < 2; ++l) {
      threads.emplace_back([&, l] {
        failed[size_t(l)].data = x[size_t(l)];
        failed[size_t(l)].status = rings[size_t(l)]->AllReduce(8, {0, 1, 2}, failed[size_t(l)].data, RingContribution{},
                                                                &failed[size_t(l)].all);
      });
    }
    for (auto& t : threads) t.join();
  }
  for (const auto& f : failed) CHECK(f.status.code() == base::Code::kUnavailable);
  out = Rendezvous(rings, {0, 1}, held, false);
  for (const auto& [st, plan] : out) {
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(plan.members == std::vector<int>{0, 1});
    CHECK(plan.version == 7);
  }
  const auto two = Reduce(rings, 8, {0, 1}, x, {1, 1});
  for (const auto& o : two) REQUIRE(o.status.ok());
  // Learner 2 restarted (a fresh process: version 0, its own parameters) asks to join while
  // the others reduce: their reduction gives way to a rendezvous of all three, and the
  // restarted learner takes the others' state and version.
  {
    learner::RingOptions o;
    o.endpoints = endpoints;
    o.rank = 2;
    o.incarnation = 999;
    o.timeout = std::chrono::milliseconds(2000);
    o.piece_elements = 64;
    rings[2] = std::make_unique<Ring>(ctx, o);
    REQUIRE(rings[2]->Start().ok());
  }
  held[2] = Held(N, 99.f, 0, 0);
  out = Rendezvous(rings, {0, 1, 2}, held, false);
  for (const auto& [st, plan] : out) {
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(plan.members == std::vector<int>{0, 1, 2});
    CHECK(plan.version == 7);
    CHECK(plan.env_frames.at(2) == 300);  // its count as the ring last carried it
  }
  CHECK(held[2].version == 7);
  CHECK(held[2].params == held[0].params);
  CHECK(held[2].mom == held[0].mom);
  const auto three = Reduce(rings, 9, {0, 1, 2}, x, {1, 1, 1});
  for (const auto& o : three) {
    INFO(o.status.message());
    CHECK(o.status.ok());
  }
}
