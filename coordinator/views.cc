#include "coordinator/views.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "base/metrics.h"
#include "coordinator/learner_status.h"
#include "config/config.h"
#include "config/tasks.h"
#include "wire/zmq_util.h"

namespace stampede::coordinator {

std::string Human(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (std::fabs(v) >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

std::string FormatTarget(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string ReturnText(double mean, int counted) {
  if (counted <= 0) return "\u2013";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", mean);
  return buf;
}

namespace {

// Per actor ("0", "1", ...): its policy version, the newest version its fetcher heard of,
// its trajectories' lag on arrival (newest, mean and largest since the last row; in the
// summary the largest over the run), fetcher resets, mixed assemblies, the frames it made
// and, for one `stampede scale` took out, "retired".
nlohmann::json ActorsJson(const ActorWatch& watch, bool summary) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [index, a] : watch.actors()) {
    nlohmann::json one = {{"policy_version", a.version},
                          {"newest_heard_version", a.heard},
                          {"lag", a.lag},
                          {"fetcher_resets", a.fetcher_resets},
                          {"mixed_assemblies", a.mixed_assemblies},
                          {"trajectories", a.trajectories},
                          {"frames", a.frames}};
    if (a.retired) one["retired"] = true;
    if (summary) {
      one["lag_max"] = a.lag_max_run;
    } else {
      one["lag_mean"] = a.lag_mean;
      one["lag_max"] = a.lag_max;
    }
    j[std::to_string(index)] = one;
  }
  return j;
}

// The learners' replay tables (learner.replay) in one: sums of sizes and counters, the
// mean of their sampled ages and the largest.
nlohmann::json ReplayJson(const std::map<int, wire::Status>& learners) {
  double size = 0, bytes = 0, inserts = 0, samples = 0, removed_oldest = 0, removed_sampled = 0;
  double refused = 0, dropped = 0, age = 0, fraction = 0;
  int64_t age_max = 0;
  bool can_sample = true;
  std::string selector;
  for (const auto& [index, s] : learners) {
    const auto& r = s.replay();
    size += double(r.size());
    bytes += double(r.bytes());
    inserts += double(r.inserts());
    samples += double(r.samples());
    removed_oldest += double(r.removed_oldest());
    removed_sampled += double(r.removed_sampled());
    refused += double(r.inserts_refused());
    dropped += double(r.trust_region_dropped());
    age += r.sampled_age_mean();
    fraction += r.replayed_fraction();
    age_max = std::max(age_max, r.sampled_age_max());
    can_sample = can_sample && r.can_sample();
    selector = r.selector();
  }
  const double n = std::max<double>(1, double(learners.size()));
  return {{"size", size}, {"bytes", bytes}, {"inserts", inserts}, {"samples", samples},
          {"sampled_age_mean", age / n}, {"sampled_age_max", age_max}, {"selector", selector},
          {"can_sample", can_sample}, {"removed_oldest", removed_oldest}, {"removed_sampled", removed_sampled},
          {"inserts_refused", refused}, {"trust_region_dropped", dropped}, {"replayed_fraction", fraction / n}};
}

// Per task from the merged learner status: name -> episodes, mean_return_100,
// returns_counted, env_frames, policy_lag_mean, frames_to_target (and normalised_score
// where the task gives random and reference scores).
nlohmann::json TasksJson(const config::Config& cfg, const wire::Status& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& ts : s.tasks()) {
    if (ts.task() < 0 || ts.task() >= config::NumTasks(cfg)) continue;
    nlohmann::json t = {{"episodes", ts.episodes()},
                        {"mean_return_100", ts.mean_return_100()},
                        {"returns_counted", ts.returns_counted()},
                        {"mean_episode_length_100", ts.mean_episode_length_100()},
                        {"env_frames", ts.env_frames()},
                        {"policy_lag_mean", ts.policy_lag_mean()},
                        {"frames_to_target", ts.frames_to_target()}};
    if (PopArtOn(cfg)) {
      t["popart_mean"] = ts.popart_mean();
      t["popart_scale"] = ts.popart_scale();
    }
    if (cfg.tasks_size() > 0) {
      const double norm = config::NormalisedScore(cfg.tasks(ts.task()), ts.mean_return_100());
      if (!std::isnan(norm) && ts.returns_counted() > 0) t["normalised_score"] = norm;
    }
    j[config::TaskName(cfg, ts.task())] = t;
  }
  return j;
}

// Per learner: frames it trained on, gradients or steps, its window's mean return.
nlohmann::json LearnersJson(const std::map<int, wire::Status>& learners) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [index, s] : learners) {
    j[std::to_string(index)] = {{"env_frames", s.env_frames()},
                                {"steps", s.learner_steps()},
                                {"mean_return_100", s.mean_return_100()},
                                {"returns_counted", s.returns_counted()},
                                {"policy_version", s.policy_version()}};
    if (s.allreduce_rounds() > 0) {
      auto& one = j[std::to_string(index)];
      one["allreduce_rounds"] = s.allreduce_rounds();
      one["allreduce_bytes_sent"] = s.allreduce_bytes_sent();
      one["allreduce_seconds"] = s.allreduce_seconds();
      one["allreduce_dropped"] = s.allreduce_dropped();
      one["allreduce_resets"] = s.allreduce_resets();
    }
  }
  return j;
}

