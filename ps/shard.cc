#include "ps/shard.h"
#include "base/log.h"
#include "base/trace.h"

#include <cstdio>
#include <cmath>
#include <cstring>

#include <algorithm>
#include <filesystem>

#include "net/kernel_math.h"
#include "wire/bfloat16.h"
#include "net/layout.h"
#include "ps/checkpoints.h"
#include "wire/auth.h"
#include "base/durable_file.h"
#include "wire/zmq_util.h"

namespace stampede::ps {

const char* RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kUnparsable: return "bad_request";
    case Refusal::kWrongLayout: return "wrong_layout";
    case Refusal::kNonFinite: return "non_finite";
    case Refusal::kStalePut: return "stale_put";
    case Refusal::kUnauthorisedPut: return "unauthorised_put";
    case Refusal::kWrongMode: return "wrong_mode";
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
    base::LogError("ps %d: refused a request (%s): %s%s\n", opt_.shard, RefusalName(why), detail.c_str(),
                 base::LogLimiter::More(unlogged).c_str());
  }
}

struct Shard::Snapshot {
  int64_t version;
  std::vector<float> data;
  // The same values as bfloat16, made on the first request for them.
  mutable std::vector<uint16_t> bf16;
};

UpdateMode UpdateModeOf(const std::string& name) {
  return name == "sync" ? UpdateMode::kSync : name == "async" ? UpdateMode::kAsync : UpdateMode::kRelay;
}

Shard::Shard(zmq::context_t& ctx, ShardOptions opt)
    : opt_(opt), socket_(ctx, zmq::socket_type::router) {
  wire::ConfigureReceiver(socket_, opt_.max_message_bytes);
  socket_.set(zmq::sockopt::router_mandatory, 0);
  socket_.set(zmq::sockopt::sndhwm, 1000);
  learner_frames_.assign(size_t(std::max(1, opt_.num_learners)), 0);
  if (!opt_.version_mark_path.empty()) version_mark_ = ReadVersionMark(opt_.version_mark_path);
  if (const auto& r = opt_.restore) {
    // Continue above anything this shard may have served before it died.
    total_size_ = r->total_size;
    layout_fingerprint_ = r->layout_fingerprint;
    offset_ = r->offset;
    count_ = r->count;
    for (size_t l = 0; l < r->learner_frames.size() && l < learner_frames_.size(); ++l) {
      learner_frames_[l] = r->learner_frames[l];
    }
    current_ = r->params;
    ms_ = r->mean_square;
    mom_ = r->momentum;
    restored_version_ = std::max(r->version, version_mark_);
    Publish(restored_version_, current_.data());
  }
}

Shard::~Shard() = default;

base::Status Shard::Bind(const std::string& endpoint) {
  try {
    if (opt_.curve != nullptr) opt_.curve->MakeServer(socket_, wire::kDomainParams, endpoint);
    socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return base::Unavailable("ps shard " + std::to_string(opt_.shard) + ": cannot bind " + endpoint + ": " + e.what());
  }
  return base::OkStatus();
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
  } else if (req.has_push()) {
    HandlePush(req.push(), parts.size() == 3 ? &parts[2] : nullptr, wire::PeerIdentity(parts[1]));
  } else if (req.has_checkpoint()) {
    if (FromLearner(wire::PeerIdentity(parts[1]), "checkpoint request")) HandleCheckpoint(parts[0], req.checkpoint());
  } else if (req.has_get()) {
    HandleGet(parts[0], req.get());
  } else {
    Refuse(Refusal::kUnparsable, "neither a put nor a get");
  }
}

namespace {
bool AllFinite(const float* v, int64_t n) {
  return std::all_of(v, v + n, [](float x) { return std::isfinite(x); });
}
}  // namespace

bool Shard::FromLearner(const std::string& peer, const char* what) {
  // Only with CURVE is the peer's role known; without it every peer is taken at its word.
  if (opt_.curve == nullptr || wire::IdentityRole(peer) == "learner") return true;
  Refuse(Refusal::kUnauthorisedPut, std::string("a ") + what + " from " +
                                        (peer.empty() ? std::string("an unidentified peer") : peer) +
                                        "; only learners may send one");
  return false;
}

