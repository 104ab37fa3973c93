// The coordinator's sockets, on a thread of their own (a detached CAF actor): the status
// PULL socket (every process's statuses, forwarded to the supervisor), the control PUB
// socket (the heartbeat and the current stop stage, twice a second), the reaping of
// exited children, and Ctrl-C turned into a stop request.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <zmq.hpp>

#include "base/mutex.h"
#include "wire/auth.h"
#include "wire/messages.pb.h"

namespace stampede::tools::coord {

using status_atom = caf::atom_constant<caf::atom("status")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;

// The stop messages of the current stop stage (written by the supervisor's sinks, sent
// by the status server with every heartbeat).
class ControlBoard {
 public:
  void Set(std::vector<wire::Control> stops) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    stops_ = std::move(stops);
  }
  std::vector<wire::Control> Get() EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    return stops_;
  }
  // The newest evaluation request, carried by every heartbeat.
  void SetEvaluation(int64_t round, int64_t frames) EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    eval_round_ = round;
    eval_frames_ = frames;
  }
  std::pair<int64_t, int64_t> Evaluation() EXCLUDES(mu_) {
    base::MutexLock lock(mu_);
    return {eval_round_, eval_frames_};
  }

 private:
  base::Mutex mu_;
  std::vector<wire::Control> stops_ GUARDED_BY(mu_);
  int64_t eval_round_ GUARDED_BY(mu_) = 0;
  int64_t eval_frames_ GUARDED_BY(mu_) = 0;
};

struct StatusServerOptions {
  std::string status_endpoint;   // cluster.coordinator
  std::string control_endpoint;  // cluster.control
  int64_t max_status_bytes = 0;
  const wire::Curve* curve = nullptr;  // null: no CURVE
  std::shared_ptr<ControlBoard> board;
  std::shared_ptr<std::atomic<bool>> done;  // the supervisor has finished
};

// The thread's body: binds both sockets, then tells `supervisor` (ready_atom, true), or
// (ready_atom, false) with the reason on stderr; then polls until `done`. `ctx` (and its
// ZAP handler, with CURVE) outlive it. Sends (status_atom, bytes, peer identity),
// (exited_atom, id, exited, code, signal) and once, on a signal, (stop_atom, reason, 130).
void StatusServer(caf::blocking_actor* self, caf::actor supervisor, zmq::context_t* ctx, StatusServerOptions opt);

}  // namespace stampede::tools::coord
