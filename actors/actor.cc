#include "actors/actor.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "envs/env.h"
#include "envs/rng.h"
#include "net/mlp.h"
#include "ps/client.h"
#include "wire/config.h"
#include "wire/status_channel.h"
#include "wire/zmq_util.h"

namespace stampede::actors {

using Clock = std::chrono::steady_clock;

using envs::SplitMix;

struct ActorCore::Impl {
  config::Config cfg;
  int task_index = 0;
  std::vector<std::unique_ptr<envs::Env>> envs;
  std::vector<uint64_t> episodes_started;
  std::unique_ptr<net::Mlp<float>> net;
  std::mt19937_64 rng;
  int E = 0, T = 0, D = 0, A = 0;
  bool started = false;
  // Scratch, allocated once.
  std::vector<float> probs, final_obs, final_values;
  std::vector<int> truncated_envs;

  uint64_t EnvSeed(int e) {
    return SplitMix(cfg.seed() ^ SplitMix(uint64_t(task_index) << 20 ^ uint64_t(e)) ^
                    SplitMix(episodes_started[e]++ + 0x5151));
  }
};

ActorCore::ActorCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ActorCore::~ActorCore() = default;

std::unique_ptr<ActorCore> ActorCore::Create(const config::Config& cfg, int task_index,
                                             std::string* error) {
  auto m = std::make_unique<Impl>();
  m->cfg = cfg;
  m->task_index = task_index;
  m->E = cfg.actors().envs_per_actor();
  m->T = cfg.actors().unroll_length();
  envs::EnvOptions eo;
  eo.max_episode_steps = cfg.env().max_episode_steps();
  for (int e = 0; e < m->E; ++e) {
    auto env = envs::MakeEnv(cfg.env().name(), eo, error);
    if (!env) return nullptr;
    m->envs.push_back(std::move(env));
  }
  m->episodes_started.assign(m->E, 0);
  m->D = m->envs[0]->spec().obs_size();
  m->A = m->envs[0]->spec().num_actions;
  m->net = std::make_unique<net::Mlp<float>>(
      net::MakeMlpSpec(m->D, HiddenSizes(cfg), m->A, cfg.net().activation()));
  m->rng.seed(SplitMix(cfg.seed() * 7919 + uint64_t(task_index)));
  m->probs.resize(m->A);
  m->final_obs.resize(size_t(m->E) * m->D);
  m->final_values.resize(m->E);
  m->truncated_envs.reserve(m->E);
  return std::unique_ptr<ActorCore>(new ActorCore(std::move(m)));
}

const net::MlpSpec& ActorCore::net_spec() const { return impl_->net->spec(); }
int64_t ActorCore::param_count() const { return impl_->net->layout().total_size(); }
uint64_t ActorCore::layout_fingerprint() const { return impl_->net->layout().Fingerprint(); }
int ActorCore::obs_size() const { return impl_->D; }
int ActorCore::num_actions() const { return impl_->A; }

void ActorCore::CollectUnroll(std::span<const float> params, int64_t version,
                              wire::TrajectoryBatch* out) {
  Impl& m = *impl_;
  const int E = m.E, T = m.T, D = m.D, A = m.A;
  if (out->T() != T || out->n() != E || out->observations.size() != size_t(T + 1) * E * D) {
    out->Resize(T, E, D, A);
    m.started = false;
  }
  if (!m.started) {
    for (int e = 0; e < E; ++e) {
      m.envs[e]->Reset(m.EnvSeed(e), std::span<float>(&out->observations[size_t(e) * D], D));
    }
    m.started = true;
  } else {
    // The last unroll's bootstrap observation is this unroll's first.
    std::copy_n(&out->observations[size_t(T) * E * D], size_t(E) * D, out->observations.begin());
  }
  out->meta.clear_episodes();
  out->meta.set_policy_version(version);
  std::fill(out->truncation_values.begin(), out->truncation_values.end(), 0.f);
  for (int t = 0; t < T; ++t) {
    float* obs_t = &out->observations[size_t(t) * E * D];
    float* obs_next = obs_t + size_t(E) * D;
    float* logits = &out->behaviour_logits[size_t(t) * E * A];
    m.net->Forward(params.data(), obs_t, E, logits, nullptr);
    m.truncated_envs.clear();
    for (int e = 0; e < E; ++e) {
      // Sample from softmax(logits).
      const float* z = logits + size_t(e) * A;
      float mx = z[0];
      for (int j = 1; j < A; ++j) mx = std::max(mx, z[j]);
      double sum = 0;
      for (int j = 0; j < A; ++j) sum += (m.probs[j] = std::exp(z[j] - mx));
      double u = std::uniform_real_distribution<double>(0, sum)(m.rng);
      int a = A - 1;
      for (int j = 0; j < A; ++j) {
        u -= m.probs[j];
        if (u < 0) {
          a = j;
          break;
        }
      }
      const size_t i = size_t(t) * E + e;
      out->actions[i] = a;
      const envs::StepResult r = m.envs[e]->Step(a, std::span<float>(obs_next + size_t(e) * D, D));
      out->rewards[i] = r.reward;
      out->terminated[i] = r.terminated;
      out->truncated[i] = r.truncated;
      if (r.terminated || r.truncated) {
        auto* ep = out->meta.add_episodes();
        ep->set_episode_return(float(m.envs[e]->episode_return()));
        ep->set_length(m.envs[e]->episode_length());
        if (r.truncated && !r.terminated) m.truncated_envs.push_back(e);
      }
    }
    if (!m.truncated_envs.empty()) {
      // Value of the final observation of time-limited episodes, for the learner's
      // bootstrap (learner.bootstrap_on_truncation).
      const int k = int(m.truncated_envs.size());
      for (int j = 0; j < k; ++j) {
        std::copy_n(obs_next + size_t(m.truncated_envs[j]) * D, D, &m.final_obs[size_t(j) * D]);
      }
      m.net->Forward(params.data(), m.final_obs.data(), k, nullptr, m.final_values.data());
      for (int j = 0; j < k; ++j) {
        out->truncation_values[size_t(t) * E + m.truncated_envs[j]] = m.final_values[j];
      }
    }
    for (int e = 0; e < E; ++e) {
      const size_t i = size_t(t) * E + e;
      if (out->terminated[i] || out->truncated[i]) {
        m.envs[e]->Reset(m.EnvSeed(e), std::span<float>(obs_next + size_t(e) * D, D));
      }
    }
  }
  frames_ += int64_t(T) * E;
}

int RunActor(const config::Config& cfg, int task_index, const std::atomic<bool>& stop) {
  std::string error;
  auto core = ActorCore::Create(cfg, task_index, &error);
  if (!core) {
    std::fprintf(stderr, "actor %d: %s\n", task_index, error.c_str());
    return 2;
  }
  const uint64_t incarnation = wire::NewIncarnation();
  const wire::Sender sender = wire::MakeSender(wire::ROLE_ACTOR, task_index, incarnation);
  zmq::context_t ctx(1);
  zmq::socket_t out(ctx, zmq::socket_type::push);
  wire::ConfigureSender(out, 1, 100);
  wire::LimitKernelBuffers(out, wire::TrajectoryBytes(cfg.actors().unroll_length(),
                                                     cfg.actors().envs_per_actor(),
                                                     core->obs_size(), core->num_actions()));
  out.connect(cfg.cluster().learner());
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(), sender);
  wire::Status& status = channel.status();
  auto report = [&](const char* activity) {
    status.set_actor_frames(core->frames());
    channel.Send(activity);
  };

