#include "learner/learner.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <optional>
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "base/mutex.h"
#include "learner/batch.h"
#include "learner/checkpoint.h"
#include "wire/auth.h"
#include "wire/log_limit.h"
#include "learner/loss.h"
#include "learner/popart.h"
#include "learner/rmsprop.h"
#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "ps/checkpoints.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "wire/durable_file.h"
#include <filesystem>
#include "replay/bounded_queue.h"
#include "replay/table.h"
#include "wire/config.h"
#include "wire/tasks.h"
#include "wire/trace.h"
#include "wire/zmq_util.h"

namespace stampede::learner {

using Clock = std::chrono::steady_clock;
constexpr size_t kReturnWindow = 100;  // episodes in the mean-return window

namespace {
// The loss's options from the learner config (both backends take these).
LossOptions LossOptionsFrom(const config::Config& cfg) {
  const auto& lc = cfg.learner();
  LossOptions lo;
  lo.discount = lc.discount();
  lo.vtrace.clip_rho_threshold = lc.clip_rho_threshold();
  lo.vtrace.clip_c_threshold = lc.clip_c_threshold();
  lo.vtrace.clip_pg_rho_threshold = lc.clip_pg_rho_threshold();
  lo.vtrace.lambda = lc.lambda();
  lo.baseline_cost = lc.baseline_cost();
  lo.entropy_cost = lc.entropy_cost();
  lo.bootstrap_on_truncation = lc.bootstrap_on_truncation();
  lo.reward_clip = lc.reward_clip();
  lo.reward_scale = lc.reward_scale();
  lo.popart = lc.popart();
  lo.normalize_advantages = lc.normalize_advantages();
  if (lc.replay().fraction() > 0) {
    lo.entropy_online_only = lc.replay().entropy_online_only();
    lo.trust_region_kl = lc.replay().trust_region_kl();
  }
  // Masks only where some task has fewer actions than the shared head.
  const auto limits = wire::TaskActionLimits(cfg);
  const int head = cfg.env().resolved_spec().num_actions();
  if (cfg.env().resolved_spec().action_kind() == config::DISCRETE &&
      std::any_of(limits.begin(), limits.end(), [&](int a) { return a < head; })) {
    lo.action_limits = limits;
  }
  return lo;
}

net::cuda::TrainerOptions TrainerOptions(const config::Config& cfg) {
  const auto& lc = cfg.learner();
  const LossOptions lo = LossOptionsFrom(cfg);
  net::cuda::TrainerOptions o;
  o.unroll_length = cfg.actors().unroll_length();
  o.batch_size = lc.batch_size();
  o.discount = lo.discount;
  o.clips = net::VTraceClips{lo.vtrace.clip_rho_threshold, lo.vtrace.clip_c_threshold,
                             lo.vtrace.clip_pg_rho_threshold, lo.vtrace.lambda};
  o.baseline_cost = lo.baseline_cost;
  o.entropy_cost = lo.entropy_cost;
  o.bootstrap_on_truncation = lo.bootstrap_on_truncation;
  o.reward_clip = lo.reward_clip;
  o.reward_scale = lo.reward_scale;
  o.normalize_advantages = lo.normalize_advantages;
  o.max_grad_norm = lc.max_grad_norm();
  o.rms_decay = float(lc.optimizer().decay());
  o.rms_momentum = float(lc.optimizer().momentum());
  o.rms_epsilon = float(lc.optimizer().epsilon());
  o.allow_tf32 = true;
  return o;
}

// The mean of a window, recomputed from the window itself (a running sum would keep the
// rounding damage of one huge value forever); 0 for an empty one.
double WindowMean(const std::deque<float>& window) {
  double sum = 0;
  for (float v : window) sum += v;
  return window.empty() ? 0 : sum / double(window.size());
}

// One unroll of a received batch: the batch is shared by its n unrolls.
struct UnrollRef {
  std::shared_ptr<const wire::TrajectoryBatch> batch;
  int column = 0;
};

}  // namespace

struct Learner::Impl {
  Learner* self;
  config::Config cfg;
  zmq::context_t& ctx;
  std::string bind_endpoint;
  uint64_t incarnation;
  std::unique_ptr<zmq::socket_t> socket;  // receiver thread's, after Start
  std::unique_ptr<net::Model<float>> net;
  std::unique_ptr<ps::ParamsPublisher> publisher;
  std::unique_ptr<ps::ParamsFetcher> fetcher;  // sync/async: the shards' parameters
  int index = 0;
  bool restarted = false;
  bool ps_mode = false;  // the shards own the optimizer (sync/async)
  // Sync/async chief: the sharded checkpoint in progress (0: none).
  int64_t ckpt_sequence = 0;
  std::string ckpt_dir;
  Clock::time_point ckpt_started;
  std::vector<wire::CheckpointDone> ckpt_done;
  std::vector<bool> ckpt_asked;  // per shard: the request is queued to it
  // Each shard's incarnation when the round began: a shard restarted since, before its
  // part arrived, lost the request, so the round is abandoned and the next one begins.
  std::vector<uint64_t> ckpt_incarnations;
  bool ckpt_abandoned = false;  // the last round was abandoned: start the next at once
  std::vector<float> params, grad;
  std::unique_ptr<RmsProp> rms;
  std::unique_ptr<net::cuda::Trainer> gpu;  // learner.device "cuda:N": the step runs there
  net::ParamLayout layout;
  wire::StepShape shape;
  int frames_per_step = 1;
  replay::BoundedQueue<UnrollRef> queue;
  // Experience replay (learner.replay.fraction > 0): this learner's table, and how many
  // unrolls of each batch come from it.
  std::unique_ptr<replay::Table<UnrollRef>> table;
  int replay_per_batch = 0;
  bool prioritized = false;
  // One sampled unroll of a batch (batch columns B - picks.size() .. B - 1).
  struct Pick {
    uint64_t key;
    double probability;
    int64_t table_size;
  };
  std::atomic<bool> stop{false};
  std::thread receiver, trainer;
  std::atomic<int64_t> dropped[size_t(wire::DropReason::kCount)] = {};
  std::string checkpoint_path;

  int num_tasks = 1;
  std::vector<int> action_limits;  // per task
  std::optional<PopArtSlots> popart;

