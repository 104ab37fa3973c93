#include "learner/ring.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include <zmq.hpp>

#include "wire/auth.h"
#include "wire/log_limit.h"
#include "wire/messages.pb.h"
#include "wire/zmq_util.h"

namespace stampede::learner {

namespace {
using Clock = std::chrono::steady_clock;
// A send that would block (the next member's queue is full) is tried again at this pace
// until the timeout, looking at the stop flag in between.
constexpr std::chrono::milliseconds kSendRetry{100};
// The longest one poll lasts before the stop flag is looked at again.
constexpr std::chrono::milliseconds kPollSlice{100};
// Messages that came before the one expected (of this round, or of the next while this
// one finishes; none should, as each sender sends in the order its receiver reads) are
// kept up to this many.
constexpr size_t kMaxEarly = 256;

struct Early {
  wire::RingPart header;
  zmq::message_t payload;
};
}  // namespace

struct Ring::Impl {
  zmq::context_t& ctx;
  RingOptions opt;
  std::unique_ptr<zmq::socket_t> in;
  std::map<int, std::unique_ptr<zmq::socket_t>> out;  // by learner index
  RingStats stats;
  wire::LogLimiter drop_log;
  std::vector<Early> early;
  // The reduction in progress.
  int64_t round = 0;
  std::vector<int> members;
  int prev = 0, next = 0;
  int64_t total = 0;
  std::map<int, RingContribution> known;

  Impl(zmq::context_t& c, RingOptions o) : ctx(c), opt(std::move(o)) {}

  void Drop(const std::string& why) {
    ++stats.dropped;
    int64_t unlogged = 0;
    if (drop_log.Allow("dropped", &unlogged)) {
      std::fprintf(stderr, "learner %d: allreduce: dropped a message: %s%s\n", opt.rank, why.c_str(),
                   wire::LogLimiter::More(unlogged).c_str());
    }
  }

  wire::RingPart Header(int phase, int step, int chunk, int64_t offset) const {
    wire::RingPart h;
    *h.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, opt.rank, opt.incarnation);
    h.set_round(round);
    h.set_phase(phase);
    h.set_step(step);
    h.set_chunk(chunk);
    h.set_offset(offset);
    h.set_total(total);
    for (int m : members) h.add_members(m);
    for (const auto& [l, c] : known) {
      auto* k = h.add_known();
      k->set_learner(c.learner);
      k->set_env_frames(c.env_frames);
      k->set_weight(c.weight);
      k->set_fingerprint(c.fingerprint);
    }
    return h;
  }

  base::Status Send(int phase, int step, int chunk, std::span<const float> data, int64_t begin, int64_t end,
                    const std::atomic<bool>* stop) {
    zmq::socket_t& s = *out.at(next);
    for (int64_t at = begin; at < end || (at == begin && begin == end);) {
      const int64_t n = std::min(end - at, opt.piece_elements);
      const wire::RingPart h = Header(phase, step, chunk, at);
      const wire::Frame f{data.data() + at, size_t(n) * sizeof(float)};
      const auto deadline = Clock::now() + opt.timeout;
      while (!wire::SendMessage(s, h, std::span<const wire::Frame>(&f, 1))) {
        if (stop && stop->load()) return base::Cancelled("stopped");
        if (Clock::now() > deadline) {
          return base::Unavailable("allreduce round " + std::to_string(round) + ": learner " + std::to_string(next) +
                                   " took nothing for " + std::to_string(opt.timeout.count() / 1000.0) +
                                   " s (learner.allreduce_timeout_s)");
        }
      }
      stats.bytes_sent += int64_t(f.size);
      at += n;
      if (n == 0) break;  // an empty chunk still sends one (empty) piece
    }
    return base::OkStatus();
  }

  // Checks a received piece against what this reduction can accept; "" when it may be kept.
  std::string Check(const wire::RingPart& h, const zmq::message_t& payload, const std::string& peer) const {
    if (std::string e = wire::CheckProtocol(h.sender()); !e.empty()) return e;
    if (h.sender().role() != wire::ROLE_LEARNER) return "not from a learner";
    if (!peer.empty() && peer != wire::Identity("learner", h.sender().task_index())) {
      return "claims learner " + std::to_string(h.sender().task_index()) + " but its key is " + peer + "'s";
    }
    if (h.round() < round) return "round " + std::to_string(h.round()) + " is over (now " + std::to_string(round) + ")";
    if (h.round() > round) return "";  // kept until this learner gets there
    if (h.sender().task_index() != prev) {
      return "from learner " + std::to_string(h.sender().task_index()) + ", but the previous member is " +
             std::to_string(prev);
    }
    if (int(h.members_size()) != int(members.size()) || !std::equal(members.begin(), members.end(), h.members().begin())) {
      return "another ring's members";
    }
    if (h.total() != total) return "a buffer of " + std::to_string(h.total()) + " values, expected " + std::to_string(total);
    if (payload.size() % sizeof(float) != 0) return "a payload of " + std::to_string(payload.size()) + " bytes";
    const int64_t n = int64_t(payload.size() / sizeof(float));
    if (h.offset() < 0 || h.offset() > total || n > total - h.offset()) return "values outside the buffer";
    if (h.phase() < 0 || h.phase() > 1 || h.step() < 0 || h.step() >= int(members.size()) - 1) return "no such step";
    return "";
  }

