// The replay table (replay/table.h): each selector's order or distribution, removal by
// age, bytes and times sampled, the rate limiter's blocking and release (synchronised on
// the table's own wait counters, no sleeps), and close while blocked; the bounded queue.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <thread>

#include "replay/bounded_queue.h"
#include "replay/table.h"
#include "tests/wait.h"

using namespace stampede::replay;
using namespace std::chrono_literals;

namespace {
using IntTable = Table<int>;

TableOptions Options(int64_t capacity) {
  TableOptions o;
  o.capacity = capacity;
  o.limiter.min_size = 1;
  return o;
}

bool Put(IntTable& t, int v, int64_t bytes = 1, double priority = 1) {
  return t.Insert(std::make_shared<const int>(v), bytes, priority, 0s);
}

int Take(IntTable& t) {
  IntTable::Sampled s;
  REQUIRE(t.Sample(&s, 0s));
  return *s.item;
}

// Pearson's chi-square of `counts` against `p`.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double x2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = double(n) * p[i];
    x2 += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return x2;
}

// Spins (yielding) until `pred`; the tests wait on counters the table sets.
template <class F>
void Until(F pred) {
  while (!pred()) std::this_thread::yield();
}
}  // namespace

TEST_CASE("replay: FIFO samples the oldest, in insertion order when each is sampled once", "[replay]") {
  TableOptions o = Options(100);
  o.max_times_sampled = 1;
  IntTable t(o, MakeFifoSelector());
  for (int i = 0; i < 6; ++i) REQUIRE(Put(t, i));
  for (int i = 0; i < 6; ++i) CHECK(Take(t) == i);
  CHECK(t.stats().size == 0);
  CHECK(t.stats().removed_sampled == 6);
  IntTable::Sampled s;
  CHECK(!t.Sample(&s, 0s));  // empty
}

TEST_CASE("replay: uniform sampling frequencies match 1/n (chi-square, fixed seed)", "[replay]") {
  IntTable t(Options(100), MakeUniformSelector(), 7);
  constexpr int kItems = 8, kDraws = 80000;
  for (int i = 0; i < kItems; ++i) Put(t, i);
  std::vector<int64_t> counts(kItems, 0);
  for (int d = 0; d < kDraws; ++d) {
    IntTable::Sampled s;
    REQUIRE(t.Sample(&s, 0s));
    CHECK(s.probability == Approx(1.0 / kItems));
    ++counts[size_t(*s.item)];
  }
  // 7 degrees of freedom: 24.32 is the 0.999 quantile.
  CHECK(ChiSquare(counts, std::vector<double>(kItems, 1.0 / kItems)) < 24.32);
}

TEST_CASE("replay: prioritized sampling follows p^alpha / sum (chi-square, fixed seed)", "[replay]") {
  const double alpha = 0.6;
  IntTable t(Options(100), MakePrioritizedSelector(alpha), 11);
  constexpr int kItems = 40, kDraws = 200000;  // past the sum tree's first 16 leaves: it grows
  std::vector<double> p(kItems);
  double total = 0;
  for (int i = 0; i < kItems; ++i) {
    const double priority = 0.5 + i % 7;
    Put(t, i, 1, priority);
    total += p[size_t(i)] = std::pow(priority, alpha);
  }
  for (double& x : p) x /= total;
  std::vector<int64_t> counts(kItems, 0);
  for (int d = 0; d < kDraws; ++d) {
    IntTable::Sampled s;
    REQUIRE(t.Sample(&s, 0s));
    REQUIRE(s.probability == Approx(p[size_t(*s.item)]).epsilon(1e-9));
    ++counts[size_t(*s.item)];
  }
  // 39 degrees of freedom: 72.05 is the 0.999 quantile.
  CHECK(ChiSquare(counts, p) < 72.05);

  SECTION("an update moves the distribution; a removed item is never sampled") {
    IntTable u(Options(100), MakePrioritizedSelector(1.0), 3);
    for (int i = 0; i < 4; ++i) Put(u, i, 1, 1.0);
    IntTable::Sampled s;
    REQUIRE(u.Sample(&s, 0s));
    u.UpdatePriority(2, 997.0);  // key 2 is the third insert: weight 997 of 1000
    int twos = 0;
    for (int d = 0; d < 1000; ++d) {
      REQUIRE(u.Sample(&s, 0s));
      twos += *s.item == 2;
    }
    CHECK(twos > 980);
  }
}

