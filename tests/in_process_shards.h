// Test helper: S PS shards serving on ephemeral loopback ports, each on its own thread,
// for tests that need a real PS without processes.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ps/shard.h"

namespace stampede::testing {

struct InProcessShards {
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<ps::Shard>> shards;
  std::vector<std::thread> threads;
  std::vector<std::string> endpoints;

  // `curve`: CURVE servers (the caller runs the context's ZAP handler), or null.
  InProcessShards(zmq::context_t& ctx, int n, int versions_kept = 8, const wire::Curve* curve = nullptr) {
    for (int s = 0; s < n; ++s) {
      ps::ShardOptions so;
      so.curve = curve;
      so.shard = s;
      so.num_shards = n;
      so.versions_kept = versions_kept;
      shards.push_back(std::make_unique<ps::Shard>(ctx, so));
      REQUIRE(shards.back()->Bind("tcp://127.0.0.1:*").ok());
      endpoints.push_back(shards.back()->endpoint());
    }
    for (auto& s : shards) threads.emplace_back([&s, this] { s->Run(stop); });
  }
  ~InProcessShards() { Stop(); }
  void Stop() {
    stop = true;
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

}  // namespace stampede::testing
