#include "base/log.h"
#include "learner/impl.h"

namespace stampede::learner {

double WindowMean(const std::deque<float>& window) {
  double sum = 0;
  for (float v : window) sum += v;
  return window.empty() ? 0 : sum / double(window.size());
}

namespace {
// The longest one wait on the PS's sockets lasts before the caller looks at its deadline
// and the stop flag again (a reply wakes it at once).
constexpr std::chrono::milliseconds kPsWait{5};
// A restarted learner asks the shards what they hold for at most this long.
constexpr std::chrono::seconds kRestartProbe{3};
// The chief waits this long for the shards' parts of the final checkpoint.
constexpr std::chrono::seconds kFinalCheckpointWait{20};

}  // namespace


Learner::Impl::Impl(const config::Config& c, zmq::context_t& z, std::string ep, uint64_t inc)
    : Trainer(c, 0), ctx(z), bind_endpoint(std::move(ep)), incarnation(inc),
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
    prioritized = ChoiceOf<config::Selector>(rc.selector()) == config::Selector::prioritized;
  }
  ps_link = std::make_unique<PsLink>(*this);
  links.batches = this;
  links.books = this;
  links.shards = ps_link.get();
}

Learner::Impl::~Impl() = default;

Learner::Learner(const config::Config& cfg, zmq::context_t& ctx, std::string trajectory_endpoint,
                 uint64_t incarnation, std::shared_ptr<const wire::Curve> curve, int index, bool restarted)
    : impl_(std::make_unique<Impl>(cfg, ctx, std::move(trajectory_endpoint), incarnation)) {
  impl_->curve = std::move(curve);
  impl_->index = index;
  impl_->restarted = restarted;
  impl_->ps_mode = ShardsOwnOptimizer(cfg);
  impl_->allreduce = UpdateModeOf(cfg) == config::UpdateMode::allreduce;
}

Learner::~Learner() { Stop(); }

int64_t Learner::learner_steps() const { return impl_->counters.steps.load(); }
int64_t Learner::env_frames() const { return impl_->counters.frames.load(); }
int64_t Learner::policy_version() const { return impl_->counters.version.load(); }

