#include "wire/status_channel.h"

#include <unistd.h>

#include "wire/auth.h"
#include "wire/zmq_util.h"

namespace stampede::wire {

StatusChannel::StatusChannel(zmq::context_t& ctx, const std::string& coordinator_endpoint,
                             const Sender& sender, const Curve* curve) {
  *status_.mutable_sender() = sender;
  status_.set_pid(int(::getpid()));
  if (coordinator_endpoint.empty()) return;
  socket_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
  ConfigureSender(*socket_, 100, 0);
  if (curve != nullptr) curve->MakeClient(*socket_, "coordinator");
  socket_->connect(coordinator_endpoint);
}

void StatusChannel::Send(const char* activity) {
  status_.set_activity(activity);
  if (socket_) (void)SendMessage(*socket_, status_);
}

}  // namespace stampede::wire
