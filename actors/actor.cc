#include "actors/actor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "actors/acting.h"
#include "actors/env_source.h"
#include "actors/inference.h"
#include "actors/params_client.h"
#include "base/log.h"
#include "envs/rng.h"
#include "envs/vector_env.h"
#include "net/distribution.h"
#include "net/from_config.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "config/config.h"
#include "wire/auth.h"
#include "wire/status_channel.h"
#include "config/tasks.h"
#include "base/trace.h"
#include "wire/zmq_util.h"

namespace stampede::actors {

using Clock = std::chrono::steady_clock;

using envs::SplitMix;

struct ActorCore::Impl {
  config::Config cfg;
  int task_index = 0;
  std::unique_ptr<envs::VectorEnv> env;
  std::unique_ptr<net::Model<float>> net;
  std::mt19937_64 rng;
  int E = 0, T = 0, D = 0, A = 0, frames_per_step = 1;
  wire::StepShape shape;
  bool started = false;
  // Scratch, allocated once.
  int S = 0;                      // recurrent state floats per env (0: no core)
  std::vector<float> state;       // [E, S]: each env's network state before its next step
  std::vector<float> final_state; // [E, S]: gathered states for truncated envs' final obs
  std::vector<uint8_t> episode_start;  // [E]: the env's next observation starts an episode
  std::vector<float> final_values;
  std::vector<float> clipped;     // [E, D]: box actions as the env gets them
  std::vector<std::byte> final_obs;
  EpisodeBooks books;
  std::vector<int> truncated_envs;
  // A suite's task: its observations are brought to the joint shape, and its policy is
  // masked to its own actions (those below action_limit).
  int task = 0;
  int V = 1;                 // value outputs (one per task with PopArt)
  int64_t popart_stats = -1;  // PopArt: offset of the statistics in the parameters
  int action_limit = 0;  // 0: every action of the head
  config::ObsAdapter adapter;
  std::vector<std::byte> task_obs, task_final_obs;  // [E] task-shaped (adapter not identity)
  RemotePolicy* remote = nullptr;  // central inference: the server acts, not `net`
};

ActorCore::ActorCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ActorCore::~ActorCore() = default;

base::StatusOr<std::unique_ptr<ActorCore>> ActorCore::Create(const config::Config& cfg, int task_index) {
  auto m = std::make_unique<Impl>();
  m->cfg = cfg;
  m->task_index = task_index;
  m->E = cfg.actors().envs_per_actor();
  m->T = cfg.actors().unroll_length();
  // A suite's actor runs one task's env; the network is the suite's (joint spec).
  m->task = config::TaskOfActor(cfg, task_index);
  const config::Config task_cfg = config::TaskEnvConfig(cfg, m->task);
  ASSIGN_OR_RETURN(m->env, envs::MakeVectorEnv(EnvSourceFromConfig(task_cfg), m->E));
  const envs::EnvSpec& spec = m->env->spec();
  const config::EnvSpec actual = SpecToProto(spec);
  if (task_cfg.env().has_resolved_spec()) {
    if (std::string diff = SpecMismatch(task_cfg.env().resolved_spec(), actual); !diff.empty()) {
      return base::InvalidArgument(
          (cfg.tasks_size() > 0 ? "task \"" + config::TaskName(cfg, m->task) + "\": " : std::string()) + diff);
    }
  }
  config::Config with_spec = task_cfg;
  *with_spec.mutable_env()->mutable_resolved_spec() = actual;
  wire::StepShape task_shape;
  RETURN_IF_ERROR(ResolvedStepShape(with_spec, &task_shape));
  m->shape = task_shape;
  if (cfg.tasks_size() > 0) {
    RETURN_IF_ERROR(ResolvedStepShape(cfg, &m->shape));
    *with_spec.mutable_env()->mutable_resolved_spec() = cfg.env().resolved_spec();
    m->adapter = config::ObsAdapter(task_shape.obs_shape, m->shape.obs_shape, task_shape.obs_dtype == wire::DType::kUint8,
                                  cfg.suite().obs_rule());
    if (!m->adapter.identity()) {
      m->task_obs.resize(size_t(m->E) * m->adapter.from_bytes());
      m->task_final_obs.resize(size_t(m->E) * m->adapter.from_bytes());
    }
    if (!task_shape.box() && task_shape.action_kind == wire::ActionKind::kDiscrete) {
      m->action_limit = task_shape.num_actions;
    }
  }
  m->D = m->shape.obs_size();
  m->A = m->shape.num_actions;
  m->frames_per_step = spec.frames_per_step;
  ASSIGN_OR_RETURN(m->net, net::MakeModelFromConfig(with_spec, m->shape));
  m->S = m->net->state_size();
  if (m->shape.box()) m->clipped.resize(size_t(m->E) * m->shape.action_size());
  m->state.assign(size_t(m->E) * m->S, 0.f);
  m->final_state.assign(size_t(m->E) * m->S, 0.f);
  m->episode_start.assign(m->E, 1);
  m->rng.seed(SplitMix(cfg.seed() * 7919 + uint64_t(task_index)));
  m->final_obs.resize(size_t(m->E) * m->shape.obs_bytes());
  m->V = m->net->num_values();
  m->final_values.resize(size_t(m->E) * m->V);
  if (m->net->spec().popart) m->popart_stats = m->net->layout().Find("popart/stats").offset;
  m->books = EpisodeBooks(m->E);
  m->truncated_envs.reserve(m->E);
  return std::unique_ptr<ActorCore>(new ActorCore(std::move(m)));
}

const net::ModelSpec& ActorCore::net_spec() const { return impl_->net->spec(); }
int64_t ActorCore::param_count() const { return impl_->net->layout().total_size(); }
uint64_t ActorCore::layout_fingerprint() const { return impl_->net->layout().Fingerprint(); }
const net::ParamLayout& ActorCore::layout() const { return impl_->net->layout(); }
const wire::StepShape& ActorCore::shape() const { return impl_->shape; }
int ActorCore::obs_size() const { return impl_->D; }
int ActorCore::num_actions() const { return impl_->A; }
int ActorCore::frames_per_step() const { return impl_->frames_per_step; }
void ActorCore::SetRemote(RemotePolicy* remote) { impl_->remote = remote; }

void ActorCore::CollectUnroll(std::span<const float> params, int64_t version,
                              wire::TrajectoryBatch* out) {
  Impl& m = *impl_;
  base::TraceSpan span("unroll", "actor");
  const int E = m.E, T = m.T, A = m.A;
  const size_t obs_bytes = m.shape.obs_bytes();
  if (out->T() != T || out->n() != E || !(out->shape == m.shape)) {
    out->Resize(T, E, m.shape);
    m.started = false;
  }
  if (!m.started) {
    if (m.adapter.identity()) {
      m.env->Reset(SplitMix(m.cfg.seed() ^ SplitMix(uint64_t(m.task_index) << 20)), out->obs_row(0));
    } else {
      m.env->Reset(SplitMix(m.cfg.seed() ^ SplitMix(uint64_t(m.task_index) << 20)), m.task_obs.data());
      m.adapter.Apply(m.task_obs.data(), E, out->obs_row(0));
    }
    m.books.Clear();
    std::fill(m.episode_start.begin(), m.episode_start.end(), 1);
    m.started = true;
  } else {
    // The last unroll's bootstrap observation is this unroll's first.
    std::memcpy(out->obs_row(0), out->obs_row(size_t(T) * E), size_t(E) * obs_bytes);
  }
  out->meta.clear_episodes();
  out->meta.set_policy_version(version);
  out->meta.set_task_id(m.task);
  std::fill(out->truncation_values.begin(), out->truncation_values.end(), 0.f);
  int64_t valid_steps = 0;
  const int S = m.S;
  for (int t = 0; t < T; ++t) {
    const size_t row = size_t(t) * E;
    float* logits = &out->behaviour_logits[row * A];
    std::optional<base::TraceSpan> infer(std::in_place, "infer", "actor");
    if (m.remote != nullptr) {
      // The server zeroes the states of envs that start an episode and keeps them.
      const int64_t acted = m.remote->Step(out->obs_row(row), E, m.episode_start.data(),
                                           t == 0 && S > 0 ? out->initial_core_state.data() : nullptr, logits);
      if (t == 0 || acted < out->meta.policy_version()) out->meta.set_policy_version(acted);
    } else {
      ResetStartingStates(m.state.data(), S, m.episode_start.data(), E);
      if (t == 0) std::copy(m.state.begin(), m.state.end(), out->initial_core_state.begin());
      m.net->Step(params.data(), out->obs_row(row), E, nullptr, m.state.data(), m.state.data(), logits, nullptr);
    }
    const net::PolicyShape& pol = m.net->spec().policy;
    MaskMissingActions(pol, logits, E, A, m.action_limit);
    infer.reset();
    const int K = pol.action_size();
    ActionOut chosen;
    if (m.shape.box()) {
      // The learner scores the unclipped sample; the env gets it clipped to the bounds.
      chosen.box_raw = &out->box_actions[row * K];
      chosen.box_clipped = m.clipped.data();
      chosen.low = m.shape.action_low.data();
      chosen.high = m.shape.action_high.data();
    } else {
      chosen.actions = &out->actions[row * K];
    }
    ChooseActions(pol, logits, E, A, /*greedy=*/false, m.rng, chosen);
    envs::VectorStep step;
    const bool adapt = !m.adapter.identity();
    step.obs = adapt ? m.task_obs.data() : out->obs_row(row + E);
    step.rewards = &out->rewards[row];
    step.terminated = &out->terminated[row];
    step.truncated = &out->truncated[row];
    step.valid = &out->valid[row];
    step.final_obs = adapt ? m.task_final_obs.data() : m.final_obs.data();
    {
      base::TraceSpan env_span("env_step", "actor");
      if (m.shape.box()) {
        m.env->StepBox(m.clipped.data(), step);
      } else {
        m.env->Step(&out->actions[row * K], step);
      }
    }
    if (adapt) {
      m.adapter.Apply(m.task_obs.data(), E, out->obs_row(row + E));
      m.adapter.Apply(m.task_final_obs.data(), E, m.final_obs.data());
    }
    m.truncated_envs.clear();
    for (int e = 0; e < E; ++e) {
      const size_t i = row + e;
      m.episode_start[e] = out->terminated[i] | out->truncated[i] | uint8_t(!out->valid[i]);
      if (!out->valid[i]) continue;  // only an automatic reset
      ++valid_steps;
      double episode_return = 0;
      int episode_length = 0;
      if (m.books.Step(e, out->rewards[i], out->terminated[i] || out->truncated[i], &episode_return, &episode_length)) {
        auto* ep = out->meta.add_episodes();
        ep->set_episode_return(float(episode_return));
        ep->set_length(episode_length);
        if (out->truncated[i] && !out->terminated[i]) m.truncated_envs.push_back(e);
      }
    }
    if (!m.truncated_envs.empty()) {
      // Value of the final observation of time-limited episodes, for the learner's
      // bootstrap (learner.bootstrap_on_truncation). Rows are gathered to the front.
      const int k = int(m.truncated_envs.size());
      for (int j = 0; j < k; ++j) {
        if (m.truncated_envs[j] != j) {
          std::memcpy(&m.final_obs[j * obs_bytes], &m.final_obs[m.truncated_envs[j] * obs_bytes], obs_bytes);
        }
        // The state that saw the episode up to the final observation.
        if (S > 0 && m.remote == nullptr) {
          std::copy_n(&m.state[size_t(m.truncated_envs[j]) * S], S, &m.final_state[size_t(j) * S]);
        }
      }
      if (m.remote != nullptr) {
        // Unnormalised by the server, which holds the statistics.
        m.remote->Values(m.final_obs.data(), m.truncated_envs.data(), k, m.task, m.final_values.data());
        for (int j = 0; j < k; ++j) out->truncation_values[row + m.truncated_envs[j]] = m.final_values[size_t(j)];
        continue;
      }
      m.net->Step(params.data(), m.final_obs.data(), k, nullptr, m.final_state.data(), nullptr,
                  nullptr, m.final_values.data());
      for (int j = 0; j < k; ++j) {
        out->truncation_values[row + m.truncated_envs[j]] =
            float(net::TaskValue(&m.final_values[size_t(j) * m.V], m.V, m.task, params.data(), m.popart_stats));
      }
    }
  }
  frames_ += valid_steps * m.frames_per_step;
}

ps::ClientOptions ActingClientOptions(const config::Config& cfg, const net::ParamLayout& layout,
                                      const wire::Sender& sender, std::shared_ptr<const wire::Curve> curve) {
  ps::ClientOptions co;
  co.endpoints.assign(cfg.cluster().ps().begin(), cfg.cluster().ps().end());
  co.total_size = layout.total_size();
  co.layout_fingerprint = layout.Fingerprint();
  co.placement = std::make_shared<ps::Placement>(ps::PlacementFromConfig(cfg, layout));
  co.max_message_bytes = cfg.cluster().max_message_bytes();
  co.sender = sender;
  co.curve = std::move(curve);
  co.mixed_versions = ShardsOwnOptimizer(cfg);
  co.bfloat16 = cfg.ps().wire_bfloat16();
  return co;
}

base::Status RunActor(const config::Config& cfg, int task_index, std::atomic<bool>& stop) {
  ASSIGN_OR_RETURN(std::unique_ptr<ActorCore> core, ActorCore::Create(cfg, task_index));
  ASSIGN_OR_RETURN(const std::shared_ptr<const wire::Curve> curve, wire::RunCurve(cfg, wire::Identity("actor", task_index)));
  const uint64_t incarnation = wire::NewIncarnation();
  const wire::Sender sender = wire::MakeSender(wire::ROLE_ACTOR, task_index, incarnation);
  zmq::context_t ctx(1);
  zmq::socket_t out(ctx, zmq::socket_type::push);
  wire::ConfigureSender(out, 1, 100);
  wire::LimitKernelBuffers(out, wire::TrajectoryBytes(cfg.actors().unroll_length(),
                                                     cfg.actors().envs_per_actor(), core->shape()));
  const int learner_index = LearnerOfActor(cfg, task_index);
  const std::string learner_endpoint = LearnerEndpoint(cfg, learner_index);
  if (curve) curve->MakeClient(out, wire::Identity("learner", learner_index), learner_endpoint);
  out.connect(learner_endpoint);
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(), sender, curve.get(), cfg.cluster().control(), &stop);
  wire::Status& status = channel.status();
  auto report = [&](const char* activity) {
    status.set_actor_frames(core->frames());
    channel.Send(activity);
  };

