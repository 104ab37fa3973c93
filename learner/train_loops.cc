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

void Learner::Impl::TrainLoop() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  const LossOptions lo = LossOptionsFrom(cfg);
  Batch batch, next_batch;
  Targets<float> targets;  // PopArt: the step's value targets
  batch.Resize(T, B, shape);
  next_batch.Resize(T, B, shape);
  bool next_staged = false;  // CUDA: next_batch is staged on the device already
  std::vector<UnrollRef> items, trained, next_items;  // trained: the batch's unrolls (replay inserts them)
  std::vector<Pick> picks, trained_picks, next_picks;
  auto last_checkpoint = Clock::now();
  bool unpublished = false;  // the newest version has not reached every shard yet
  std::vector<float> before;  // CUDA: the parameters before the step (the update ratio)
  while (!stop.load()) {
    if (!next_staged && !Take(B, &items, &picks, std::chrono::milliseconds(unpublished ? 5 : 100))) {
      if (unpublished) unpublished = !publisher->Put(params, self->version_.load());
      continue;
    }
    const auto start = Clock::now();
    const double lr = LearningRate();
    LossStats st;
    double norm = 0, update_ratio = 0;
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
      gpu->Launch(lr, self->version_.load() + 1);
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
      before = params;
      gpu->GetParams(params);
      update_ratio = UpdateToParamRatio(before, params);
      st.total = gs.total, st.pg_loss = gs.pg_loss, st.baseline_loss = gs.baseline_loss;
      st.entropy = gs.entropy;
      st.explained_variance = gs.explained_variance, st.approx_kl = gs.approx_kl;
      st.rho_clip_fraction = gs.rho_clip_fraction;
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
        update_ratio = rms->Step(params, grad, lr, self->version_.load() + 1);
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
    RecordStep(batch, version - 1, st, norm, update_ratio, lr, std::chrono::duration<double>(Clock::now() - start).count());
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
  const bool got = fresh ? fetcher->PollFresh(params, &v, kFreshWait) : fetcher->Poll(params, &v);
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
  if (const base::Status written = ps::WriteManifest(ckpt_dir, m); !written.ok()) {
    *error = written.message();
    return false;
  }
  ps::PruneCheckpoints(cfg.run_dir() + "/checkpoints", cfg.learner().checkpoints_kept());
  base::MutexLock lock(mu);
  checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
  return true;
}

void Learner::Impl::TrainLoopSharded() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  const LossOptions lo = LossOptionsFrom(cfg);
  const bool sync = lc.update_mode() == "sync";
  const bool chief = index == 0 && !checkpoint_path.empty();
  Batch batch;
  batch.Resize(T, B, shape);
  Targets<float> targets;  // replay: the step's advantages give priorities
  std::vector<UnrollRef> items;
  std::vector<Pick> picks;
  std::vector<int64_t> pushed;  // each shard's version our newest gradient was computed on
  int64_t sync_wait_start = -1;  // trace: when the wait for the others' gradients began
  std::vector<float> previous;   // the parameters this learner's previous step trained on
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
        // Wait for the shards' next version (a reply), then look again.
        (void)fetcher->WaitForReply(kSyncWait);
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
    // The shards applied the steps: the ratio is of everything they applied (every
    // learner's) since this learner's previous step.
    const double update_ratio = previous.empty() ? 0.0 : UpdateToParamRatio(previous, params);
    previous = params;
    const double lr = LearningRate();
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
    RecordStep(batch, self->version_.load(), st, norm, update_ratio, lr,
               std::chrono::duration<double>(Clock::now() - start).count());
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
  last_loss = st;
  last_grad_norm = norm;
  last_update_ratio = update_ratio;
  last_lr = lr;
  train_seconds += seconds;
}

}  // namespace stampede::learner
