// PS shards and their clients: slices, versions kept, and an actor-side fetch that
// never mixes shards of different versions.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <limits>

#include <thread>

#include "net/layout.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/shard.h"
#include "tests/in_process_shards.h"
#include "wire/bfloat16.h"
#include "wire/zmq_util.h"
#include "tests/wait.h"

using namespace stampede;

TEST_CASE("ps: shard slices tile the vector with sizes differing by at most one", "[ps]") {
  for (int64_t total : {1, 7, 100, 4611}) {
    for (int shards : {1, 2, 3, 8}) {
      int64_t next = 0, lo = total, hi = 0;
      for (int s = 0; s < shards; ++s) {
        auto sl = net::ShardSlice(total, s, shards);
        CHECK(sl.offset == next);
        next += sl.count;
        lo = std::min(lo, sl.count);
        hi = std::max(hi, sl.count);
      }
      CHECK(next == total);
      CHECK(hi - lo <= 1);
    }
  }
}

namespace {
struct Fleet {
  zmq::context_t ctx{1};
  testing::InProcessShards servers;
  std::vector<std::unique_ptr<ps::Shard>>& shards = servers.shards;
  explicit Fleet(int n) : servers(ctx, n) {}
  ps::ClientOptions Options(int64_t total, wire::Role role) {
    ps::ClientOptions o;
    o.endpoints = servers.endpoints;
    o.total_size = total;
    o.layout_fingerprint = 42;
    o.sender = wire::MakeSender(role, 0, 1);
    return o;
  }
};

std::vector<float> Pattern(int64_t total, int64_t version) {
  std::vector<float> v(total);
  for (int64_t i = 0; i < total; ++i) v[i] = float(version * 10000 + i);
  return v;
}
}  // namespace