  // The figures the receiver and trainer threads write and FillStatus reads.
  base::Mutex mu;
  std::string failure GUARDED_BY(mu);  // why the trainer thread ended (Learner::failure)
  // Per task: its own return window, counters and lag (a suite's returns have different
  // scales, so one window over all tasks would mean nothing).
  struct TaskStats {
    std::deque<float> returns, lengths;
    int64_t episodes = 0, frames = 0, frames_to_target = -1;
    double lag_sum = 0;
    int64_t lag_count = 0;
  };
  std::vector<TaskStats> tasks GUARDED_BY(mu);
  std::vector<float> popart_stats GUARDED_BY(mu);  // PopArt: a copy of "popart/stats" for the status
  std::deque<float> returns GUARDED_BY(mu);
  std::deque<float> lengths GUARDED_BY(mu);
  int64_t episodes GUARDED_BY(mu) = 0;
  int64_t frames_to_target GUARDED_BY(mu) = -1;
  double lag_sum GUARDED_BY(mu) = 0;
  int64_t lag_count GUARDED_BY(mu) = 0;
  int64_t lag_max GUARDED_BY(mu) = 0;
  // Per actor: its trajectories' policy versions and lags on arrival (the status's actor_lags).
  struct ActorArrivals {
    int64_t version = -1, lag = 0, lag_max = 0, count = 0, total = 0;
    double lag_sum = 0;
  };
  std::map<int, ActorArrivals> actor_arrivals GUARDED_BY(mu);
  LossStats last_loss GUARDED_BY(mu);
  double last_grad_norm GUARDED_BY(mu) = 0;
  double last_lr GUARDED_BY(mu) = 0;
  double train_seconds GUARDED_BY(mu) = 0;
  double receive_wait_s GUARDED_BY(mu) = 0;
  int64_t skipped_steps GUARDED_BY(mu) = 0;  // non-finite loss or gradient: not applied
  // Replay figures: ages of sampled unrolls since the last status; cumulative counts.
  double replay_age_sum GUARDED_BY(mu) = 0;
  int64_t replay_age_count GUARDED_BY(mu) = 0;
  int64_t replay_age_max GUARDED_BY(mu) = 0;
  int64_t replay_inserts_refused GUARDED_BY(mu) = 0;
  int64_t trust_region_dropped GUARDED_BY(mu) = 0;
  int64_t trained_fresh GUARDED_BY(mu) = 0;  // since the last status
  int64_t trained_replayed GUARDED_BY(mu) = 0;
  // Drop lines, rate-limited per reason for the whole learner (a claimed sender id
  // costs an attacker nothing).
  wire::LogLimiter drop_log GUARDED_BY(mu);
  std::string checkpoint_error GUARDED_BY(mu);  // the newest failed checkpoint write
  int64_t checkpoint_failures GUARDED_BY(mu) = 0;
  std::shared_ptr<const wire::Curve> curve;  // CURVE on: the run's keys
  std::unique_ptr<wire::ZapHandler> zap;    // ... and the handler for the PULL socket

  Impl(Learner* s, const config::Config& c, zmq::context_t& z, std::string ep, uint64_t inc)
      : self(s), cfg(c), ctx(z), bind_endpoint(std::move(ep)), incarnation(inc),
        queue(size_t(c.learner().queue_capacity())) {
    const auto& rc = c.learner().replay();
    if (rc.fraction() > 0) {
      replay::TableOptions o;
      o.capacity = rc.capacity();
      o.max_bytes = rc.max_bytes();
      o.max_times_sampled = rc.max_times_sampled();
      o.limiter.min_size = rc.min_size();
      o.limiter.samples_per_insert = rc.samples_per_insert();
      o.limiter.error_buffer = rc.error_buffer();
      table = std::make_unique<replay::Table<UnrollRef>>(
          o, replay::MakeSelector(rc.selector(), rc.priority_exponent()), uint64_t(c.seed()) * 7919 + 17);
      replay_per_batch = int(std::lround(rc.fraction() * c.learner().batch_size()));
      prioritized = rc.selector() == "prioritized";
    }
  }

  // The next batch's unrolls: fresh ones from the queue first, then (replay) sampled
  // ones, whose picks go to *picks. False on timeout or stop.
  bool Take(int B, std::vector<UnrollRef>* items, std::vector<Pick>* picks, std::chrono::milliseconds timeout);
  // Replay: marks the sampled columns (and their importance weights) in the batch.
  void MarkReplayed(const std::vector<Pick>& picks, Batch* batch) const;
  // Replay, after a step: the fresh unrolls go into the table, the sampled ones get new
  // priorities; `targets` (CPU learner) gives the advantages, null on the CUDA learner.
  void AfterStep(const std::vector<UnrollRef>& items, const std::vector<Pick>& picks, const Batch& batch,
                 const Targets<float>* targets, const LossStats& st);

  // Sync/async: the run's frames (the others' from the PS, ours counted here).
  int64_t GlobalFrames() const { return self->frames_.load() + self->other_frames_.load(); }
  // Sync/async: reads the newest parameters the shards have (non-blocking) and the
  // counters that come with them.
  bool PollParams(bool fresh = false);
  // Sync/async chief: starts a sharded checkpoint, and completes it once every shard's
  // part is written (true when one was completed by this call).
  void StartShardedCheckpoint();
  bool PollShardedCheckpoint(std::string* error);

