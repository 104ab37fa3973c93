#include "ps/client.h"

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "net/layout.h"
#include "ps/fetch_state.h"
#include "ps/placement.h"
#include "wire/bfloat16.h"
#include "wire/auth.h"
#include "wire/zmq_util.h"

namespace stampede::ps {

using Clock = std::chrono::steady_clock;
// A request with no answer for this long is sent again (the shard holds a request
// until it has a newer version, so silence is normal; this bounds how long a lost
// request or reply can leave an actor on old parameters). A repeated request
// replaces the held one at the shard, so it costs one small message.
constexpr auto kRequestTimeout = std::chrono::milliseconds(250);
// The longest a blocking call waits on its sockets before it looks at the stop flag again.
constexpr auto kStopCheck = std::chrono::milliseconds(100);

// Blocks until one of `sockets` has `events` ready or `max_wait` passes.
template <class Sockets, class Get>
bool WaitOn(Sockets& sockets, Get socket_of, short events, std::chrono::milliseconds max_wait) {
  std::vector<zmq::pollitem_t> items;
  for (auto& s : sockets) items.push_back({socket_of(s).handle(), 0, events, 0});
  return wire::Poll(items.data(), items.size(), max_wait) > 0;
}

struct ParamsFetcher::ShardState {
  zmq::socket_t socket;
  std::vector<float> data;  // the held slice (FetchState::held gives its version)
  ShardState(zmq::context_t& ctx) : socket(ctx, zmq::socket_type::dealer) {}
};

namespace {
// The options' plan, or equal contiguous slices where none is given.
void DefaultPlacement(ClientOptions* opt) {
  const int S = int(opt->endpoints.size());
  if (!opt->placement) opt->placement = std::make_shared<Placement>(ContiguousPlacement(opt->total_size, S));
  if (opt->placement->num_shards() != S || opt->placement->total_size != opt->total_size) {
    throw std::invalid_argument("PS placement for " + std::to_string(opt->placement->num_shards()) + " shards and " +
                                std::to_string(opt->placement->total_size) + " floats, but the client has " +
                                std::to_string(S) + " shards and " + std::to_string(opt->total_size) + " floats");
  }
}
}  // namespace

ParamsFetcher::ParamsFetcher(zmq::context_t& ctx, ClientOptions opt)
    : opt_(std::move(opt)), state_(int(opt_.endpoints.size()), opt_.mixed_versions, kRequestTimeout) {
  DefaultPlacement(&opt_);
  for (const auto& ep : opt_.endpoints) {
    auto s = std::make_unique<ShardState>(ctx);
    wire::ConfigureReceiver(s->socket, opt_.max_message_bytes);
    if (opt_.curve) opt_.curve->MakeClient(s->socket, wire::Identity("ps", int(shards_.size())), ep);
    s->socket.connect(ep);
    shards_.push_back(std::move(s));
  }
}
ParamsFetcher::~ParamsFetcher() = default;

bool ParamsFetcher::Request(const FetchRequest& r) {
  wire::PsRequest req;
  *req.mutable_sender() = opt_.sender;
  req.mutable_get()->set_min_version(r.min_version);
  req.mutable_get()->set_exact_version(r.exact_version);
  req.mutable_get()->set_bfloat16(opt_.bfloat16);
  const std::string bytes = req.SerializeAsString();
  zmq::message_t msg(bytes.data(), bytes.size());
  return bool(shards_[size_t(r.shard)]->socket.send(msg, zmq::send_flags::dontwait));
}

void ParamsFetcher::SendDue(int64_t current) {
  const auto now = Clock::now();
  for (const FetchRequest& r : state_.Due(now, current)) {
    if (Request(r)) state_.Sent(r.shard, now);
  }
}

void ParamsFetcher::Reset() {
  state_.Reset();
  ++resets_;
}

bool ParamsFetcher::Poll(std::span<float> params, int64_t* version) {
  const int S = int(shards_.size());
  std::vector<zmq::message_t> parts;
  for (int i = 0; i < S; ++i) {
    ShardState& s = *shards_[i];
    while (wire::RecvMultipart(s.socket, &parts, false)) {
      ++replies_;
      wire::ParamsSlice reply;
      if (parts.empty() || !wire::ParseFrame(parts[0], &reply) ||
          !wire::CheckProtocol(reply.sender()).empty()) {
        ++rejected_;
        continue;
      }
      if (incarnations_.size() != size_t(S)) incarnations_.assign(size_t(S), 0);
      incarnations_[size_t(i)] = reply.sender().incarnation();
      if (i == 0) {
        frames_by_learner_.assign(reply.env_frames_by_learner().begin(), reply.env_frames_by_learner().end());
      }
      if (!reply.has_params()) {
        state_.OnReply(i, false, 0, *version);
        continue;
      }
      const net::Slice mine{opt_.placement->Start(i), opt_.placement->Count(i)};
      if (reply.total_size() != opt_.total_size || reply.layout_fingerprint() != opt_.layout_fingerprint) {
        // Another network's parameters: they will never fit, so say so at once.
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "PS shard %d serves a network of %lld parameters (layout fingerprint %016llx), but this "
                      "process's network has %lld (fingerprint %016llx): it was started with another net or env "
                      "config than the learner",
                      i, (long long)reply.total_size(), (unsigned long long)reply.layout_fingerprint(),
                      (long long)opt_.total_size, (unsigned long long)opt_.layout_fingerprint);
        mismatch_ = buf;
      } else if (reply.offset() != mine.offset || reply.count() != mine.count) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "PS shard %d serves the slice [%lld, %lld) of the parameters, but this process's placement "
                      "gives it [%lld, %lld): it was started with another ps.placement or ps.partition_bytes than "
                      "the learner",
                      i, (long long)reply.offset(), (long long)(reply.offset() + reply.count()), (long long)mine.offset,
                      (long long)(mine.offset + mine.count));
        mismatch_ = buf;
      }
      const size_t element = reply.bfloat16() ? sizeof(uint16_t) : sizeof(float);
      if (parts.size() != 2 || reply.shard() != i || reply.total_size() != opt_.total_size ||
          reply.layout_fingerprint() != opt_.layout_fingerprint || reply.offset() != mine.offset ||
          reply.count() != mine.count || parts[1].size() != size_t(mine.count) * element) {
        ++rejected_;
        state_.OnReply(i, false, 0, *version);
        continue;
      }
      if (!state_.OnReply(i, true, reply.version(), *version)) continue;
      s.data.resize(mine.count);
      if (reply.bfloat16()) {
        const auto* h = static_cast<const uint16_t*>(parts[1].data());
        for (int64_t k = 0; k < mine.count; ++k) s.data[size_t(k)] = wire::FromBfloat16(h[k]);
      } else {
        std::memcpy(s.data.data(), parts[1].data(), parts[1].size());
      }
    }
  }
  const bool got = opt_.mixed_versions ? PollMixed(params, version) : PollRelay(params, version);
  SendDue(*version);  // at once, so that the answers are in by the next Poll
  return got;
}