// Per PS shard (sync/async): version, gradients applied and dropped, staleness histogram.
nlohmann::json PsJson(const std::map<int, wire::Status>& ps) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [shard, s] : ps) {
    nlohmann::json one = {{"version", s.policy_version()},
                          {"gradients_applied", s.gradients_applied()},
                          {"gradients_dropped", s.gradients_dropped()}};
    if (s.staleness_histogram_size() > 0) {
      one["staleness_histogram"] = std::vector<int64_t>(s.staleness_histogram().begin(), s.staleness_histogram().end());
    }
    j[std::to_string(shard)] = one;
  }
  return j;
}

}  // namespace

nlohmann::json Views::Refused(const Core& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [who, reasons] : c.refused_) {
    for (const auto& [reason, n] : reasons) j[who][reason] = n;
  }
  if (c.rejected_connections_ > 0) j["coordinator"]["unauthorised_connection"] = c.rejected_connections_;
  return j;
}

std::pair<double, double> Views::NormalisedAggregate(const Core& c) {
  std::vector<double> v;
  for (const auto& ts : c.figures_.merged.tasks()) {
    if (c.cfg_.tasks_size() == 0 || ts.task() < 0 || ts.task() >= c.cfg_.tasks_size() || ts.returns_counted() == 0) {
      continue;
    }
    const double norm = config::NormalisedScore(c.cfg_.tasks(ts.task()), ts.mean_return_100());
    if (!std::isnan(norm)) v.push_back(norm);
  }
  return config::MeanAndMedian(std::move(v));
}

EvaluationView Views::Evaluation(const Core& c, const wire::EvaluationReport& r) {
  EvaluationView v;
  const auto& cfg = c.cfg_;
  const bool suite = cfg.tasks_size() > 0;
  nlohmann::json tasks = nlohmann::json::object();
  std::vector<double> normalised;
  double sum = 0;
  int n = 0, episodes = 0, capped = 0;
  for (const auto& t : r.tasks()) {
    if (t.task() < 0 || t.task() >= config::NumTasks(cfg)) continue;
    const std::string name = config::TaskName(cfg, t.task());
    nlohmann::json one = {{"eval_return_mean", t.return_mean()},
                          {"eval_return_std", t.return_std()},
                          {"episodes", t.episodes()},
                          {"capped", t.capped()},
                          {"mean_episode_length", t.mean_episode_length()}};
    if (suite) {
      const double norm = config::NormalisedScore(cfg.tasks(t.task()), t.return_mean());
      if (!std::isnan(norm)) {
        one["eval_normalised_score"] = norm;
        normalised.push_back(norm);
        v.scalars.emplace_back("eval/" + name + "/normalised_score", norm);
      }
      v.scalars.emplace_back("eval/" + name + "/return_mean", t.return_mean());
    }
    tasks[name] = one;
    sum += t.return_mean();
    ++n;
    episodes += t.episodes();
    capped += t.capped();
  }
  const double mean = n > 0 ? sum / n : 0;
  v.event = {{"round", r.round()},
             {"env_frames", r.env_frames()},
             {"policy_version", r.policy_version()},
             {"greedy", r.greedy()},
             {"seconds", r.seconds()},
             {"episodes", episodes},
             {"capped", capped},
             {"tasks", tasks}};
  char buf[512];
  if (suite) {
    const auto [norm_mean, norm_median] = config::MeanAndMedian(std::move(normalised));
    if (!std::isnan(norm_mean)) {
      v.event["eval_normalised_mean"] = norm_mean;
      v.event["eval_normalised_median"] = norm_median;
      v.scalars.emplace_back("eval/normalised_mean", norm_mean);
      v.scalars.emplace_back("eval/normalised_median", norm_median);
    }
    std::snprintf(buf, sizeof buf, "norm.score mean %.3f median %.3f over %d tasks", norm_mean, norm_median, n);
  } else {
    // One task: its return (a suite's raw returns have different scales: no mean of them).
    v.event["eval_return_mean"] = mean;
    v.event["eval_return_std"] = n > 0 ? r.tasks(0).return_std() : 0;
    v.scalars.emplace_back("eval/return_mean", mean);
    std::snprintf(buf, sizeof buf, "return %s +- %s", FormatTarget(std::round(mean * 1000) / 1000).c_str(),
                  FormatTarget(std::round(v.event["eval_return_std"].get<double>() * 1000) / 1000).c_str());
  }
  char line[768];
  std::snprintf(line, sizeof line,
                "stampede: evaluation %lld at %s frames (policy version %lld, %s, %d episodes%s, %.1f s): %s\n",
                (long long)r.round(), Human(double(r.env_frames())).c_str(), (long long)r.policy_version(),
                r.greedy() ? "greedy" : "sampled", episodes,
                capped > 0 ? (", " + std::to_string(capped) + " cut at evaluation.max_steps").c_str() : "",
                r.seconds(), buf);
  v.line = line;
  return v;
}