  void ReceiveLoop();
  void TrainLoop();
  void TrainLoopSharded();
  // A step whose loss or gradient was not finite.
  void CountSkippedStep();
  // A step's policy lag (against `trained_on`, the version its parameters were), loss
  // and timing, for the status.
  void RecordStep(const Batch& batch, int64_t trained_on, const LossStats& st, double norm, double lr, double seconds);
  void Accept(std::shared_ptr<wire::TrajectoryBatch> b);
  // A trajectory's task id names a task of the run and its actions are that task's.
  wire::DropReason CheckTask(const wire::TrajectoryBatch& b, std::string* detail) const;
  // Records the trajectory's policy lag for its actor; kStale past learner.max_policy_lag.
  wire::DropReason CheckLag(const wire::TrajectoryBatch& b, std::string* detail);
  void Drop(const std::vector<zmq::message_t>& parts, wire::DropReason reason,
            const std::string& detail);
  void Assemble(const std::vector<UnrollRef>& items, Batch* batch) const;
  // PopArt: each task's statistics from its valid targets in the batch, then the head rescaled.
  void UpdatePopArt(const Batch& batch, const Targets<float>& targets);
  // Writes the checkpoint; a failure is also kept for the status (the run's exit code
  // and summary report it).
  bool SaveCheckpoint(std::string* error);
  bool WriteCheckpointFile(std::string* error);
};

Learner::Learner(const config::Config& cfg, zmq::context_t& ctx, std::string trajectory_endpoint,
                 uint64_t incarnation, std::shared_ptr<const wire::Curve> curve, int index, bool restarted)
    : impl_(std::make_unique<Impl>(this, cfg, ctx, std::move(trajectory_endpoint), incarnation)) {
  impl_->curve = std::move(curve);
  impl_->index = index;
  impl_->restarted = restarted;
  impl_->ps_mode = ShardsOwnOptimizer(cfg);
}

Learner::~Learner() { Stop(); }

bool Learner::Start(std::string* error) {
  Impl& m = *impl_;
  // Shapes come from the resolved spec in the config; the learner loads no env code.
  if (!ResolvedStepShape(m.cfg, &m.shape, error)) return false;
  m.frames_per_step = std::max(1, m.cfg.env().resolved_spec().frames_per_step());
  m.net = net::MakeModelFromConfig(m.cfg, m.shape, error);
  if (!m.net) return false;
  m.layout = m.net->layout();
  m.num_tasks = wire::NumTasks(m.cfg);
  {
    base::MutexLock lock(m.mu);  // no other thread yet; the lock keeps the contract simple
    m.tasks.assign(size_t(m.num_tasks), {});
  }
  m.action_limits = wire::TaskActionLimits(m.cfg);
  if (m.cfg.learner().popart()) m.popart = PopArtSlotsOf(m.layout);
  m.params.assign(m.layout.total_size(), 0.f);
  m.grad.assign(m.layout.total_size(), 0.f);
  const auto& oc = m.cfg.learner().optimizer();
  m.rms = std::make_unique<RmsProp>(m.layout.total_size(),
                                    RmsPropOptions{oc.decay(), oc.momentum(), oc.epsilon()});
  if (!m.cfg.run_dir().empty()) m.checkpoint_path = m.cfg.run_dir() + "/checkpoint.bin";
  std::error_code exists_ec;
  if (m.restarted && !m.ps_mode && !m.checkpoint_path.empty() && std::filesystem::exists(m.checkpoint_path, exists_ec)) {
    // Restarted after a crash: continue from this run's newest checkpoint.
    m.cfg.mutable_learner()->set_restore_from(m.checkpoint_path);
  }
  if (!m.cfg.learner().restore_from().empty() && !m.ps_mode) {
    CheckpointData d;
    if (!LoadCheckpoint(m.cfg.learner().restore_from(), &d, error)) return false;
    if (d.layout_fingerprint != m.layout.Fingerprint() || d.params.size() != m.params.size()) {
      *error = m.cfg.learner().restore_from() + ": checkpoint is for another network:\n" +
               d.layout_text + "this config's network is:\n" + LayoutText(m.layout);
      return false;
    }
    auto finite = [](const std::vector<float>& v) {
      for (float x : v) {
        if (!std::isfinite(x)) return false;
      }
      return true;
    };
    if (!finite(d.params) || !finite(d.rms_mean_square) || !finite(d.rms_momentum)) {
      *error = m.cfg.learner().restore_from() +
               ": checkpoint holds non-finite parameters or optimizer state (NaN or infinity); "
               "refusing to train from it";
      return false;
    }
    m.params = d.params;
    m.rms->mean_square() = d.rms_mean_square;
    m.rms->momentum() = d.rms_momentum;
    version_ = d.version;
    steps_ = d.learner_steps;
    frames_ = d.env_frames;
    start_frames_ = d.env_frames;
  } else {
    net::InitParams(m.net->spec(), m.cfg.seed(), m.params);
  }
  if (m.popart) {
    base::MutexLock lock(m.mu);
    m.popart_stats.assign(m.params.begin() + m.popart->stats, m.params.begin() + m.popart->stats + 2 * m.num_tasks);
  }
  if (const std::string device = m.cfg.learner().device(); device != "cpu") {
    const LossOptions lo = LossOptionsFrom(m.cfg);
    if (lo.popart || !lo.action_limits.empty()) {
      // `stampede run` refuses this before anything starts; a learner started by hand too.
      *error = "learner.device \"" + device + "\": PopArt and per-task action masks run on the CPU learner only";
      return false;
    }
    const int index = std::stoi(device.substr(5));  // "cuda:N", checked by the config
    m.gpu = net::cuda::Trainer::Create(m.net->spec(), index, TrainerOptions(m.cfg), error);
    if (!m.gpu) return false;
    m.gpu->SetState(m.params, m.rms->mean_square(), m.rms->momentum());
  }
  m.socket = std::make_unique<zmq::socket_t>(m.ctx, zmq::socket_type::pull);
  wire::ConfigureReceiver(*m.socket, m.cfg.cluster().max_message_bytes());
  if (m.curve) {
    // Trajectories from the run's actors only.
    m.zap = std::make_unique<wire::ZapHandler>(m.ctx, *m.curve, wire::RunAllowList(), "learner");
    m.curve->MakeServer(*m.socket, wire::kDomainTrajectories);
  }
  m.socket->set(zmq::sockopt::rcvhwm, 2);
  wire::LimitKernelBuffers(*m.socket, wire::TrajectoryBytes(m.cfg.actors().unroll_length(),
                                                           m.cfg.actors().envs_per_actor(), m.shape));
  try {
    m.socket->bind(m.bind_endpoint);
  } catch (const zmq::error_t& e) {
    *error = "learner: cannot bind " + m.bind_endpoint + " (cluster.learner): " + e.what();
    return false;
  }
  ps::ClientOptions co;
  co.endpoints.assign(m.cfg.cluster().ps().begin(), m.cfg.cluster().ps().end());
  co.total_size = m.layout.total_size();
  co.layout_fingerprint = m.layout.Fingerprint();
  co.placement = std::make_shared<ps::Placement>(ps::PlacementFromConfig(m.cfg, m.layout));
  co.sender = wire::MakeSender(wire::ROLE_LEARNER, m.index, m.incarnation);
  co.curve = m.curve;
  co.max_message_bytes = m.cfg.cluster().max_message_bytes();
  co.learner_index = m.index;
  co.mixed_versions = m.ps_mode;
  co.bfloat16 = m.cfg.ps().wire_bfloat16();
  m.publisher = std::make_unique<ps::ParamsPublisher>(m.ctx, co);
  if (m.ps_mode) m.fetcher = std::make_unique<ps::ParamsFetcher>(m.ctx, co);
  if (m.restarted && !m.ps_mode) {
    // Never put a version at or below one the PS has served: continue above the newest
    // any shard holds (a shard restarted too holds none), and continue the frame count
    // the PS kept for this learner. Each shard answers at once if it has anything.
    ps::ClientOptions probe = co;
    probe.mixed_versions = true;
    m.fetcher = std::make_unique<ps::ParamsFetcher>(m.ctx, probe);
    std::vector<float> served(m.params.size());
    int64_t assembled = -1, ps_version = -1;
    const int64_t restored = version_.load();
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    while (!m.stop.load() && Clock::now() < deadline && !m.fetcher->Poll(served, &assembled)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int64_t v : m.fetcher->newest_versions()) ps_version = std::max(ps_version, v);
    if (ps_version >= 0) {
      version_ = std::max(version_.load(), ps_version + 1);
      steps_ = version_.load();
    }
    std::fprintf(stderr, "learner: restarted: %s; the PS serves version %lld; continuing as version %lld\n",
                 m.cfg.learner().restore_from().empty()
                     ? "no checkpoint yet, fresh parameters"
                     : ("restored version " + std::to_string(restored) + " from " + m.cfg.learner().restore_from()).c_str(),
                 (long long)ps_version, (long long)version_.load());
    const auto& by_learner = m.fetcher->env_frames_by_learner();
    if (!by_learner.empty()) frames_ = std::max(frames_.load(), by_learner[0]);
    start_frames_ = frames_.load();
    m.fetcher.reset();
  }
  m.publisher->set_env_frames(frames_.load());
  if (m.ps_mode) {
    // The chief initialises the shards (a shard that already has parameters, restored
    // from a checkpoint, ignores this); everyone then takes the shards' parameters.
    if (m.index == 0 && !m.publisher->PutAll(m.params, 0, &m.stop)) {
      *error = "learner: stopped before the first parameters reached the PS";
      return false;
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(m.cfg.actors().first_params_timeout_s());
    while (!m.PollParams()) {
      if (m.stop.load() || Clock::now() > deadline) {
        *error = "learner " + std::to_string(m.index) + ": no parameters from the PS within " +
                 std::to_string(int(m.cfg.actors().first_params_timeout_s())) + " s (actors.first_params_timeout_s)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // A restarted learner continues the count the PS kept for it.
    const auto& by_learner = m.fetcher->env_frames_by_learner();
    if (size_t(m.index) < by_learner.size()) frames_ = std::max(frames_.load(), by_learner[size_t(m.index)]);
    start_frames_ = frames_.load();
    if (m.index == 0 && !m.checkpoint_path.empty()) m.StartShardedCheckpoint();
  } else if (!m.publisher->PutAll(m.params, version_.load(), &m.stop)) {
    *error = "learner: stopped before the first parameters reached the PS";
    return false;
  }
  m.receiver = std::thread([&m] { m.ReceiveLoop(); });
  m.trainer = std::thread([&m] {
    // The CUDA backend reports device errors (out of memory, a failed launch) by throwing:
    // caught here, said once, and the role ends the process with its own exit code.
    try {
      if (m.ps_mode) {
        m.TrainLoopSharded();
      } else {
        m.TrainLoop();
      }
    } catch (const std::exception& e) {
      base::MutexLock lock(m.mu);
      m.failure = std::string(m.gpu ? "device error on the trainer thread: " : "trainer thread failed: ") + e.what();
      std::fprintf(stderr, "learner %d: %s\n", m.index, m.failure.c_str());
    }
  });
  return true;
}

std::string Learner::endpoint() const {
  return impl_->socket ? impl_->socket->get(zmq::sockopt::last_endpoint) : std::string();
}

void Learner::Stop() {
  Impl& m = *impl_;
  m.stop = true;
  m.queue.Close();
  if (m.table) m.table->Close();
  if (m.receiver.joinable()) m.receiver.join();
  if (m.trainer.joinable()) m.trainer.join();
}

int64_t Learner::dropped(wire::DropReason reason) const {
  return impl_->dropped[size_t(reason)].load();
}

int64_t Learner::dropped_total() const {
  int64_t n = 0;
  for (const auto& d : impl_->dropped) n += d.load();
  return n;
}

void Learner::Impl::ReceiveLoop() {
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t items[] = {{socket->handle(), 0, ZMQ_POLLIN, 0}};
  const int64_t budget = cfg.stop().total_env_frames();
  while (!stop.load()) {
    if (GlobalFrames() >= budget) {
      // The global frame budget is spent: take no more (the coordinator stops the run).
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    wire::Poll(items, 1, std::chrono::milliseconds(100));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    while (!stop.load() && GlobalFrames() < budget &&
           wire::RecvMultipart(*socket, &parts, false)) {
      wire::TraceSpan span("receive", "learner");
      auto b = std::make_shared<wire::TrajectoryBatch>();
      wire::TrajectoryExpectations expect;
      expect.unroll_length = cfg.actors().unroll_length();
      expect.num_unrolls = cfg.actors().envs_per_actor();
      expect.shape = shape;
      // Sync/async: an actor may have read a shard's newer version than this learner has
      // yet, by up to a restarted shard's jump (ps/checkpoints.h, version marks).
      expect.newest_policy_version = self->version_.load() + (ps_mode ? 100000 : 0);
      expect.max_abs_observation = cfg.wire().max_abs_observation();
      expect.max_abs_reward = cfg.wire().max_abs_reward();
      expect.max_episode_length = cfg.env().resolved_spec().max_episode_steps();
      std::string detail;
      wire::DropReason reason = wire::DecodeTrajectory(parts, expect, b.get(), &detail);
      if (reason == wire::DropReason::kNone) reason = CheckTask(*b, &detail);
      if (reason == wire::DropReason::kNone) reason = CheckLag(*b, &detail);
      if (reason != wire::DropReason::kNone) {
        Drop(parts, reason, detail);
        continue;
      }
      Accept(std::move(b));
    }
  }
}

wire::DropReason Learner::Impl::CheckLag(const wire::TrajectoryBatch& b, std::string* detail) {
  const int64_t learner_version = self->version_.load();
  const int64_t version = b.meta.policy_version();
  const int64_t lag = std::max<int64_t>(0, learner_version - version);
  const int actor = b.meta.sender().task_index();
  if (actor >= 0 && actor < cfg.actors().num_actors()) {
    base::MutexLock lock(mu);
    ActorArrivals& a = actor_arrivals[actor];
    a.version = version;
    a.lag = lag;
    a.lag_max = std::max(a.lag_max, lag);
    a.lag_sum += double(lag);
    ++a.count;
    ++a.total;
  }
  const int64_t bound = cfg.learner().max_policy_lag();
  if (bound <= 0 || lag <= bound) return wire::DropReason::kNone;
  *detail = "its policy version " + std::to_string(version) + " is " + std::to_string(lag) +
            " versions older than the learner's " + std::to_string(learner_version) +
            " (learner.max_policy_lag = " + std::to_string(bound) + ")";
  return wire::DropReason::kStale;
}

void Learner::Impl::Drop(const std::vector<zmq::message_t>& parts, wire::DropReason reason,
                         const std::string& detail) {
  ++dropped[size_t(reason)];
  int actor = -1;
  wire::Trajectory meta;
  if (!parts.empty() && wire::ParseFrame(parts[0], &meta)) actor = meta.sender().task_index();
  base::MutexLock lock(mu);
  int64_t unlogged = 0;
  if (!drop_log.Allow(wire::DropReasonName(reason), &unlogged)) return;
  std::fprintf(stderr, "learner: dropped a trajectory from actor %d (%s): %s%s\n", actor,
               wire::DropReasonName(reason), detail.c_str(), wire::LogLimiter::More(unlogged).c_str());
}

wire::DropReason Learner::Impl::CheckTask(const wire::TrajectoryBatch& b, std::string* detail) const {
  const int task = b.meta.task_id();
  if (task < 0 || task >= num_tasks) {
    *detail = "task id " + std::to_string(task) + ", but the run has " + std::to_string(num_tasks) + " task(s)";
    return wire::DropReason::kOutOfRange;
  }
  const int limit = action_limits[size_t(task)];
  if (shape.action_kind == wire::ActionKind::kDiscrete && limit < shape.num_actions) {
    for (int32_t a : b.actions) {
      if (a >= limit) {
        *detail = "action " + std::to_string(a) + " in a trajectory of task \"" + wire::TaskName(cfg, task) +
                  "\", which has " + std::to_string(limit) + " actions";
        return wire::DropReason::kOutOfRange;
      }
    }
  }
  return wire::DropReason::kNone;
}

void Learner::Impl::Accept(std::shared_ptr<wire::TrajectoryBatch> b) {
  {
    base::MutexLock lock(mu);
    TaskStats& ts = tasks[size_t(b->meta.task_id())];
    for (const auto& ep : b->meta.episodes()) {
      for (auto* w : {&returns, &ts.returns}) w->push_back(ep.episode_return());
      for (auto* w : {&lengths, &ts.lengths}) w->push_back(float(ep.length()));
      if (returns.size() > kReturnWindow) {
        returns.pop_front();
        lengths.pop_front();
      }
      if (ts.returns.size() > kReturnWindow) {
        ts.returns.pop_front();
        ts.lengths.pop_front();
      }
      ++episodes;
      ++ts.episodes;
    }
    const auto& stop_cfg = cfg.stop();
    const int64_t frames = b->valid_steps() * frames_per_step;
    const int64_t now = self->frames_.load() + frames;
    ts.frames += frames;
    if (cfg.tasks_size() == 0) {
      if (frames_to_target < 0 && (stop_cfg.target_return() != 0 || stop_cfg.stop_at_target()) &&
          returns.size() >= kReturnWindow && WindowMean(returns) >= stop_cfg.target_return()) {
        frames_to_target = now;
      }
      ts.frames_to_target = frames_to_target;
    } else {
      // A suite reaches its target when every task with a target has reached its own.
      const auto& task_cfg = cfg.tasks(b->meta.task_id());
      if (ts.frames_to_target < 0 && task_cfg.target_return() != 0 && ts.returns.size() >= kReturnWindow &&
          WindowMean(ts.returns) >= task_cfg.target_return()) {
        ts.frames_to_target = now;
      }
      bool all = true, any = false;
      for (int t = 0; t < num_tasks; ++t) {
        if (cfg.tasks(t).target_return() == 0) continue;
        any = true;
        all = all && tasks[size_t(t)].frames_to_target >= 0;
      }
      if (frames_to_target < 0 && any && all) frames_to_target = now;
    }
    self->frames_ += frames;
  }
  std::shared_ptr<const wire::TrajectoryBatch> shared = std::move(b);
  for (int c = 0; c < shared->n(); ++c) {
    double waited = 0;
    if (!queue.Push(UnrollRef{shared, c}, &waited)) return;  // closed: stopping
    if (waited > 0) {
      base::MutexLock lock(mu);
      receive_wait_s += waited;
    }
  }
}

bool Learner::Impl::Take(int B, std::vector<UnrollRef>* items, std::vector<Pick>* picks,
                         std::chrono::milliseconds timeout) {
  const int want = table && table->CanSample() ? replay_per_batch : 0;
  if (!queue.PopExactly(size_t(B - want), items, timeout)) return false;
  picks->clear();
  for (int k = 0; k < want; ++k) {
    replay::Table<UnrollRef>::Sampled s;
    if (!table->Sample(&s, std::chrono::milliseconds(0))) break;
    items->push_back(*s.item);
    picks->push_back({s.key, s.probability, s.table_size});
  }
  // The rate limiter allowed fewer samples than asked: fresh unrolls fill the batch (first).
  std::vector<UnrollRef> more;
  while (items->size() < size_t(B)) {
    if (stop.load()) return false;
    if (queue.PopExactly(size_t(B) - items->size(), &more, std::chrono::milliseconds(100))) {
      items->insert(items->begin() + long(items->size() - picks->size()), more.begin(), more.end());
    }
  }
  return true;
}

void Learner::Impl::MarkReplayed(const std::vector<Pick>& picks, Batch* batch) const {
  if (!table) return;
  const int B = batch->n(), r = int(picks.size());
  batch->replayed.assign(size_t(B), 0);
  batch->weights.clear();
  for (int b = B - r; b < B; ++b) batch->replayed[size_t(b)] = 1;
  const double beta = cfg.learner().replay().importance_exponent();
  if (beta <= 0 || r == 0) return;
  // Prioritized replay's correction (Schaul et al. 2016): (N P(i))^-beta, over the max.
  batch->weights.assign(size_t(B), 1.f);
  std::vector<double> w(static_cast<size_t>(r));
  double max_w = 0;
  for (int k = 0; k < r; ++k) {
    w[size_t(k)] = std::pow(double(picks[size_t(k)].table_size) * picks[size_t(k)].probability, -beta);
    max_w = std::max(max_w, w[size_t(k)]);
  }
  for (int k = 0; k < r; ++k) batch->weights[size_t(B - r + k)] = float(w[size_t(k)] / max_w);
}

void Learner::Impl::AfterStep(const std::vector<UnrollRef>& items, const std::vector<Pick>& picks,
                              const Batch& batch, const Targets<float>* targets, const LossStats& st) {
  if (!table) return;
  const int B = batch.n(), T = batch.T(), r = int(picks.size()), fresh = B - r;
  // Priority: the unroll's mean |V-trace advantage| over its transitions (1 without targets).
  std::vector<double> priority(size_t(B), 1.0);
  if (prioritized && targets != nullptr) {
    for (int b = 0; b < B; ++b) {
      double sum = 0;
      int n = 0;
      for (int t = 0; t < T; ++t) {
        const size_t i = size_t(t) * B + b;
        if (!batch.valid[i]) continue;
        sum += std::abs(double(targets->pg_advantages[i]));
        ++n;
      }
      priority[size_t(b)] = n ? sum / n : 0.0;
    }
  }
  const int64_t bytes = wire::TrajectoryBytes(T, 1, shape);
  int64_t refused = 0;
  for (int b = 0; b < fresh; ++b) {
    if (!table->Insert(std::make_shared<const UnrollRef>(items[size_t(b)]), bytes, priority[size_t(b)],
                       std::chrono::milliseconds(0))) {
      ++refused;
    }
  }
  if (prioritized) {
    for (int k = 0; k < r; ++k) table->UpdatePriority(picks[size_t(k)].key, priority[size_t(fresh + k)]);
  }
  base::MutexLock lock(mu);
  replay_inserts_refused += refused;
  trust_region_dropped += st.trust_region_dropped;
}

void Learner::Impl::Assemble(const std::vector<UnrollRef>& items, Batch* batch) const {
  for (int b = 0; b < batch->n(); ++b) CopyUnroll(*items[b].batch, items[b].column, b, batch);
}

void Learner::Impl::UpdatePopArt(const Batch& batch, const Targets<float>& targets) {
  const int T = batch.T(), B = batch.n();
  std::vector<double> sum(size_t(num_tasks), 0), square(size_t(num_tasks), 0);
  std::vector<int64_t> count(size_t(num_tasks), 0);
  for (int t = 0; t < T; ++t) {
    for (int b = 0; b < B; ++b) {
      const size_t i = size_t(t) * B + b;
      if (!batch.valid[i]) continue;
      const int k = batch.tasks[size_t(b)];
      sum[size_t(k)] += targets.vs[i];
      square[size_t(k)] += double(targets.vs[i]) * targets.vs[i];
      ++count[size_t(k)];
    }
  }
  for (int k = 0; k < num_tasks; ++k) {
    if (count[size_t(k)] == 0) continue;
    const double n = double(count[size_t(k)]);
    PopArtUpdate(*popart, params.data(), k, sum[size_t(k)] / n, square[size_t(k)] / n, cfg.learner().popart_beta());
  }
  base::MutexLock lock(mu);
  popart_stats.assign(params.begin() + popart->stats, params.begin() + popart->stats + 2 * num_tasks);
}

void Learner::Impl::TrainLoop() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  const LossOptions lo = LossOptionsFrom(cfg);
  const double lr0 = lc.optimizer().learning_rate();
  const double total_frames = double(cfg.stop().total_env_frames());
  Batch batch, next_batch;
  Targets<float> targets;  // PopArt: the step's value targets
  batch.Resize(T, B, shape);
  next_batch.Resize(T, B, shape);
  bool next_staged = false;  // CUDA: next_batch is staged on the device already
  std::vector<UnrollRef> items, trained, next_items;  // trained: the batch's unrolls (replay inserts them)
  std::vector<Pick> picks, trained_picks, next_picks;
  auto last_checkpoint = Clock::now();
  bool unpublished = false;  // the newest version has not reached every shard yet
  while (!stop.load()) {
    if (!next_staged && !Take(B, &items, &picks, std::chrono::milliseconds(unpublished ? 5 : 100))) {
      if (unpublished) unpublished = !publisher->Put(params, self->version_.load());
      continue;
    }
    const auto start = Clock::now();
    double lr = lr0;
    if (lc.optimizer().linear_decay()) {
      lr = lr0 * std::max(0.0, 1.0 - double(self->frames_.load()) / total_frames);
    }
    LossStats st;
    double norm = 0;
    if (gpu) {
      // The batch goes up from pinned memory; only statistics and parameters come back.
      if (next_staged) {
        std::swap(batch, next_batch);  // staged while the previous step computed
        trained.swap(next_items);
        trained_picks.swap(next_picks);
      } else {
        wire::TraceSpan span("assemble", "learner");
        Assemble(items, &batch);
        MarkReplayed(picks, &batch);
        trained.swap(items);
        trained_picks.swap(picks);
        items.clear();
        gpu->Stage(BatchViewOf(batch));
      }
      next_staged = false;
      wire::TraceSpan gpu_span("gpu_step", "learner");
      gpu->Launch(lr);
      // While the device computes: if the next batch is already here, assemble and stage it.
      if (Take(B, &items, &next_picks, std::chrono::milliseconds(0))) {
        Assemble(items, &next_batch);
        MarkReplayed(next_picks, &next_batch);
        next_items.swap(items);
        items.clear();
        gpu->Stage(BatchViewOf(next_batch));
        next_staged = true;
      }
      const net::cuda::StepStats gs = gpu->Wait();
      gpu->GetParams(params);
      st.total = gs.total, st.pg_loss = gs.pg_loss, st.baseline_loss = gs.baseline_loss;
      st.entropy = gs.entropy;
      norm = gs.grad_norm;
    } else {
      {
        wire::TraceSpan span("assemble", "learner");
        Assemble(items, &batch);
        MarkReplayed(picks, &batch);
        trained.swap(items);  // released after the step (replay keeps the fresh ones)
        trained_picks.swap(picks);
        items.clear();
      }
      std::fill(grad.begin(), grad.end(), 0.f);
      st = ComputeLossAndGrad(*net, params.data(), batch, lo, grad.data(), popart || table ? &targets : nullptr);
      wire::TraceSpan span("apply", "learner");
      norm = ClipGlobalNorm(grad, lc.max_grad_norm());
      if (std::isfinite(st.total) && std::isfinite(norm)) {
        rms->Step(params, grad, lr);
        if (popart) UpdatePopArt(batch, targets);
      }
    }
    if (!std::isfinite(st.total) || !std::isfinite(norm)) {
      // Never applied (the CUDA step leaves the parameters alone too).
      CountSkippedStep();
      trained.clear();
      continue;
    }
    AfterStep(trained, trained_picks, batch, gpu ? nullptr : &targets, st);
    trained.clear();
    const int64_t version = ++self->version_;
    const int64_t steps = ++self->steps_;
    if (steps % lc.publish_every() == 0 || unpublished) {
      wire::TraceSpan span("publish", "learner");
      unpublished = !publisher->Put(params, version);
    }
    // The step trained on the parameters of the version before it.
    RecordStep(batch, version - 1, st, norm, lr, std::chrono::duration<double>(Clock::now() - start).count());
    if (!checkpoint_path.empty() && lc.checkpoint_interval_s() > 0 &&
        Clock::now() - last_checkpoint > std::chrono::duration<double>(lc.checkpoint_interval_s())) {
      std::string error;
      wire::TraceSpan span("checkpoint", "learner");
      if (!SaveCheckpoint(&error)) std::fprintf(stderr, "learner: checkpoint failed: %s\n", error.c_str());
      last_checkpoint = Clock::now();
    }
  }
}

bool Learner::Impl::PollParams(bool fresh) {
  int64_t v = self->version_.load();
  const bool got = fresh ? fetcher->PollFresh(params, &v, std::chrono::microseconds(1000)) : fetcher->Poll(params, &v);
  if (got) self->version_ = v;
  const auto& by = fetcher->env_frames_by_learner();
  int64_t others = 0;
  for (size_t l = 0; l < by.size(); ++l) others += int(l) == index ? 0 : by[l];
  self->other_frames_ = others;
  return got;
}

void Learner::Impl::StartShardedCheckpoint() {
  const std::string root = cfg.run_dir() + "/checkpoints";
  ckpt_sequence = ps::NextCheckpointSequence(root);
  ckpt_dir = ps::CheckpointDir(root, ckpt_sequence);
  std::error_code ec;
  std::filesystem::create_directories(ckpt_dir, ec);
  ckpt_done.clear();
  ckpt_asked.assign(size_t(cfg.ps().num_shards()), false);
  ckpt_incarnations = fetcher->shard_incarnations();
  ckpt_abandoned = false;
  ckpt_started = Clock::now();
  if (ec) {
    base::MutexLock lock(mu);
    checkpoint_error = "cannot start checkpoint " + ckpt_dir + ": " + ec.message();
    ++checkpoint_failures;
    ckpt_sequence = 0;
  }
}

bool Learner::Impl::PollShardedCheckpoint(std::string* error) {
  if (ckpt_sequence == 0) return false;
  // A shard whose queue is full now (gradients ahead of the request, or a shard being
  // restarted) is asked again on the next call, until the 60 s below.
  for (int s = 0; s < int(ckpt_asked.size()); ++s) {
    if (!ckpt_asked[size_t(s)]) ckpt_asked[size_t(s)] = publisher->RequestCheckpoint(ckpt_sequence, s);
  }
  std::vector<wire::CheckpointDone> done;
  publisher->PollCheckpointDone(&done);
  for (const auto& d : done) {
    if (d.sequence() != ckpt_sequence) continue;
    if (!d.error().empty()) {
      *error = "ps " + std::to_string(d.shard()) + " could not write its part of " + ckpt_dir + ": " + d.error();
      ckpt_sequence = 0;
      return false;
    }
    ckpt_done.push_back(d);
  }
  const int S = cfg.ps().num_shards();
  std::set<int> shards;
  for (const auto& d : ckpt_done) shards.insert(d.shard());
  const auto& incarnations = fetcher->shard_incarnations();
  for (int s = 0; s < S && size_t(s) < ckpt_incarnations.size() && size_t(s) < incarnations.size(); ++s) {
    if (shards.count(s) || ckpt_incarnations[size_t(s)] == 0 || incarnations[size_t(s)] == ckpt_incarnations[size_t(s)]) {
      continue;
    }
    // Not a failure: the restarted shard will answer the next round.
    std::fprintf(stderr, "learner: checkpoint %s abandoned: ps %d was restarted before it wrote its part\n",
                 ckpt_dir.c_str(), s);
    std::error_code ec;
    std::filesystem::remove_all(ckpt_dir, ec);
    ckpt_sequence = 0;
    ckpt_abandoned = true;
    return false;
  }
  if (int(shards.size()) < S) {
    if (Clock::now() - ckpt_started > std::chrono::seconds(60)) {
      *error = ckpt_dir + ": only " + std::to_string(shards.size()) + " of " + std::to_string(S) +
               " shards wrote their part within 60 s";
      ckpt_sequence = 0;
    }
    return false;
  }
  // Every shard's part is on disk: the chief's parts, then the manifest that completes it.
  ps::Manifest m;
  m.sequence = ckpt_sequence;
  std::vector<bool> listed(size_t(S), false);
  for (const auto& d : ckpt_done) {
    if (listed[size_t(d.shard())]) continue;
    listed[size_t(d.shard())] = true;
    if (d.shard() == 0) m.version = d.version();
    m.parts.push_back({d.file(), d.bytes(), d.checksum()});
  }
  m.learner_frames = fetcher->env_frames_by_learner();
  if (size_t(index) < m.learner_frames.size()) m.learner_frames[size_t(index)] = self->frames_.load();
  const std::string counters = "version " + std::to_string(m.version) + "\nenv_frames " +
                               std::to_string(GlobalFrames()) + "\nlearner_steps " + std::to_string(self->steps_.load()) + "\n";
  const std::pair<std::string, std::string> chief_parts[] = {{"config.textproto", ConfigToText(cfg)},
                                                             {"counters.txt", counters}};
  for (const auto& [name, text] : chief_parts) {
    if (!wire::WriteFileAtomically(ckpt_dir + "/" + name, text, error)) {
      ckpt_sequence = 0;
      return false;
    }
    m.parts.push_back({name, int64_t(text.size()), wire::Fnv1a64(text.data(), text.size())});
  }
  ckpt_sequence = 0;
  if (!ps::WriteManifest(ckpt_dir, m, error)) return false;
  ps::PruneCheckpoints(cfg.run_dir() + "/checkpoints", cfg.learner().checkpoints_kept());
  base::MutexLock lock(mu);
  checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
  return true;
}

void Learner::Impl::TrainLoopSharded() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  const LossOptions lo = LossOptionsFrom(cfg);
  const double lr0 = lc.optimizer().learning_rate();
  const double total_frames = double(cfg.stop().total_env_frames());
  const bool sync = lc.update_mode() == "sync";
  const bool chief = index == 0 && !checkpoint_path.empty();
  Batch batch;
  batch.Resize(T, B, shape);
  Targets<float> targets;  // replay: the step's advantages give priorities
  std::vector<UnrollRef> items;
  std::vector<Pick> picks;
  std::vector<int64_t> pushed;  // each shard's version our newest gradient was computed on
  int64_t sync_wait_start = -1;  // trace: when the wait for the others' gradients began
  auto last_checkpoint = Clock::now();
  while (!stop.load()) {
    PollParams();
    if (chief) {
      std::string error;
      if (PollShardedCheckpoint(&error)) last_checkpoint = Clock::now();
      if (!error.empty()) {
        std::fprintf(stderr, "learner: checkpoint failed: %s\n", error.c_str());
        base::MutexLock lock(mu);
        checkpoint_error = error;
        ++checkpoint_failures;
      }
      if (ckpt_sequence == 0 && lc.checkpoint_interval_s() > 0 &&
          (ckpt_abandoned ||
           Clock::now() - last_checkpoint > std::chrono::duration<double>(lc.checkpoint_interval_s()))) {
        StartShardedCheckpoint();
        last_checkpoint = Clock::now();
      }
    }
    if (sync && !pushed.empty()) {
      // Sync: the next gradient must be computed on the version our last one helped make.
      const auto& now_at = fetcher->shard_versions();
      bool moved = true;
      for (size_t i = 0; i < pushed.size(); ++i) moved = moved && now_at[i] > pushed[i];
      if (!moved) {
        if (sync_wait_start < 0 && wire::Trace::on()) sync_wait_start = wire::Trace::NowUs();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if (sync_wait_start >= 0) {
        // The time this learner waited for the other replicas' gradients of its version.
        wire::Trace::Complete("sync_wait", "learner", sync_wait_start, wire::Trace::NowUs() - sync_wait_start);
        sync_wait_start = -1;
      }
    }
    if (!Take(B, &items, &picks, std::chrono::milliseconds(5))) continue;
    const auto start = Clock::now();
    PollParams(true);  // the newest parameters the shards hold now
    double lr = lr0;
    if (lc.optimizer().linear_decay()) lr = lr0 * std::max(0.0, 1.0 - double(GlobalFrames()) / total_frames);
    {
      wire::TraceSpan span("assemble", "learner");
      Assemble(items, &batch);
      MarkReplayed(picks, &batch);
    }
    std::fill(grad.begin(), grad.end(), 0.f);
    const LossStats st = ComputeLossAndGrad(*net, params.data(), batch, lo, grad.data(), table ? &targets : nullptr);
    const double norm = ClipGlobalNorm(grad, lc.max_grad_norm());
    if (!std::isfinite(st.total) || !std::isfinite(norm)) {
      CountSkippedStep();  // never pushed
      items.clear();
      continue;
    }
    AfterStep(items, picks, batch, &targets, st);
    items.clear();
    pushed = fetcher->shard_versions();
    {
      wire::TraceSpan span("push", "learner");
      publisher->set_env_frames(self->frames_.load());
      if (!publisher->PushGradient(grad, pushed, lr, &stop)) break;
    }
    ++self->steps_;
    RecordStep(batch, self->version_.load(), st, norm, lr, std::chrono::duration<double>(Clock::now() - start).count());
  }
}

void Learner::Impl::CountSkippedStep() {
  // Counted, said once in a while; training goes on with the next batch.
  base::MutexLock lock(mu);
  if (skipped_steps++ % 1000 == 0) {
    std::fprintf(stderr, "learner: skipped a step with a non-finite loss or gradient (%lld so far)\n",
                 (long long)skipped_steps);
  }
}

void Learner::Impl::RecordStep(const Batch& batch, int64_t trained_on, const LossStats& st, double norm, double lr,
                               double seconds) {
  base::MutexLock lock(mu);
  for (int b = 0; b < batch.n(); ++b) {
    const int64_t lag = std::max<int64_t>(0, trained_on - batch.policy_versions[size_t(b)]);
    if (!batch.replayed.empty() && batch.replayed[size_t(b)]) {
      // A replayed unroll's age, not the fleet's policy lag.
      replay_age_sum += double(lag);
      ++replay_age_count;
      replay_age_max = std::max(replay_age_max, lag);
      ++trained_replayed;
      continue;
    }
    ++trained_fresh;
    lag_sum += double(lag);
    ++lag_count;
    lag_max = std::max(lag_max, lag);
    TaskStats& ts = tasks[size_t(batch.tasks[size_t(b)])];
    ts.lag_sum += double(lag);
    ++ts.lag_count;
  }
  last_loss = st;
  last_grad_norm = norm;
  last_lr = lr;
  train_seconds += seconds;
}

bool Learner::Impl::SaveCheckpoint(std::string* error) {
  if (WriteCheckpointFile(error)) {
    base::MutexLock lock(mu);
    if (!ps_mode) checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
    return true;
  }
  base::MutexLock lock(mu);
  checkpoint_error = *error;
  ++checkpoint_failures;
  return false;
}

std::string Learner::failure() const {
  base::MutexLock lock(impl_->mu);
  return impl_->failure;
}

bool Learner::Impl::WriteCheckpointFile(std::string* error) {
  if (gpu) {
    try {
      gpu->GetState(params, rms->mean_square(), rms->momentum());
    } catch (const std::exception& e) {
      *error = "not writing " + checkpoint_path + ": the device state cannot be read back: " + e.what();
      return false;
    }
  }
  for (float x : params) {
    if (!std::isfinite(x)) {
      *error = "not writing " + checkpoint_path + ": the parameters hold a non-finite value";
      return false;
    }
  }
  CheckpointData d;
  d.layout_fingerprint = layout.Fingerprint();
  d.layout_text = LayoutText(layout);
  d.version = self->version_.load();
  d.env_frames = GlobalFrames();
  d.learner_steps = self->steps_.load();
  d.params = params;
  d.rms_mean_square = rms->mean_square();
  d.rms_momentum = rms->momentum();
  return learner::SaveCheckpoint(checkpoint_path, d, error);
}

bool Learner::WriteCheckpoint(std::string* error) {
  Impl& m = *impl_;
  if (m.checkpoint_path.empty()) {
    *error = "no run_dir, so no checkpoint path";
    return false;
  }
  if (m.ps_mode) {
    if (m.index != 0) return true;  // the chief checkpoints for everyone
    // The shards' parts (they stop after the learners), then the parameters for eval.
    m.PollShardedCheckpoint(error);  // one in progress completes or is dropped
    error->clear();
    m.StartShardedCheckpoint();
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (m.ckpt_sequence != 0 && Clock::now() < deadline) {
      if (m.PollShardedCheckpoint(error)) break;
      if (m.ckpt_sequence == 0 && m.ckpt_abandoned) m.StartShardedCheckpoint();  // a shard restarted: again
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (m.ckpt_sequence != 0) *error = m.ckpt_dir + ": the shards did not write their parts within 20 s";
    m.ckpt_sequence = 0;
    for (int i = 0; i < 20 && !m.PollParams(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!error->empty()) {
      base::MutexLock lock(m.mu);
      m.checkpoint_error = *error;
      ++m.checkpoint_failures;
      return false;
    }
  }
  return m.SaveCheckpoint(error);
}

void Learner::FillStatus(wire::Status* s) {
  Impl& m = *impl_;
  s->set_env_frames(frames_.load());
  s->set_learner_index(m.index);
  s->set_global_env_frames(m.GlobalFrames());
  s->set_start_env_frames(start_frames_);
  s->set_learner_steps(steps_.load());
  s->set_policy_version(version_.load());
  s->set_queue_depth(int(m.queue.size()));
  s->set_dropped_trajectories(dropped_total());
  for (int r = 1; r < int(wire::DropReason::kCount); ++r) {
    if (const int64_t n = m.dropped[r].load()) {
      (*s->mutable_dropped_by_reason())[wire::DropReasonName(wire::DropReason(r))] = n;
    }
  }
  base::MutexLock lock(m.mu);
  s->set_checkpoint_error(m.checkpoint_error);
  s->set_checkpoint_failures(m.checkpoint_failures);
  if (m.zap && m.zap->rejected() > 0) (*s->mutable_refused_by_reason())["unauthorised_connection"] = m.zap->rejected();
  s->set_episodes(m.episodes);
  s->set_returns_counted(int(m.returns.size()));
  s->set_frames_to_target(m.frames_to_target);
  s->set_mean_return_100(WindowMean(m.returns));
  s->set_mean_episode_length_100(WindowMean(m.lengths));
  s->set_policy_lag_mean(m.lag_count ? m.lag_sum / double(m.lag_count) : 0);
  s->set_policy_lag_max(m.lag_max);
  m.lag_sum = 0;
  m.lag_count = 0;
  m.lag_max = 0;
  s->clear_actor_lags();
  for (auto& [actor, a] : m.actor_arrivals) {
    wire::ActorLag* out = s->add_actor_lags();
    out->set_actor(actor);
    out->set_policy_version(a.version);
    out->set_lag(a.lag);
    out->set_lag_mean(a.count ? a.lag_sum / double(a.count) : 0);
    out->set_lag_max(a.lag_max);
    out->set_trajectories(a.total);
    a.lag_sum = 0;
    a.lag_max = 0;
    a.count = 0;
  }
  if (m.table) {
    const replay::TableStats ts = m.table->stats();
    wire::ReplayStatus* r = s->mutable_replay();
    r->set_size(ts.size);
    r->set_bytes(ts.bytes);
    r->set_inserts(ts.inserts);
    r->set_samples(ts.samples);
    r->set_selector(ts.selector);
    r->set_can_sample(ts.can_sample);
    r->set_removed_oldest(ts.removed_oldest);
    r->set_removed_sampled(ts.removed_sampled);
    r->set_inserts_refused(m.replay_inserts_refused);
    r->set_trust_region_dropped(m.trust_region_dropped);
    r->set_sampled_age_mean(m.replay_age_count ? m.replay_age_sum / double(m.replay_age_count) : 0);
    r->set_sampled_age_max(m.replay_age_max);
    const int64_t trained = m.trained_fresh + m.trained_replayed;
    r->set_replayed_fraction(trained ? double(m.trained_replayed) / double(trained) : 0);
    m.replay_age_sum = 0;
    m.replay_age_count = 0;
    m.replay_age_max = 0;
    m.trained_fresh = 0;
    m.trained_replayed = 0;
  }
  s->set_pg_loss(m.last_loss.pg_loss);
  s->set_baseline_loss(m.last_loss.baseline_loss);
  s->set_entropy(m.last_loss.entropy);
  s->set_grad_norm(m.last_grad_norm);
  s->set_learning_rate(m.last_lr);
  s->set_train_seconds(m.train_seconds);
  s->set_receive_wait_s(m.receive_wait_s);
  s->set_skipped_steps(m.skipped_steps);
  s->clear_tasks();
  for (int t = 0; t < m.num_tasks; ++t) {
    auto& ts = m.tasks[size_t(t)];
    wire::TaskStatus* out = s->add_tasks();
    out->set_task(t);
    out->set_episodes(ts.episodes);
    out->set_mean_return_100(WindowMean(ts.returns));
    out->set_returns_counted(int(ts.returns.size()));
    out->set_mean_episode_length_100(WindowMean(ts.lengths));
    out->set_env_frames(ts.frames);
    out->set_policy_lag_mean(ts.lag_count ? ts.lag_sum / double(ts.lag_count) : 0);
    out->set_frames_to_target(ts.frames_to_target);
    ts.lag_sum = 0;
    ts.lag_count = 0;
    out->set_popart_mean(m.popart ? m.popart_stats[size_t(t)] : 0);
    out->set_popart_scale(m.popart ? m.popart_stats[size_t(m.num_tasks + t)] : 1);
  }
}

}  // namespace stampede::learner