bool ParamsFetcher::PollRelay(std::span<float> params, int64_t* version) {
  const FetchState::Assembly a = state_.Take(Clock::now(), *version);
  if (a.version < 0) return false;
  const int S = int(shards_.size());
  assembled_.resize(size_t(S));
  for (int i = 0; i < S; ++i) {
    opt_.placement->Scatter(i, shards_[i]->data.data(), params.data());
    assembled_[size_t(i)] = state_.held(i);
  }
  *version = a.version;
  return true;
}

bool ParamsFetcher::PollMixed(std::span<float> params, int64_t* version) {
  const int S = int(shards_.size());
  assembled_.resize(size_t(S), -1);
  bool all = true, changed = false;
  for (int i = 0; i < S; ++i) all = all && state_.held(i) >= 0;
  if (all) {
    int64_t oldest = state_.held(0);
    for (int i = 0; i < S; ++i) {
      const int64_t held = state_.held(i);
      oldest = std::min(oldest, held);
      if (held == assembled_[size_t(i)]) continue;
      opt_.placement->Scatter(i, shards_[i]->data.data(), params.data());
      assembled_[size_t(i)] = held;
      changed = true;
    }
    if (changed) *version = oldest;
  }
  return changed;
}

std::vector<int64_t> ParamsFetcher::newest_versions() const {
  std::vector<int64_t> out;
  for (int i = 0; i < state_.num_shards(); ++i) out.push_back(state_.held(i));
  return out;
}

bool ParamsFetcher::PollFresh(std::span<float> params, int64_t* version, std::chrono::milliseconds max_wait) {
  const auto deadline = Clock::now() + max_wait;
  bool got = Poll(params, version);
  // While replies keep coming within the wait: nothing more means the shards have nothing newer.
  while (Clock::now() < deadline &&
         WaitForReply(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()))) {
    got = Poll(params, version) || got;
  }
  return got;
}

bool ParamsFetcher::WaitForReply(std::chrono::milliseconds max_wait) {
  return WaitOn(shards_, [](auto& s) -> zmq::socket_t& { return s->socket; }, ZMQ_POLLIN, max_wait);
}

bool ParamsFetcher::WaitFirst(std::span<float> params, int64_t* version,
                              std::chrono::duration<double> timeout, const std::atomic<bool>* stop) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (stop != nullptr && stop->load()) return false;
    if (Poll(params, version)) return true;
    // Poll sends what is due again after kRequestTimeout: wake for a reply or by then.
    (void)WaitForReply(std::min(kStopCheck, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
  }
  return false;
}