namespace {
// The factor the global-norm clip scaled the newest gradient by (1: not clipped).
double GradClipFactor(const config::Config& cfg, double norm) {
  const double max_norm = cfg.learner().max_grad_norm();
  return max_norm > 0 && norm > max_norm ? max_norm / norm : 1.0;
}
}  // namespace

ProgressRow Views::Progress(const Core& c, Clock::time_point now) {
  ProgressRow out;
  const auto& cfg = c.cfg_;
  const double dt = std::chrono::duration<double>(now - c.last_row_).count();
  const double elapsed = c.Elapsed(now);
  const auto& s = c.figures_.merged;
  const base::StepFigures step = StepFiguresOf(s);
  const double fps = dt > 0 ? double(s.env_frames() - c.last_frames_) / dt : 0;
  const double lag_mean = c.lag_mean_n_ ? c.lag_mean_acc_ / c.lag_mean_n_ : 0;
  const int actors_alive = c.procs_.Alive(wire::ROLE_ACTOR);
  const auto [actor_frames, actor_wait] = c.actor_counts_.Totals();
  const bool suite = cfg.tasks_size() > 0;
  const auto [norm_mean, norm_median] = NormalisedAggregate(c);
  if (!c.opt_.quiet) {
    // A suite's line shows the normalised mean (its returns have different scales).
    std::string score = suite ? (std::isnan(norm_mean) ? "" : "norm.score " + FormatTarget(std::round(norm_mean * 100) / 100) + " | ")
                              : "return(100) " + ReturnText(s.mean_return_100(), s.returns_counted()) + " | ";
    // The worst actor's lag: one frozen actor among many hides in the mean.
    std::string worst;
    if (c.actors_.worst_actor() >= 0) {
      worst = " (worst actor " + std::to_string(c.actors_.worst_actor()) + ": " + std::to_string(c.actors_.worst_lag()) + ")";
    }
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "[%7.1fs] frames %s (%s/s) | episodes %lld | %ssteps %lld | "
                  "lag %.1f/%lld%s | queue %d | dropped %lld | actors %d |",
                  elapsed, Human(double(s.env_frames())).c_str(), Human(fps).c_str(), (long long)s.episodes(),
                  score.c_str(), (long long)s.learner_steps(), lag_mean, (long long)c.lag_max_acc_, worst.c_str(),
                  s.queue_depth(), (long long)s.dropped_trajectories(), actors_alive);
    out.line = buf;
    for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
      const base::MetricDecl& d = base::kStepMetrics[i];
      if (!(d.shows & base::kShowProgress)) continue;
      std::snprintf(buf, sizeof buf, d.format, step.at(i));
      out.line += " " + std::string(d.label) + " " + buf;
    }
    out.line += "\n";
    if (UpdateModeOf(cfg) == config::UpdateMode::allreduce) {
      // The ring's resets (a learner gone or back) belong on the line: the batch per step changed.
      out.line.insert(out.line.size() - 1, " | ring resets " + std::to_string(s.allreduce_resets()));
    }
    const int every = cfg.suite().task_lines_every();
    if (suite && every > 0 && c.rows_ % every == 0) {
      std::string line = "          tasks:";
      for (const auto& ts : s.tasks()) {
        if (ts.task() < 0 || ts.task() >= cfg.tasks_size()) continue;
        line += " " + cfg.tasks(ts.task()).name() + " " + ReturnText(ts.mean_return_100(), ts.returns_counted()) +
                " (" + std::to_string(ts.episodes()) + " ep) |";
      }
      line.resize(line.size() - 2);
      out.line += line + "\n";
    }
  }
  nlohmann::json row = {{"wall_time", c.UnixAt(now)},
                        {"elapsed_s", elapsed},
                        {"env_frames", s.env_frames()},
                        {"frames_per_s", fps},
                        {"learner_step", s.learner_steps()},
                        {"episodes", s.episodes()},
                        {"mean_return_100", s.mean_return_100()},
                        {"mean_episode_length_100", s.mean_episode_length_100()},
                        {"returns_counted", s.returns_counted()},
                        {"policy_lag_mean", lag_mean},
                        {"policy_lag_max", c.lag_max_acc_},
                        {"policy_version", s.policy_version()},
                        {"queue_depth", s.queue_depth()},
                        {"dropped_trajectories", s.dropped_trajectories()},
                        {"grad_clip_factor", GradClipFactor(cfg, step[base::StepMetric::kGradNorm])},
                        {"train_seconds", s.train_seconds()},
                        {"learner_receive_wait_s", s.receive_wait_s()},
                        {"learner_skipped_steps", s.skipped_steps()},
                        {"actors_alive", actors_alive},
                        {"actor_frames", actor_frames},
                        {"actor_send_wait_s", actor_wait},
                        {"actor_restarts", c.actor_restarts_}};
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    if (base::kStepMetrics[i].shows & base::kShowRow) row[std::string(base::kStepMetrics[i].name)] = step.at(i);
  }
  if (UpdateModeOf(cfg) == config::UpdateMode::allreduce) row["allreduce_resets"] = s.allreduce_resets();
  if (!Refused(c).empty()) row["refused"] = Refused(c);
  if (c.forged_statuses_ > 0) row["forged_statuses"] = c.forged_statuses_;
  if (c.implausible_statuses_ > 0) row["implausible_statuses"] = c.implausible_statuses_;
  if (!s.dropped_by_reason().empty()) {
    nlohmann::json by_reason = nlohmann::json::object();
    for (const auto& [reason, n] : s.dropped_by_reason()) by_reason[reason] = n;
    row["dropped_by_reason"] = by_reason;
  }
  row["tasks"] = TasksJson(cfg, s);
  row["actors"] = ActorsJson(c.actors_, false);
  row["worst_actor_lag"] = c.actors_.worst_lag();
  nlohmann::json replay_row;
  if (cfg.learner().replay().fraction() > 0) row["replay"] = replay_row = ReplayJson(c.figures_.learners);
  if (cfg.learner().num_learners() > 1 || ShardsOwnOptimizer(cfg)) row["learners"] = LearnersJson(c.figures_.learners);
  if (ShardsOwnOptimizer(cfg)) row["ps"] = PsJson(c.figures_.ps);
  if (c.role_restarts_ > 0) row["restarts"] = c.role_restarts_;
  if (suite && !std::isnan(norm_mean)) {
    row["mean_normalised_score"] = norm_mean;
    row["median_normalised_score"] = norm_median;
  }
  out.row = std::move(row);
  out.scalars = {{"frames_per_s", fps},
                 {"learner/steps", double(s.learner_steps())},
                 {"learner/grad_clip_factor", GradClipFactor(cfg, step[base::StepMetric::kGradNorm])},
                 {"policy_lag/mean", lag_mean},
                 {"policy_lag/max", double(c.lag_max_acc_)},
                 {"policy_lag/worst_actor", double(c.actors_.worst_lag())},
                 {"queue/depth", double(s.queue_depth())},
                 {"queue/learner_receive_wait_s", s.receive_wait_s()},
                 {"queue/actor_send_wait_s", actor_wait},
                 {"dropped_trajectories", double(s.dropped_trajectories())}};
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    const base::MetricDecl& d = base::kStepMetrics[i];
    if (d.shows & base::kShowTensorBoard) out.scalars.push_back({std::string(d.tensorboard), step.at(i)});
  }
  if (!suite && s.returns_counted() > 0) out.scalars.push_back({"return_100", s.mean_return_100()});
  if (!replay_row.is_null()) {
    out.scalars.push_back({"replay/size", replay_row["size"].get<double>()});
    out.scalars.push_back({"replay/sampled_age_mean", replay_row["sampled_age_mean"].get<double>()});
    out.scalars.push_back({"replay/replayed_fraction", replay_row["replayed_fraction"].get<double>()});
  }
  for (const auto& ts : s.tasks()) {
    if (ts.task() < 0 || ts.task() >= config::NumTasks(cfg) || ts.returns_counted() == 0) continue;
    const std::string name = config::TaskName(cfg, ts.task());
    out.scalars.push_back({"return_100/" + name, ts.mean_return_100()});
    out.scalars.push_back({"policy_lag/" + name, ts.policy_lag_mean()});
    if (suite) {
      const double norm = config::NormalisedScore(cfg.tasks(ts.task()), ts.mean_return_100());
      if (!std::isnan(norm)) out.scalars.push_back({"normalised_score/" + name, norm});
    }
  }
  if (suite && !std::isnan(norm_mean)) {
    out.scalars.push_back({"normalised_score/mean", norm_mean});
    out.scalars.push_back({"normalised_score/median", norm_median});
  }
  return out;
}

