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

#include "net/model.h"
#include "wire/config.pb.h"
#include "wire/trajectory.h"

namespace stampede::actors {

// The acting part without any sockets (also what `stampede bench` measures).
// Used by one thread.
class ActorCore {
 public:
  // nullptr and `error` set if the env cannot be made or differs from the config's
  // resolved spec.
  static std::unique_ptr<ActorCore> Create(const config::Config& cfg, int task_index,
                                           std::string* error);
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
  void CollectUnroll(std::span<const float> params, int64_t version, wire::TrajectoryBatch* out);
  int64_t frames() const { return frames_; }  // env frames (valid steps x frames per step)

 private:
  struct Impl;
  explicit ActorCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int64_t frames_ = 0;
};

// The actor process body: fetch parameters, act, send, until `stop`. Returns the
// process exit code (non-zero with a message on stderr on a fatal error).
int RunActor(const config::Config& cfg, int task_index, std::atomic<bool>& stop);

}  // namespace stampede::actors
