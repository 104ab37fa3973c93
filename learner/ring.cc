#include "learner/ring.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include <zmq.hpp>

#include "base/log.h"
#include "wire/auth.h"
#include "base/log_limit.h"
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
// Pieces of state kept that came before the chief's plan.
constexpr size_t kMaxEarlyState = 4096;

// "step S of ring G" for a round the learners number (generation << 40) | step; the number
// itself otherwise.
std::string RoundText(int64_t round) {
  if (round < (int64_t(1) << 40)) return "round " + std::to_string(round);
  return "step " + std::to_string(round & ((int64_t(1) << 40) - 1)) + " of ring " + std::to_string(round >> 40);
}

struct Early {
  wire::RingPart header;
  zmq::message_t payload;
};

// RingPart.phase: 0 and 1 are a reduction's; the rendezvous (Ring::Rendezvous) uses
//   kJoin  (a learner -> the chief): round = its state's version; known[0]: its frames, and
//          in `fingerprint` its version again;
//   kPlan  (the chief -> each member): step = the generation, round = the version everyone
//          continues from, members = the new ring, chunk = the member whose state the
//          others with an older version take (the source), known: every member's frames
//          and (in `fingerprint`) the version of its state;
//   kState (the source -> a member with an older state): pieces of params, then mean
//          square, then momentum (offset into those 3 N values), round = the plan's;
//   kReset (the chief -> every learner): join now (the chief is forming a new ring).
constexpr int kJoin = 2, kPlan = 3, kState = 4, kReset = 5;
// A learner waiting for the chief's plan says it is there again this often.
constexpr std::chrono::milliseconds kJoinRepeat{500};
// After a failure, the chief takes the learners that joined until none has for this long.
constexpr std::chrono::milliseconds kSettle{1000};
}  // namespace

struct Ring::Impl {
  zmq::context_t& ctx;
  RingOptions opt;
  std::unique_ptr<zmq::socket_t> in;
  std::map<int, std::unique_ptr<zmq::socket_t>> out;  // by learner index
  RingStats stats;
  base::LogLimiter drop_log;
  std::vector<Early> early;
  // The reduction in progress.
  int64_t round = 0;
  std::vector<int> members;
  int prev = 0, next = 0;
  int64_t total = 0;
  std::map<int, RingContribution> known;
  // The rendezvous: the ring's generation and members; the chief's joiners (learner ->
  // its version and frames); a plan that came while a reduction ran; every learner's
  // newest frame count the ring carried.
  int64_t generation = 0;
  std::map<int, std::pair<int64_t, int64_t>> joins;
  std::map<int, uint64_t> member_incarnations;  // the chief: each member's at the last plan
  std::map<int, uint64_t> join_incarnations;    // the chief: each joiner's
  std::optional<wire::RingPart> pending_plan;
  std::map<int, int64_t> frames_seen;

  Impl(zmq::context_t& c, RingOptions o) : ctx(c), opt(std::move(o)) {}

