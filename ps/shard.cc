#include "ps/shard.h"
#include "wire/trace.h"

#include <cstdio>
#include <cmath>
#include <cstring>

#include "net/layout.h"
#include "wire/auth.h"
#include "wire/zmq_util.h"

namespace stampede::ps {

const char* RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kUnparsable: return "bad_request";
    case Refusal::kWrongLayout: return "wrong_layout";
    case Refusal::kNonFinite: return "non_finite";
    case Refusal::kStalePut: return "stale_put";
    case Refusal::kUnauthorisedPut: return "unauthorised_put";
    default: return "unknown";
  }
}

void Shard::Refuse(Refusal why, const std::string& detail) {
  ++stats_.refused[size_t(why)];
  if (why == Refusal::kStalePut) {
    ++stats_.stale_puts;  // versions are monotone; an old put is ignored, not logged
    return;
  }
  ++stats_.bad_requests;
  int64_t unlogged = 0;
  if (log_limiter_.Allow(RefusalName(why), &unlogged)) {
    std::fprintf(stderr, "ps %d: refused a request (%s): %s%s\n", opt_.shard, RefusalName(why), detail.c_str(),
                 wire::LogLimiter::More(unlogged).c_str());
  }
}

struct Shard::Snapshot {
  int64_t version;
  std::vector<float> data;
};

Shard::Shard(zmq::context_t& ctx, ShardOptions opt)
    : opt_(opt), socket_(ctx, zmq::socket_type::router) {
  wire::ConfigureReceiver(socket_, opt_.max_message_bytes);
  socket_.set(zmq::sockopt::router_mandatory, 0);
  socket_.set(zmq::sockopt::sndhwm, 1000);
  if (opt_.curve != nullptr) opt_.curve->MakeServer(socket_, wire::kDomainParams);
}

Shard::~Shard() = default;

bool Shard::Bind(const std::string& endpoint, std::string* error) {
  try {
    socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    *error = "ps shard " + std::to_string(opt_.shard) + ": cannot bind " + endpoint + ": " + e.what();
    return false;
  }
  return true;
}

std::string Shard::endpoint() const { return socket_.get(zmq::sockopt::last_endpoint); }

void Shard::Run(const std::atomic<bool>& stop) {
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stop.load()) {
    wire::Poll(items, 1, std::chrono::milliseconds(100));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    while (wire::RecvMultipart(socket_, &parts, false)) Handle(parts);
  }
}

void Shard::Handle(const std::vector<zmq::message_t>& parts) {
  wire::PsRequest req;
  std::string problem;
  if (parts.size() < 2 || parts.size() > 3 || !wire::ParseFrame(parts[1], &req)) {
    problem = "unparsable request";
  } else if (std::string e = wire::CheckProtocol(req.sender()); !e.empty()) {
    problem = e;
  }
  if (!problem.empty()) {
    Refuse(Refusal::kUnparsable, problem);
    return;
  }
  if (req.has_put()) {
    HandlePut(req.put(), parts.size() == 3 ? &parts[2] : nullptr, wire::PeerIdentity(parts[1]));
  } else if (req.has_get()) {
    HandleGet(parts[0], req.get());
  } else {
    Refuse(Refusal::kUnparsable, "neither a put nor a get");
  }
}