TEST_CASE("replay: removal by capacity and bytes takes the oldest, by times sampled the sampled", "[replay]") {
  {
    IntTable t(Options(3), MakeFifoSelector());
    for (int i = 0; i < 5; ++i) Put(t, i);
    CHECK(t.stats().size == 3);
    CHECK(t.stats().removed_oldest == 2);
    CHECK(Take(t) == 2);  // 0 and 1 went
  }
  {
    TableOptions o = Options(100);
    o.max_bytes = 100;
    IntTable t(o, MakeFifoSelector());
    for (int i = 0; i < 5; ++i) Put(t, i, 30);
    CHECK(t.stats().size == 3);
    CHECK(t.stats().bytes == 90);
    CHECK(Take(t) == 2);
  }
  {
    TableOptions o = Options(100);
    o.max_times_sampled = 2;
    IntTable t(o, MakeUniformSelector(), 5);
    Put(t, 1);
    IntTable::Sampled s;
    REQUIRE(t.Sample(&s, 0s));
    CHECK(s.times_sampled == 1);
    REQUIRE(t.Sample(&s, 0s));
    CHECK(s.times_sampled == 2);
    CHECK(t.stats().size == 0);
    // Items removed by sampling do not hold the age bound's place: capacity still counts live items.
    for (int i = 0; i < 150; ++i) Put(t, i);
    CHECK(t.stats().size == 100);
  }
}

TEST_CASE("replay: sampling waits for min_size and is released by the insert that reaches it", "[replay]") {
  TableOptions o = Options(100);
  o.limiter.min_size = 3;
  IntTable t(o, MakeFifoSelector());
  std::atomic<bool> done{false};
  bool got = false;
  std::thread sampler([&] {
    IntTable::Sampled s;
    got = t.Sample(&s, 1h);
    done = true;
  });
  Until([&] { return t.stats().sample_waits == 1; });  // it is waiting
  Put(t, 0);
  Put(t, 1);
  CHECK(!t.CanSample());
  CHECK(!done.load());  // two items: still not allowed, so still waiting
  Put(t, 2);
  sampler.join();
  CHECK(got);
}

TEST_CASE("replay: samples_per_insert blocks inserts and samples in turn (Reverb's ratio)", "[replay]") {
  // spi 2, min_size 1, error_buffer 4: samples stay within [2 inserts - 2 - ..., ...]:
  // after 1 insert, 4 samples are allowed and the 5th waits; with no samples, 3 inserts
  // are allowed and the 4th waits until 2 samples.
  TableOptions o = Options(100);
  o.limiter = {1, 2.0, 4.0};
  {
    IntTable t(o, MakeUniformSelector(), 1);
    Put(t, 0);
    for (int i = 0; i < 4; ++i) Take(t);
    CHECK(!t.CanSample());
    std::thread sampler([&] {
      IntTable::Sampled s;
      CHECK(t.Sample(&s, 1h));
    });
    Until([&] { return t.stats().sample_waits == 1; });
    REQUIRE(Put(t, 1));  // 2 more samples allowed: releases the waiting one
    sampler.join();
    CHECK(t.stats().samples == 5);
  }
  {
    IntTable t(o, MakeUniformSelector(), 1);
    for (int i = 0; i < 3; ++i) REQUIRE(Put(t, i));
    CHECK(!Put(t, 3));  // refused at once (timeout 0)
    std::atomic<bool> inserted{false};
    std::thread inserter([&] {
      CHECK(t.Insert(std::make_shared<const int>(3), 1, 1.0, 1h));
      inserted = true;
    });
    Until([&] { return t.stats().insert_waits == 2; });  // the refused one, then this
    Take(t);
    CHECK(!inserted.load());  // one sample is not enough: (4 x 2) - 1 > 6
    Take(t);
    inserter.join();
    CHECK(t.stats().size == 4);
  }
}

