// The PS client options of the acting side (an actor, the central inference server): the
// run's shards, its placement of the network's tensors, the layout's size and fingerprint,
// this process's sender and keys, the update mode's fetch rule and the wire precision.
#pragma once

#include <memory>

#include "net/layout.h"
#include "ps/client.h"
#include "config/config.pb.h"

namespace stampede::actors {

ps::ClientOptions ActingClientOptions(const config::Config& cfg, const net::ParamLayout& layout,
                                      const wire::Sender& sender, std::shared_ptr<const wire::Curve> curve);

}  // namespace stampede::actors