void Shard::HandlePut(const wire::ParamsSlice& put, const zmq::message_t* data, const std::string& peer) {
  wire::TraceSpan span("put", "ps");
  if (opt_.curve != nullptr && wire::IdentityRole(peer) != "learner") {
    Refuse(Refusal::kUnauthorisedPut, "a put from " + (peer.empty() ? std::string("an unidentified peer") : peer) +
                                          "; only learners may put");
    return;
  }
  // The learner's placement (ps/placement.h) decides the slice; it must lie inside the
  // vector, and stay the same from put to put.
  const char* problem = nullptr;
  Refusal why = Refusal::kWrongLayout;
  if (put.shard() != opt_.shard || put.num_shards() != opt_.num_shards) {
    problem = "put for another shard";
  } else if (put.offset() < 0 || put.count() <= 0 || put.total_size() <= 0 ||
             put.offset() > put.total_size() - put.count() || data == nullptr ||
             data->size() != size_t(put.count()) * sizeof(float)) {
    problem = "put slice does not fit its parameter vector";
  } else if (total_size_ >= 0 && (put.offset() != offset_ || put.count() != count_)) {
    problem = "put slice differs from this shard's slice";
  } else if (total_size_ >= 0 && (put.total_size() != total_size_ ||
                                  put.layout_fingerprint() != layout_fingerprint_)) {
    problem = "put for a different parameter layout";
  } else {
    // Never serve non-finite parameters: actors would act on NaN.
    const float* v = static_cast<const float*>(data->data());
    for (int64_t i = 0; i < put.count() && problem == nullptr; ++i) {
      if (!std::isfinite(v[i])) {
        problem = "put holds a non-finite value (NaN or infinity)";
        why = Refusal::kNonFinite;
      }
    }
  }
  if (problem != nullptr) {
    Refuse(why, problem);
    return;
  }
  if (!versions_.empty() && put.version() <= versions_.back()->version) {
    Refuse(Refusal::kStalePut, {});
    return;
  }
  auto snap = std::make_shared<Snapshot>();
  snap->version = put.version();
  snap->data.resize(put.count());
  std::memcpy(snap->data.data(), data->data(), data->size());
  total_size_ = put.total_size();
  layout_fingerprint_ = put.layout_fingerprint();
  offset_ = put.offset();
  count_ = put.count();
  versions_.push_back(std::move(snap));
  while (int(versions_.size()) > opt_.versions_kept) versions_.pop_front();
  ++stats_.puts;
  stats_.newest_version = put.version();
  AnswerWaiting();
}

std::shared_ptr<const Shard::Snapshot> Shard::Pick(const wire::GetParams& get) const {
  if (get.exact_version() > 0) {
    for (const auto& snap : versions_) {
      if (snap->version == get.exact_version()) return snap;
    }
  }
  if (!versions_.empty() && versions_.back()->version >= get.min_version()) return versions_.back();
  return nullptr;
}

void Shard::HandleGet(const zmq::message_t& identity, const wire::GetParams& get) {
  wire::TraceSpan span("get", "ps");
  ++stats_.gets;
  const std::string id(static_cast<const char*>(identity.data()), identity.size());
  if (auto pick = Pick(get)) {
    Reply(id, pick);
    return;
  }
  // Nothing that new yet: hold the request and answer it when a put brings one, so an
  // actor learns of a new version at once without asking again and again.
  for (auto& w : waiting_) {
    if (w.identity == id) {
      w.get = get;
      return;
    }
  }
  if (waiting_.size() < kMaxWaiting) {
    waiting_.push_back({id, get});
  } else {
    Reply(id, nullptr);  // too many waiting: the client asks again
  }
}

void Shard::AnswerWaiting() {
  size_t kept = 0;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (auto pick = Pick(waiting_[i].get)) {
      Reply(waiting_[i].identity, pick);
    } else {
      if (i != kept) waiting_[kept] = std::move(waiting_[i]);  // no self-move: it empties strings
      ++kept;
    }
  }
  waiting_.resize(kept);
}

void Shard::Reply(const std::string& identity, const std::shared_ptr<const Snapshot>& pick) {
  wire::ParamsSlice reply;
  *reply.mutable_sender() = wire::MakeSender(wire::ROLE_PS, opt_.shard, opt_.incarnation);
  reply.set_shard(opt_.shard);
  reply.set_num_shards(opt_.num_shards);
  reply.set_has_params(pick != nullptr);
  if (pick) {
    reply.set_version(pick->version);
    reply.set_offset(offset_);
    reply.set_count(count_);
    reply.set_total_size(total_size_);
    reply.set_layout_fingerprint(layout_fingerprint_);
  }
  zmq::message_t id(identity.data(), identity.size());
  const std::string head = reply.SerializeAsString();
  zmq::message_t head_msg(head.data(), head.size());
  if (!socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  if (!pick) {
    (void)socket_.send(head_msg, zmq::send_flags::none);
    return;
  }
  (void)socket_.send(head_msg, zmq::send_flags::sndmore);
  // Zero-copy: the message keeps the snapshot alive until ZeroMQ has sent it.
  auto* hold = new std::shared_ptr<const Snapshot>(pick);
  zmq::message_t body(const_cast<float*>(pick->data.data()), pick->data.size() * sizeof(float),
                      [](void*, void* hint) { delete static_cast<std::shared_ptr<const Snapshot>*>(hint); },
                      hold);
  (void)socket_.send(body, zmq::send_flags::none);
  ++stats_.replies_with_params;
}

}  // namespace stampede::ps
