// `stampede bench --broadcast`: how long 16 concurrent clients take to fetch one whole new
// version of a 1M- and a 10M-parameter vector from S = 1, 2, 4 PS shards on loopback (the
// shards run as threads of this process, each with its own ZeroMQ context; every client
// has its own context and thread, as actor processes would).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "base/log.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/shard.h"
#include "tools/bench.h"
#include "wire/zmq_util.h"

namespace stampede::tools {

namespace {
using Clock = std::chrono::steady_clock;

// Seconds from the put of a version until all `clients` have assembled it (median of
// `rounds` versions), with every client already holding the previous version.
double Broadcast(int64_t floats, int shards, int clients, int rounds, bool bfloat16) {
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<zmq::context_t>> shard_ctx;
  std::vector<std::unique_ptr<ps::Shard>> servers;
  std::vector<std::thread> server_threads;
  std::vector<std::string> endpoints;
  for (int s = 0; s < shards; ++s) {
    shard_ctx.push_back(std::make_unique<zmq::context_t>(1));
    ps::ShardOptions so;
    so.shard = s;
    so.num_shards = shards;
    so.versions_kept = 2;
    so.max_message_bytes = int64_t(floats) * 4 + (1 << 20);
    servers.push_back(std::make_unique<ps::Shard>(*shard_ctx.back(), so));
    if (const base::Status bound = servers.back()->Bind("tcp://127.0.0.1:*"); !bound.ok()) {
      base::LogError("bench: %s\n", bound.message().c_str());
      return -1;
    }
    endpoints.push_back(servers.back()->endpoint());
  }
  for (auto& s : servers) server_threads.emplace_back([&s, &stop] { s->Run(stop); });
  auto options = [&](wire::Role role) {
    ps::ClientOptions o;
    o.endpoints = endpoints;
    o.total_size = floats;
    o.layout_fingerprint = 1;
    o.max_message_bytes = int64_t(floats) * 4 + (1 << 20);
    o.sender = wire::MakeSender(role, 0, 1);
    o.bfloat16 = bfloat16 && role == wire::ROLE_ACTOR;
    return o;
  };
  zmq::context_t pub_ctx(1);
  ps::ParamsPublisher pub(pub_ctx, options(wire::ROLE_LEARNER));
  std::vector<float> params(size_t(floats), 0.5f);
  std::atomic<int64_t> published{-1};
  std::vector<std::atomic<int64_t>> got(static_cast<size_t>(clients));
  for (auto& g : got) g = -1;
  std::vector<std::thread> client_threads;
  for (int c = 0; c < clients; ++c) {
    client_threads.emplace_back([&, c] {
      zmq::context_t ctx(1);
      ps::ParamsFetcher fetch(ctx, options(wire::ROLE_ACTOR));
      std::vector<float> mine(static_cast<size_t>(floats));
      int64_t version = -1;
      while (!stop.load()) {
        if (fetch.Poll(mine, &version)) {
          got[size_t(c)] = version;
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
    });
  }
  std::vector<double> times;
  for (int v = 0; v <= rounds; ++v) {
    const auto start = Clock::now();
    if (!pub.PutAll(params, v, nullptr)) break;
    bool all = false;
    while (!all && Clock::now() - start < std::chrono::seconds(60)) {
      all = true;
      for (auto& g : got) all = all && g.load() >= v;
      if (!all) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (v > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());  // v = 0 warms up
  }
  stop = true;
  for (auto& t : client_threads) t.join();
  for (auto& t : server_threads) t.join();
  if (times.empty()) return -1;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
}  // namespace

int RunBroadcastBench(const BenchOptions& opt) {
  const int clients = 16;
  std::printf("stampede bench --broadcast: %d concurrent clients fetch one new whole version, median of 5 "
              "(bfloat16: ps.wire_bfloat16, 2 bytes a parameter on the wire)\n",
              clients);
  std::printf("%12s %9s %7s %12s %14s %16s\n", "parameters", "wire", "shards", "seconds", "MB/s (total)",
              "per client MB/s");
  for (int64_t floats : {int64_t(1) << 20, int64_t(10) << 20}) {
    for (bool bf16 : {false, true}) {
      for (int shards : {1, 2, 4}) {
        const double t = Broadcast(floats, shards, clients, 5, bf16);
        const double mb = double(floats) * (bf16 ? 2 : 4) / 1e6;
        std::printf("%12lld %9s %7d %12.4f %14.0f %16.0f\n", (long long)floats, bf16 ? "bfloat16" : "float32", shards,
                    t, t > 0 ? clients * mb / t : 0, t > 0 ? mb / t : 0);
        std::fflush(stdout);
      }
    }
  }
  (void)opt;
  return 0;
}

}  // namespace stampede::tools
