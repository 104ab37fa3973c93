// A process's status (heartbeat and metrics) to the coordinator: one PUSH socket, used
// by one thread. Without a coordinator endpoint (a role started by hand) Send does
// nothing.
#pragma once

#include <memory>
#include <string>

#include <zmq.hpp>

#include "wire/messages.pb.h"

namespace stampede::wire {

class Curve;

class StatusChannel {
 public:
  // `curve`: the run's keys (CURVE on), or null.
  StatusChannel(zmq::context_t& ctx, const std::string& coordinator_endpoint, const Sender& sender,
                const Curve* curve = nullptr);
  Status& status() { return status_; }
  // Sends status() with `activity` (what the process is doing now); never blocks.
  void Send(const char* activity);

 private:
  std::unique_ptr<zmq::socket_t> socket_;
  Status status_;
};

}  // namespace stampede::wire
