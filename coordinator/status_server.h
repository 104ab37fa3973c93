// The coordinator's sockets, on a thread of their own (a detached CAF actor): the status
// PULL socket (every process's statuses, forwarded to the supervisor), the control PUB
// socket (the heartbeat and the current stop stage, twice a second), the reaping of
// exited children, and Ctrl-C turned into a stop request.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <zmq.hpp>

#include "wire/auth.h"
#include "wire/messages.pb.h"

namespace stampede::coordinator {

using status_atom = caf::atom_constant<caf::atom("status")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;

// Supervisor -> status server: the current stop stage's messages (each a serialized
// wire::Control) and the newest evaluation request (round, env frames), sent with every
// heartbeat from then on.
using stops_atom = caf::atom_constant<caf::atom("stops")>;
using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;

struct StatusServerOptions {
  std::string status_endpoint;   // cluster.coordinator
  std::string control_endpoint;  // cluster.control
  int64_t max_status_bytes = 0;
  const wire::Curve* curve = nullptr;  // null: no CURVE
};

// The thread's body: binds both sockets, then tells `supervisor` (ready_atom, true), or
// (ready_atom, false) with the reason on stderr; then polls the sockets and its mailbox
// until the supervisor is gone (it monitors it). `ctx` (and its ZAP handler, with CURVE)
// outlive it. Sends (status_atom, bytes, peer identity), (exited_atom, id, exited, code,
// signal) and once, on a signal, (stop_atom, reason, 130); takes stops_atom and
// evaluate_atom. Everything it sends is its own state: nothing is shared with the
// supervisor but messages.
void StatusServer(caf::blocking_actor* self, caf::actor supervisor, zmq::context_t* ctx, StatusServerOptions opt);

}  // namespace stampede::coordinator
