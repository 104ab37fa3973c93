#include "base/log.h"
#include "learner/impl.h"

namespace stampede::learner {

namespace {
// Before a gradient, the shards' replies are read for up to this long while they keep
// coming (ps::ParamsFetcher::PollFresh).
constexpr std::chrono::milliseconds kFreshWait{1};
// Sync: the longest one wait for the shards' next version lasts before the loop looks at
// the stop flag and its checkpoint again (a reply wakes it at once).
constexpr std::chrono::milliseconds kSyncWait{5};
}  // namespace

// Relay: the step is applied here (by the host optimizer, or fused on the backend) and
// the new version goes to the shards, which serve it to the actors.
class Learner::Impl::RelayUpdater : public Updater {
 public:
  explicit RelayUpdater(Impl& m) : m_(m), last_checkpoint_(Clock::now()) {}
  bool Ready() override { return true; }
  std::chrono::milliseconds TakeWait() const override {
    return std::chrono::milliseconds(unpublished_ ? 5 : 100);
  }
  void Idle() override {
    if (unpublished_) unpublished_ = !m_.publisher->Put(m_.params, m_.version().load());
  }
  int64_t BeforeStep(double*) override { return m_.version().load(); }
  bool Commit(double* lr, const Batch& batch, const Targets<float>* targets, double* update_ratio) override {
    if (!m_.fused) {
      base::TraceSpan span("apply", "learner");
      *update_ratio = m_.rms->Step(m_.params, m_.grad, *lr, m_.version().load() + 1);
      if (m_.popart) m_.UpdatePopArt(batch, *targets);
    } else if (m_.popart) {
      m_.SharePopArtStats();  // the device's step updated them
    }
    const int64_t version = ++m_.version();
    Publish(version, ++m_.steps());
    return true;
  }
  // Puts the new version to the shards every learner.publish_every steps (or at once
  // while the last one has not reached every shard).
  void Publish(int64_t version, int64_t steps) {
    if (steps % m_.cfg.learner().publish_every() == 0 || unpublished_) {
      base::TraceSpan span("publish", "learner");
      unpublished_ = !m_.publisher->Put(m_.params, version);
    }
  }
  void AfterStep() override {
    const auto& lc = m_.cfg.learner();
    if (m_.checkpoint_path.empty() || lc.checkpoint_interval_s() <= 0 ||
        Clock::now() - last_checkpoint_ <= std::chrono::duration<double>(lc.checkpoint_interval_s())) {
      return;
    }
    base::TraceSpan span("checkpoint", "learner");
    if (const base::Status st = m_.SaveCheckpoint(); !st.ok()) {
      base::LogError("learner: checkpoint failed: %s\n", st.message().c_str());
    }
    last_checkpoint_ = Clock::now();
  }

 private:
  Impl& m_;
  Clock::time_point last_checkpoint_;
  bool unpublished_ = false;  // the newest version has not reached every shard yet
};

// Sync/async: the gradient goes to the shards, which own the optimizer; the learner
// computes on the newest parameters they hold. Sync: each gradient is computed on the
// version this learner's previous one helped make.
class Learner::Impl::ShardedUpdater : public Updater {
 public:
  explicit ShardedUpdater(Impl& m)
      : m_(m),
        sync_(UpdateModeOf(m.cfg) == config::UpdateMode::sync),
        chief_(m.index == 0 && !m.checkpoint_path.empty()),
        last_checkpoint_(Clock::now()) {}
  bool Ready() override {
    m_.PollParams();
    if (chief_) Checkpoints();
    if (!sync_ || pushed_.empty()) return true;
    const auto& now_at = m_.fetcher->shard_versions();
    bool moved = true;
    for (size_t i = 0; i < pushed_.size(); ++i) moved = moved && now_at[i] > pushed_[i];
    if (!moved) {
      if (sync_wait_start_ < 0 && base::Trace::on()) sync_wait_start_ = base::Trace::NowUs();
      // Wait for the shards' next version (a reply), then look again.
      (void)m_.fetcher->WaitForReply(kSyncWait);
      return false;
    }
    if (sync_wait_start_ >= 0) {
      // The time this learner waited for the other replicas' gradients of its version.
      base::Trace::Complete("sync_wait", "learner", sync_wait_start_, base::Trace::NowUs() - sync_wait_start_);
      sync_wait_start_ = -1;
    }
    return true;
  }
  std::chrono::milliseconds TakeWait() const override { return std::chrono::milliseconds(5); }
  int64_t BeforeStep(double* update_ratio) override {
    m_.PollParams(true);  // the newest parameters the shards hold now
    // The shards applied the steps: the ratio is of everything they applied (every
    // learner's) since this learner's previous step.
    *update_ratio = previous_.empty() ? 0.0 : UpdateToParamRatio(previous_, m_.params);
    previous_ = m_.params;
    return m_.version().load();
  }
  bool Commit(double* lr, const Batch&, const Targets<float>*, double*) override {
    pushed_ = m_.fetcher->shard_versions();
    {
      base::TraceSpan span("push", "learner");
      m_.publisher->set_env_frames(m_.frames());
      if (!m_.publisher->PushGradient(m_.grad, pushed_, *lr, &m_.stop)) return false;
    }
    ++m_.steps();
    return true;
  }

