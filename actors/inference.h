// Central inference (actors.inference "central"): one server per learner, a thread of
// the learner's process, runs the forward passes of that learner's actors in batches
// (SEED RL's learner-side inference, TorchBeast's dynamic batcher, Sample Factory's
// policy workers). The server holds the parameters (from the PS, like an actor) and
// each env's recurrent state; an actor sends one request per batch step of its envs
// and gets the behaviour logits and the version that acted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/actor.h"

namespace stampede::wire {
class Sender;
class Curve;
}  // namespace stampede::wire

namespace zmq {
class context_t;
}

namespace stampede::actors {

// The actor's side: one DEALER socket to its learner's server. Step and Values wait
// for the answer (reporting through `waiting` every second while they do) and throw
// std::runtime_error on an error reply, on `stop`, or after `timeout_s` without one.
class InferenceClient : public RemotePolicy {
 public:
  // `waiting` (may be empty) is called with what the actor is doing while it waits.
  InferenceClient(zmq::context_t& ctx, const config::Config& cfg, int actor_index, const wire::Sender& sender,
                  const wire::Curve* curve, const ActorCore& core, const std::atomic<bool>* stop,
                  std::function<void(const char*)> waiting);
  ~InferenceClient() override;
  int64_t Step(const std::byte* obs, int E, const uint8_t* episode_start, float* state_before,
               float* logits) override;
  void Values(const std::byte* obs, const int* envs, int k, int task, float* values) override;
  int64_t last_version() const;
  double mean_batch_envs() const;  // envs per server batch over this actor's steps

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The server: Start binds cluster.inference[learner] and serves on a thread of its own
// until Stop (or the destructor).
class InferenceServer {
 public:
  InferenceServer(const config::Config& cfg, int learner_index, std::atomic<bool>& stop);
  ~InferenceServer();
  // An error if the network cannot be made or the endpoint bound.
  [[nodiscard]] base::Status Start();
  void Stop();
  // The endpoint bound (a wildcard port resolved).
  std::string endpoint() const;
  // Counters since Start (read from any thread).
  int64_t batches() const;
  int64_t requests() const;
  int64_t envs() const;
  int64_t errors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stampede::actors