TEST_CASE("ps: a fetched version is always one whole version, and versions only grow", "[ps]") {
  const int64_t total = 1001;
  Fleet fleet(3);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(total, wire::ROLE_LEARNER));
  ps::ParamsFetcher fetch(fleet.ctx, fleet.Options(total, wire::ROLE_ACTOR));
  std::vector<float> params(total);
  int64_t version = -1;
  REQUIRE(pub.PutAll(Pattern(total, 0), 0, nullptr));
  REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
  CHECK(version == 0);
  CHECK(params == Pattern(total, 0));

  // The learner publishes 200 versions while the actor keeps polling.
  // A failed put is counted and checked here: REQUIRE on another thread would abort the binary.
  std::atomic<int> failed_puts{0};
  std::thread learner([&] {
    for (int64_t v = 1; v <= 200; ++v) {
      if (!pub.PutAll(Pattern(total, v), v, nullptr)) ++failed_puts;
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // the learner's pace, not a wait
    }
  });
  // A REQUIRE below that fails unwinds through this join, not past a joinable thread.
  struct JoinAtExit {
    std::thread& t;
    ~JoinAtExit() {
      if (t.joinable()) t.join();
    }
  } join_at_exit{learner};
  int swaps = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (version < 200 && std::chrono::steady_clock::now() < deadline) {
    const int64_t before = version;
    const int64_t mixed_before = fetch.mixed_assemblies();
    if (fetch.Poll(params, &version)) {
      ++swaps;
      REQUIRE(version > before);
      if (fetch.mixed_assemblies() == mixed_before) {
        REQUIRE(params == Pattern(total, version));  // one whole version
      } else {
        // The counted fallback (ps/fetch_state.h): each shard's slice is one whole
        // version of that shard, the oldest of them is the version reported.
        const auto& at = fetch.shard_versions();
        REQUIRE(*std::min_element(at.begin(), at.end()) == version);
        for (int s = 0; s < 3; ++s) {
          const auto sl = net::ShardSlice(total, s, 3);
          const auto want = Pattern(total, at[size_t(s)]);
          for (int64_t k = sl.offset; k < sl.offset + sl.count; ++k) REQUIRE(params[size_t(k)] == want[size_t(k)]);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  learner.join();
  CHECK(failed_puts == 0);
  CHECK(version == 200);
  CHECK(swaps >= 2);
  CHECK(fetch.rejected_replies() == 0);
}

TEST_CASE("ps: a shard refuses puts for another layout or slice and stale versions", "[ps]") {
  Fleet fleet(2);
  // Puts from different sockets may arrive in any order: wait for each to land.
  auto all = [&](auto field, int64_t want) {
    return [&fleet, field, want] {
      for (auto& s : fleet.shards) {
        if ((s->stats().*field).load() < want) return false;
      }
      return true;
    };
  };
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(100, wire::ROLE_LEARNER));
  REQUIRE(pub.PutAll(Pattern(100, 5), 5, nullptr));
  REQUIRE(testing::WaitUntil(all(&ps::ShardStats::newest_version, 5)));
  auto other = fleet.Options(100, wire::ROLE_LEARNER);
  other.layout_fingerprint = 43;
  ps::ParamsPublisher wrong(fleet.ctx, other);
  REQUIRE(wrong.PutAll(Pattern(100, 6), 6, nullptr));
  REQUIRE(testing::WaitUntil(all(&ps::ShardStats::bad_requests, 1)));
  // A put older than what the shards hold (from another publisher: one publisher never
  // sends a version older than its last).
  ps::ParamsPublisher late(fleet.ctx, fleet.Options(100, wire::ROLE_LEARNER));
  REQUIRE(late.PutAll(Pattern(100, 3), 3, nullptr));
  REQUIRE(testing::WaitUntil(all(&ps::ShardStats::stale_puts, 1)));
  REQUIRE(pub.PutAll(Pattern(100, 7), 7, nullptr));
  REQUIRE(testing::WaitUntil(all(&ps::ShardStats::newest_version, 7)));
  // A put holding NaN (a newer version, the right layout) is refused: actors never get it.
  std::vector<float> poisoned = Pattern(100, 8);
  for (auto& x : poisoned) x = std::numeric_limits<float>::quiet_NaN();
  ps::ParamsPublisher nan_pub(fleet.ctx, fleet.Options(100, wire::ROLE_LEARNER));
  REQUIRE(nan_pub.PutAll(poisoned, 1000000000000, nullptr));
  REQUIRE(testing::WaitUntil(all(&ps::ShardStats::bad_requests, 2)));
  for (auto& s : fleet.shards) {
    CHECK(s->stats().newest_version.load() == 7);
    CHECK(s->stats().bad_requests.load() == 2);  // the other layout's put and the NaN put
    CHECK(s->stats().refused[size_t(ps::Refusal::kWrongLayout)].load() == 1);
    CHECK(s->stats().refused[size_t(ps::Refusal::kNonFinite)].load() == 1);
    CHECK(s->stats().refused[size_t(ps::Refusal::kStalePut)].load() == 1);
    CHECK(s->stats().stale_puts.load() == 1);    // version 3 after 5
    CHECK(s->stats().puts.load() == 2);          // 5 and 7
  }
  // An actor built for another layout refuses what the shards serve.
  auto actor_opt = fleet.Options(100, wire::ROLE_ACTOR);
  actor_opt.layout_fingerprint = 43;
  ps::ParamsFetcher fetch(fleet.ctx, actor_opt);
  std::vector<float> params(100);
  int64_t version = -1;
  CHECK_FALSE(fetch.WaitFirst(params, &version, std::chrono::milliseconds(300), nullptr));
  CHECK(fetch.rejected_replies() > 0);
  CHECK(version == -1);
}

TEST_CASE("ps: a get for a version not yet there is held and answered by the put", "[ps]") {
  Fleet fleet(1);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(10, wire::ROLE_LEARNER));
  REQUIRE(pub.PutAll(Pattern(10, 3), 3, nullptr));
  zmq::socket_t dealer(fleet.ctx, zmq::socket_type::dealer);
  wire::ConfigureReceiver(dealer, 1 << 20);
  dealer.connect(fleet.servers.endpoints[0]);
  wire::PsRequest req;
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 7);
  req.mutable_get()->set_min_version(5);
  REQUIRE(wire::SendMessage(dealer, req));
  zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}};
  CHECK(wire::Poll(items, 1, std::chrono::milliseconds(200)) == 0);  // held: nothing that new
  REQUIRE(pub.PutAll(Pattern(10, 4), 4, nullptr));
  CHECK(wire::Poll(items, 1, std::chrono::milliseconds(200)) == 0);  // 4 < 5: still held
  REQUIRE(pub.PutAll(Pattern(10, 5), 5, nullptr));
  const int ready = wire::Poll(items, 1, std::chrono::milliseconds(5000));
  INFO("puts " << fleet.shards[0]->stats().puts.load() << " newest " << fleet.shards[0]->stats().newest_version.load() << " gets " << fleet.shards[0]->stats().gets.load() << " bad " << fleet.shards[0]->stats().bad_requests.load());
  REQUIRE(ready == 1);
  std::vector<zmq::message_t> parts;
  REQUIRE(wire::RecvMultipart(dealer, &parts, true));
  wire::ParamsSlice reply;
  REQUIRE(wire::ParseFrame(parts[0], &reply));
  CHECK(reply.has_params());
  CHECK(reply.version() == 5);
  REQUIRE(parts.size() == 2);
  CHECK(std::memcmp(parts[1].data(), Pattern(10, 5).data(), 40) == 0);
  CHECK(fleet.shards[0]->stats().gets.load() == 1);
}

