#include "learner/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/durable_file.h"
#include "base/log.h"
#include "base/trace.h"
#include "config/config.h"
#include "net/from_config.h"

namespace stampede::learner {

namespace {
// Sync: the longest one wait for the shards' next version lasts before the loop looks at
// the stop flag and its checkpoint again (a reply wakes it at once).
constexpr std::chrono::milliseconds kSyncWait{5};
}  // namespace

ComputeThreads::ComputeThreads(int setting, int most)
    : auto_(setting == 0), most_(std::max(1, most)), threads_(setting == 0 ? 1 : std::max(1, setting)) {}

int ComputeThreads::Observe(double waited_s, double step_s, const std::function<double()>& idle_cores) {
  if (!auto_) return threads_;
  waited_ += std::max(0.0, waited_s);
  busy_ += std::max(0.0, step_s);
  if (++steps_ < kWindow) return threads_;
  const double total = waited_ + busy_;
  const double idle = total > 0 ? waited_ / total : 0.0;
  const double spare = idle_cores();  // read every window, so each reading covers one
  if (idle > kIdle) {
    threads_ = 1;
  } else if (idle < kBusy && threads_ == 1 && spare >= kSpareCores) {
    threads_ = most_;
  }
  steps_ = 0;
  waited_ = busy_ = 0;
  return threads_;
}

// Relay: the step is applied here (by the host optimizer, or fused on the backend) and
// the new version goes to the shards, which serve it to the actors.
class Trainer::RelayUpdater : public Updater {
 public:
  explicit RelayUpdater(Trainer& m) : m_(m), last_checkpoint_(m.links.now()) {}
  bool Ready() override { return true; }
  std::chrono::milliseconds TakeWait() const override {
    return std::chrono::milliseconds(unpublished_ ? 5 : 100);
  }
  void Idle() override {
    if (unpublished_) unpublished_ = !m_.links.shards->Put(m_.params, m_.counters.version.load());
  }
  int64_t BeforeStep(double*) override { return m_.counters.version.load(); }
  bool Commit(double* lr, const Batch& batch, const Targets<float>* targets, double* update_ratio) override {
    if (!m_.fused) {
      base::TraceSpan span("apply", "learner");
      *update_ratio = m_.rms->Step(m_.params, m_.grad, *lr, m_.counters.version.load() + 1);
      if (m_.popart) m_.UpdatePopArt(batch, *targets);
    } else if (m_.popart) {
      m_.SharePopArtStats();  // the device's step updated them
    }
    const int64_t version = ++m_.counters.version;
    Publish(version, ++m_.counters.steps);
    return true;
  }
  // Puts the new version to the shards every learner.publish_every steps (or at once
  // while the last one has not reached every shard).
  void Publish(int64_t version, int64_t steps) {
    if (steps % m_.cfg.learner().publish_every() == 0 || unpublished_) {
      base::TraceSpan span("publish", "learner");
      unpublished_ = !m_.links.shards->Put(m_.params, version);
    }
  }
  void AfterStep() override {
    const auto& lc = m_.cfg.learner();
    if (m_.links.checkpoints == nullptr || lc.checkpoint_interval_s() <= 0 ||
        m_.links.now() - last_checkpoint_ <= std::chrono::duration<double>(lc.checkpoint_interval_s())) {
      return;
    }
    base::TraceSpan span("checkpoint", "learner");
    if (const base::Status st = m_.links.checkpoints->Save(); !st.ok()) {
      base::LogError("learner: checkpoint failed: %s\n", st.message().c_str());
    }
    last_checkpoint_ = m_.links.now();
  }

