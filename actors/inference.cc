#include "actors/inference.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "actors/acting.h"
#include "actors/params_client.h"
#include "base/log.h"
#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "ps/client.h"
#include "wire/auth.h"
#include "config/config.h"
#include "wire/messages.pb.h"
#include "config/tasks.h"
#include "wire/unrolls.h"
#include "wire/zmq_util.h"

namespace stampede::actors {

using Clock = std::chrono::steady_clock;

namespace {
// Largest batch of one actor's envs a server accepts in a request (actors.envs_per_actor's bound).
constexpr int kMaxRequestEnvs = 4096;
}  // namespace

// ---------------------------------------------------------------------------- client

struct InferenceClient::Impl {
  zmq::socket_t socket;
  std::string endpoint;
  wire::Sender sender;
  int E = 0, A = 0, S = 0;
  size_t obs_bytes = 0;
  double timeout_s = 60;
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const char*)> waiting;
  uint64_t sequence = 0;
  int64_t version = -1;
  int64_t steps = 0, batch_env_sum = 0;
  std::string flags;
  std::vector<zmq::message_t> parts;
  wire::InferReply reply;

  explicit Impl(zmq::context_t& ctx) : socket(ctx, zmq::socket_type::dealer) {}

  // Sends the request and waits for its reply (into `parts`, `reply`).
  void Call(const wire::InferRequest& req, std::span<const wire::Frame> frames, size_t want_frames) {
    const auto start = Clock::now();
    while (!wire::SendMessage(socket, req, frames)) {
      if (stop->load()) throw std::runtime_error("stopped while sending to the inference server");
      Check(start);
    }
    zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
    auto last_report = Clock::now();
    while (true) {
      if (stop->load()) throw std::runtime_error("stopped while waiting for the inference server");
      wire::Poll(items, 1, std::chrono::milliseconds(100));
      if (items[0].revents & ZMQ_POLLIN) {
        if (!wire::RecvMultipart(socket, &parts, false)) continue;
        if (parts.empty() || !wire::ParseFrame(parts[0], &reply)) {
          throw std::runtime_error("inference server at " + endpoint + " sent an unreadable reply");
        }
        if (reply.sequence() != req.sequence()) continue;  // the answer to a request given up on
        if (!reply.error().empty()) throw std::runtime_error("inference server at " + endpoint + ": " + reply.error());
        if (parts.size() != 1 + want_frames) {
          throw std::runtime_error("inference server at " + endpoint + " sent " + std::to_string(parts.size() - 1) +
                                   " arrays, expected " + std::to_string(want_frames));
        }
        version = reply.policy_version();
        return;
      }
      Check(start);
      if (waiting && Clock::now() - last_report > std::chrono::seconds(1)) {
        waiting("waiting for the inference server");
        last_report = Clock::now();
      }
    }
  }
  void Check(Clock::time_point start) const {
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      char text[64];
      std::snprintf(text, sizeof text, "%.0f", timeout_s);
      throw std::runtime_error("no answer from the inference server at " + endpoint + " within " + text +
                               " s (actors.first_params_timeout_s)");
    }
  }
  void Expect(size_t frame, size_t bytes) const {
    if (parts[frame].size() != bytes) {
      throw std::runtime_error("inference server at " + endpoint + " sent " + std::to_string(parts[frame].size()) +
                               " bytes in array " + std::to_string(frame) + ", expected " + std::to_string(bytes));
    }
  }
};

InferenceClient::InferenceClient(zmq::context_t& ctx, const config::Config& cfg, int actor_index,
                                 const wire::Sender& sender, const wire::Curve* curve, const ActorCore& core,
                                 const std::atomic<bool>* stop, std::function<void(const char*)> waiting)
    : impl_(std::make_unique<Impl>(ctx)) {
  Impl& m = *impl_;
  const int learner = LearnerOfActor(cfg, actor_index);
  m.endpoint = InferenceEndpoint(cfg, learner);
  if (m.endpoint.empty()) {
    throw std::runtime_error("actors.inference is \"central\" but cluster.inference has no endpoint for learner " +
                             std::to_string(learner));
  }
  m.sender = sender;
  m.E = cfg.actors().envs_per_actor();
  m.A = core.num_actions();
  m.S = 2 * core.net_spec().lstm_size;
  m.obs_bytes = core.shape().obs_bytes();
  m.timeout_s = cfg.actors().first_params_timeout_s();
  m.stop = stop;
  m.waiting = std::move(waiting);
  m.flags.resize(size_t(m.E));
  wire::ConfigureSender(m.socket, 4, 100);
  wire::ConfigureReceiver(m.socket, cfg.cluster().max_message_bytes());
  if (curve != nullptr) curve->MakeClient(m.socket, wire::Identity("learner", learner), m.endpoint);
  m.socket.connect(m.endpoint);
}