const char* Shard::CheckSlice(const wire::ParamsSlice& put, const zmq::message_t* data) const {
  // The learner's placement (ps/placement.h) decides the slice; it must lie inside the
  // vector, and stay the same from put to put.
  if (put.shard() != opt_.shard || put.num_shards() != opt_.num_shards) return "put for another shard";
  if (put.offset() < 0 || put.count() <= 0 || put.total_size() <= 0 || put.offset() > put.total_size() - put.count() ||
      data == nullptr || data->size() != size_t(put.count()) * sizeof(float)) {
    return "put slice does not fit its parameter vector";
  }
  if (total_size_ >= 0 && (put.offset() != offset_ || put.count() != count_)) {
    return "put slice differs from this shard's slice";
  }
  if (total_size_ >= 0 && (put.total_size() != total_size_ || put.layout_fingerprint() != layout_fingerprint_)) {
    return "put for a different parameter layout";
  }
  if (put.learner_index() < 0 || put.learner_index() >= int(learner_frames_.size()) || put.learner_env_frames() < 0) {
    return "learner index or frame count out of range";
  }
  return nullptr;
}

void Shard::CountFrames(const wire::ParamsSlice& slice) {
  auto& mine = learner_frames_[size_t(slice.learner_index())];
  mine = std::max(mine, slice.learner_env_frames());
}

void Shard::Publish(int64_t version, const float* values) {
  if (!opt_.version_mark_path.empty() && version >= version_mark_) {
    // Reserve a block of versions before serving any of them.
    constexpr int64_t kBlock = 1000;
    if (const base::Status marked = WriteVersionMark(opt_.version_mark_path, version + kBlock); marked.ok()) {
      version_mark_ = version + kBlock;
    } else {
      base::LogError("ps %d: cannot write the version mark: %s\n", opt_.shard, marked.message().c_str());
    }
  }
  auto snap = std::make_shared<Snapshot>();
  snap->version = version;
  snap->data.assign(values, values + count_);
  versions_.push_back(std::move(snap));
  while (int(versions_.size()) > opt_.versions_kept) versions_.pop_front();
  stats_.newest_version = version;
  if (restored_version_ >= 0 && version > restored_version_) {
    // The recovery benchmark (tools/bench_recovery.sh) reads this line.
    const double unix_time =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    base::LogInfo("ps %d: version %lld, the first new one since the restore, at unix time %.3f\n", opt_.shard,
                 (long long)version, unix_time);
    restored_version_ = -1;
  }
  AnswerWaiting();
}

void Shard::HandlePut(const wire::ParamsSlice& put, const zmq::message_t* data, const std::string& peer) {
  base::TraceSpan span("put", "ps");
  if (!FromLearner(peer, "put")) return;
  const char* problem = CheckSlice(put, data);
  Refusal why = Refusal::kWrongLayout;
  if (problem == nullptr && !AllFinite(static_cast<const float*>(data->data()), put.count())) {
    // Never serve non-finite parameters: actors would act on NaN.
    problem = "put holds a non-finite value (NaN or infinity)";
    why = Refusal::kNonFinite;
  }
  if (problem != nullptr) {
    Refuse(why, problem);
    return;
  }
  CountFrames(put);
  // Sync/async: a put only initialises the shard (the chief's version 0); after that the
  // shard's own optimizer makes every version.
  if (!versions_.empty() && (put.version() <= versions_.back()->version || opt_.mode != UpdateMode::kRelay)) {
    Refuse(Refusal::kStalePut, {});
    return;
  }
  total_size_ = put.total_size();
  layout_fingerprint_ = put.layout_fingerprint();
  offset_ = put.offset();
  count_ = put.count();
  ++stats_.puts;
  const float* values = static_cast<const float*>(data->data());
  if (opt_.mode != UpdateMode::kRelay) {
    current_.assign(values, values + count_);
    ms_.assign(size_t(count_), 0.f);
    mom_.assign(size_t(count_), 0.f);
    Publish(std::max(put.version(), version_mark_), values);
    return;
  }
  Publish(put.version(), values);
}