base::Status Learner::Start() {
  Impl& m = *impl_;
  // Shapes come from the resolved spec in the config; the learner loads no env code.
  RETURN_IF_ERROR(ResolvedStepShape(m.cfg, &m.shape));
  m.frames_per_step = std::max(1, m.cfg.env().resolved_spec().frames_per_step());
  ASSIGN_OR_RETURN(m.net, net::MakeModelFromConfig(m.cfg, m.shape));
  m.layout = m.net->layout();
  m.num_tasks = config::NumTasks(m.cfg);
  {
    base::MutexLock lock(m.mu);  // no other thread yet; the lock keeps the contract simple
    m.tasks.assign(size_t(m.num_tasks), {});
  }
  m.action_limits = config::TaskActionLimits(m.cfg);
  if (PopArtOn(m.cfg)) m.popart = PopArtSlotsOf(m.layout);
  m.params.assign(m.layout.total_size(), 0.f);
  m.grad.assign(m.layout.total_size(), 0.f);
  m.rms = std::make_unique<Optimizer>(m.layout.total_size(), net::OptimizerHyperFromConfig(m.cfg.learner().optimizer()));
  // Allreduce: the chief writes the checkpoints (every learner holds the same state).
  if (!m.cfg.run_dir().empty() && !(m.allreduce && m.index != 0)) m.checkpoint_path = m.cfg.run_dir() + "/checkpoint.bin";
  m.links.checkpoints = m.checkpoint_path.empty() ? nullptr : &m;
  std::error_code exists_ec;
  if (m.restarted && !m.ps_mode && !m.checkpoint_path.empty() && std::filesystem::exists(m.checkpoint_path, exists_ec)) {
    // Restarted after a crash: continue from this run's newest checkpoint.
    m.cfg.mutable_learner()->set_restore_from(m.checkpoint_path);
  }
  if (!m.cfg.learner().restore_from().empty() && !m.ps_mode) {
    CheckpointData d;
    RETURN_IF_ERROR(LoadCheckpoint(m.cfg.learner().restore_from(), &d));
    if (d.layout_fingerprint != m.layout.Fingerprint() || d.params.size() != m.params.size()) {
      return base::InvalidArgument(m.cfg.learner().restore_from() + ": checkpoint is for another network:\n" +
               d.layout_text + "this config's network is:\n" + LayoutText(m.layout));
    }
    auto finite = [](const std::vector<float>& v) {
      for (float x : v) {
        if (!std::isfinite(x)) return false;
      }
      return true;
    };
    if (!finite(d.params) || !finite(d.rms_mean_square) || !finite(d.rms_momentum)) {
      return base::InvalidArgument(m.cfg.learner().restore_from() +
               ": checkpoint holds non-finite parameters or optimizer state (NaN or infinity); "
               "refusing to train from it");
    }
    m.params = d.params;
    m.rms->mean_square() = d.rms_mean_square;
    m.rms->momentum() = d.rms_momentum;
    m.counters.version = d.version;
    m.counters.steps = d.learner_steps;
    // The checkpoint holds the run's frames; allreduce: every learner restores the chief's
    // checkpoint, and the chief alone carries the count on (the coordinator adds the
    // learners' counts).
    m.counters.frames = m.allreduce && m.index != 0 ? 0 : d.env_frames;
    start_frames_ = m.counters.frames.load();
  } else {
    net::InitParams(m.net->spec(), m.cfg.seed(), m.params);
  }
  if (m.popart) m.SharePopArtStats();
  auto backend = MakeBackend(m.cfg, *m.net, m.index);
  if (!backend.ok()) return backend.status();
  m.backend = std::move(backend).value();
  // Relay on a backend with a fused step runs it there; allreduce applies the averaged
  // gradient on the host (each learner the same step).
  m.fused = !m.ps_mode && !m.allreduce && m.backend->fuses_update();
  if (m.fused) m.backend->SetState(m.params, m.rms->mean_square(), m.rms->momentum());
  m.socket = std::make_unique<zmq::socket_t>(m.ctx, zmq::socket_type::pull);
  wire::ConfigureReceiver(*m.socket, m.cfg.cluster().max_message_bytes());
  // What an actor's connection has delivered stays to be read when that actor leaves
  // (`stampede scale` taking it out, a crash): with a linger of 0 libzmq drops the messages
  // still queued from a peer that disconnects. The receiver sets 0 again when it ends.
  m.socket->set(zmq::sockopt::linger, 2000);
  if (m.curve) {
    // Trajectories from the run's actors only.
    m.zap = std::make_unique<wire::ZapHandler>(m.ctx, *m.curve, wire::RunAllowList(), "learner");
    m.curve->MakeServer(*m.socket, wire::kDomainTrajectories, m.bind_endpoint);
  }
  m.socket->set(zmq::sockopt::rcvhwm, 2);
  wire::LimitKernelBuffers(*m.socket, wire::TrajectoryBytes(m.cfg.actors().unroll_length(),
                                                           m.cfg.actors().envs_per_actor(), m.shape));
  try {
    m.socket->bind(m.bind_endpoint);
  } catch (const zmq::error_t& e) {
    return base::Unavailable("learner: cannot bind " + m.bind_endpoint + " (cluster.learner): " + e.what());
  }
  if (m.allreduce) {
    RingOptions ro;
    ro.endpoints.assign(m.cfg.cluster().allreduce().begin(), m.cfg.cluster().allreduce().end());
    if (m.index < int(ro.endpoints.size())) ro.bind = BindEndpoint(m.cfg, ro.endpoints[size_t(m.index)]);
    ro.rank = m.index;
    ro.incarnation = m.incarnation;
    ro.curve = m.curve;
    ro.timeout = std::chrono::milliseconds(int64_t(m.cfg.learner().allreduce_timeout_s() * 1000));
    ro.max_message_bytes = m.cfg.cluster().max_message_bytes();
    ro.piece_elements = std::max<int64_t>(1024, ro.max_message_bytes / int64_t(2 * sizeof(float)));
    ro.piece_elements = std::min<int64_t>(ro.piece_elements, int64_t(1) << 20);
    m.ring = std::make_unique<Ring>(m.ctx, ro);
    RETURN_IF_ERROR(m.ring->Start());
    m.links.ring = m.ring.get();
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
  if (m.restarted && !m.ps_mode && !(m.allreduce && m.index != 0)) {
    // Never put a version at or below one the PS has served: continue above the newest
    // any shard holds (a shard restarted too holds none), and continue the frame count
    // the PS kept for this learner. Each shard answers at once if it has anything.
    ps::ClientOptions probe = co;
    probe.mixed_versions = true;
    m.fetcher = std::make_unique<ps::ParamsFetcher>(m.ctx, probe);
    std::vector<float> served(m.params.size());
    int64_t assembled = -1, ps_version = -1;
    const int64_t restored = m.counters.version.load();
    (void)m.fetcher->WaitFirst(served, &assembled, kRestartProbe, &m.stop);
    for (int64_t v : m.fetcher->newest_versions()) ps_version = std::max(ps_version, v);
    if (ps_version >= 0 && m.allreduce) {
      // The ring decides the version (the newest any learner's state has); the chief's
      // next version is above what the PS served whatever the ring decides.
      m.version_floor = ps_version + 1;
    } else if (ps_version >= 0) {
      m.counters.version = std::max(m.counters.version.load(), ps_version + 1);
      m.counters.steps = m.counters.version.load();
    }
    base::LogInfo("learner: restarted: %s; the PS serves version %lld; %s %lld\n",
                 m.cfg.learner().restore_from().empty()
                     ? "no checkpoint yet, fresh parameters"
                     : ("restored version " + std::to_string(restored) + " from " + m.cfg.learner().restore_from()).c_str(),
                 (long long)ps_version,
                 m.allreduce ? "the ring takes the newest state of its learners, at version at least" : "continuing as version",
                 (long long)(m.allreduce ? std::max(m.version_floor, m.counters.version.load()) : m.counters.version.load()));
    const auto& by_learner = m.fetcher->env_frames_by_learner();
    if (!by_learner.empty()) m.counters.frames = std::max(m.counters.frames.load(), by_learner[0]);
    start_frames_ = m.counters.frames.load();
    m.fetcher.reset();
  }
  m.publisher->set_env_frames(m.counters.frames.load());
  if (m.ps_mode) {
    // The chief initialises the shards (a shard that already has parameters, restored
    // from a checkpoint, ignores this); everyone then takes the shards' parameters.
    if (m.index == 0 && !m.publisher->PutAll(m.params, 0, &m.stop)) {
      return base::InvalidArgument("learner: stopped before the first parameters reached the PS");
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(m.cfg.actors().first_params_timeout_s());
    while (!m.PollParams()) {
      if (m.stop.load() || Clock::now() > deadline) {
        return base::InvalidArgument("learner " + std::to_string(m.index) + ": no parameters from the PS within " +
                 std::to_string(int(m.cfg.actors().first_params_timeout_s())) + " s (actors.first_params_timeout_s)");
      }
      (void)m.fetcher->WaitForReply(kPsWait);
    }
    // A restarted learner continues the count the PS kept for it.
    const auto& by_learner = m.fetcher->env_frames_by_learner();
    if (size_t(m.index) < by_learner.size()) m.counters.frames = std::max(m.counters.frames.load(), by_learner[size_t(m.index)]);
    start_frames_ = m.counters.frames.load();
    if (m.index == 0 && !m.checkpoint_path.empty()) m.StartShardedCheckpoint();
  } else if (m.allreduce && m.index != 0) {
    // Allreduce: the chief publishes for everyone.
  } else if (!m.publisher->PutAll(m.params, m.counters.version.load(), &m.stop)) {
    return base::InvalidArgument("learner: stopped before the first parameters reached the PS");
  }
  m.receiver = std::thread([&m] { m.ReceiveLoop(); });
  m.trainer = std::thread([&m] {
    // The CUDA backend reports device errors (out of memory, a failed launch) by throwing:
    // caught here, said once, and the role ends the process with its own exit code.
    try {
      m.Run();
    } catch (const std::exception& e) {
      m.Fail(m.backend->name() != "cpu" ? base::DeviceError(std::string("device error on the trainer thread: ") + e.what())
                                        : base::Internal(std::string("trainer thread failed: ") + e.what()));
    }
  });
  return base::OkStatus();
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

base::Status Learner::Impl::SaveCheckpoint() {
  const base::Status written = WriteCheckpointFile();
  base::MutexLock lock(mu);
  if (written.ok()) {
    if (!ps_mode) checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
    return written;
  }
  checkpoint_error = written.message();
  ++checkpoint_failures;
  return written;
}

base::Status Learner::failure() const {
  base::MutexLock lock(impl_->mu);
  return impl_->failure;
}

base::Status Learner::Impl::WriteCheckpointFile() {
  if (fused) {
    try {
      backend->GetState(params, rms->mean_square(), rms->momentum());
    } catch (const std::exception& e) {
      return base::Internal("not writing " + checkpoint_path + ": the device state cannot be read back: " + e.what());
    }
  }
  for (float x : params) {
    if (!std::isfinite(x)) {
      return base::Internal("not writing " + checkpoint_path + ": the parameters hold a non-finite value");
    }
  }
  CheckpointData d;
  d.layout_fingerprint = layout.Fingerprint();
  d.layout_text = LayoutText(layout);
  d.version = counters.version.load();
  d.env_frames = GlobalFrames();
  d.learner_steps = counters.steps.load();
  d.params = params;
  d.rms_mean_square = rms->mean_square();
  d.rms_momentum = rms->momentum();
  return learner::SaveCheckpoint(checkpoint_path, d);
}

base::Status Learner::WriteCheckpoint() {
  Impl& m = *impl_;
  if (m.allreduce && m.index != 0) return base::OkStatus();  // the chief checkpoints for everyone
  if (m.checkpoint_path.empty()) {
    return base::Internal("no run_dir, so no checkpoint path");
  }
  if (m.ps_mode) {
    if (m.index != 0) return base::OkStatus();  // the chief checkpoints for everyone
    // The shards' parts (they stop after the learners), then the parameters for eval.
    std::string error;
    (void)m.PollShardedCheckpoint();  // one in progress completes or is dropped
    m.StartShardedCheckpoint(/*final=*/true);
    const auto deadline = Clock::now() + kFinalCheckpointWait;
    while (m.ckpt_sequence != 0 && Clock::now() < deadline) {
      const base::StatusOr<bool> done = m.PollShardedCheckpoint();
      if (!done.ok()) error = done.status().message();
      if (!done.ok() || *done) break;
      if (m.ckpt_sequence == 0 && m.ckpt_abandoned) m.StartShardedCheckpoint(/*final=*/true);  // a shard restarted: again
      (void)m.publisher->WaitForReply(kPsWait);
    }
    if (m.ckpt_sequence != 0) {
      error = m.ckpt_dir + ": the shards did not write their parts within " +
               std::to_string(kFinalCheckpointWait.count()) + " s";
    }
    m.ckpt_sequence = 0;
    // The shards' newest parameters, for eval and export: whatever comes within kPsWait x 20.
    for (int i = 0; i < 20 && !m.PollParams(); ++i) (void)m.fetcher->WaitForReply(kPsWait);
    if (!error.empty()) {
      base::MutexLock lock(m.mu);
      m.checkpoint_error = error;
      ++m.checkpoint_failures;
      return base::Internal(error);
    }
  }
  return m.SaveCheckpoint();
}

void Learner::FillStatus(wire::Status* s) {
  Impl& m = *impl_;
  s->set_env_frames(m.counters.frames.load());
  s->set_learner_index(m.index);
  s->set_global_env_frames(m.GlobalFrames());
  s->set_start_env_frames(start_frames_);
  s->set_learner_steps(m.counters.steps.load());
  s->set_policy_version(m.counters.version.load());
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
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    (*s->mutable_step_metrics())[std::string(base::kStepMetrics[i].name)] = m.last_figures.at(i);
  }
  s->set_allreduce_rounds(m.ring_stats.reductions);
  s->set_allreduce_bytes_sent(m.ring_stats.bytes_sent);
  s->set_allreduce_seconds(m.ring_stats.seconds);
  s->set_allreduce_dropped(m.ring_stats.dropped);
  s->set_allreduce_resets(std::max<int64_t>(0, m.ring_generation - 1));
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
