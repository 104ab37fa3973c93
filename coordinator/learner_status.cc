#include "coordinator/learner_status.h"

#include <algorithm>
#include <vector>

#include "config/config.h"
#include "config/tasks.h"

namespace stampede::coordinator {

std::pair<int64_t, double> ActorCounts::Totals() const {
  std::pair<int64_t, double> total{0, 0};
  for (const auto& [pid, fw] : per_process) {
    total.first += fw.first;
    total.second += fw.second;
  }
  return total;
}

std::string Implausible(const config::Config& cfg, const std::map<int, wire::Status>& learners,
                        const ActorCounts& actors, const wire::Status& s) {
  const auto prev = learners.find(s.sender().task_index());
  if (prev != learners.end() && s.sender().incarnation() == prev->second.sender().incarnation() &&
      (s.env_frames() < prev->second.env_frames() || s.learner_steps() < prev->second.learner_steps())) {
    return "frames or steps went backwards (" + std::to_string(prev->second.env_frames()) + " -> " +
           std::to_string(s.env_frames()) + " frames)";
  }
  if (s.sender().task_index() < 0 || s.sender().task_index() >= cfg.learner().num_learners()) {
    return "learner index " + std::to_string(s.sender().task_index()) + " is not one of the run's";
  }
  if (s.env_frames() < 0 || s.learner_steps() < 0 || s.start_env_frames() < 0 ||
      s.start_env_frames() > s.env_frames()) {
    return "negative counts or a start above the current count";
  }
  const auto& a = cfg.actors();
  const double per_message = double(a.unroll_length()) * a.envs_per_actor() *
                             std::max(1, cfg.env().resolved_spec().frames_per_step());
  // Messages between the actors and the trainer: the learner's queue (in unrolls, E per
  // message), one in each actor's socket, a few in the kernel's buffers.
  const double in_flight =
      per_message * (double(cfg.learner().queue_capacity()) / a.envs_per_actor() + 2.0 * a.num_actors() + 8);
  // What each actor process made but has not reported: actors report after sends 1, 2,
  // 4, ... and then every 100 ms, so at most what it has reported (a young or dead one)
  // and at most a second of the whole fleet's peak rate (a live one), plus a message.
  double unreported = 0;
  for (const auto& [pid, fw] : actors.per_process) {
    unreported += std::min(double(fw.first), std::max(per_message * 64, actors.peak_rate)) + per_message;
  }
  const int64_t made = actors.Totals().first;
  const double bound = double(made) + unreported + actors.peak_rate + in_flight;
  const double claimed = double(s.env_frames() - s.start_env_frames());
  if (claimed > bound) {
    return std::to_string(int64_t(claimed)) + " frames trained on, but the actors report " + std::to_string(made) +
           " made";
  }
  return {};
}

namespace {
// Window means of several learners: each learner's 100-episode mean weighted by how
// many returns it holds.
struct WeightedMean {
  double sum = 0, length_sum = 0;
  int64_t counted = 0;
  void Add(double mean, double length, int n) {
    sum += mean * n;
    length_sum += length * n;
    counted += n;
  }
  double mean() const { return counted ? sum / double(counted) : 0; }
  double length() const { return counted ? length_sum / double(counted) : 0; }
};
}  // namespace

base::StepFigures StepFiguresOf(const wire::Status& s) {
  base::StepFigures f;
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    const auto it = s.step_metrics().find(std::string(base::kStepMetrics[i].name));
    if (it != s.step_metrics().end()) f.at(i) = it->second;
  }
  return f;
}