InferenceClient::~InferenceClient() = default;

int64_t InferenceClient::Step(const std::byte* obs, int E, const uint8_t* episode_start, float* state_before,
                              float* logits) {
  Impl& m = *impl_;
  if (E != m.E) throw std::logic_error("InferenceClient::Step: batch of " + std::to_string(E) + " envs");
  wire::InferRequest req;
  *req.mutable_sender() = m.sender;
  req.set_sequence(++m.sequence);
  req.set_num_envs(E);
  std::memcpy(m.flags.data(), episode_start, size_t(E));
  req.set_episode_start(m.flags);
  req.set_want_state(state_before != nullptr && m.S > 0);
  const wire::Frame frames[] = {{obs, size_t(E) * m.obs_bytes}};
  m.Call(req, frames, req.want_state() ? 2 : 1);
  m.Expect(1, size_t(E) * m.A * sizeof(float));
  std::memcpy(logits, m.parts[1].data(), m.parts[1].size());
  if (req.want_state()) {
    m.Expect(2, size_t(E) * m.S * sizeof(float));
    std::memcpy(state_before, m.parts[2].data(), m.parts[2].size());
  }
  ++m.steps;
  m.batch_env_sum += m.reply.batch_envs();
  return m.version;
}

void InferenceClient::Values(const std::byte* obs, const int* envs, int k, int task, float* values) {
  Impl& m = *impl_;
  wire::InferRequest req;
  *req.mutable_sender() = m.sender;
  req.set_sequence(++m.sequence);
  req.set_num_envs(k);
  req.set_task_id(task);
  for (int j = 0; j < k; ++j) req.add_value_envs(envs[j]);
  const wire::Frame frames[] = {{obs, size_t(k) * m.obs_bytes}};
  m.Call(req, frames, 1);
  m.Expect(1, size_t(k) * sizeof(float));
  std::memcpy(values, m.parts[1].data(), m.parts[1].size());
}

int64_t InferenceClient::last_version() const { return impl_->version; }
double InferenceClient::mean_batch_envs() const {
  return impl_->steps > 0 ? double(impl_->batch_env_sum) / double(impl_->steps) : 0.0;
}

// ---------------------------------------------------------------------------- server

struct InferenceServer::Impl {
  config::Config cfg;
  int learner = 0;
  std::atomic<bool>& stop;
  std::atomic<bool> quit{false};
  std::thread thread;
  zmq::context_t ctx{1};
  std::unique_ptr<zmq::socket_t> socket;
  std::shared_ptr<const wire::Curve> curve;
  std::unique_ptr<wire::ZapHandler> zap;
  std::unique_ptr<ps::ParamsFetcher> fetcher;
  std::unique_ptr<net::Model<float>> net;
  // The learner's GPU, where it has one (learner.device "cuda..."): the forward passes run
  // there (SEED RL's setting), from parameters uploaded once per version.
  std::unique_ptr<net::cuda::Policy> gpu;
  int64_t uploaded = -1;  // the version on the GPU
  wire::StepShape shape;
  int E = 0, A = 0, S = 0, V = 1;
  size_t obs_bytes = 0;
  int64_t popart_stats = -1;
  int min_batch = 0, max_batch = 0;
  std::chrono::microseconds timeout{2000};
  std::vector<float> params;
  int64_t version = -1;
  std::atomic<int64_t> batches{0}, requests{0}, envs{0}, errors{0};

  struct Client {
    uint64_t incarnation = 0;
    std::vector<float> state;  // [E, S]
  };
  std::map<int, Client> clients;  // by actor index
  struct Pending {
    std::vector<zmq::message_t> parts;  // identity, header, observations
    wire::InferRequest req;
    Clock::time_point arrived;
  };
  std::deque<Pending> pending;
  int pending_envs = 0;
  // Scratch.
  std::vector<std::byte> batch_obs;
  std::vector<float> batch_state, logits, values, states_before;

  Impl(const config::Config& c, int l, std::atomic<bool>& s) : cfg(c), learner(l), stop(s) {}