  const ps::ClientOptions co = ActingClientOptions(cfg, core->layout(), sender, curve);
  std::vector<float> params;
  int64_t version = -1;
  // Central inference: the learner's inference server acts; this actor fetches nothing.
  const bool central = InferenceOf(cfg) == config::Inference::central;
  std::unique_ptr<InferenceClient> inference;
  std::unique_ptr<ps::ParamsFetcher> fetcher;
  if (central) {
    try {
      inference = std::make_unique<InferenceClient>(ctx, cfg, task_index, sender, curve.get(), *core, &stop, report);
    } catch (const std::exception& e) {
      return base::InvalidArgument(e.what());
    }
    core->SetRemote(inference.get());
  } else {
    fetcher = std::make_unique<ps::ParamsFetcher>(ctx, co);
    params.resize(size_t(core->param_count()));
    report("waiting for the first parameters");
    const auto first_deadline = Clock::now() + std::chrono::duration<double>(
                                                   cfg.actors().first_params_timeout_s());
    while (!fetcher->WaitFirst(params, &version, std::chrono::seconds(1), &stop)) {
      if (stop.load()) return base::OkStatus();
      if (!fetcher->layout_mismatch().empty()) return base::InvalidArgument(fetcher->layout_mismatch());
      report("waiting for the first parameters");
      if (Clock::now() > first_deadline) {
        // Restarted: the PS may be up by then.
        char what[160];
        std::snprintf(what, sizeof what, "no parameters from the PS (%d shards) after %.0f s",
                      co.endpoints.empty() ? 0 : int(co.endpoints.size()), cfg.actors().first_params_timeout_s());
        return base::Unavailable(what);
      }
    }
  }
  const int64_t max_lag = cfg.actors().max_policy_lag();
  wire::TrajectoryBatch batch;
  *batch.meta.mutable_sender() = sender;
  batch.stack_frames = cfg.wire().stack_frames();
  double send_wait = 0, total_wait = 0;
  int64_t sends = 0;
  auto last_report = Clock::now();
  while (!stop.load()) {
    try {
      core->CollectUnroll(params, version, &batch);
    } catch (const std::exception& e) {
      // An env failed (a plug-in's error, a Python exception) or the inference server
      // could not answer: this actor ends with the message; the coordinator restarts it.
      if (stop.load()) break;
      return base::Internal(e.what());
    }
    if (central) version = batch.meta.policy_version();
    batch.meta.set_send_wait_s(send_wait);
    send_wait = 0;
    const auto send_start = Clock::now();
    std::optional<base::TraceSpan> send_span(std::in_place, "send", "actor");
    bool sent = false;
    while (!stop.load() && !(sent = wire::SendTrajectory(out, batch))) {
      // The learner is behind (its queue is full): keep the parameters current while this
      // unroll waits, so that the next one starts from the newest version rather than the
      // one answered before the wait. The unroll sent carries its own behaviour logits and
      // version, so nothing in it changes. Each try above waits up to 100 ms.
      if (fetcher) fetcher->Poll(params, &version);
      if (Clock::now() - last_report > std::chrono::seconds(1)) {
        status.set_actor_send_wait_s(
            total_wait + std::chrono::duration<double>(Clock::now() - send_start).count());
        report("waiting for the learner to take a trajectory");
        last_report = Clock::now();
      }
    }
    if (!sent) {
      // Stopping (the run's end, or `stampede scale` taking this actor out): the unroll it
      // has made still goes to the learner, for up to 2 s. Its frames are counted, so they
      // must arrive.
      const auto give_up = Clock::now() + std::chrono::seconds(2);
      while (!(sent = wire::SendTrajectory(out, batch)) && Clock::now() < give_up) {
      }
      break;
    }
    send_span.reset();
    const double waited = std::chrono::duration<double>(Clock::now() - send_start).count();
    send_wait += waited;
    total_wait += waited;
    if (fetcher) {
      ps::ParamsFetcher& f = *fetcher;
      base::TraceSpan fetch_span("fetch_params", "actor");
      f.Poll(params, &version);  // refresh only between unrolls, never waiting
      // Relay: a fetcher that has heard of versions far newer than the one it holds has
      // failed to assemble them; start it afresh (mixed fetchers take every new slice).
      const int64_t heard = f.newest_heard();
      if (max_lag > 0 && !co.mixed_versions && heard - version >= max_lag) {
        if (f.resets() == 0) {
          base::LogInfo("actor %d: its parameters (version %lld) are %lld versions behind the newest the PS has "
                       "answered it with (%lld): fetcher reset (actors.max_policy_lag = %lld); further resets are "
                       "counted in its status, not logged\n",
                       task_index, (long long)version, (long long)(heard - version), (long long)heard,
                       (long long)max_lag);
        }
        f.Reset();
      }
    }
    // Frames are reported often: the coordinator bounds the learner's frame count by
    // twice the actors' own counts, and an actor that dies takes its unreported frames
    // with it. After sends 1, 2, 4, 8, ... (so even an actor that lives for a few
    // messages has reported at least half of what it sent), then every 100 ms.
    ++sends;
    if ((sends & (sends - 1)) == 0 || Clock::now() - last_report > std::chrono::milliseconds(100)) {
      status.set_actor_send_wait_s(total_wait);
      status.set_actor_policy_version(version);
      if (fetcher) {
        status.set_actor_newest_heard_version(fetcher->newest_heard());
        status.set_actor_fetcher_resets(fetcher->resets());
        status.set_actor_mixed_assemblies(fetcher->mixed_assemblies());
      } else {
        status.set_actor_newest_heard_version(version);
      }
      report("acting");
      last_report = Clock::now();
    }
  }
  // What the socket still holds (the last unroll or two: its queue is short) leaves before
  // it closes, within 2 s. Over ipc:// libzmq may cut off what it has not yet written when
  // the socket closes (zeromq/libzmq#4660), so the actor first waits, up to 3 s, until the
  // learner has read every byte it sent.
  out.set(zmq::sockopt::linger, 2000);
  if (wire::IsIpcEndpoint(learner_endpoint)) {
    (void)wire::WaitUnixPeerRead(learner_endpoint.substr(6), std::chrono::seconds(3));
  }
  report("stopped");
  return base::OkStatus();
}

}  // namespace stampede::actors