void Shard::HandlePush(const wire::PushGradient& push, const zmq::message_t* data, const std::string& peer) {
  base::TraceSpan span("apply", "ps");
  if (!FromLearner(peer, "gradient push")) return;
  if (opt_.mode == UpdateMode::kRelay) {
    Refuse(Refusal::kWrongMode, "a gradient push, but learner.update_mode is \"relay\" (the learner applies the optimizer)");
    return;
  }
  const wire::ParamsSlice& slice = push.slice();
  const char* problem = CheckSlice(slice, data);
  if (problem == nullptr && total_size_ < 0) problem = "a gradient before the chief's first parameters";
  if (problem == nullptr && !(std::isfinite(push.learning_rate()) && push.learning_rate() >= 0 && push.learning_rate() <= 10)) {
    problem = "learning rate out of range [0, 10]";
  }
  Refusal why = Refusal::kWrongLayout;
  const float* g = static_cast<const float*>(problem == nullptr ? data->data() : nullptr);
  if (problem == nullptr && !AllFinite(g, count_)) {
    problem = "gradient holds a non-finite value (NaN or infinity)";
    why = Refusal::kNonFinite;
  }
  if (problem != nullptr) {
    Refuse(why, problem);
    return;
  }
  CountFrames(slice);
  const int64_t current = versions_.back()->version;
  const int64_t staleness = current - slice.version();
  if (staleness < 0) {
    Refuse(Refusal::kWrongLayout, "gradient for version " + std::to_string(slice.version()) +
                                      ", newer than this shard's " + std::to_string(current));
    return;
  }
  if (opt_.mode == UpdateMode::kAsync) {
    if (staleness > opt_.max_staleness) {
      ++stats_.gradients_dropped;
      return;
    }
    Apply(g, push.learning_rate(), staleness);
    return;
  }
  // Sync: only gradients of the current version count, one per learner.
  const int learner = slice.learner_index();
  if (staleness > 0 || std::find(contributed_.begin(), contributed_.end(), learner) != contributed_.end()) {
    ++stats_.gradients_dropped;
    return;
  }
  if (contributed_.empty()) sum_.assign(size_t(count_), 0.f);
  for (int64_t i = 0; i < count_; ++i) sum_[size_t(i)] += g[i];
  lr_sum_ += push.learning_rate();
  contributed_.push_back(learner);
  if (int(contributed_.size()) < opt_.replicas_to_aggregate) return;
  const float n = float(contributed_.size());
  for (float& v : sum_) v /= n;
  const double lr = lr_sum_ / n;
  contributed_.clear();
  lr_sum_ = 0;
  Apply(sum_.data(), lr, 0);
}

void Shard::Apply(const float* grad, double lr, int64_t staleness) {
  // The step count for Adam's bias correction is the version this step makes (versions
  // only grow, across restarts too, so a restarted shard never corrects as if new).
  const int64_t next = versions_.back()->version + 1;
  const net::OptimizerStep step = net::MakeOptimizerStep(opt_.optimizer, lr, next);
  for (int64_t i = 0; i < count_; ++i) {
    net::OptimizerElement(opt_.optimizer, step, current_[size_t(i)], ms_[size_t(i)], mom_[size_t(i)], grad[i]);
  }
  ++stats_.gradients_applied;
  ++stats_.staleness[size_t(std::min<int64_t>(staleness, kStalenessBuckets - 1))];
  Publish(versions_.back()->version + 1, current_.data());
}