 private:
  // The chief: completes the sharded checkpoint in progress and starts the next one.
  void Checkpoints() {
    const auto& lc = m_.cfg.learner();
    std::string error;
    if (m_.PollShardedCheckpoint(&error)) last_checkpoint_ = Clock::now();
    if (!error.empty()) {
      base::LogError("learner: checkpoint failed: %s\n", error.c_str());
      base::MutexLock lock(m_.mu);
      m_.checkpoint_error = error;
      ++m_.checkpoint_failures;
    }
    if (m_.ckpt_sequence == 0 && lc.checkpoint_interval_s() > 0 &&
        (m_.ckpt_abandoned ||
         Clock::now() - last_checkpoint_ > std::chrono::duration<double>(lc.checkpoint_interval_s()))) {
      m_.StartShardedCheckpoint();
      last_checkpoint_ = Clock::now();
    }
  }

  Impl& m_;
  const bool sync_, chief_;
  Clock::time_point last_checkpoint_;
  std::vector<int64_t> pushed_;  // each shard's version our newest gradient was computed on
  int64_t sync_wait_start_ = -1;  // trace: when the wait for the others' gradients began
  std::vector<float> previous_;   // the parameters this learner's previous step trained on
};

// Allreduce: the learners average their gradients in a ring (learner/ring.h) and each
// applies the same optimizer step to the same parameters, so they stay equal bit for bit
// (compared every learner.allreduce_check_every steps). The learning rate comes from the
// run's frames, every learner's as the ring carries them, so it is the same everywhere.
// The chief publishes each version and writes the checkpoints, as a relay learner does.
// A step waits for every learner: a straggler (a learner whose actors are slow) slows the
// others, and one that sends nothing for learner.allreduce_timeout_s ends the step with
// the ring broken (the learner fails and is restarted).
class Learner::Impl::AllreduceUpdater : public Updater {
 public:
  explicit AllreduceUpdater(Impl& m) : m_(m), relay_(m), chief_(m.index == 0) {}
  // The ring is formed before the first step and again after a reduction failed
  // (learner/ring.h Rendezvous: Horovod Elastic's reset): the members are the learners
  // there, the version the newest any of their states has, and a learner that was
  // restarted takes the parameters and optimizer state of one that was not.
  bool Ready() override {
    if (formed_) return true;
    RingMemberState st;
    st.params = m_.params;
    st.mean_square = m_.rms->mean_square();
    st.momentum = m_.rms->momentum();
    st.version = m_.version().load();
    st.env_frames = m_.frames();
    RingPlan plan;
    const base::Status s = m_.ring->Rendezvous(&st, chief_ ? m_.version_floor : 0, !ever_formed_, &plan, &m_.stop);
    if (!s.ok()) {
      if (s.code() != base::Code::kCancelled) {
        base::LogInfo("learner %d: allreduce: %s; trying again\n", m_.index, s.message().c_str());
      }
      return false;
    }
    m_.version() = st.version;
    members_ = plan.members;
    generation_ = plan.generation;
    {
      base::MutexLock lock(m_.mu);
      m_.ring_generation = plan.generation;
    }
    if (const auto f = plan.env_frames.find(m_.index); f != plan.env_frames.end() && f->second > m_.frames()) {
      m_.self->frames_ = f->second;  // a restarted learner continues its count
    }
    std::string who;
    for (int l : members_) who += (who.empty() ? "" : ",") + std::to_string(l);
    base::LogInfo("learner %d: allreduce: ring %lld formed: learners %s at version %lld (state of learner %d)\n",
                 m_.index, (long long)plan.generation, who.c_str(), (long long)st.version, plan.source);
    formed_ = ever_formed_ = true;
    return true;
  }
  std::chrono::milliseconds TakeWait() const override { return relay_.TakeWait(); }
  void Idle() override {
    if (chief_) relay_.Idle();
  }
  int64_t BeforeStep(double*) override { return m_.version().load(); }
  bool Commit(double* lr, const Batch&, const Targets<float>*, double* update_ratio) override {
    return Reduce(1, lr, update_ratio);
  }
  bool Skip() override {
    double lr = 0, ratio = 0;
    return Reduce(0, &lr, &ratio);
  }
  void AfterStep() override {
    if (chief_) relay_.AfterStep();
  }