nlohmann::json Views::Summary(const Core& c, double fps) {
  const auto& cfg = c.cfg_;
  const RunResult& r = *c.result_;
  const auto& s = c.figures_.merged;
  nlohmann::json summary = {{"exit_code", r.exit_code},
                            {"stop_reason", c.stop_.reason},
                            {"wall_seconds", r.wall_seconds},
                            {"env_frames", r.env_frames},
                            {"learner_steps", r.learner_steps},
                            {"mean_return_100", r.mean_return_100},
                            {"episodes", s.episodes()},
                            {"frames_per_second", fps},
                            {"frames_to_target", r.frames_to_target},
                            {"seconds_to_target", r.seconds_to_target},
                            {"target_return", cfg.stop().target_return()},
                            {"actor_restarts", r.actor_restarts}};
  const base::StepFigures step = StepFiguresOf(c.figures_.merged);
  for (size_t i = 0; i < base::kStepMetrics.size(); ++i) {
    const base::MetricDecl& d = base::kStepMetrics[i];
    if (d.shows & base::kShowSummary) summary[std::string(d.name)] = step.at(i);
  }
  if (const std::string error = c.figures_.CheckpointError(); !error.empty()) summary["checkpoint_error"] = error;
  if (c.figures_.checkpoint_failures > 0) summary["checkpoint_failures"] = c.figures_.checkpoint_failures;
  if (c.forged_statuses_ > 0) summary["forged_statuses"] = c.forged_statuses_;
  if (c.implausible_statuses_ > 0) summary["implausible_statuses"] = c.implausible_statuses_;
  if (!Refused(c).empty()) summary["refused"] = Refused(c);
  summary["tasks"] = TasksJson(cfg, s);
  summary["actors"] = ActorsJson(c.actors_, true);
  if (cfg.learner().num_learners() > 1 || ShardsOwnOptimizer(cfg)) {
    summary["learners"] = LearnersJson(c.figures_.learners);
    summary["ps"] = PsJson(c.figures_.ps);
  }
  summary["restarts"] = c.role_restarts_;
  if (UpdateModeOf(cfg) == config::UpdateMode::allreduce) summary["allreduce_resets"] = s.allreduce_resets();
  if (!c.last_eval_.is_null()) summary["evaluation"] = c.last_eval_;
  if (cfg.tasks_size() > 0) {
    summary.erase("mean_return_100");  // over a mix of scales: meaningless in a suite
    const auto [mean, median] = NormalisedAggregate(c);
    if (!std::isnan(mean)) {
      summary["mean_normalised_score"] = mean;
      summary["median_normalised_score"] = median;
    }
  }
  return summary;
}