TEST_CASE("ps: a fetcher built for another network says what differs instead of waiting", "[ps]") {
  Fleet fleet(2);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(1000, wire::ROLE_LEARNER));
  REQUIRE(pub.PutAll(Pattern(1000, 0), 0, nullptr));
  auto other = fleet.Options(640, wire::ROLE_ACTOR);
  other.layout_fingerprint = 7;
  ps::ParamsFetcher fetch(fleet.ctx, other);
  std::vector<float> params(640);
  int64_t version = -1;
  // Never a version (it would not fit), but the reason within one wait.
  CHECK_FALSE(fetch.WaitFirst(params, &version, std::chrono::seconds(2), nullptr));
  CHECK(version == -1);
  CHECK_THAT(fetch.layout_mismatch(), Catch::Contains("serves a network of 1000 parameters") &&
                                          Catch::Contains("this process's network has 640") &&
                                          Catch::Contains("another net or env config"));
  // The right network sees no mismatch.
  ps::ParamsFetcher same(fleet.ctx, fleet.Options(1000, wire::ROLE_ACTOR));
  std::vector<float> right(1000);
  REQUIRE(same.WaitFirst(right, &version, std::chrono::seconds(5), nullptr));
  CHECK(same.layout_mismatch().empty());
}

namespace {
net::ParamLayout Sizes(const std::vector<int>& sizes) {
  net::ParamLayout layout;
  for (size_t i = 0; i < sizes.size(); ++i) layout.Add("t" + std::to_string(i), {sizes[i]});
  return layout;
}
std::vector<std::string> Names(const ps::Placement& p, int shard) {
  std::vector<std::string> out;
  for (const auto& r : p.shards[size_t(shard)]) out.push_back(r.tensor);
  return out;
}
}  // namespace

TEST_CASE("placement: greedy puts each tensor, largest first, on the lightest shard", "[ps][placement]") {
  // 60, 100, 30, 50, 40 floats on 2 shards: 100 -> 0; 60 -> 1; 50 -> 1 (110); 40 -> 0
  // (140); 30 -> 1 (140). Even: imbalance 1.
  const auto p = ps::PlaceTensors(Sizes({60, 100, 30, 50, 40}), 2, "greedy", 0);
  CHECK(Names(p, 0) == std::vector<std::string>{"t1", "t4"});
  CHECK(Names(p, 1) == std::vector<std::string>{"t0", "t3", "t2"});
  CHECK(p.Count(0) == 140);
  CHECK(p.Count(1) == 140);
  CHECK(p.Imbalance() == Approx(1.0));
  // On 3 shards: 100 -> 0, 60 -> 1, 50 -> 2, 40 -> 2 (90), 30 -> 1 (90): max 100, mean 280/3.
  const auto q = ps::PlaceTensors(Sizes({60, 100, 30, 50, 40}), 3, "greedy", 0);
  CHECK(Names(q, 0) == std::vector<std::string>{"t1"});
  CHECK(Names(q, 1) == std::vector<std::string>{"t0", "t2"});
  CHECK(Names(q, 2) == std::vector<std::string>{"t3", "t4"});
  CHECK(q.Imbalance() == Approx(100.0 / (280.0 / 3)));
}

