#include "coordinator/status_server.h"

#include <chrono>
#include <cstdio>

#include "base/log.h"
#include "coordinator/local_launcher.h"
#include "base/signals.h"
#include "wire/zmq_util.h"

namespace stampede::coordinator {

namespace {
// Binds `socket` to `endpoint`; false, with the reason on stderr, if it cannot.
bool Bind(zmq::socket_t& socket, const std::string& endpoint, const char* what, const char* field) {
  try {
    socket.bind(endpoint);
    return true;
  } catch (const zmq::error_t& e) {
    base::LogError("stampede: cannot bind the coordinator's %s %s (%s): %s\n", what, endpoint.c_str(), field,
                 e.what());
    return false;
  }
}
}  // namespace

void StatusServer(caf::blocking_actor* self, caf::actor supervisor, zmq::context_t* ctx, StatusServerOptions opt) {
  using Clock = std::chrono::steady_clock;
  zmq::socket_t control(*ctx, zmq::socket_type::pub);
  wire::ConfigureSender(control, 1000, 0);
  if (opt.curve != nullptr) opt.curve->MakeServer(control, wire::kDomainControl, opt.control_endpoint);
  zmq::socket_t pull(*ctx, zmq::socket_type::pull);
  // Statuses are small: a bounded size and queue keep a flood from growing memory.
  wire::ConfigureReceiver(pull, opt.max_status_bytes);
  pull.set(zmq::sockopt::rcvhwm, 256);
  if (opt.curve != nullptr) opt.curve->MakeServer(pull, wire::kDomainStatus, opt.status_endpoint);
  const bool bound = Bind(control, opt.control_endpoint, "control socket", "cluster.control") &&
                     Bind(pull, opt.status_endpoint, "status socket", "cluster.coordinator");
  self->send(supervisor, ready_atom::value, bound);
  if (!bound) return;
  self->monitor(supervisor);
  bool done = false;
  bool signalled = false;
  std::vector<wire::Control> stops;
  int64_t eval_round = 0, eval_frames = 0;
  auto last_beat = Clock::now() - std::chrono::seconds(1);
  zmq::pollitem_t items[] = {{pull.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::message_t msg;
  while (!done) {
    // The supervisor's messages first, without waiting: the sockets are this loop's wait.
    for (bool more = true; more;) {
      self->receive(
          [&](stops_atom, const std::vector<std::string>& bytes) {
            stops.clear();
            for (const auto& b : bytes) {
              if (wire::Control c; c.ParseFromString(b)) stops.push_back(std::move(c));
            }
            last_beat = Clock::now() - std::chrono::seconds(1);  // the new stage goes out now
          },
          [&](evaluate_atom, int64_t round, int64_t frames) {
            eval_round = round;
            eval_frames = frames;
          },
          [&](const caf::down_msg&) { done = true; },
          caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
    }
    if (done) break;
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
      // EINTR from Ctrl-C
    }
    // At most a bounded batch per turn, so the supervisor's mailbox stays small.
    for (int n = 0; n < 256 && pull.recv(msg, zmq::recv_flags::dontwait); ++n) {
      if (msg.more()) {  // statuses are one part; drain and ignore anything else
        while (msg.more() && pull.recv(msg, zmq::recv_flags::dontwait)) {}
        continue;
      }
      self->send(supervisor, status_atom::value, msg.to_string(), wire::PeerIdentity(msg));
    }
    ReapExitedChildren([&](ProcessId id, ExitStatus how) {
      self->send(supervisor, exited_atom::value, int64_t(id), how.exited, how.code, how.signal);
    });
    if (Clock::now() - last_beat > std::chrono::milliseconds(500)) {
      // The heartbeat, and the current stop stage's messages, to every process.
      last_beat = Clock::now();
      wire::Control beat;
      *beat.mutable_sender() = wire::MakeSender(wire::ROLE_COORDINATOR, 0, 0);
      beat.set_evaluate_round(eval_round);
      beat.set_evaluate_frames(eval_frames);
      (void)wire::SendMessage(control, beat);
      for (const auto& c : stops) (void)wire::SendMessage(control, c);
    }
    if (!signalled && base::StopFlag().load()) {
      signalled = true;
      self->send(supervisor, stop_atom::value, "interrupted (signal " + std::to_string(base::StopSignal()) + ")", 130);
    }
  }
}

}  // namespace stampede::coordinator