wire::Status MergeLearners(const config::Config& cfg, const std::map<int, wire::Status>& learners) {
  if (cfg.learner().num_learners() == 1 && !learners.empty()) return learners.begin()->second;
  const bool sharded = ShardsOwnOptimizer(cfg);
  wire::Status m = learners.begin()->second;  // the chief's (lowest index) identity
  int64_t frames = 0, start = 0, episodes = 0, steps = 0, depth = 0, dropped = 0, skipped = 0, version = 0, lag_max = 0;
  int64_t resets = 0;
  double wait = 0, lag = 0, train = 0;
  base::StepFigures metric_sum;
  WeightedMean all;
  std::map<std::string, int64_t> by_reason;
  const int T = config::NumTasks(cfg);
  std::vector<WeightedMean> task_means(static_cast<size_t>(T));
  std::vector<wire::TaskStatus> tasks(static_cast<size_t>(T));
  std::vector<double> task_lag(static_cast<size_t>(T), 0.0);
  for (const auto& [index, s] : learners) {
    frames += s.env_frames();
    start += s.start_env_frames();
    episodes += s.episodes();
    steps += s.learner_steps();
    depth += s.queue_depth();
    dropped += s.dropped_trajectories();
    skipped += s.skipped_steps();
    version = std::max(version, s.policy_version());
    resets = std::max(resets, s.allreduce_resets());  // every member's ring has the same generation
    lag_max = std::max(lag_max, s.policy_lag_max());
    wait += s.receive_wait_s();
    const base::StepFigures f = StepFiguresOf(s);
    for (size_t i = 0; i < base::kStepMetrics.size(); ++i) metric_sum.at(i) += f.at(i);
    lag += s.policy_lag_mean();
    train = std::max(train, s.train_seconds());
    all.Add(s.mean_return_100(), s.mean_episode_length_100(), s.returns_counted());
    for (const auto& [reason, n] : s.dropped_by_reason()) by_reason[reason] += n;
    for (const auto& ts : s.tasks()) {
      if (ts.task() < 0 || ts.task() >= T) continue;
      auto& t = tasks[size_t(ts.task())];
      t.set_task(ts.task());
      t.set_episodes(t.episodes() + ts.episodes());
      t.set_env_frames(t.env_frames() + ts.env_frames());
      task_means[size_t(ts.task())].Add(ts.mean_return_100(), ts.mean_episode_length_100(), ts.returns_counted());
      task_lag[size_t(ts.task())] += ts.policy_lag_mean();
      t.set_popart_mean(ts.popart_mean());
      t.set_popart_scale(ts.popart_scale());
    }
  }
  const double n = double(learners.size());
  m.set_env_frames(frames);
  m.set_start_env_frames(start);
  m.set_episodes(episodes);
  // Sync/async: the shards' version counts the steps; allreduce: every learner takes each
  // step (the same version everywhere), so summing would count each L times.
  m.set_learner_steps(sharded || UpdateModeOf(cfg) == config::UpdateMode::allreduce ? version : steps);
  m.set_policy_version(version);
  m.set_queue_depth(int(depth));
  m.set_dropped_trajectories(dropped);
  m.set_skipped_steps(skipped);
  m.set_allreduce_resets(resets);
  m.set_policy_lag_max(lag_max);
  m.set_receive_wait_s(wait);
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    // kChief: m is the chief's status already.
    if (base::kStepMetrics[i].merge == base::Merge::kMean) {
      (*m.mutable_step_metrics())[std::string(base::kStepMetrics[i].name)] = metric_sum.at(i) / n;
    }
  }
  m.set_policy_lag_mean(lag / n);
  m.set_train_seconds(train);
  m.set_mean_return_100(all.mean());
  m.set_mean_episode_length_100(all.length());
  m.set_returns_counted(int(all.counted));
  m.clear_dropped_by_reason();
  for (const auto& [reason, c] : by_reason) (*m.mutable_dropped_by_reason())[reason] = c;
  m.clear_tasks();
  for (int t = 0; t < T; ++t) {
    auto* out = m.add_tasks();
    *out = tasks[size_t(t)];
    out->set_task(t);
    out->set_mean_return_100(task_means[size_t(t)].mean());
    out->set_mean_episode_length_100(task_means[size_t(t)].length());
    out->set_returns_counted(int(task_means[size_t(t)].counted));
    out->set_policy_lag_mean(task_lag[size_t(t)] / n);
    out->set_frames_to_target(-1);
  }
  // Targets: over the learners' windows together (each up to 100 episodes), once they
  // hold at least 100 returns.
  m.set_frames_to_target(-1);
  const auto& stop = cfg.stop();
  if (cfg.tasks_size() == 0 && (stop.target_return() != 0 || stop.stop_at_target()) && all.counted >= 100 &&
      all.mean() >= stop.target_return()) {
    m.set_frames_to_target(frames);
  }
  if (cfg.tasks_size() > 0) {
    bool every = true, any = false;
    for (int t = 0; t < T; ++t) {
      const double target = cfg.tasks(t).target_return();
      auto* out = m.mutable_tasks(t);
      if (target != 0 && task_means[size_t(t)].counted >= 100 && task_means[size_t(t)].mean() >= target) {
        out->set_frames_to_target(frames);
      }
      if (target == 0) continue;
      any = true;
      every = every && out->frames_to_target() >= 0;
    }
    if (any && every) m.set_frames_to_target(frames);
  }
  return m;
}

}  // namespace stampede::coordinator
