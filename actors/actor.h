// The actor: E environments stepped as one batch, batched CPU inference with the last
// parameters fetched, unrolls of T steps (plus the bootstrap observation) written in
// place into the message that will be sent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/model.h"
#include "config/config.pb.h"
#include "wire/trajectory.h"

namespace stampede::actors {

// Where forward passes run when they do not run in the actor (actors.inference
// "central": actors/inference.h). Throws std::runtime_error when it cannot answer.
class RemotePolicy {
 public:
  virtual ~RemotePolicy() = default;
  // Behaviour logits [E, A] of `obs` [E], after the states of the envs with
  // episode_start[e] != 0 are zeroed; where `state_before` is non-null, each env's state
  // before the step [E, S]. Returns the policy version that acted.
  virtual int64_t Step(const std::byte* obs, int E, const uint8_t* episode_start, float* state_before,
                       float* logits) = 0;
  // Values of `obs` [k] (env envs[j]'s final observation) with those envs' current
  // states, unnormalised for `task`; nothing advances.
  virtual void Values(const std::byte* obs, const int* envs, int k, int task, float* values) = 0;
};

// The acting part without any sockets (also what `stampede bench` measures).
// Used by one thread.
class ActorCore {
 public:
  // An error if the env or the network cannot be made, or the env differs from the
  // config's resolved spec.
  static base::StatusOr<std::unique_ptr<ActorCore>> Create(const config::Config& cfg, int task_index);
  ~ActorCore();

  const net::ModelSpec& net_spec() const;
  int64_t param_count() const;
  uint64_t layout_fingerprint() const;
  const net::ParamLayout& layout() const;
  const wire::StepShape& shape() const;
  int obs_size() const;
  int num_actions() const;
  int frames_per_step() const;  // the env's frames per agent step
  // Fills `out` (sized by the core) with the next unroll of every env, acting with
  // `params` and recording `version` as the behaviour policy's version. Throws
  // std::runtime_error when an env fails.
  // With a remote policy set, `params` and `version` are unused: the remote policy acts
  // and the unroll carries the oldest version it acted with.
  void CollectUnroll(std::span<const float> params, int64_t version, wire::TrajectoryBatch* out);
  // Central inference: forward passes go to `remote` (not owned; nullptr: local again).
  void SetRemote(RemotePolicy* remote);
  int64_t frames() const { return frames_; }  // env frames (valid steps x frames per step)

 private:
  struct Impl;
  explicit ActorCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int64_t frames_ = 0;
};

// The actor process body: fetch parameters, act, send, until `stop`. Ok when stopped;
// otherwise why it ended: its envs or config refused (kInvalidArgument), no parameters in
// time (kUnavailable), an env or the inference server failing (kInternal).
base::Status RunActor(const config::Config& cfg, int task_index, std::atomic<bool>& stop);

}  // namespace stampede::actors
