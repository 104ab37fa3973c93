// A process's status (heartbeat and metrics) to the coordinator: one PUSH socket, used
// by one thread. Without a coordinator endpoint Send does nothing. With a control
// endpoint it also listens (SUB) to the coordinator: a stop meant for this process sets
// `*stop`, and 5 s without a word from the coordinator is reported on stderr.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
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
                const Curve* curve = nullptr, const std::string& control_endpoint = "",
                std::atomic<bool>* stop = nullptr);
  Status& status() { return status_; }
  // Sends status() with `activity` (what the process is doing now) and reads what the
  // coordinator said meanwhile; never blocks.
  void Send(const char* activity);
  // True once the coordinator has been heard on the control socket.
  bool heard() const { return heard_; }
  // The newest evaluation round the coordinator has asked for (0: none) and the global
  // env frames at which it asked (the evaluator's work list; config `evaluation`).
  int64_t evaluate_round() const { return evaluate_round_; }
  int64_t evaluate_frames() const { return evaluate_frames_; }

 private:
  void Listen();
  std::unique_ptr<zmq::socket_t> socket_, control_;
  std::string control_endpoint_;
  std::atomic<bool>* stop_ = nullptr;
  Status status_;
  bool heard_ = false;
  int64_t evaluate_round_ = 0, evaluate_frames_ = 0;
  std::chrono::steady_clock::time_point last_heard_, last_warned_;
};

// Sleeps `seconds`, waking every 20 ms to return early once `stop` is set: a role's
// reporting loop between two status messages.
void SleepUnlessStopped(double seconds, const std::atomic<bool>& stop);

}  // namespace stampede::wire