 private:
  bool Reduce(int weight, double* lr, double* update_ratio) {
    const int64_t step = m_.version().load() + 1;
    // The ring's round: the step, under the ring's generation, so that pieces of a step an
    // earlier ring abandoned never count in this one's.
    const int64_t round = (generation_ << 40) | step;
    RingContribution own;
    own.env_frames = m_.frames();
    own.weight = weight;
    const int64_t every = m_.cfg.learner().allreduce_check_every();
    if (every > 0 && step % every == 0) {
      own.fingerprint = base::Fnv1a64(reinterpret_cast<const char*>(m_.params.data()), m_.params.size() * sizeof(float)) | 1;
    }
    std::vector<RingContribution> all;
    {
      base::TraceSpan span("allreduce", "learner");
      const base::Status st = m_.ring->AllReduce(round, members_, m_.grad, own, &all, &m_.stop);
      if (st.code() == base::Code::kCancelled) return false;
      if (!st.ok()) {
        // A learner gone, or one joining: this step is dropped (nobody applies it) and the
        // ring is formed again before the next.
        base::LogInfo("learner %d: allreduce: %s; forming the ring again\n", m_.index, st.message().c_str());
        formed_ = false;
        return true;
      }
    }
    {
      base::MutexLock lock(m_.mu);
      m_.ring_stats = m_.ring->stats();
    }
    int64_t frames = 0;
    int weights = 0;
    for (const auto& c : all) {
      frames += c.env_frames;
      weights += c.weight;
      if (own.fingerprint != 0 && c.fingerprint != own.fingerprint) {
        m_.Fail(base::Internal("allreduce: the learners' parameters differ at step " + std::to_string(step) +
                               " (learner " + std::to_string(m_.index) + " against learner " + std::to_string(c.learner) +
                               "); they must be equal bit for bit"));
        return false;
      }
    }
    m_.self->other_frames_ = frames - own.env_frames;
    if (weights == 0) return true;  // no learner had a finite gradient: nothing to apply
    *lr = net::ScheduledLearningRate(m_.cfg.learner().optimizer(), m_.cfg.stop().total_env_frames(), double(frames));
    {
      base::TraceSpan span("apply", "learner");
      *update_ratio = m_.rms->Step(m_.params, m_.grad, *lr, step);
    }
    const int64_t version = ++m_.version();
    const int64_t steps = ++m_.steps();
    if (chief_) relay_.Publish(version, steps);
    return true;
  }