ParamsPublisher::ParamsPublisher(zmq::context_t& ctx, ClientOptions opt) : opt_(std::move(opt)) {
  DefaultPlacement(&opt_);
  for (const auto& ep : opt_.endpoints) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    wire::ConfigureSender(s, 4, 0);
    wire::ConfigureReceiver(s, 1 << 16);  // shards answer only checkpoint requests
    if (opt_.curve) opt_.curve->MakeClient(s, wire::Identity("ps", int(sockets_.size())), ep);
    s.connect(ep);
    sockets_.push_back(std::move(s));
  }
  sent_version_.assign(sockets_.size(), -1);
}
ParamsPublisher::~ParamsPublisher() = default;

const float* ParamsPublisher::Slice(int shard, std::span<const float> values, int64_t version,
                                    wire::ParamsSlice* put) {
  const int S = int(sockets_.size());
  const net::Slice mine{opt_.placement->Start(shard), opt_.placement->Count(shard)};
  *put->mutable_sender() = opt_.sender;
  put->set_has_params(true);
  put->set_version(version);
  put->set_shard(shard);
  put->set_num_shards(S);
  put->set_offset(mine.offset);
  put->set_count(mine.count);
  put->set_total_size(opt_.total_size);
  put->set_layout_fingerprint(opt_.layout_fingerprint);
  put->set_learner_index(opt_.learner_index);
  put->set_learner_env_frames(env_frames_);
  // One range: sent in place; several: gathered into one buffer first.
  if (opt_.placement->contiguous_single(shard)) return values.data() + opt_.placement->shards[size_t(shard)].front().offset;
  gather_.resize(size_t(mine.count));
  opt_.placement->Gather(shard, values.data(), gather_.data());
  return gather_.data();
}

bool ParamsPublisher::PutShard(int shard, std::span<const float> params, int64_t version) {
  wire::PsRequest req;
  *req.mutable_sender() = opt_.sender;
  const float* data = Slice(shard, params, version, req.mutable_put());
  const wire::Frame frames[] = {{data, size_t(req.put().count()) * sizeof(float)}};
  return wire::SendMessage(sockets_[shard], req, frames);
}

bool ParamsPublisher::PushGradient(std::span<const float> grad, const std::vector<int64_t>& shard_versions,
                                   double learning_rate, const std::atomic<bool>* stop) {
  for (int i = 0; i < int(sockets_.size()); ++i) {
    wire::PsRequest req;
    *req.mutable_sender() = opt_.sender;
    wire::PushGradient* push = req.mutable_push();
    push->set_learning_rate(learning_rate);
    const float* data = Slice(i, grad, shard_versions.at(size_t(i)), push->mutable_slice());
    const wire::Frame frames[] = {{data, size_t(push->slice().count()) * sizeof(float)}};
    while (!wire::SendMessage(sockets_[size_t(i)], req, frames)) {
      if (stop != nullptr && stop->load()) return false;
      (void)WaitWritable(i, kStopCheck);
    }
  }
  return true;
}

bool ParamsPublisher::RequestCheckpoint(int64_t sequence, int shard) {
  wire::PsRequest req;
  *req.mutable_sender() = opt_.sender;
  req.mutable_checkpoint()->set_sequence(sequence);
  return wire::SendMessage(sockets_.at(size_t(shard)), req, {});
}

bool ParamsPublisher::WaitForReply(std::chrono::milliseconds max_wait) {
  return WaitOn(sockets_, [](zmq::socket_t& s) -> zmq::socket_t& { return s; }, ZMQ_POLLIN, max_wait);
}

bool ParamsPublisher::WaitWritable(int shard, std::chrono::milliseconds max_wait) {
  zmq::pollitem_t item{sockets_.at(size_t(shard)).handle(), 0, ZMQ_POLLOUT, 0};
  return wire::Poll(&item, 1, max_wait) > 0;
}

void ParamsPublisher::PollCheckpointDone(std::vector<wire::CheckpointDone>* done) {
  std::vector<zmq::message_t> parts;
  for (auto& socket : sockets_) {
    while (wire::RecvMultipart(socket, &parts, false)) {
      wire::CheckpointDone d;
      if (parts.size() == 1 && wire::ParseFrame(parts[0], &d) && wire::CheckProtocol(d.sender()).empty()) {
        done->push_back(d);
      }
    }
  }
}

bool ParamsPublisher::Put(std::span<const float> params, int64_t version) {
  bool all = true;
  for (int i = 0; i < int(sockets_.size()); ++i) {
    if (sent_version_[i] < version && PutShard(i, params, version)) sent_version_[i] = version;
    all = all && sent_version_[i] >= version;
  }
  return all;
}

bool ParamsPublisher::PutAll(std::span<const float> params, int64_t version,
                             const std::atomic<bool>* stop) {
  while (!Put(params, version)) {
    if (stop != nullptr && stop->load()) return false;
    // Wait for room at the first shard that has not taken this version yet.
    for (int i = 0; i < int(sockets_.size()); ++i) {
      if (sent_version_[size_t(i)] < version) {
        (void)WaitWritable(i, kStopCheck);
        break;
      }
    }
  }
  return true;
}

}  // namespace stampede::ps