  // Receives the pieces of chunk [begin, end) of (phase, step) from the previous member,
  // adding them into data (reduce-scatter) or copying them (all-gather).
  base::Status Receive(int phase, int step, std::span<float> data, int64_t begin, int64_t end,
                       const std::atomic<bool>* stop) {
    int64_t at = begin;
    do {
      wire::RingPart h;
      zmq::message_t payload;
      bool got = false;
      // A piece kept earlier: checked again now that its round is this one.
      for (auto it = early.begin(); it != early.end();) {
        const wire::RingPart& e = it->header;
        if (e.round() != round || e.phase() != phase || e.step() != step || e.offset() != at) {
          ++it;
          continue;
        }
        if (std::string why = Check(e, it->payload, ""); !why.empty()) {
          Drop(why);
          it = early.erase(it);
          continue;
        }
        h = std::move(it->header);
        payload = std::move(it->payload);
        early.erase(it);
        got = true;
        break;
      }
      {
        const auto deadline = Clock::now() + opt.timeout;
        while (!got) {
          if (stop && stop->load()) return base::Cancelled("stopped");
          const auto now = Clock::now();
          if (now > deadline) {
            return base::Unavailable("allreduce round " + std::to_string(round) + ": learner " + std::to_string(prev) +
                                     " sent nothing for " + std::to_string(opt.timeout.count() / 1000.0) +
                                     " s (learner.allreduce_timeout_s)");
          }
          zmq::pollitem_t item{in->handle(), 0, ZMQ_POLLIN, 0};
          const auto wait = std::min(kPollSlice, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                                     std::chrono::milliseconds(1));
          if (wire::Poll(&item, 1, wait) <= 0) continue;
          std::vector<zmq::message_t> parts;
          if (!wire::RecvMultipart(*in, &parts, false)) continue;
          if (parts.size() != 2) {
            Drop(std::to_string(parts.size()) + " parts, expected 2");
            continue;
          }
          if (!wire::ParseFrame(parts[0], &h)) {
            Drop("an unreadable header");
            continue;
          }
          stats.bytes_received += int64_t(parts[1].size());
          if (std::string why = Check(h, parts[1], wire::PeerIdentity(parts[0])); !why.empty()) {
            Drop(why);
            continue;
          }
          if (h.round() > round || h.phase() != phase || h.step() != step || h.offset() != at) {
            // Not this piece: kept for later (this round's, or the next round's).
            if (early.size() < kMaxEarly) {
              early.push_back(Early{std::move(h), std::move(parts[1])});
            } else {
              Drop("too many messages ahead of the one expected");
            }
            continue;
          }
          payload = std::move(parts[1]);
          got = true;
        }
      }
      const int64_t n = int64_t(payload.size() / sizeof(float));
      if (n > end - at) return base::Internal("allreduce: learner " + std::to_string(prev) + " sent a piece past its chunk");
      const float* v = static_cast<const float*>(payload.data());
      float* d = data.data() + at;
      if (phase == 0) {
        for (int64_t i = 0; i < n; ++i) d[i] = v[i] + d[i];
      } else {
        std::memcpy(d, v, size_t(n) * sizeof(float));
      }
      for (const auto& k : h.known()) {
        if (std::find(members.begin(), members.end(), k.learner()) == members.end()) continue;
        RingContribution c;
        c.learner = k.learner();
        c.env_frames = k.env_frames();
        c.weight = k.weight() != 0 ? 1 : 0;
        c.fingerprint = k.fingerprint();
        known[c.learner] = c;
      }
      at += n;
      if (n == 0) break;
    } while (at < end);
    return base::OkStatus();
  }
};

Ring::Ring(zmq::context_t& ctx, RingOptions options) : impl_(std::make_unique<Impl>(ctx, std::move(options))) {}
Ring::~Ring() = default;

const RingStats& Ring::stats() const { return impl_->stats; }