std::string Views::DoneText(const Core& c, double fps) {
  const auto& cfg = c.cfg_;
  const RunResult& r = *c.result_;
  const auto& s = c.figures_.merged;
  char buf[512];
  std::snprintf(buf, sizeof buf, "stampede: done in %.1f s: %s frames (%s/s), %lld learner steps", r.wall_seconds,
                Human(double(r.env_frames)).c_str(), Human(fps).c_str(), r.learner_steps);
  std::string out = buf;
  if (cfg.tasks_size() == 0) out += ", mean return(100) " + ReturnText(r.mean_return_100, s.returns_counted());
  if (r.frames_to_target >= 0) {
    std::snprintf(buf, sizeof buf, "; target %s reached at %lld frames, %.1f s",
                  cfg.tasks_size() > 0 ? "of every task" : FormatTarget(cfg.stop().target_return()).c_str(),
                  r.frames_to_target, r.seconds_to_target);
    out += buf;
  }
  out += "\n";
  if (cfg.tasks_size() > 0) {
    // The per-task table at the end of a suite's run.
    std::snprintf(buf, sizeof buf, "%-20s %10s %8s %12s %10s\n", "task", "return(100)", "episodes", "frames", "normalised");
    out += buf;
    for (const auto& ts : s.tasks()) {
      if (ts.task() < 0 || ts.task() >= cfg.tasks_size()) continue;
      const double norm = config::NormalisedScore(cfg.tasks(ts.task()), ts.mean_return_100());
      std::snprintf(buf, sizeof buf, "%-20s %10s %8lld %12lld %10s\n", cfg.tasks(ts.task()).name().c_str(),
                    ReturnText(ts.mean_return_100(), ts.returns_counted()).c_str(), (long long)ts.episodes(),
                    (long long)ts.env_frames(),
                    std::isnan(norm) || ts.returns_counted() == 0
                        ? "\u2013"
                        : FormatTarget(std::round(norm * 1000) / 1000 + 0.0).c_str());
      out += buf;
    }
    const auto [mean, median] = NormalisedAggregate(c);
    if (!std::isnan(mean)) {
      std::snprintf(buf, sizeof buf, "normalised score: mean %.3f, median %.3f\n", mean, median);
      out += buf;
    }
  }
  out += "stampede: run directory " + cfg.run_dir() + "\n";
  return out;
}

