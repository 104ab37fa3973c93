// `stampede bench --allreduce`: the learners' ring-allreduce alone (learner/ring.h), with
// 2, 3 and 4 learners as threads of this process, each with its own ZeroMQ context and
// TCP loopback socket (as learner processes on one machine would), at 1M and 10M floats;
// beside ZeroMQ's own loopback bandwidth (one PUSH -> PULL pair, 4 MiB messages), the
// most a learner's link could carry.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "learner/ring.h"
#include "tools/bench.h"

namespace stampede::tools {

namespace {
using Clock = std::chrono::steady_clock;

int FreeTcpPort() {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::pull);
  s.set(zmq::sockopt::linger, 0);
  s.bind("tcp://127.0.0.1:*");
  const std::string e = s.get(zmq::sockopt::last_endpoint);
  return std::stoi(e.substr(e.rfind(':') + 1));
}

// MB/s of one PUSH -> PULL pair on TCP loopback, 4 MiB messages, for `seconds`.
double LoopbackMBps(double seconds) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  const size_t bytes = size_t(4) << 20;
  std::vector<char> payload(bytes, 1);
  std::thread sender([&] {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      zmq::message_t m(payload.data(), payload.size());
      (void)push.send(m, zmq::send_flags::none);
    }
    zmq::message_t last(0);
    (void)push.send(last, zmq::send_flags::none);
  });
  int64_t got = 0;
  const auto start = Clock::now();
  for (;;) {
    zmq::message_t m;
    if (!pull.recv(m)) break;
    if (m.size() == 0) break;
    got += int64_t(m.size());
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  sender.join();
  return double(got) / elapsed / 1e6;
}

struct RingFigures {
  double reductions_per_s = 0;
  double sent_mbps_per_learner = 0;  // bytes each learner put on its link, per second
  double bus_mbps = 0;               // the gradient's bytes reduced per second (algorithm bandwidth)
  double bytes_per_step = 0;         // per learner
};

RingFigures MeasureRing(int L, int64_t floats, double seconds) {
  std::vector<std::string> endpoints;
  for (int l = 0; l < L; ++l) endpoints.push_back("tcp://127.0.0.1:" + std::to_string(FreeTcpPort()));
  std::vector<std::unique_ptr<zmq::context_t>> contexts;
  std::vector<std::unique_ptr<learner::Ring>> rings;
  for (int l = 0; l < L; ++l) {
    contexts.push_back(std::make_unique<zmq::context_t>(1));
    learner::RingOptions o;
    o.endpoints = endpoints;
    o.rank = l;
    o.incarnation = uint64_t(l) + 1;
    o.max_message_bytes = int64_t(floats) * 4 + (1 << 20);
    rings.push_back(std::make_unique<learner::Ring>(*contexts.back(), o));
    if (!rings.back()->Start().ok()) return {};
  }
  std::vector<int> members(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) members[size_t(l)] = l;
  // Every learner runs the same number of rounds: as many as learner 0 fits in `seconds`
  // after one warm-up round, decided up front from a timed first round.
  auto run = [&](int64_t first_round, int rounds) {
    std::vector<std::thread> threads;
    for (int l = 0; l < L; ++l) {
      threads.emplace_back([&, l] {
        std::vector<float> data(size_t(floats), 0.001f * float(l + 1));
        std::vector<learner::RingContribution> all;
        for (int r = 0; r < rounds; ++r) {
          if (!rings[size_t(l)]->AllReduce(first_round + r, members, data, learner::RingContribution{}, &all).ok()) return;
        }
      });
    }
    for (auto& t : threads) t.join();
  };
  const auto warm = Clock::now();
  run(1, 1);
  const double one = std::max(1e-4, std::chrono::duration<double>(Clock::now() - warm).count());
  const int rounds = std::max(2, int(seconds / one));
  const int64_t sent_before = rings[0]->stats().bytes_sent;
  const auto start = Clock::now();
  run(2, rounds);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  RingFigures f;
  f.reductions_per_s = rounds / elapsed;
  f.bytes_per_step = double(rings[0]->stats().bytes_sent - sent_before) / rounds;
  f.sent_mbps_per_learner = f.bytes_per_step * f.reductions_per_s / 1e6;
  f.bus_mbps = double(floats) * 4 * f.reductions_per_s / 1e6;
  return f;
}
}  // namespace

int RunAllreduceBench(const BenchOptions& opt) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("stampede bench --allreduce: learners as threads on TCP loopback, %u cores here\n", cores);
  const double loopback = LoopbackMBps(std::min(opt.seconds, 2.0));
  std::printf("  ZeroMQ loopback, one PUSH -> PULL pair, 4 MiB messages: %.0f MB/s\n", loopback);
  std::printf("  %-9s %-10s %12s %16s %18s %16s %14s\n", "learners", "floats", "steps/s", "ms per step",
              "sent MB per step", "sent MB/s each", "of loopback");
  for (const int64_t floats : {int64_t(1) << 20, int64_t(10) << 20}) {
    for (int L = 2; L <= 4; ++L) {
      const RingFigures f = MeasureRing(L, floats, opt.seconds);
      if (f.reductions_per_s <= 0) {
        std::printf("  %-9d %-10lld failed\n", L, (long long)floats);
        return 1;
      }
      std::printf("  %-9d %-10lld %12.2f %16.1f %18.2f %16.0f %13.0f%%\n", L, (long long)floats, f.reductions_per_s,
                  1e3 / f.reductions_per_s, f.bytes_per_step / 1e6, f.sent_mbps_per_learner,
                  100 * f.sent_mbps_per_learner / loopback);
    }
  }
  std::printf("  (a learner sends 2 (L - 1) / L of the gradient per step: 4.2, 5.6, 6.3 MB at 1M floats for L = 2, 3, 4; "
              "with more learners than cores they share the cores)\n");
  return 0;
}

}  // namespace stampede::tools