  ps::ClientOptions co;
  co.endpoints.assign(cfg.cluster().ps().begin(), cfg.cluster().ps().end());
  co.total_size = core->param_count();
  co.layout_fingerprint = core->layout_fingerprint();
  co.max_message_bytes = cfg.cluster().max_message_bytes();
  co.sender = sender;
  ps::ParamsFetcher fetcher(ctx, co);
  std::vector<float> params(core->param_count());
  int64_t version = -1;
  report("waiting for the first parameters");
  const auto first_deadline = Clock::now() + std::chrono::duration<double>(
                                                 cfg.actors().first_params_timeout_s());
  while (!fetcher.WaitFirst(params, &version, std::chrono::seconds(1), &stop)) {
    if (stop.load()) return 0;
    report("waiting for the first parameters");
    if (Clock::now() > first_deadline) {
      std::fprintf(stderr, "actor %d: no parameters from the PS (%d shards) after %.0f s\n",
                   task_index, co.endpoints.empty() ? 0 : int(co.endpoints.size()),
                   cfg.actors().first_params_timeout_s());
      return 3;
    }
  }
  wire::TrajectoryBatch batch;
  *batch.meta.mutable_sender() = sender;
  double send_wait = 0, total_wait = 0;
  auto last_report = Clock::now();
  while (!stop.load()) {
    core->CollectUnroll(params, version, &batch);
    batch.meta.set_send_wait_s(send_wait);
    send_wait = 0;
    const auto send_start = Clock::now();
    bool sent = false;
    while (!stop.load() && !(sent = wire::SendTrajectory(out, batch))) {
      if (Clock::now() - last_report > std::chrono::seconds(1)) {
        status.set_actor_send_wait_s(
            total_wait + std::chrono::duration<double>(Clock::now() - send_start).count());
        report("waiting for the learner to take a trajectory");
        last_report = Clock::now();
      }
    }
    const double waited = std::chrono::duration<double>(Clock::now() - send_start).count();
    send_wait += waited;
    total_wait += waited;
    if (!sent) break;
    fetcher.Poll(params, &version);  // refresh only between unrolls, never waiting
    if (Clock::now() - last_report > std::chrono::seconds(1)) {
      status.set_actor_send_wait_s(total_wait);
      status.set_actor_policy_version(version);
      report("acting");
      last_report = Clock::now();
    }
  }
  return 0;
}

}  // namespace stampede::actors