void Shard::HandleCheckpoint(const zmq::message_t& identity, const wire::CheckpointRequest& req) {
  base::TraceSpan span("checkpoint", "ps");
  wire::CheckpointDone done;
  *done.mutable_sender() = wire::MakeSender(wire::ROLE_PS, opt_.shard, opt_.incarnation);
  done.set_sequence(req.sequence());
  done.set_shard(opt_.shard);
  done.set_file(ShardPartName(opt_.shard));
  auto finite = [](const std::vector<float>& v) { return AllFinite(v.data(), int64_t(v.size())); };
  if (opt_.mode != UpdateMode::kRelay && !versions_.empty() && !(finite(current_) && finite(ms_) && finite(mom_))) {
    // Never written: a restore would bring the NaN back.
    done.set_error("the slice or its optimizer state holds a non-finite value; not written");
    ++stats_.checkpoint_failures;
  } else if (opt_.mode == UpdateMode::kRelay || versions_.empty() || opt_.checkpoint_root.empty() ||
      req.sequence() <= 0 || req.sequence() > 99999999) {
    done.set_error(opt_.mode == UpdateMode::kRelay ? "relay mode: the learner checkpoints"
                   : versions_.empty()             ? "no parameters yet"
                   : opt_.checkpoint_root.empty()  ? "this shard has no run directory"
                                                   : "checkpoint sequence out of range [1, 99999999]");
  } else {
    ShardPart part;
    part.shard = opt_.shard;
    part.num_shards = opt_.num_shards;
    part.version = versions_.back()->version;
    part.offset = offset_;
    part.count = count_;
    part.total_size = total_size_;
    part.layout_fingerprint = layout_fingerprint_;
    part.learner_frames = learner_frames_;
    part.params = current_;
    part.mean_square = ms_;
    part.momentum = mom_;
    const std::string bytes = SerializeShardPart(part);
    const std::string dir = CheckpointDir(opt_.checkpoint_root, req.sequence());
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (const base::Status written = base::WriteFileAtomically(dir + "/" + done.file(), bytes); written.ok()) {
      done.set_version(part.version);
      done.set_bytes(int64_t(bytes.size()));
      done.set_checksum(base::Fnv1a64(bytes.data(), bytes.size()));
      ++stats_.checkpoint_parts;
    } else {
      done.set_error(written.message());
      ++stats_.checkpoint_failures;
    }
  }
  (void)wire::SendRouted(socket_, identity, done, {});
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
  base::TraceSpan span("get", "ps");
  ++stats_.gets;
  const std::string id(static_cast<const char*>(identity.data()), identity.size());
  if (auto pick = Pick(get)) {
    Reply(id, pick, get.bfloat16());
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
    Reply(id, nullptr, false);  // too many waiting: the client asks again
  }
}

void Shard::AnswerWaiting() {
  size_t kept = 0;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (auto pick = Pick(waiting_[i].get)) {
      Reply(waiting_[i].identity, pick, waiting_[i].get.bfloat16());
    } else {
      if (i != kept) waiting_[kept] = std::move(waiting_[i]);  // no self-move: it empties strings
      ++kept;
    }
  }
  waiting_.resize(kept);
}

void Shard::Reply(const std::string& identity, const std::shared_ptr<const Snapshot>& pick, bool bfloat16) {
  wire::ParamsSlice reply;
  *reply.mutable_sender() = wire::MakeSender(wire::ROLE_PS, opt_.shard, opt_.incarnation);
  reply.set_shard(opt_.shard);
  reply.set_num_shards(opt_.num_shards);
  reply.set_has_params(pick != nullptr);
  for (int64_t f : learner_frames_) reply.add_env_frames_by_learner(f);
  if (pick) {
    reply.set_bfloat16(bfloat16);
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
  void* bytes = const_cast<float*>(pick->data.data());
  size_t size = pick->data.size() * sizeof(float);
  if (bfloat16) {
    if (pick->bf16.size() != pick->data.size()) {
      pick->bf16.resize(pick->data.size());
      for (size_t i = 0; i < pick->data.size(); ++i) pick->bf16[i] = wire::ToBfloat16(pick->data[i]);
    }
    bytes = pick->bf16.data();
    size = pick->bf16.size() * sizeof(uint16_t);
  }
  zmq::message_t body(bytes, size,
                      [](void*, void* hint) { delete static_cast<std::shared_ptr<const Snapshot>*>(hint); },
                      hold);
  (void)socket_.send(body, zmq::send_flags::none);
  ++stats_.replies_with_params;
}

}  // namespace stampede::ps