TEST_CASE("replay: close wakes a blocked sample and a blocked insert, and later calls fail at once", "[replay]") {
  TableOptions o = Options(100);
  o.limiter = {5, 1.0, 0.0};
  IntTable t(o, MakeUniformSelector());
  bool sampled = true;
  std::thread sampler([&] {
    IntTable::Sampled s;
    sampled = t.Sample(&s, 1h);
  });
  Until([&] { return t.stats().sample_waits == 1; });
  t.Close();
  sampler.join();
  CHECK(!sampled);
  CHECK(!Put(t, 1));
  CHECK(t.stats().size == 0);
}

TEST_CASE("replay: selector names", "[replay]") {
  CHECK(std::string(MakeSelector("fifo", 0)->name()) == "fifo");
  CHECK(std::string(MakeSelector("uniform", 0)->name()) == "uniform");
  CHECK(std::string(MakeSelector("prioritized", 0.6)->name()) == "prioritized");
  CHECK(MakeSelector("lifo", 0) == nullptr);
}

// ---- the bounded queue between the learner's receiver and trainer

TEST_CASE("bounded queue: FIFO order, exact pops, and a full queue makes the producer wait", "[replay]") {
  stampede::replay::BoundedQueue<int> q(3);
  for (int i = 0; i < 3; ++i) REQUIRE(q.Push(i));
  CHECK(q.size() == 3);
  std::vector<int> out;
  // Fewer queued than asked: nothing is taken, after the timeout.
  CHECK_FALSE(q.PopExactly(4, &out, std::chrono::milliseconds(1)));
  CHECK(q.size() == 3);
  // The producer blocks on the full queue until the consumer takes two. Seen from here: it
  // is waiting inside Push (a Push that did not wait would return, or never be counted).
  std::atomic<bool> pushed{false}, push_ok{false};
  double waited = 0;
  std::thread producer([&] {
    push_ok = q.Push(3, &waited);
    pushed = true;
  });
  // A REQUIRE below that fails closes the queue (waking the producer) and joins it.
  struct CloseAndJoin {
    stampede::replay::BoundedQueue<int>& q;
    std::thread& t;
    ~CloseAndJoin() {
      q.Close();
      if (t.joinable()) t.join();
    }
  } close_and_join{q, producer};
  REQUIRE(stampede::testing::WaitUntil([&] { return q.waiting_producers() == 1 || pushed; }));
  CHECK_FALSE(pushed);
  CHECK(q.size() == 3);
  REQUIRE(q.PopExactly(2, &out, std::chrono::seconds(5)));
  CHECK(out == std::vector<int>{0, 1});
  producer.join();
  CHECK(pushed);
  CHECK(push_ok);
  CHECK(q.waiting_producers() == 0);
  CHECK(waited > 0);
  REQUIRE(q.PopExactly(2, &out, std::chrono::seconds(5)));
  CHECK(out == std::vector<int>{2, 3});
  CHECK(q.size() == 0);
}

TEST_CASE("bounded queue: Close wakes a waiting consumer and refuses later pushes", "[replay]") {
  stampede::replay::BoundedQueue<int> q(2);
  std::atomic<int> result{-1};
  std::thread consumer([&] {
    std::vector<int> out;
    result = q.PopExactly(1, &out, std::chrono::seconds(30)) ? 1 : 0;
  });
  q.Close();
  consumer.join();  // returns long before its 30 s deadline: woken by Close
  CHECK(result == 0);
  CHECK_FALSE(q.Push(7));
  CHECK(q.size() == 0);
}

TEST_CASE("bounded queue: Close wakes a producer blocked on a full queue", "[replay]") {
  stampede::replay::BoundedQueue<int> q(1);
  REQUIRE(q.Push(1));
  std::atomic<int> result{-1};
  std::thread producer([&] { result = q.Push(2) ? 1 : 0; });
  q.Close();
  producer.join();
  CHECK(result == 0);
  CHECK(q.size() == 1);  // what was queued before the close is still there
}