  void ReplyError(const zmq::message_t& identity, uint64_t sequence, const std::string& error) {
    ++errors;
    wire::InferReply r;
    r.set_sequence(sequence);
    r.set_error(error);
    (void)wire::SendRouted(*socket, identity, r);
  }

  Client& ClientOf(const wire::Sender& sender) {
    Client& c = clients[sender.task_index()];
    if (c.incarnation != sender.incarnation()) {
      // A new actor process (or the first): its envs start afresh.
      c.incarnation = sender.incarnation();
      c.state.assign(size_t(E) * S, 0.f);
    }
    return c;
  }

  // One forward step of n rows, on the GPU where there is one, else the CPU model.
  void Forward(const std::byte* obs, int n, float* state_in, float* state_out, float* logits, float* out_values) {
    if (!gpu) {
      net->Step(params.data(), obs, n, nullptr, state_in, state_out, logits, out_values);
      return;
    }
    if (uploaded != version) {
      gpu->SetParams(params);
      uploaded = version;
    }
    gpu->Step(obs, n, nullptr, state_in, state_out, logits, out_values);
  }

  // Validates one message; queues a step request, answers a value request at once.
  void Incoming(std::vector<zmq::message_t>&& parts) {
    if (parts.size() < 2) return;  // not a request at all (no header to answer)
    wire::InferRequest req;
    if (!wire::ParseFrame(parts[1], &req)) {
      ReplyError(parts[0], 0, "unreadable request header");
      return;
    }
    const std::string bad = Check(req, parts);
    if (!bad.empty()) {
      ReplyError(parts[0], req.sequence(), bad);
      return;
    }
    ++requests;
    if (req.value_envs_size() > 0) {
      AnswerValues(parts, req);
      return;
    }
    pending_envs += req.num_envs();
    pending.push_back({std::move(parts), std::move(req), Clock::now()});
  }

  std::string Check(const wire::InferRequest& req, const std::vector<zmq::message_t>& parts) const {
    if (std::string e = wire::CheckProtocol(req.sender()); !e.empty()) return e;
    const int actor = req.sender().task_index();
    if (req.sender().role() != wire::ROLE_ACTOR || actor < 0 || actor >= config::kMaxActors) {
      return "sender is not an actor of this run";
    }
    if (LearnerOfActor(cfg, actor) != learner) {
      return "actor " + std::to_string(actor) + " belongs to learner " + std::to_string(LearnerOfActor(cfg, actor)) +
             "'s inference server, not learner " + std::to_string(learner) + "'s";
    }
    if (parts.size() != 3) return "expected 1 observation array, got " + std::to_string(int(parts.size()) - 2);
    const int n = req.num_envs();
    if (req.value_envs_size() > 0) {
      if (n != req.value_envs_size()) return "num_envs differs from the number of value_envs";
      for (int e : req.value_envs()) {
        if (e < 0 || e >= E) return "value env " + std::to_string(e) + " out of range [0, " + std::to_string(E) + ")";
      }
      // With several value outputs (PopArt) the task picks one and its statistics.
      if (req.task_id() < 0 || ((V > 1 || popart_stats >= 0) && req.task_id() >= V)) {
        return "task id " + std::to_string(req.task_id()) + " out of range";
      }
    } else {
      if (n != E) {
        return "a step of " + std::to_string(n) + " envs, but actors.envs_per_actor is " + std::to_string(E);
      }
      if (req.episode_start().size() != size_t(n)) return "episode_start has " + std::to_string(req.episode_start().size()) + " bytes, expected " + std::to_string(n);
    }
    if (n < 1 || n > kMaxRequestEnvs) return "num_envs " + std::to_string(n) + " out of range";
    if (parts[2].size() != size_t(n) * obs_bytes) {
      return "observations are " + std::to_string(parts[2].size()) + " bytes, expected " +
             std::to_string(size_t(n) * obs_bytes) + " (" + std::to_string(n) + " x " + std::to_string(obs_bytes) + ")";
    }
    return {};
  }

