// The fleet's side of the trainer core: the sync/async chief's sharded checkpoint rounds
// (the shards write their parts, the chief the manifest that completes them) and the
// books the trainer keeps in the learner's status.
#include "base/log.h"
#include "learner/impl.h"

namespace stampede::learner {

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

base::StatusOr<bool> Learner::Impl::PollShardedCheckpoint() {
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
      ckpt_sequence = 0;
      return base::Internal("ps " + std::to_string(d.shard()) + " could not write its part of " + ckpt_dir + ": " + d.error());
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
      ckpt_sequence = 0;
      return base::Internal(ckpt_dir + ": only " + std::to_string(shards.size()) + " of " + std::to_string(S) +
                            " shards wrote their part within 60 s");
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
  if (size_t(index) < m.learner_frames.size()) m.learner_frames[size_t(index)] = counters.frames.load();
  const std::string counters_text = "version " + std::to_string(m.version) + "\nenv_frames " +
                               std::to_string(GlobalFrames()) + "\nlearner_steps " + std::to_string(this->counters.steps.load()) + "\n";
  const std::pair<std::string, std::string> chief_parts[] = {{"config.textproto", ConfigToText(cfg)},
                                                             {"counters.txt", counters_text}};
  for (const auto& [name, text] : chief_parts) {
    if (const base::Status written = base::WriteFileAtomically(ckpt_dir + "/" + name, text); !written.ok()) {
      ckpt_sequence = 0;
      return written;
    }
    m.parts.push_back({name, int64_t(text.size()), base::Fnv1a64(text.data(), text.size())});
  }
  ckpt_sequence = 0;
  RETURN_IF_ERROR(ps::WriteManifest(ckpt_dir, m));
  ps::PruneCheckpoints(cfg.run_dir() + "/checkpoints", cfg.learner().checkpoints_kept());
  base::MutexLock lock(mu);
  checkpoint_error.clear();  // the newest checkpoint is complete (failures stay counted)
  return true;
}

base::StatusOr<bool> Learner::Impl::PollRound() {
  base::StatusOr<bool> done = PollShardedCheckpoint();
  if (!done.ok()) {
    base::MutexLock lock(mu);
    checkpoint_error = done.status().message();
    ++checkpoint_failures;
  }
  return done;
}

void Learner::Impl::SkippedStep() {
  // Counted, said once in a while; training goes on with the next batch.
  base::MutexLock lock(mu);
  if (skipped_steps++ % 1000 == 0) {
    base::LogInfo("learner: skipped a step with a non-finite loss or gradient (%lld so far)\n",
                 (long long)skipped_steps);
  }
}

void Learner::Impl::Stepped(const Batch& batch, int64_t trained_on, const base::StepFigures& figures) {
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
  last_figures = figures;
  train_seconds += figures[base::StepMetric::kStepSeconds];
}

void Learner::Impl::Failed(const base::Status& why) {
  base::MutexLock lock(mu);
  failure = why;
}

void Learner::Impl::PopArtStats(std::span<const float> stats) {
  base::MutexLock lock(mu);
  popart_stats.assign(stats.begin(), stats.end());
}

void Learner::Impl::RingFormed(int64_t generation) {
  base::MutexLock lock(mu);
  ring_generation = generation;
}

void Learner::Impl::RingReduced(const RingStats& stats) {
  base::MutexLock lock(mu);
  ring_stats = stats;
}

}  // namespace stampede::learner
