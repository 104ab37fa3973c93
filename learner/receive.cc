#include "base/log.h"
#include "learner/impl.h"

namespace stampede::learner {

namespace {
// How often a receiver whose frame budget is spent looks at the stop flag.
constexpr std::chrono::milliseconds kBudgetSpentWait{20};
}  // namespace

void Learner::Impl::ReceiveLoop() {
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t items[] = {{socket->handle(), 0, ZMQ_POLLIN, 0}};
  const int64_t budget = cfg.stop().total_env_frames();
  while (!stop.load()) {
    if (GlobalFrames() >= budget) {
      // The global frame budget is spent: take no more (the coordinator stops the run).
      // Nothing but the stop flag can end this wait, and a flag has no event to wait on.
      std::this_thread::sleep_for(kBudgetSpentWait);
      continue;
    }
    wire::Poll(items, 1, std::chrono::milliseconds(100));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    while (!stop.load() && GlobalFrames() < budget &&
           wire::RecvMultipart(*socket, &parts, false)) {
      base::TraceSpan span("receive", "learner");
      auto b = std::make_shared<wire::TrajectoryBatch>();
      wire::TrajectoryExpectations expect;
      expect.unroll_length = cfg.actors().unroll_length();
      expect.num_unrolls = cfg.actors().envs_per_actor();
      expect.shape = shape;
      // Sync/async: an actor may have read a shard's newer version than this learner has
      // yet, by up to a restarted shard's jump (ps/checkpoints.h, version marks).
      // Allreduce: a restarted learner's actors act with the ring's version until the
      // rendezvous gives it that version too.
      expect.newest_policy_version = counters.version.load() + (ps_mode || allreduce ? 100000 : 0);
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
  // Stopping: the socket closes without waiting for what is still queued (Start's linger).
  socket->set(zmq::sockopt::linger, 0);
}

wire::DropReason Learner::Impl::CheckLag(const wire::TrajectoryBatch& b, std::string* detail) {
  const int64_t learner_version = counters.version.load();
  const int64_t version = b.meta.policy_version();
  const int64_t lag = std::max<int64_t>(0, learner_version - version);
  const int actor = b.meta.sender().task_index();
  if (actor >= 0 && actor < config::kMaxActors) {  // actors.num_actors, or more after `stampede scale`
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
  base::LogInfo("learner: dropped a trajectory from actor %d (%s): %s%s\n", actor,
               wire::DropReasonName(reason), detail.c_str(), base::LogLimiter::More(unlogged).c_str());
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
        *detail = "action " + std::to_string(a) + " in a trajectory of task \"" + config::TaskName(cfg, task) +
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
    const int64_t now = counters.frames.load() + frames;
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
    counters.frames += frames;
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

bool Learner::Impl::Next(Batch* batch, std::chrono::milliseconds wait) {
  Pending p;
  if (!Take(batch->n(), &p.items, &p.picks, wait)) return false;
  base::TraceSpan span("assemble", "learner");
  Assemble(p.items, batch);
  MarkReplayed(p.picks, batch);
  pending.push_back(std::move(p));
  return true;
}

void Learner::Impl::Trained(const Batch& batch, const Targets<float>* targets, const LossStats& st) {
  const Pending p = std::move(pending.front());
  pending.pop_front();
  AfterStep(p.items, p.picks, batch, targets, st);
}

void Learner::Impl::Assemble(const std::vector<UnrollRef>& items, Batch* batch) const {
  for (int b = 0; b < batch->n(); ++b) CopyUnroll(*items[b].batch, items[b].column, b, batch);
}

}  // namespace stampede::learner