  void AnswerValues(const std::vector<zmq::message_t>& parts, const wire::InferRequest& req) {
    Client& c = ClientOf(req.sender());
    const int k = req.num_envs();
    batch_state.resize(size_t(k) * S);
    for (int j = 0; j < k; ++j) {
      std::copy_n(&c.state[size_t(req.value_envs(j)) * S], S, &batch_state[size_t(j) * S]);
    }
    batch_obs.resize(parts[2].size());
    std::memcpy(batch_obs.data(), parts[2].data(), parts[2].size());
    values.resize(size_t(k) * V);
    Forward(batch_obs.data(), k, batch_state.data(), nullptr, nullptr, values.data());
    std::vector<float> out(static_cast<size_t>(k));
    const int task = req.task_id();
    for (int j = 0; j < k; ++j) out[size_t(j)] = float(net::TaskValue(&values[size_t(j) * V], V, task, params.data(), popart_stats));
    wire::InferReply r;
    r.set_sequence(req.sequence());
    r.set_policy_version(version);
    r.set_batch_envs(k);
    const wire::Frame frames[] = {wire::AsFrame(out)};
    (void)wire::SendRouted(*socket, parts[0], r, frames);
  }

  bool Ready(Clock::time_point now) const {
    if (pending.empty()) return false;
    return pending_envs >= min_batch || now - pending.front().arrived >= timeout;
  }

  void RunBatch() {
    // Whole requests from the front, up to max_batch envs (at least one request).
    size_t count = 0;
    int n = 0;
    while (count < pending.size() && (count == 0 || max_batch <= 0 || n + pending[count].req.num_envs() <= max_batch)) {
      n += pending[count].req.num_envs();
      ++count;
    }
    batch_obs.resize(size_t(n) * obs_bytes);
    batch_state.resize(size_t(n) * S);
    states_before.resize(size_t(n) * S);
    logits.resize(size_t(n) * A);
    int row = 0;
    for (size_t i = 0; i < count; ++i) {
      const Pending& p = pending[i];
      const int k = p.req.num_envs();
      std::memcpy(&batch_obs[size_t(row) * obs_bytes], p.parts[2].data(), p.parts[2].size());
      if (S > 0) {
        Client& c = ClientOf(p.req.sender());
        ResetStartingStates(c.state.data(), S, reinterpret_cast<const uint8_t*>(p.req.episode_start().data()), k);
        std::copy_n(c.state.data(), size_t(k) * S, &batch_state[size_t(row) * S]);
      }
      row += k;
    }
    if (S > 0) std::copy(batch_state.begin(), batch_state.end(), states_before.begin());
    Forward(batch_obs.data(), n, batch_state.data(), batch_state.data(), logits.data(), nullptr);
    // Counted before any reply goes out: a client that has its reply sees the batch counted.
    ++batches;
    envs += n;
    row = 0;
    for (size_t i = 0; i < count; ++i) {
      const Pending& p = pending[i];
      const int k = p.req.num_envs();
      if (S > 0) {
        Client& c = ClientOf(p.req.sender());
        std::copy_n(&batch_state[size_t(row) * S], size_t(k) * S, c.state.data());
      }
      wire::InferReply r;
      r.set_sequence(p.req.sequence());
      r.set_policy_version(version);
      r.set_batch_envs(n);
      std::vector<wire::Frame> frames = {{&logits[size_t(row) * A], size_t(k) * A * sizeof(float)}};
      if (p.req.want_state() && S > 0) frames.push_back({&states_before[size_t(row) * S], size_t(k) * S * sizeof(float)});
      (void)wire::SendRouted(*socket, p.parts[0], r, frames);
      row += k;
    }
    for (size_t i = 0; i < count; ++i) {
      pending_envs -= pending.front().req.num_envs();
      pending.pop_front();
    }
  }