  void Drop(const std::string& why) {
    ++stats.dropped;
    int64_t unlogged = 0;
    if (drop_log.Allow("dropped", &unlogged)) {
      base::LogInfo("learner %d: allreduce: dropped a message: %s%s\n", opt.rank, why.c_str(),
                   base::LogLimiter::More(unlogged).c_str());
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
          return base::Unavailable("allreduce " + RoundText(round) + ": learner " + std::to_string(next) +
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
  // A rendezvous message met during a reduction: the reason to abandon it, or "" to go on.
  std::string Control(const wire::RingPart& h) {
    const int from = h.sender().task_index();
    if (h.phase() == kJoin && opt.rank == 0) {
      // A member's JOIN from before the current ring (it repeats them while it waits) is
      // stale; a learner restarted since (another incarnation) or a member that lost this
      // ring asks for a new one.
      const auto it = member_incarnations.find(from);
      if (it != member_incarnations.end() && it->second == h.sender().incarnation() && h.step() < generation) return "";
      joins[from] = {h.round(), h.known_size() > 0 ? h.known(0).env_frames() : 0};
      join_incarnations[from] = h.sender().incarnation();
      return "learner " + std::to_string(from) + " asks to join the ring";
    }
    if ((h.phase() == kPlan || h.phase() == kReset) && from == 0 && opt.rank != 0 && h.step() > generation) {
      if (h.phase() == kPlan) pending_plan = h;
      return "the chief is forming a new ring";
    }
    return "";  // not for this learner, or stale: ignored
  }

  // A reduction's piece met during a rendezvous (a member that has its plan already began
  // the next reduction): kept for it. Pieces of rounds before the plan's are dropped when
  // that reduction starts (rounds carry the ring's generation, so an older ring's never match).
  void KeepEarly(wire::RingPart h, zmq::message_t payload) {
    if (early.size() < kMaxEarly) {
      early.push_back(Early{std::move(h), std::move(payload)});
    } else {
      Drop("too many messages ahead of the one expected");
    }
  }

  // Sends one message without waiting (a rendezvous message to a learner that may be gone).
  void SendNow(int to, const wire::RingPart& h, std::span<const float> data = {}) {
    auto it = out.find(to);
    if (it == out.end()) return;
    const wire::Frame f{data.data(), data.size() * sizeof(float)};
    (void)wire::SendMessage(*it->second, h, std::span<const wire::Frame>(&f, 1));
  }

  wire::RingPart ControlHeader(int phase) const {
    wire::RingPart h;
    *h.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, opt.rank, opt.incarnation);
    h.set_phase(phase);
    return h;
  }

  // Receives one well-formed message from another learner of the run before `deadline`.
  // False on the deadline or the stop flag.
  bool Next(Clock::time_point deadline, wire::RingPart* h, zmq::message_t* payload, const std::atomic<bool>* stop) {
    for (;;) {
      if (stop && stop->load()) return false;
      const auto now = Clock::now();
      if (now > deadline) return false;
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
      if (!wire::ParseFrame(parts[0], h)) {
        Drop("an unreadable header");
        continue;
      }
      stats.bytes_received += int64_t(parts[1].size());
      if (std::string why = CheckSender(*h, wire::PeerIdentity(parts[0])); !why.empty()) {
        Drop(why);
        continue;
      }
      *payload = std::move(parts[1]);
      return true;
    }
  }

  // Who sent it: a learner of the run speaking our protocol, whose key is its own.
  std::string CheckSender(const wire::RingPart& h, const std::string& peer) const {
    if (std::string e = wire::CheckProtocol(h.sender()); !e.empty()) return e;
    if (h.sender().role() != wire::ROLE_LEARNER) return "not from a learner";
    const int from = h.sender().task_index();
    if (from < 0 || from >= int(opt.endpoints.size()) || from == opt.rank) return "from no other learner of the run";
    if (!peer.empty() && peer != wire::Identity("learner", from)) {
      return "claims learner " + std::to_string(from) + " but its key is " + peer + "'s";
    }
    return "";
  }

  std::string Check(const wire::RingPart& h, const zmq::message_t& payload, const std::string& peer) const {
    if (std::string e = CheckSender(h, peer); !e.empty()) return e;
    if (h.round() < round) return RoundText(h.round()) + " is over (now " + RoundText(round) + ")";
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
      const auto deadline = Clock::now() + opt.timeout;
      while (!got) {
        if (!Next(deadline, &h, &payload, stop)) {
          if (stop && stop->load()) return base::Cancelled("stopped");
          return base::Unavailable("allreduce " + RoundText(round) + ": learner " + std::to_string(prev) +
                                   " sent nothing for " + std::to_string(opt.timeout.count() / 1000.0) +
                                   " s (learner.allreduce_timeout_s)");
        }
        if (h.phase() >= kJoin) {
          // The ring's membership is changing: a learner asks the chief to join, or the
          // chief re-forms the ring. This reduction is abandoned for the rendezvous.
          if (std::string why = Control(h); !why.empty()) return base::Unavailable(why);
          continue;
        }
        if (std::string why = Check(h, payload, ""); !why.empty()) {  // Next checked the key
          Drop(why);
          continue;
        }
        if (h.round() > round || h.phase() != phase || h.step() != step || h.offset() != at) {
          KeepEarly(std::move(h), std::move(payload));  // not this piece: this round's or the next's
          continue;
        }
        got = true;
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
  if (m.opt.curve) m.opt.curve->MakeServer(*m.in, wire::kDomainAllreduce, m.opt.endpoints[size_t(m.opt.rank)]);
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
    if (m.opt.curve) m.opt.curve->MakeClient(*s, wire::Identity("learner", l), m.opt.endpoints[size_t(l)]);
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
  for (int l : members) {
    all->push_back(m.known.at(l));
    m.frames_seen[l] = m.known.at(l).env_frames;
  }
  ++m.stats.reductions;
  m.stats.seconds += std::chrono::duration<double>(Clock::now() - started).count();
  return base::OkStatus();
}

base::Status Ring::Rendezvous(RingMemberState* state, int64_t floor, bool first, RingPlan* plan,
                              const std::atomic<bool>* stop) {
  Impl& m = *impl_;
  const int L = int(m.opt.endpoints.size());
  const int64_t N = int64_t(state->params.size());
  // Who has which state version and frames (the plan's `known`).
  std::map<int, std::pair<int64_t, int64_t>> versions;
  wire::RingPart decided;
  // Pieces of state that came before the chief's plan (the source and the chief send
  // independently, so a member can read the source's first pieces before the plan).
  std::vector<Early> state_early;
  if (m.opt.rank == 0) {
    // The chief: ask everyone, take who comes, decide.
    m.joins[0] = {state->version, state->env_frames};
    int64_t generation = m.generation;
    m.join_incarnations[0] = m.opt.incarnation;
    wire::RingPart reset = m.ControlHeader(kReset);
    reset.set_step(generation + 1);
    for (int l = 1; l < L; ++l) m.SendNow(l, reset);
    const auto start = Clock::now();
    const auto limit = start + m.opt.timeout;
    auto last_new = start;
    while (int(m.joins.size()) < L) {
      const auto until = first ? limit : std::min(limit, last_new + kSettle);
      wire::RingPart h;
      zmq::message_t payload;
      if (!m.Next(until, &h, &payload, stop)) {
        if (stop && stop->load()) return base::Cancelled("stopped");
        break;  // the time is up: those that joined
      }
      if (h.phase() != kJoin) {
        m.KeepEarly(std::move(h), std::move(payload));  // a member that has the plan already
        continue;
      }
      const int from = h.sender().task_index();
      if (!m.joins.count(from)) last_new = Clock::now();
      m.joins[from] = {h.round(), h.known_size() > 0 ? h.known(0).env_frames() : 0};
      m.join_incarnations[from] = h.sender().incarnation();
      generation = std::max<int64_t>(generation, h.step());
    }
    int64_t newest = -1;
    int source = 0;
    for (const auto& [l, vf] : m.joins) {
      if (vf.first > newest) newest = vf.first, source = l;
    }
    decided = m.ControlHeader(kPlan);
    decided.set_step(generation + 1);
    decided.set_round(std::max(newest, floor));
    decided.set_chunk(source);
    for (const auto& [l, vf] : m.joins) {
      decided.add_members(l);
      auto* k = decided.add_known();
      k->set_learner(l);
      const auto seen = m.frames_seen.find(l);
      const int64_t frames = std::max(vf.second, seen == m.frames_seen.end() ? int64_t(0) : seen->second);
      k->set_env_frames(frames);
      k->set_fingerprint(uint64_t(vf.first));
      m.frames_seen[l] = frames;
    }
    m.member_incarnations = m.join_incarnations;
    m.join_incarnations.clear();
    for (const auto& [l, vf] : m.joins) {
      if (l != 0) m.SendNow(l, decided);
    }
    m.joins.clear();
  } else {
    // Everyone else: join, and wait for the chief's plan.
    const auto deadline = Clock::now() + (first ? 2 * m.opt.timeout : m.opt.timeout);
    bool have = false;
    if (m.pending_plan) {
      decided = *m.pending_plan;
      have = true;
    }
    m.pending_plan.reset();
    auto next_join = Clock::now();
    while (!have) {
      if (Clock::now() >= next_join) {
        wire::RingPart join = m.ControlHeader(kJoin);
        join.set_round(state->version);
        join.set_step(m.generation);
        auto* k = join.add_known();
        k->set_learner(m.opt.rank);
        k->set_env_frames(state->env_frames);
        k->set_fingerprint(uint64_t(state->version));
        m.SendNow(0, join);
        next_join = Clock::now() + kJoinRepeat;
      }
      wire::RingPart h;
      zmq::message_t payload;
      if (!m.Next(std::min(deadline, next_join), &h, &payload, stop)) {
        if (stop && stop->load()) return base::Cancelled("stopped");
        if (Clock::now() > deadline) {
          return base::Unavailable("allreduce: no plan from the chief (learner 0) within " +
                                   std::to_string(m.opt.timeout.count() / 1000.0) + " s (learner.allreduce_timeout_s)");
        }
        continue;
      }
      if (h.phase() < kJoin) {
        m.KeepEarly(std::move(h), std::move(payload));  // a member that has the plan already
        continue;
      }
      if (h.phase() == kState) {
        // The source read the chief's plan first and has begun sending: kept for below.
        if (state_early.size() < kMaxEarlyState) {
          state_early.push_back(Early{std::move(h), std::move(payload)});
        } else {
          m.Drop("too many pieces of state ahead of the chief's plan");
        }
        continue;
      }
      if (h.sender().task_index() != 0) continue;
      if (h.phase() == kReset) next_join = Clock::now();  // join at once
      if (h.phase() == kPlan && h.step() > m.generation) {
        decided = std::move(h);
        have = true;
      }
    }
  }
  // The plan, as every member reads it.
  RingPlan p;
  p.generation = decided.step();
  p.version = decided.round();
  p.source = decided.chunk();
  p.members.assign(decided.members().begin(), decided.members().end());
  std::sort(p.members.begin(), p.members.end());
  int64_t newest = -1;
  for (const auto& k : decided.known()) {
    p.env_frames[k.learner()] = k.env_frames();
    versions[k.learner()] = {int64_t(k.fingerprint()), k.env_frames()};
    newest = std::max(newest, int64_t(k.fingerprint()));
  }
  if (std::find(p.members.begin(), p.members.end(), m.opt.rank) == p.members.end() || !versions.count(p.source)) {
    return base::Unavailable("allreduce: the chief's plan leaves this learner out");
  }
  // The state: from the source to every member whose state is older.
  const auto deadline = Clock::now() + m.opt.timeout;
  std::span<float> parts3[3] = {state->params, state->mean_square, state->momentum};
  if (m.opt.rank == p.source) {
    for (int l : p.members) {
      if (l == m.opt.rank || versions[l].first >= newest) continue;
      zmq::socket_t& s = *m.out.at(l);
      for (int64_t at = 0; at < 3 * N;) {
        const int which = int(at / std::max<int64_t>(1, N));
        const int64_t within = at - which * N;
        const int64_t n = std::min(N - within, m.opt.piece_elements);
        wire::RingPart h = m.ControlHeader(kState);
        h.set_round(p.version);
        h.set_step(p.generation);
        h.set_offset(at);
        h.set_total(3 * N);
        const wire::Frame f{parts3[which].data() + within, size_t(n) * sizeof(float)};
        while (!wire::SendMessage(s, h, std::span<const wire::Frame>(&f, 1))) {
          if (stop && stop->load()) return base::Cancelled("stopped");
          if (Clock::now() > deadline) return base::Unavailable("allreduce: learner " + std::to_string(l) + " took no state");
        }
        m.stats.bytes_sent += int64_t(f.size);
        at += n;
      }
    }
  } else if (state->version < newest) {
    size_t taken = 0;  // of state_early
    for (int64_t at = 0; at < 3 * N;) {
      wire::RingPart h;
      zmq::message_t payload;
      if (taken < state_early.size()) {
        h = std::move(state_early[taken].header);
        payload = std::move(state_early[taken].payload);
        ++taken;
      } else if (!m.Next(deadline, &h, &payload, stop)) {
        if (stop && stop->load()) return base::Cancelled("stopped");
        return base::Unavailable("allreduce: no state from learner " + std::to_string(p.source) + " within " +
                                 std::to_string(m.opt.timeout.count() / 1000.0) + " s");
      }
      if (h.phase() < kJoin) {
        m.KeepEarly(std::move(h), std::move(payload));
        continue;
      }
      if (h.phase() != kState || h.sender().task_index() != p.source || h.step() != p.generation) continue;
      const int64_t n = int64_t(payload.size() / sizeof(float));
      const int which = int(at / std::max<int64_t>(1, N));
      const int64_t within = at - which * N;
      if (h.offset() != at || h.total() != 3 * N || payload.size() % sizeof(float) != 0 || n > N - within) {
        m.Drop("a piece of state that does not fit");
        continue;
      }
      std::memcpy(parts3[which].data() + within, payload.data(), payload.size());
      at += n;
    }
  }
  state->version = p.version;
  m.generation = p.generation;
  m.pending_plan.reset();
  *plan = std::move(p);
  return base::OkStatus();
}

}  // namespace stampede::learner