 private:
  Trainer& m_;
  Clock::time_point last_checkpoint_;
  bool unpublished_ = false;  // the newest version has not reached every shard yet
};

// Sync/async: the gradient goes to the shards, which own the optimizer; the learner
// computes on the newest parameters they hold. Sync: each gradient is computed on the
// version this learner's previous one helped make.
class Trainer::ShardedUpdater : public Updater {
 public:
  explicit ShardedUpdater(Trainer& m)
      : m_(m),
        sync_(UpdateModeOf(m.cfg) == config::UpdateMode::sync),
        chief_(m.index == 0 && m.links.checkpoints != nullptr),
        last_checkpoint_(m.links.now()) {}
  bool Ready() override {
    m_.PollParams();
    if (chief_) Checkpoints();
    if (!sync_ || pushed_.empty()) return true;
    const auto& now_at = m_.links.shards->shard_versions();
    bool moved = true;
    for (size_t i = 0; i < pushed_.size(); ++i) moved = moved && now_at[i] > pushed_[i];
    if (!moved) {
      if (sync_wait_start_ < 0 && base::Trace::on()) sync_wait_start_ = base::Trace::NowUs();
      // Wait for the shards' next version (a reply), then look again.
      (void)m_.links.shards->WaitForReply(kSyncWait);
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
    return m_.counters.version.load();
  }
  bool Commit(double* lr, const Batch&, const Targets<float>*, double*) override {
    pushed_ = m_.links.shards->shard_versions();
    {
      base::TraceSpan span("push", "learner");
      if (!m_.links.shards->PushGradient(m_.grad, pushed_, *lr, m_.counters.frames.load(), &m_.stop)) return false;
    }
    ++m_.counters.steps;
    return true;
  }

 private:
  // The chief: completes the sharded checkpoint in progress and starts the next one.
  void Checkpoints() {
    const auto& lc = m_.cfg.learner();
    CheckpointWriter& w = *m_.links.checkpoints;
    if (const base::StatusOr<bool> done = w.PollRound(); !done.ok()) {
      base::LogError("learner: checkpoint failed: %s\n", done.status().message().c_str());
    } else if (*done) {
      last_checkpoint_ = m_.links.now();
    }
    if (!w.round_open() && lc.checkpoint_interval_s() > 0 &&
        (w.round_abandoned() ||
         m_.links.now() - last_checkpoint_ > std::chrono::duration<double>(lc.checkpoint_interval_s()))) {
      w.StartRound();
      last_checkpoint_ = m_.links.now();
    }
  }

  Trainer& m_;
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
class Trainer::AllreduceUpdater : public Updater {
 public:
  explicit AllreduceUpdater(Trainer& m) : m_(m), relay_(m), chief_(m.index == 0) {}
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
    st.version = m_.counters.version.load();
    st.env_frames = m_.counters.frames.load();
    RingPlan plan;
    const base::Status s = m_.links.ring->Rendezvous(&st, chief_ ? m_.version_floor : 0, !ever_formed_, &plan, &m_.stop);
    if (!s.ok()) {
      if (s.code() != base::Code::kCancelled) {
        base::LogInfo("learner %d: allreduce: %s; trying again\n", m_.index, s.message().c_str());
      }
      return false;
    }
    m_.counters.version = st.version;
    members_ = plan.members;
    generation_ = plan.generation;
    m_.links.books->RingFormed(plan.generation);
    if (const auto f = plan.env_frames.find(m_.index); f != plan.env_frames.end() && f->second > m_.counters.frames.load()) {
      m_.counters.frames = f->second;  // a restarted learner continues its count
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
  int64_t BeforeStep(double*) override { return m_.counters.version.load(); }
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
    const int64_t step = m_.counters.version.load() + 1;
    // The ring's round: the step, under the ring's generation, so that pieces of a step an
    // earlier ring abandoned never count in this one's.
    const int64_t round = (generation_ << 40) | step;
    RingContribution own;
    own.env_frames = m_.counters.frames.load();
    own.weight = weight;
    const int64_t every = m_.cfg.learner().allreduce_check_every();
    if (every > 0 && step % every == 0) {
      own.fingerprint = base::Fnv1a64(reinterpret_cast<const char*>(m_.params.data()), m_.params.size() * sizeof(float)) | 1;
    }
    std::vector<RingContribution> all;
    {
      base::TraceSpan span("allreduce", "learner");
      const base::Status st = m_.links.ring->AllReduce(round, members_, m_.grad, own, &all, &m_.stop);
      if (st.code() == base::Code::kCancelled) return false;
      if (!st.ok()) {
        // A learner gone, or one joining: this step is dropped (nobody applies it) and the
        // ring is formed again before the next.
        base::LogInfo("learner %d: allreduce: %s; forming the ring again\n", m_.index, st.message().c_str());
        formed_ = false;
        return true;
      }
    }
    m_.links.books->RingReduced(m_.links.ring->stats());
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
    m_.counters.other_frames = frames - own.env_frames;
    if (weights == 0) return true;  // no learner had a finite gradient: nothing to apply
    *lr = net::ScheduledLearningRate(m_.cfg.learner().optimizer(), m_.cfg.stop().total_env_frames(), double(frames));
    {
      base::TraceSpan span("apply", "learner");
      *update_ratio = m_.rms->Step(m_.params, m_.grad, *lr, step);
    }
    const int64_t version = ++m_.counters.version;
    const int64_t steps = ++m_.counters.steps;
    if (chief_) relay_.Publish(version, steps);
    return true;
  }

  Trainer& m_;
  RelayUpdater relay_;  // the chief's publishing and checkpoints
  const bool chief_;
  std::vector<int> members_;  // the ring's, as the last rendezvous made it
  bool formed_ = false, ever_formed_ = false;
  int64_t generation_ = 0;
};

void Trainer::Fail(const base::Status& why) {
  base::LogInfo("learner %d: %s\n", index, why.message().c_str());
  links.books->Failed(why);
}

std::unique_ptr<Updater> Trainer::MakeUpdater() {
  switch (UpdateModeOf(cfg)) {
    case config::UpdateMode::sync:
    case config::UpdateMode::async:
      return std::make_unique<ShardedUpdater>(*this);
    case config::UpdateMode::allreduce:
      return std::make_unique<AllreduceUpdater>(*this);
    default:
      return std::make_unique<RelayUpdater>(*this);
  }
}

double Trainer::LearningRate() const {
  return net::ScheduledLearningRate(cfg.learner().optimizer(), cfg.stop().total_env_frames(), double(GlobalFrames()));
}

void Trainer::Run() {
  const auto& lc = cfg.learner();
  const int B = lc.batch_size(), T = cfg.actors().unroll_length();
  const std::unique_ptr<Updater> updater = MakeUpdater();
  Batch batch, next_batch;
  batch.Resize(T, B, shape);
  next_batch.Resize(T, B, shape);
  // The step's V-trace targets, where the backend gives them and something uses them
  // (replay priorities, PopArt's statistics).
  Targets<float> targets;
  Targets<float>* const tg =
      backend->has_targets() && (popart || links.batches->wants_targets()) ? &targets : nullptr;
  bool next_staged = false;  // next_batch is loaded already (taken while the previous step computed)
  std::vector<float> before;  // fused: the parameters before the step (the update ratio)
  // learner.threads; auto shares the machine's cores among the learners.
  ComputeThreads threads(lc.threads(), ComputeThreads::Most(links.cores, lc.num_learners()));
  backend->SetComputeThreads(threads.threads());
  auto waiting_since = links.now();  // since the last step ended: the wait for this one's batch
  while (!stop.load()) {
    if (!updater->Ready()) continue;
    if (next_staged) {
      std::swap(batch, next_batch);
      next_staged = false;
    } else {
      if (!links.batches->Next(&batch, updater->TakeWait())) {
        updater->Idle();
        continue;
      }
      backend->Load(batch);
    }
    const double waited = std::chrono::duration<double>(links.now() - waiting_since).count();
    const auto start = Clock::now();
    double update_ratio = 0, norm = 0;
    const int64_t trained_on = updater->BeforeStep(&update_ratio);
    double lr = LearningRate();
    {
      base::TraceSpan span(fused ? "device_step" : "gradient", "learner");
      if (fused) {
        before = params;
        backend->LaunchUpdate(lr, counters.version.load() + 1);
      } else {
        backend->LaunchGradient(params);
      }
    }
    // While the device computes: if the next batch is already here, assemble and load it.
    if (backend->overlaps() && links.batches->Next(&next_batch, std::chrono::milliseconds(0))) {
      backend->Load(next_batch);
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
      links.books->SkippedStep();
      links.batches->NotTrained();
      if (!updater->Skip()) break;
      continue;
    }
    links.batches->Trained(batch, tg, st);
    if (!updater->Commit(&lr, batch, tg, &update_ratio)) break;
    base::StepFigures figures = st.m;
    figures[base::StepMetric::kGradNorm] = norm;
    figures[base::StepMetric::kUpdateToParamRatio] = update_ratio;
    figures[base::StepMetric::kLearningRate] = lr;
    const double step_s = std::chrono::duration<double>(Clock::now() - start).count();
    figures[base::StepMetric::kStepSeconds] = step_s;
    figures[base::StepMetric::kComputeThreads] = threads.threads();
    links.books->Stepped(batch, trained_on, figures);
    updater->AfterStep();
    const int before_threads = threads.threads();
    if (threads.Observe(waited, step_s, links.idle_cores) != before_threads) backend->SetComputeThreads(threads.threads());
    waiting_since = links.now();
  }
}

bool Trainer::PollParams(bool fresh) {
  int64_t v = counters.version.load();
  const bool got = links.shards->Poll(params, &v, fresh);
  if (got) counters.version = v;
  const auto& by = links.shards->env_frames_by_learner();
  int64_t others = 0;
  for (size_t l = 0; l < by.size(); ++l) others += int(l) == index ? 0 : by[l];
  counters.other_frames = others;
  return got;
}

void Trainer::UpdatePopArt(const Batch& batch, const Targets<float>& targets) {
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
  popart_updates.resize(size_t(num_tasks), 0);
  if (popart_fresh.empty()) {
    // Statistics at their initial values (mean 0, scale 1) start fresh; restored ones do not.
    for (int k = 0; k < num_tasks; ++k) {
      popart_fresh.push_back(params[size_t(popart->stats + k)] == 0.f &&
                             params[size_t(popart->stats + popart->num_values + k)] == 1.f);
    }
  }
  for (int k = 0; k < num_tasks; ++k) {
    if (count[size_t(k)] == 0) continue;
    const double n = double(count[size_t(k)]);
    const int64_t t = popart_updates[size_t(k)]++;
    const bool fresh = popart_fresh[size_t(k)];
    // A fresh value head has no outputs worth keeping: its first update lets its values
    // start at the targets' mean, so the first advantages are not the whole return (which
    // made RMSProp's first steps throw the policy to one action: docs/learning-benchmarks.md, "Library defaults").
    PopArtUpdate(*popart, params.data(), k, sum[size_t(k)] / n, square[size_t(k)] / n,
                 PopArtStepSize(cfg.learner().popart_beta(), t, fresh), /*preserve_outputs=*/!(fresh && t == 0));
  }
  SharePopArtStats();
}

void Trainer::SharePopArtStats() {
  links.books->PopArtStats(std::span<const float>(params).subspan(size_t(popart->stats), size_t(2 * num_tasks)));
}

}  // namespace stampede::learner