  void Serve() {
    zmq::pollitem_t items[] = {{socket->handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<zmq::message_t> parts;
    bool have_params = false;
    const auto first_deadline = Clock::now() + std::chrono::duration<double>(cfg.actors().first_params_timeout_s());
    bool warned = false;
    while (!stop.load() && !quit.load()) {
      if (!have_params) {
        have_params = fetcher->WaitFirst(params, &version, std::chrono::milliseconds(50), &stop);
        if (!have_params && !warned && Clock::now() > first_deadline) {
          base::LogInfo("learner %d: inference server: no parameters from the PS after %.0f s\n", learner,
                       cfg.actors().first_params_timeout_s());
          warned = true;
        }
      }
      auto wait = std::chrono::milliseconds(100);
      if (!pending.empty() && have_params) {
        const auto due = pending.front().arrived + timeout - Clock::now();
        wait = std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(due));
      }
      if (!have_params) wait = std::chrono::milliseconds(0);
      wire::Poll(items, 1, wait);
      while (wire::RecvMultipart(*socket, &parts, false)) {
        if (!have_params && !parts.empty()) {
          wire::InferRequest req;
          if (parts.size() >= 2 && wire::ParseFrame(parts[1], &req) && req.value_envs_size() > 0) {
            ReplyError(parts[0], req.sequence(), "no parameters yet");
            continue;
          }
        }
        Incoming(std::move(parts));
        parts.clear();
      }
      if (!have_params) continue;
      while (Ready(Clock::now())) RunBatch();
      fetcher->Poll(params, &version);  // refresh between batches, never waiting
    }
  }
};

InferenceServer::InferenceServer(const config::Config& cfg, int learner_index, std::atomic<bool>& stop)
    : impl_(std::make_unique<Impl>(cfg, learner_index, stop)) {}

InferenceServer::~InferenceServer() { Stop(); }

base::Status InferenceServer::Start() {
  Impl& m = *impl_;
  const config::Config& cfg = m.cfg;
  const std::string endpoint = InferenceEndpoint(cfg, m.learner);
  if (endpoint.empty()) {
    return base::InvalidArgument("actors.inference is \"central\" but cluster.inference has no endpoint for learner " +
                                 std::to_string(m.learner));
  }
  RETURN_IF_ERROR(ResolvedStepShape(cfg, &m.shape));
  ASSIGN_OR_RETURN(m.net, net::MakeModelFromConfig(cfg, m.shape));
  m.E = cfg.actors().envs_per_actor();
  m.A = m.net->policy_size();
  m.S = m.net->state_size();
  m.V = m.net->num_values();
  m.obs_bytes = m.shape.obs_bytes();
  if (m.net->spec().popart) m.popart_stats = m.net->layout().Find("popart/stats").offset;
  if (cfg.learner().device() != "cpu") {
    ASSIGN_OR_RETURN(const int device, net::cuda::LearnerDevice(cfg.learner().device(), m.learner));
    ASSIGN_OR_RETURN(m.gpu, net::cuda::Policy::Create(m.net->spec(), device, /*allow_tf32=*/true));
    base::LogInfo("learner %d: inference server on cuda:%d\n", m.learner, device);
  }
  int served = 0;
  for (int a = 0; a < cfg.actors().num_actors(); ++a) served += LearnerOfActor(cfg, a) == m.learner ? 1 : 0;
  const auto& ci = cfg.actors().central_inference();
  m.min_batch = ci.min_batch() > 0 ? ci.min_batch() : served * m.E;
  m.max_batch = ci.max_batch();
  m.timeout = std::chrono::microseconds(int64_t(ci.timeout_ms() * 1000));
  m.params.assign(size_t(m.net->layout().total_size()), 0.f);

  ASSIGN_OR_RETURN(m.curve, wire::RunCurve(cfg, wire::Identity("learner", m.learner)));
  m.socket = std::make_unique<zmq::socket_t>(m.ctx, zmq::socket_type::router);
  wire::ConfigureReceiver(*m.socket, cfg.cluster().max_message_bytes());
  m.socket->set(zmq::sockopt::router_mandatory, 0);
  m.socket->set(zmq::sockopt::linger, 0);
  if (m.curve) {
    m.zap = std::make_unique<wire::ZapHandler>(m.ctx, *m.curve, wire::RunAllowList(),
                                               "learner " + std::to_string(m.learner) + " inference");
    m.curve->MakeServer(*m.socket, wire::kDomainInference, endpoint);
  }
  try {
    m.socket->bind(BindEndpoint(cfg, endpoint));
  } catch (const zmq::error_t& e) {
    return base::Unavailable("inference server cannot bind " + endpoint + ": " + e.what());
  }
  m.fetcher = std::make_unique<ps::ParamsFetcher>(
      m.ctx, ActingClientOptions(cfg, m.net->layout(), wire::MakeSender(wire::ROLE_LEARNER, m.learner, wire::NewIncarnation()),
                                 m.curve));
  m.thread = std::thread([&m] { m.Serve(); });
  return base::OkStatus();
}

void InferenceServer::Stop() {
  Impl& m = *impl_;
  m.quit = true;
  if (m.thread.joinable()) m.thread.join();
}

std::string InferenceServer::endpoint() const {
  return impl_->socket ? impl_->socket->get(zmq::sockopt::last_endpoint) : std::string();
}
int64_t InferenceServer::batches() const { return impl_->batches.load(); }
int64_t InferenceServer::requests() const { return impl_->requests.load(); }
int64_t InferenceServer::envs() const { return impl_->envs.load(); }
int64_t InferenceServer::errors() const { return impl_->errors.load(); }

}  // namespace stampede::actors