base::Status Ring::Start() {
  Impl& m = *impl_;
  const int L = int(m.opt.endpoints.size());
  if (m.opt.rank < 0 || m.opt.rank >= L) {
    return base::InvalidArgument("learner " + std::to_string(m.opt.rank) + " has no cluster.allreduce endpoint (" +
                                 std::to_string(L) + " given)");
  }
  m.in = std::make_unique<zmq::socket_t>(m.ctx, zmq::socket_type::pull);
  wire::ConfigureReceiver(*m.in, m.opt.max_message_bytes);
  if (m.opt.curve) m.opt.curve->MakeServer(*m.in, wire::kDomainAllreduce);
  try {
    m.in->bind(m.opt.bind.empty() ? m.opt.endpoints[size_t(m.opt.rank)] : m.opt.bind);
  } catch (const zmq::error_t& e) {
    return base::Unavailable("learner " + std::to_string(m.opt.rank) + ": cannot bind " +
                             m.opt.endpoints[size_t(m.opt.rank)] + " (cluster.allreduce): " + e.what());
  }
  for (int l = 0; l < L; ++l) {
    if (l == m.opt.rank) continue;
    auto s = std::make_unique<zmq::socket_t>(m.ctx, zmq::socket_type::push);
    wire::ConfigureSender(*s, 64, int(kSendRetry.count()));
    if (m.opt.curve) m.opt.curve->MakeClient(*s, wire::Identity("learner", l));
    s->connect(m.opt.endpoints[size_t(l)]);
    m.out[l] = std::move(s);
  }
  return base::OkStatus();
}

base::Status Ring::AllReduce(int64_t round, const std::vector<int>& members, std::span<float> data,
                             const RingContribution& own, std::vector<RingContribution>* all,
                             const std::atomic<bool>* stop) {
  Impl& m = *impl_;
  const auto started = Clock::now();
  const int L = int(members.size());
  const auto me = std::find(members.begin(), members.end(), m.opt.rank);
  if (me == members.end() || !std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end()) {
    return base::Internal("allreduce: the members must be ascending learner indices, this one among them");
  }
  for (int l : members) {
    if (l != m.opt.rank && !m.out.count(l)) return base::Internal("allreduce: no learner " + std::to_string(l));
  }
  const int p = int(me - members.begin());
  m.round = round;
  m.members = members;
  m.prev = members[size_t((p + L - 1) % L)];
  m.next = members[size_t((p + 1) % L)];
  m.total = int64_t(data.size());
  m.known.clear();
  RingContribution mine = own;
  mine.learner = m.opt.rank;
  mine.weight = own.weight != 0 ? 1 : 0;
  m.known[m.opt.rank] = mine;
  // Pieces of earlier rounds are of no use (a round abandoned at the timeout, say).
  std::erase_if(m.early, [&](const Early& e) { return e.header.round() < round; });
  if (mine.weight == 0) std::fill(data.begin(), data.end(), 0.f);
  const auto begin = [&](int c) { return m.total * int64_t((c % L + L) % L) / L; };
  const auto end = [&](int c) { return m.total * int64_t((c % L + L) % L + 1) / L; };
  // Reduce-scatter: at step s, send chunk p - s, receive chunk p - s - 1 and add into it.
  for (int s = 0; s < L - 1; ++s) {
    const int send_c = p - s, recv_c = p - s - 1;
    if (auto st = m.Send(0, s, (send_c % L + L) % L, data, begin(send_c), end(send_c), stop); !st.ok()) return st;
    if (auto st = m.Receive(0, s, data, begin(recv_c), end(recv_c), stop); !st.ok()) return st;
  }
  // This learner holds chunk p + 1 summed over everyone: the mean, once, here.
  int weights = 0;
  for (int l : members) {
    auto it = m.known.find(l);
    if (it == m.known.end()) return base::Internal("allreduce: no contribution from learner " + std::to_string(l));
    weights += it->second.weight;
  }
  if (weights > 0) {
    const float w = float(weights);
    for (int64_t i = begin(p + 1); i < end(p + 1); ++i) data[size_t(i)] = data[size_t(i)] / w;
  }
  // All-gather: at step s, send chunk p + 1 - s, receive chunk p - s.
  for (int s = 0; s < L - 1; ++s) {
    const int send_c = p + 1 - s, recv_c = p - s;
    if (auto st = m.Send(1, s, (send_c % L + L) % L, data, begin(send_c), end(send_c), stop); !st.ok()) return st;
    if (auto st = m.Receive(1, s, data, begin(recv_c), end(recv_c), stop); !st.ok()) return st;
  }
  all->clear();
  for (int l : members) all->push_back(m.known.at(l));
  ++m.stats.reductions;
  m.stats.seconds += std::chrono::duration<double>(Clock::now() - started).count();
  return base::OkStatus();
}

}  // namespace stampede::learner