std::string Views::Diagnose(const Core& c) {
  std::ostringstream os;
  const auto& s = c.figures_.merged;
  if (!c.figures_.have_status) {
    os << "  the learner has sent no status (is it stuck before its first step?)\n";
  } else {
    const int cap = c.cfg_.learner().queue_capacity();
    os << "  learner: step " << s.learner_steps() << ", policy version " << s.policy_version() << ", queue "
       << s.queue_depth() << "/" << cap
       << (s.queue_depth() == 0 ? " (empty: no usable trajectories arrive)"
                                : s.queue_depth() >= cap ? " (full: the trainer is not taking batches)" : "")
       << ", doing: ";
    for (const auto& [key, p] : c.procs_.all()) {
      if (p.local && p.role == wire::ROLE_LEARNER) os << p.activity;
    }
    os << "\n";
    os << "  dropped trajectories: " << s.dropped_trajectories();
    for (const auto& [reason, n] : s.dropped_by_reason()) os << ", " << reason << " " << n;
    os << (s.dropped_trajectories() > 0 ? " (the actors' trajectories are refused)" : "") << "\n";
    if (s.skipped_steps() > 0) os << "  skipped (non-finite) steps: " << s.skipped_steps() << "\n";
  }
  os << "  PS versions:";
  for (const auto& [shard, ps] : c.figures_.ps) os << " shard " << shard << " " << ps.policy_version();
  os << (c.figures_.ps.empty() ? " none reported" : "") << "\n";
  const auto [frames, wait] = c.actor_counts_.Totals();
  os << "  actors: " << frames << " frames made, " << wait << " s waiting to send in all";
  std::map<std::string, int> doing;
  for (const auto& [key, p] : c.procs_.all()) {
    if (p.role == wire::ROLE_ACTOR && (p.local || !p.stopped)) ++doing[p.activity];
  }
  for (const auto& [activity, n] : doing) os << "; " << n << " " << activity;
  os << "\n";
  for (const auto& [who, reasons] : c.refused_) {
    os << "  " << who << " refused:";
    for (const auto& [reason, n] : reasons) os << " " << reason << " " << n;
    os << "\n";
  }
  return os.str();
}

}  // namespace stampede::coordinator
