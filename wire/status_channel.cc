#include "wire/status_channel.h"

#include <unistd.h>

#include <cstdio>
#include <thread>

#include "base/log.h"
#include "wire/auth.h"
#include "wire/zmq_util.h"

namespace stampede::wire {

namespace {
constexpr auto kUnreachableAfter = std::chrono::seconds(5);
constexpr auto kWarnEvery = std::chrono::seconds(30);
}  // namespace

StatusChannel::StatusChannel(zmq::context_t& ctx, const std::string& coordinator_endpoint,
                             const Sender& sender, const Curve* curve, const std::string& control_endpoint,
                             std::atomic<bool>* stop)
    : control_endpoint_(control_endpoint), stop_(stop) {
  *status_.mutable_sender() = sender;
  status_.set_pid(int(::getpid()));
  last_heard_ = std::chrono::steady_clock::now();
  last_warned_ = last_heard_ - kWarnEvery;
  if (coordinator_endpoint.empty()) return;
  socket_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
  ConfigureSender(*socket_, 100, 0);
  if (curve != nullptr) curve->MakeClient(*socket_, "coordinator", coordinator_endpoint);
  socket_->connect(coordinator_endpoint);
  if (control_endpoint.empty()) return;
  control_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub);
  ConfigureReceiver(*control_, 1 << 16);
  if (curve != nullptr) curve->MakeClient(*control_, "coordinator", control_endpoint);
  control_->set(zmq::sockopt::subscribe, "");
  control_->connect(control_endpoint);
}

void StatusChannel::Listen() {
  if (!control_) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<zmq::message_t> parts;
  while (RecvMultipart(*control_, &parts, false)) {
    Control c;
    if (parts.size() != 1 || !ParseFrame(parts[0], &c) || !CheckProtocol(c.sender()).empty() ||
        c.sender().role() != ROLE_COORDINATOR) {
      continue;
    }
    heard_ = true;
    last_heard_ = now;
    if (c.evaluate_round() > evaluate_round_) {
      evaluate_round_ = c.evaluate_round();
      evaluate_frames_ = c.evaluate_frames();
    }
    const Sender& me = status_.sender();
    const bool mine = c.stop() && (c.stop_role() == ROLE_UNSPECIFIED || c.stop_role() == me.role()) &&
                      (c.stop_index() < 0 || c.stop_index() == me.task_index());
    if (mine && stop_ != nullptr && !stop_->load()) {
      base::LogInfo("%s %d: the coordinator stops the run: %s\n", RoleName(me.role()), me.task_index(),
                   c.reason().c_str());
      stop_->store(true);
    }
  }
  if (now - last_heard_ > kUnreachableAfter && now - last_warned_ > kWarnEvery) {
    last_warned_ = now;
    base::LogInfo("%s %d: nothing from the coordinator at %s for %.0f s: is `stampede coordinator` (or `stampede "
                 "run`) running, and can this host reach it (cluster.coordinator, cluster.control)?\n",
                 RoleName(status_.sender().role()), status_.sender().task_index(), control_endpoint_.c_str(),
                 std::chrono::duration<double>(now - last_heard_).count());
  }
}

void StatusChannel::Send(const char* activity) {
  status_.set_activity(activity);
  if (socket_) (void)SendMessage(*socket_, status_);
  Listen();
}

void SleepUnlessStopped(double seconds, const std::atomic<bool>& stop) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!stop.load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace stampede::wire