  Impl& m_;
  RelayUpdater relay_;  // the chief's publishing and checkpoints
  const bool chief_;
  std::vector<int> members_;  // the ring's, as the last rendezvous made it
  bool formed_ = false, ever_formed_ = false;
  int64_t generation_ = 0;
};

void Learner::Impl::Fail(const base::Status& status) {
  base::LogInfo("learner %d: %s\n", index, status.message().c_str());
  base::MutexLock lock(mu);
  failure = status;
}

void Learner::Impl::TrainLoop() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  std::unique_ptr<Updater> updater;
  if (ps_mode) {
    updater = std::make_unique<ShardedUpdater>(*this);
  } else if (allreduce) {
    updater = std::make_unique<AllreduceUpdater>(*this);
  } else {
    updater = std::make_unique<RelayUpdater>(*this);
  }
  Batch batch, next_batch;
  batch.Resize(T, B, shape);
  next_batch.Resize(T, B, shape);
  // The step's V-trace targets, where the backend gives them and something uses them
  // (replay priorities, PopArt's statistics).
  Targets<float> targets;
  Targets<float>* const tg = backend->has_targets() && (popart || table) ? &targets : nullptr;
  bool next_staged = false;  // next_batch is loaded already (taken while the previous step computed)
  std::vector<UnrollRef> items, trained, next_items;  // trained: the batch's unrolls (replay inserts them)
  std::vector<Pick> picks, trained_picks, next_picks;
  std::vector<float> before;  // fused: the parameters before the step (the update ratio)
  auto assemble = [&](Batch* into, std::vector<UnrollRef>* keep, std::vector<Pick>* keep_picks,
                      std::vector<Pick>* taken_picks) {
    base::TraceSpan span("assemble", "learner");
    Assemble(items, into);
    MarkReplayed(*taken_picks, into);
    keep->swap(items);  // released after the step (replay keeps the fresh ones)
    keep_picks->swap(*taken_picks);
    items.clear();
    backend->Load(*into);
  };
  while (!stop.load()) {
    if (!updater->Ready()) continue;
    if (next_staged) {
      std::swap(batch, next_batch);
      trained.swap(next_items);
      trained_picks.swap(next_picks);
      next_staged = false;
    } else {
      if (!Take(B, &items, &picks, updater->TakeWait())) {
        updater->Idle();
        continue;
      }
      assemble(&batch, &trained, &trained_picks, &picks);
    }
    const auto start = Clock::now();
    double update_ratio = 0, norm = 0;
    const int64_t trained_on = updater->BeforeStep(&update_ratio);
    double lr = LearningRate();
    {
      base::TraceSpan span(fused ? "device_step" : "gradient", "learner");
      if (fused) {
        before = params;
        backend->LaunchUpdate(lr, self->version_.load() + 1);
      } else {
        backend->LaunchGradient(params);
      }
    }
    // While the device computes: if the next batch is already here, assemble and load it.
    if (backend->overlaps() && Take(B, &items, &picks, std::chrono::milliseconds(0))) {
      assemble(&next_batch, &next_items, &next_picks, &picks);
      next_staged = true;
    }
    LossStats st;
    {
      base::TraceSpan span("wait", "learner");
      if (fused) {
        st = backend->WaitUpdate(params, &norm);
        update_ratio = UpdateToParamRatio(before, params);
      } else {
        st = backend->WaitGradient(grad, tg);
        norm = ClipGlobalNorm(grad, lc.max_grad_norm());
      }
    }
    if (!std::isfinite(st.total) || !std::isfinite(norm)) {
      // Never applied or pushed (a fused step leaves the parameters alone too).
      CountSkippedStep();
      trained.clear();
      if (!updater->Skip()) break;
      continue;
    }
    AfterStep(trained, trained_picks, batch, tg, st);
    trained.clear();
    if (!updater->Commit(&lr, batch, tg, &update_ratio)) break;
    RecordStep(batch, trained_on, st, norm, update_ratio, lr, std::chrono::duration<double>(Clock::now() - start).count());
    updater->AfterStep();
  }
}

bool Learner::Impl::PollParams(bool fresh) {
  int64_t v = self->version_.load();
  const bool got = fresh ? fetcher->PollFresh(params, &v, kFreshWait) : fetcher->Poll(params, &v);
  if (got) self->version_ = v;
  const auto& by = fetcher->env_frames_by_learner();
  int64_t others = 0;
  for (size_t l = 0; l < by.size(); ++l) others += int(l) == index ? 0 : by[l];
  self->other_frames_ = others;
  return got;
}

void Learner::Impl::StartShardedCheckpoint(bool final) {
  const std::string root = cfg.run_dir() + "/checkpoints";
  ckpt_final = final;
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
    base::LogInfo("learner: checkpoint %s abandoned: ps %d was restarted before it wrote its part\n",
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
  m.final = ckpt_final;
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
    if (const base::Status written = base::WriteFileAtomically(ckpt_dir + "/" + name, text); !written.ok()) {
      *error = written.message();
      ckpt_sequence = 0;
      return false;
    }
    m.parts.push_back({name, int64_t(text.size()), base::Fnv1a64(text.data(), text.size())});
  }
  ckpt_sequence = 0;
  if (const base::Status written = ps::WriteManifest(ckpt_dir, m); !written.ok()) {
    *error = written.message();
    return false;
  }
  ps::PruneCheckpoints(cfg.run_dir() + "/checkpoints", cfg.learner().checkpoints_kept());
  base::MutexLock lock(mu);
  checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
  return true;
}

void Learner::Impl::CountSkippedStep() {
  // Counted, said once in a while; training goes on with the next batch.
  base::MutexLock lock(mu);
  if (skipped_steps++ % 1000 == 0) {
    base::LogInfo("learner: skipped a step with a non-finite loss or gradient (%lld so far)\n",
                 (long long)skipped_steps);
  }
}

void Learner::Impl::RecordStep(const Batch& batch, int64_t trained_on, const LossStats& st, double norm,
                               double update_ratio, double lr, double seconds) {
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
  last_figures = st.m;
  last_figures[base::StepMetric::kGradNorm] = norm;
  last_figures[base::StepMetric::kUpdateToParamRatio] = update_ratio;
  last_figures[base::StepMetric::kLearningRate] = lr;
  last_figures[base::StepMetric::kStepSeconds] = seconds;
  train_seconds += seconds;
}

}  // namespace stampede::learner
