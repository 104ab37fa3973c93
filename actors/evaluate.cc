#include "actors/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "actors/acting.h"
#include "actors/env_source.h"
#include "actors/params_client.h"
#include "envs/vector_env.h"
#include "net/distribution.h"
#include "net/from_config.h"
#include "ps/client.h"
#include "wire/auth.h"
#include "config/config.h"
#include "wire/status_channel.h"
#include "config/tasks.h"
#include "wire/zmq_util.h"

namespace stampede::actors {

struct EpisodeRunner::Impl {
  int E = 1, A = 0, S = 0, K = 0, limit = 0;
  wire::StepShape shape, task_shape;  // the network's (joint) and the task's own
  std::unique_ptr<net::Model<float>> net;
  std::unique_ptr<envs::VectorEnv> env;
  config::ObsAdapter adapter;
};

EpisodeRunner::EpisodeRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EpisodeRunner::~EpisodeRunner() = default;
const net::ParamLayout& EpisodeRunner::layout() const { return impl_->net->layout(); }

base::StatusOr<std::unique_ptr<EpisodeRunner>> EpisodeRunner::Create(const config::Config& cfg, int task,
                                                                     int num_envs) {
  auto m = std::make_unique<Impl>();
  m->E = std::max(1, num_envs);
  RETURN_IF_ERROR(ResolvedStepShape(cfg, &m->shape));
  ASSIGN_OR_RETURN(m->net, net::MakeModelFromConfig(cfg, m->shape));
  const config::Config task_cfg = config::TaskEnvConfig(cfg, task);
  ASSIGN_OR_RETURN(m->env, envs::MakeVectorEnv(EnvSourceFromConfig(task_cfg), m->E));
  config::Config with = task_cfg;
  *with.mutable_env()->mutable_resolved_spec() = SpecToProto(m->env->spec());
  RETURN_IF_ERROR(ResolvedStepShape(with, &m->task_shape));
  m->adapter = config::ObsAdapter(m->task_shape.obs_shape, m->shape.obs_shape,
                                m->task_shape.obs_dtype == wire::DType::kUint8, cfg.suite().obs_rule());
  m->A = m->net->policy_size();
  m->S = m->net->state_size();
  m->K = m->net->spec().policy.action_size();
  m->limit = config::TaskActionLimits(cfg)[size_t(task)];
  return std::unique_ptr<EpisodeRunner>(new EpisodeRunner(std::move(m)));
}

base::Status EpisodeRunner::Run(const float* params, const EpisodeOptions& opt, EpisodeResult* out) {
  Impl& m = *impl_;
  const int E = m.E, A = m.A, S = m.S, K = m.K;
  const net::PolicyShape& pol = m.net->spec().policy;
  const wire::StepShape& ts = m.task_shape;
  std::vector<std::byte> task_obs(size_t(E) * ts.obs_bytes()), obs(size_t(E) * m.shape.obs_bytes()),
      final_obs(size_t(E) * ts.obs_bytes());
  std::vector<float> logits(size_t(E) * A), state(size_t(E) * S, 0.f), actions_f(size_t(E) * K), rewards(E);
  std::vector<int32_t> actions(size_t(E) * K);
  std::vector<uint8_t> terminated(E), truncated(E), valid(E), first(E, 1);
  EpisodeBooks books(E);
  // Each env's share of the episodes: counting the first `episodes` to end would favour
  // short ones.
  std::vector<int> quota(E);
  for (int e = 0; e < E; ++e) quota[e] = opt.episodes / E + (e < opt.episodes % E ? 1 : 0);
  std::vector<double> finished, finished_lengths;
  int capped = 0;
  bool recording = bool(opt.on_frame);
  std::mt19937_64 rng(opt.seed);
  uint64_t resets = 0;
  m.env->Reset(opt.seed, task_obs.data());
  auto done = [&] {
    for (int e = 0; e < E; ++e) {
      if (quota[e] > 0) return false;
    }
    return true;
  };
  while (!done()) {
    if (opt.keep_going && !opt.keep_going()) {
      return base::Cancelled("stopped");
    }
    if (recording) opt.on_frame(ts, task_obs.data());
    m.adapter.Apply(task_obs.data(), E, obs.data());
    ResetStartingStates(state.data(), S, first.data(), E);
    m.net->Step(params, obs.data(), E, nullptr, state.data(), state.data(), logits.data(), nullptr);
    MaskMissingActions(pol, logits.data(), E, A, m.limit);
    ActionOut chosen;
    if (ts.box()) {
      chosen.box_clipped = actions_f.data();
      chosen.low = ts.action_low.data();
      chosen.high = ts.action_high.data();
    } else {
      chosen.actions = actions.data();
    }
    ChooseActions(pol, logits.data(), E, A, opt.greedy, rng, chosen);
    envs::VectorStep step;
    step.obs = task_obs.data();
    step.rewards = rewards.data();
    step.terminated = terminated.data();
    step.truncated = truncated.data();
    step.valid = valid.data();
    step.final_obs = final_obs.data();
    try {
      if (ts.box()) {
        m.env->StepBox(actions_f.data(), step);
      } else {
        m.env->Step(actions.data(), step);
      }
    } catch (const std::exception& e) {
      return base::Internal(e.what());
    }
    bool reset_capped = false;
    for (int e = 0; e < E; ++e) {
      first[e] = terminated[e] | truncated[e] | uint8_t(!valid[e]);
      if (!valid[e]) continue;
      const bool cap = books.length(e) + 1 >= opt.max_steps && !(terminated[e] || truncated[e]);
      double episode_return = 0;
      int episode_length = 0;
      if (books.Step(e, rewards[e], terminated[e] || truncated[e] || cap, &episode_return, &episode_length)) {
        if (quota[e] > 0) {
          --quota[e];
          finished.push_back(episode_return);
          finished_lengths.push_back(episode_length);
          capped += cap;
        }
        reset_capped = reset_capped || cap;
        if (e == 0) recording = false;  // env 0's first episode is the recording
      }
    }
    if (reset_capped && !done()) {
      // Envs reset only as a batch: every env starts afresh (the episodes in progress
      // elsewhere are not counted).
      m.env->Reset(opt.seed + ++resets, task_obs.data());
      books.Clear();
      std::fill(first.begin(), first.end(), 1);
      recording = false;
    }
  }
  EpisodeResult r;
  r.episodes = int(finished.size());
  r.capped = capped;
  for (size_t i = 0; i < finished.size(); ++i) {
    r.mean += finished[i];
    r.mean_length += finished_lengths[i];
  }
  r.mean /= double(std::max<size_t>(1, finished.size()));
  r.mean_length /= double(std::max<size_t>(1, finished.size()));
  double var = 0;
  for (double x : finished) var += (x - r.mean) * (x - r.mean);
  r.std = std::sqrt(var / double(std::max<size_t>(1, finished.size())));
  *out = r;
  return base::OkStatus();
}

base::Status RunEvaluator(const config::Config& cfg, int index, std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  const config::EvaluationConfig& ev = cfg.evaluation();
  ASSIGN_OR_RETURN(const std::shared_ptr<const wire::Curve> curve, wire::RunCurve(cfg, wire::Identity("evaluator", index)));
  const wire::Sender sender = wire::MakeSender(wire::ROLE_EVALUATOR, index, wire::NewIncarnation());
  zmq::context_t ctx(1);
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(), sender, curve.get(), cfg.cluster().control(), &stop);
  wire::Status& status = channel.status();
  auto last_report = Clock::now();
  auto report = [&](const std::string& activity) {
    channel.Send(activity.c_str());
    last_report = Clock::now();
  };
  report("starting its envs");
  const int num_tasks = config::NumTasks(cfg);
  const int num_envs = std::clamp(ev.num_envs(), 1, std::max(1, ev.episodes()));
  std::vector<std::unique_ptr<EpisodeRunner>> runners;
  for (int t = 0; t < num_tasks; ++t) {
    auto r = EpisodeRunner::Create(cfg, t, num_envs);
    if (!r.ok()) return base::InvalidArgument("task " + config::TaskName(cfg, t) + ": " + r.status().message());
    runners.push_back(std::move(r).value());
    report("starting its envs");
  }
  std::vector<float> params(size_t(runners[0]->layout().total_size()));
  ps::ParamsFetcher fetcher(ctx, ActingClientOptions(cfg, runners[0]->layout(), sender, curve));
  int64_t version = -1, done_round = 0;
  auto last_poll = Clock::now() - std::chrono::seconds(10);
  while (!stop.load()) {
    // Between rounds the parameters are refreshed once a second (the first ones at once).
    if (version < 0 || Clock::now() - last_poll > std::chrono::seconds(1)) {
      fetcher.Poll(params, &version);
      last_poll = Clock::now();
    }
    if (!fetcher.layout_mismatch().empty()) return base::InvalidArgument(fetcher.layout_mismatch());
    if (version < 0 || channel.evaluate_round() <= done_round) {
      if (Clock::now() - last_report > std::chrono::milliseconds(250)) {
        report(version < 0 ? "waiting for the first parameters" : "waiting for the next evaluation round");
      }
      wire::SleepUnlessStopped(0.05, stop);
      continue;
    }
    // The newest request: rounds that came due while the last one ran are not run twice.
    const int64_t round = channel.evaluate_round(), frames = channel.evaluate_frames();
    // The newest parameters: whatever the shards answer within 300 ms.
    for (const auto until = Clock::now() + std::chrono::milliseconds(300); Clock::now() < until && !stop.load();) {
      fetcher.Poll(params, &version);
      wire::SleepUnlessStopped(0.01, stop);
    }
    const auto start = Clock::now();
    wire::EvaluationReport rep;
    rep.set_round(round);
    rep.set_env_frames(frames);
    rep.set_policy_version(version);
    rep.set_greedy(ev.greedy());
    for (int t = 0; t < num_tasks; ++t) {
      const std::string activity =
          "evaluating round " + std::to_string(round) + " (task " + config::TaskName(cfg, t) + ")";
      EpisodeOptions opt;
      opt.episodes = ev.episodes();
      opt.num_envs = num_envs;
      opt.greedy = ev.greedy();
      opt.max_steps = ev.max_steps();
      opt.seed = cfg.seed() * 1000003u + uint64_t(round) * 7919u + uint64_t(t) * 104729u;
      opt.keep_going = [&] {
        if (Clock::now() - last_report > std::chrono::milliseconds(250)) report(activity);
        return !stop.load();
      };
      EpisodeResult r;
      if (const base::Status ran = runners[size_t(t)]->Run(params.data(), opt, &r); !ran.ok()) {
        if (stop.load()) break;
        return base::Internal("round " + std::to_string(round) + ", task " + config::TaskName(cfg, t) + ": " +
                              ran.message());
      }
      wire::EvaluationTask* et = rep.add_tasks();
      et->set_task(t);
      et->set_return_mean(r.mean);
      et->set_return_std(r.std);
      et->set_episodes(r.episodes);
      et->set_capped(r.capped);
      et->set_mean_episode_length(r.mean_length);
    }
    if (stop.load()) break;
    rep.set_seconds(std::chrono::duration<double>(Clock::now() - start).count());
    *status.mutable_evaluation() = rep;
    done_round = round;
    report("evaluated round " + std::to_string(round));
  }
  report("stopped");
  return base::OkStatus();
}

}  // namespace stampede::actors