TEST_CASE("placement: round robin deals tensors in layout order, and large tensors are partitioned", "[ps][placement]") {
  const auto rr = ps::PlaceTensors(Sizes({10, 20, 30, 40, 50}), 2, "round_robin", 0);
  CHECK(Names(rr, 0) == std::vector<std::string>{"t0", "t2", "t4"});
  CHECK(Names(rr, 1) == std::vector<std::string>{"t1", "t3"});
  // A 1000-float tensor over a 500-float threshold: 334 + 333 + 333, one part per shard,
  // covering it exactly; the small ones are placed greedily around it.
  const auto p = ps::PlaceTensors(Sizes({1000, 30, 20}), 3, "greedy", 500);
  int64_t covered = 0;
  for (int s = 0; s < 3; ++s) {
    REQUIRE(!p.shards[size_t(s)].empty());
    const auto& part = p.shards[size_t(s)].front();
    CHECK(part.tensor == "t0 part " + std::to_string(s + 1) + "/3");
    CHECK(part.offset == covered);
    CHECK(part.count == (s == 0 ? 334 : 333));
    covered += part.count;
  }
  CHECK(covered == 1000);
  CHECK(p.Count(0) + p.Count(1) + p.Count(2) == 1050);
  CHECK(Names(p, 1).back() == "t1");  // 30 onto the lightest (333 < 334), then 20 onto shard 2
  CHECK(Names(p, 2).back() == "t2");
}

TEST_CASE("placement: a whole version travels exactly through shards that hold scattered tensors", "[ps][placement]") {
  const auto layout = Sizes({7, 300, 11, 1200, 5, 64});
  auto plan = std::make_shared<ps::Placement>(ps::PlaceTensors(layout, 3, "greedy", 1000));
  const int64_t total = layout.total_size();
  Fleet fleet(3);
  auto pub_opt = fleet.Options(total, wire::ROLE_LEARNER), fetch_opt = fleet.Options(total, wire::ROLE_ACTOR);
  pub_opt.placement = fetch_opt.placement = plan;
  ps::ParamsPublisher pub(fleet.ctx, pub_opt);
  ps::ParamsFetcher fetch(fleet.ctx, fetch_opt);
  REQUIRE(pub.PutAll(Pattern(total, 3), 3, nullptr));
  std::vector<float> params(total);
  int64_t version = -1;
  REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
  CHECK(version == 3);
  CHECK(params == Pattern(total, 3));
  // A client with another plan (contiguous) gets no version: the slices do not match.
  ps::ParamsFetcher other(fleet.ctx, fleet.Options(total, wire::ROLE_ACTOR));
  std::vector<float> wrong(total);
  int64_t other_version = -1;
  CHECK_FALSE(other.WaitFirst(wrong, &other_version, std::chrono::seconds(1), nullptr));
  CHECK_THAT(other.layout_mismatch(), Catch::Contains("another ps.placement"));
}

TEST_CASE("ps: bfloat16 on the wire rounds to nearest even within 2^-8 and keeps NaN and infinities", "[ps][bfloat16]") {
  // Hand-worked: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1); 1 + 3 * 2^-8 ties
  // to 1 + 2^-6 (even); 1 + 2^-8 + 2^-20 is above the tie.
  CHECK(wire::FromBfloat16(wire::ToBfloat16(1.f + 0x1p-8f)) == 1.f);
  CHECK(wire::FromBfloat16(wire::ToBfloat16(1.f + 3 * 0x1p-8f)) == 1.f + 0x1p-6f);
  CHECK(wire::FromBfloat16(wire::ToBfloat16(1.f + 0x1p-8f + 0x1p-20f)) == 1.f + 0x1p-7f);
  CHECK(wire::ToBfloat16(-2.f) == 0xc000);
  CHECK(std::isinf(wire::FromBfloat16(wire::ToBfloat16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(wire::FromBfloat16(wire::ToBfloat16(std::numeric_limits<float>::quiet_NaN()))));

  // Through real shards: the fetched vector is the put one rounded, half the bytes.
  const int64_t total = 777;
  Fleet fleet(2);
  ps::ParamsPublisher pub(fleet.ctx, fleet.Options(total, wire::ROLE_LEARNER));
  auto o = fleet.Options(total, wire::ROLE_ACTOR);
  o.bfloat16 = true;
  ps::ParamsFetcher fetch(fleet.ctx, o);
  std::vector<float> put(total);
  for (int64_t i = 0; i < total; ++i) put[size_t(i)] = std::sin(float(i)) * float(1 + i);
  REQUIRE(pub.PutAll(put, 0, nullptr));
  std::vector<float> got(total);
  int64_t version = -1;
  REQUIRE(fetch.WaitFirst(got, &version, std::chrono::seconds(10), nullptr));
  for (int64_t i = 0; i < total; ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got[size_t(i)] - put[size_t(i)]) <= std::fabs(put[size_t(i)]) * 0x1p-8f);
    CHECK(got[size_t(i)] == wire::FromBfloat16(wire::ToBfloat16(put[size_t(i)])));
  }
}
