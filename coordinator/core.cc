#include "coordinator/core.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "coordinator/core_detail.h"
#include "coordinator/learner_status.h"
#include "coordinator/views.h"
#include "wire/auth.h"
#include "config/config.h"
#include "base/exit_codes.h"
#include "config/tasks.h"
#include "wire/zmq_util.h"

namespace stampede::coordinator {

using core_detail::Printf;
using core_detail::Who;

// ---- the process table

std::string Process::Name() const { return Who(role, index); }

Process& ProcessTable::Add(Process p) {
  auto key = std::make_pair(int(p.role), p.index);
  return procs_[key] = std::move(p);
}

void ProcessTable::Remove(wire::Role role, int index) { procs_.erase({int(role), index}); }

Process* ProcessTable::Find(wire::Role role, int index) {
  auto it = procs_.find({int(role), index});
  return it == procs_.end() ? nullptr : &it->second;
}

Process* ProcessTable::FindLocal(ProcessId id) {
  for (auto& [key, p] : procs_) {
    if (p.local && p.id == id) return &p;
  }
  return nullptr;
}

int ProcessTable::Alive(wire::Role role) const {
  int n = 0;
  for (const auto& [key, p] : procs_) n += p.role == role && (p.local || !p.stopped);
  return n;
}

bool ProcessTable::AnyAlive(wire::Role role, bool chief) const {
  for (const auto& [key, p] : procs_) {
    if (p.role == role && (p.local || !p.stopped) && (p.index == 0) == chief) return true;
  }
  return false;
}

std::string ProcessTable::Text() const {
  std::ostringstream os;
  for (const auto& [key, p] : procs_) {
    if (p.local) os << wire::RoleName(p.role) << " " << p.index << " " << p.id << "\n";
  }
  return os.str();
}

// ---- the core

Core::Core(config::Config cfg, CoreOptions opt, Launcher* launcher, Sinks* sinks, RunResult* result,
           Clock::time_point now, double unix_now)
    : cfg_(std::move(cfg)),
      opt_(std::move(opt)),
      launcher_(launcher),
      sinks_(sinks),
      result_(result),
      start_(now),
      unix_start_(unix_now),
      actors_(cfg_.actors().max_params_age_s()),
      task_reached_(size_t(config::NumTasks(cfg_)), -1),
      last_row_(now),
      steps_moved_(now) {
  actor_counts_.prev_time = now;
  actors_target_ = cfg_.actors().num_actors();
}

double Core::Elapsed(Clock::time_point t) const { return std::chrono::duration<double>(t - start_).count(); }
double Core::UnixAt(Clock::time_point t) const { return unix_start_ + Elapsed(t); }

void Core::Say(const std::string& text) {
  if (!opt_.quiet) sinks_->Say(text);
}

void Core::Event(const std::string& name, nlohmann::json extra, Clock::time_point now) {
  extra["event"] = name;
  extra["wall_time"] = UnixAt(now);
  extra["elapsed_s"] = Elapsed(now);
  if (!extra.contains("env_frames")) extra["env_frames"] = std::max(figures_.merged.env_frames(), opt_.resumed_frames);
  extra["learner_step"] = figures_.merged.learner_steps();
  sinks_->Metrics(extra);
}

ProcessId Core::StartProcess(wire::Role role, int index, int restarts, Clock::time_point now) {
  Process p;
  p.role = role;
  p.index = index;
  p.local = true;
  p.id = launcher_->Start(role, index, restarts);
  p.pid = launcher_->Pid(p.id);
  p.last_heard = now;
  procs_.Add(p);
  sinks_->Processes(procs_.Text());
  Event("spawn", {{"role", wire::RoleName(role)}, {"index", index}, {"pid", p.id}}, now);
  return p.id;
}

void Core::Start(Clock::time_point now) {
  if (!opt_.standalone) {
    for (int s = 0; s < cfg_.ps().num_shards(); ++s) StartProcess(wire::ROLE_PS, s, 0, now);
    for (int l = 0; l < cfg_.learner().num_learners(); ++l) StartProcess(wire::ROLE_LEARNER, l, 0, now);
    for (int a = 0; a < cfg_.actors().num_actors(); ++a) StartProcess(wire::ROLE_ACTOR, a, 0, now);
    if (cfg_.evaluation().interval_frames() > 0) StartProcess(wire::ROLE_EVALUATOR, 0, 0, now);
  } else {
    Say("stampede: coordinator for a run whose processes are started elsewhere: status on " +
        cfg_.cluster().coordinator() + ", control on " + cfg_.cluster().control() +
        "; start each with `stampede ROLE --config " + opt_.config_path + " --task-index I`\n");
  }
  Event("start", {{"config", opt_.config_path}}, now);
  if (!opt_.resumed_from.empty()) Event("resume", {{"checkpoint", opt_.resumed_from}}, now);
}

void Core::Progress(Clock::time_point now) {
  // A resumed run has no figures until its learner is heard: a row now would say 0 frames,
  // behind the checkpoint's.
  if (!opt_.resumed_from.empty() && !figures_.have_status) return;
  ProgressRow p = Views::Progress(*this, now);
  ++rows_;
  if (!p.line.empty()) Say(p.line);
  sinks_->Metrics(p.row);
  sinks_->TensorBoard(figures_.merged.env_frames(), UnixAt(now), p.scalars);
  last_row_ = now;
  last_frames_ = figures_.merged.env_frames();
  lag_mean_acc_ = 0;
  lag_mean_n_ = 0;
  lag_max_acc_ = 0;
  actors_.EndRow();
}

void Core::OnStatus(const std::string& bytes, const std::string& peer, Clock::time_point now) {
  if (finished_) return;
  wire::Status s;
  if (!s.ParseFromString(bytes) || !wire::CheckProtocol(s.sender()).empty()) return;
  const wire::Role role = s.sender().role();
  const int index = s.sender().task_index();
  const std::string claimed = wire::Identity(wire::RoleName(role), index);
  if (opt_.curve && peer != claimed) {
    ++forged_statuses_;
    int64_t unlogged = 0;
    if (status_log_.Allow("forged", &unlogged)) {
      sinks_->Warn("stampede: ignored a status claiming to be " + claimed + " from " + peer + "'s connection" +
                   base::LogLimiter::More(unlogged) + "\n");
    }
    return;
  }
  const std::string who = Who(role, index);
  if (!s.refused_by_reason().empty()) {
    auto& r = refused_[who];
    for (const auto& [reason, n] : s.refused_by_reason()) r[reason] = n;
  }
  if (role == wire::ROLE_PS) figures_.ps[index] = s;
  if (role == wire::ROLE_LEARNER) OnCheckpointReport(s, now);
  Process* p = procs_.Find(role, index);
  if (p != nullptr && p->local) {
    if (p->pid == 0) p->pid = s.pid();
    if (p->pid == s.pid()) {
      p->last_heard = now;
      p->activity = s.activity();
    }
  } else if (opt_.standalone) {
    OnRemoteStatus(s, who, now);
    if (finished_) return;
  }
  if (role == wire::ROLE_EVALUATOR && s.has_evaluation()) OnEvaluation(s.evaluation(), now);
  if (finished_) return;
  if (role == wire::ROLE_ACTOR) {
    actor_counts_.per_process[s.pid()] = {s.actor_frames(), s.actor_send_wait_s()};
    if (index >= 0 && index < config::kMaxActors) {
      actors_.OnActorFrames(index, s.actor_frames());
      actors_.OnActorStatus(index, s.actor_policy_version(), s.actor_newest_heard_version(), s.actor_fetcher_resets(),
                            s.actor_mixed_assemblies(), now);
    }
    const double dt = std::chrono::duration<double>(now - actor_counts_.prev_time).count();
    if (dt >= 0.5) {
      const int64_t total = actor_counts_.Totals().first;
      actor_counts_.peak_rate = std::max(actor_counts_.peak_rate, double(total - actor_counts_.prev_total) / dt);
      actor_counts_.prev_total = total;
      actor_counts_.prev_time = now;
    }
  }
  if (role != wire::ROLE_LEARNER) {
    CheckPendingLearnerStatus(now);  // the actors' newer counts may vouch for it now
    return;
  }
  if (!Implausible(cfg_, figures_.learners, actor_counts_, s).empty()) {
    // Held, not applied: the actors report their counts only every second, so a true
    // count can run ahead of them for a moment. It is dropped if they never catch up.
    if (!pending_) pending_since_ = now;
    pending_ = s;
    return;
  }
  // A held status that a newer, believable one overtakes is checked once more: if the
  // actors still cannot vouch for it, it was never true.
  if (pending_) pending_since_ = now - kPendingStatusLimit - std::chrono::seconds(1);
  CheckPendingLearnerStatus(now);
  pending_.reset();
  ApplyLearnerStatus(s, now);
}

// A learner's checkpoint state: a new failure is said once; a later complete checkpoint
// clears it (a run fails for its checkpoints only if it cannot end with a complete one).
void Core::OnCheckpointReport(const wire::Status& s, Clock::time_point now) {
  const int index = s.sender().task_index();
  std::string& mine = figures_.checkpoint_errors[index];
  if (s.checkpoint_error() != mine) {
    if (!s.checkpoint_error().empty()) {
      sinks_->Warn("stampede: learner checkpoint failed: " + s.checkpoint_error() + "\n");
      Event("checkpoint_failed", {{"error", s.checkpoint_error()}, {"failures", s.checkpoint_failures()}}, now);
    } else if (s.checkpoint_failures() > 0) {
      Event("checkpoint_recovered", {{"learner", index}, {"failures", s.checkpoint_failures()}}, now);
    }
    mine = s.checkpoint_error();
  }
  figures_.checkpoint_failures = std::max(figures_.checkpoint_failures, s.checkpoint_failures());
}

// A process started elsewhere: known from its statuses.
void Core::OnRemoteStatus(const wire::Status& s, const std::string& who, Clock::time_point now) {
  const wire::Role role = s.sender().role();
  const int index = s.sender().task_index();
  Process* p = procs_.Find(role, index);
  if (p == nullptr) {
    Process fresh;
    fresh.role = role;
    fresh.index = index;
    p = &procs_.Add(fresh);
    Say(Printf("stampede: %s joined (pid %d)\n", who.c_str(), s.pid()));
  } else if (p->pid != s.pid()) {
    Event("rejoined", {{"process", who}, {"pid", s.pid()}}, now);
  }
  p->pid = s.pid();
  p->last_heard = now;
  p->activity = s.activity();
  const bool stopped = s.activity().rfind("stopped", 0) == 0;
  if (stopped && !p->stopped) Event("process_exit", {{"process", who}, {"pid", s.pid()}, {"how", "stopped"}}, now);
  p->stopped = stopped;
  if (stopped && role == wire::ROLE_ACTOR && retiring_.count(index)) Retired(index, "stopped", now);
  if (stop_.stopping) {
    StopNextStage();
    if (procs_.AllGone()) Finish(now);
  }
}

void Core::CheckPendingLearnerStatus(Clock::time_point now) {
  if (!pending_) return;
  const std::string why = Implausible(cfg_, figures_.learners, actor_counts_, *pending_);
  if (why.empty()) {
    const wire::Status s = *pending_;
    pending_.reset();
    ApplyLearnerStatus(s, now);
  } else if (now - pending_since_ > kPendingStatusLimit) {
    ++implausible_statuses_;
    int64_t unlogged = 0;
    if (status_log_.Allow("implausible", &unlogged)) {
      sinks_->Warn("stampede: ignored the learner's counters: " + why + base::LogLimiter::More(unlogged) + "\n");
    }
    Event("implausible_status", {{"why", why}}, now);
    pending_.reset();
  }
}

void Core::ApplyLearnerStatus(const wire::Status& one, Clock::time_point now) {
  const int index = one.sender().task_index();
  if (const auto prev = figures_.learners.find(index); prev == figures_.learners.end()) {
    // Frames a learner starts from (restored) are not this run's work.
    figures_.start_frames += one.start_env_frames();
    last_frames_ += one.start_env_frames();
  } else if (one.env_frames() < prev->second.env_frames()) {
    // Restarted from a checkpoint older than its death.
    const int64_t lost = prev->second.env_frames() - one.env_frames();
    figures_.lost_frames += lost;
    Event("frames_lost", {{"learner", index}, {"lost", lost}, {"lost_total", figures_.lost_frames},
                          {"restored_frames", one.env_frames()}}, now);
  }
  figures_.learners[index] = one;
  for (const auto& a : one.actor_lags()) {
    if (a.actor() < 0 || a.actor() >= config::kMaxActors) continue;
    actors_.OnLearnerActorLag(a.actor(), a.policy_version(), a.lag(), a.lag_mean(), a.lag_max(), a.trajectories());
  }
  wire::Status s = MergeLearners(cfg_, figures_.learners);
  s.set_env_frames(s.env_frames() + figures_.lost_frames);
  actors_.OnLearnerVersion(s.policy_version());
  if (s.skipped_steps() > figures_.merged.skipped_steps()) {
    // A step with a non-finite loss or gradient was not applied (learner/learner.cc).
    Event("skipped_steps",
          {{"skipped_steps", s.skipped_steps()}, {"new", s.skipped_steps() - figures_.merged.skipped_steps()}}, now);
  }
  if (s.allreduce_resets() > figures_.merged.allreduce_resets()) {
    // The learners' ring was formed again (learner/ring.h Rendezvous): one gone or back.
    Event("allreduce_reset", {{"allreduce_resets", s.allreduce_resets()}}, now);
  }
  figures_.merged = s;
  figures_.have_status = true;
  if (!stop_.stopping) MaybeRequestEvaluation(s.env_frames(), false, now);
  lag_mean_acc_ += s.policy_lag_mean();
  ++lag_mean_n_;
  lag_max_acc_ = std::max(lag_max_acc_, s.policy_lag_max());
  RunResult& r = *result_;
  const auto& stop = cfg_.stop();
  const bool suite = cfg_.tasks_size() > 0;
  bool target_set = stop.target_return() != 0 || stop.stop_at_target();
  for (const auto& t : cfg_.tasks()) target_set = target_set || t.target_return() != 0;
  if (suite) {
    for (const auto& ts : s.tasks()) {
      const size_t k = size_t(ts.task());
      if (k >= task_reached_.size() || task_reached_[k] >= 0 || ts.frames_to_target() < 0) continue;
      task_reached_[k] = ts.frames_to_target();
      Say(Printf("stampede: task %s: mean return(100) reached its target %s at %lld frames of its own\n",
                 config::TaskName(cfg_, int(k)).c_str(), FormatTarget(cfg_.tasks(int(k)).target_return()).c_str(),
                 (long long)ts.env_frames()));
      Event("task_target_reached",
            {{"task", config::TaskName(cfg_, int(k))}, {"mean_return_100", ts.mean_return_100()},
             {"task_env_frames", ts.env_frames()}},
            now);
    }
  }
  if (target_set && r.frames_to_target < 0 && s.frames_to_target() > 0) {
    r.frames_to_target = s.frames_to_target();
    r.seconds_to_target = Elapsed(now);
    if (suite) {
      Say(Printf("stampede: every task with a target reached it by %lld frames (%.1f s)\n",
                 (long long)r.frames_to_target, r.seconds_to_target));
    } else {
      Say(Printf("stampede: mean return(100) reached the target %s at %lld frames (%.1f s)\n",
                 FormatTarget(stop.target_return()).c_str(), (long long)r.frames_to_target, r.seconds_to_target));
    }
    Event("target_reached", {{"mean_return_100", s.mean_return_100()}, {"frames_to_target", r.frames_to_target}}, now);
    if (stop.stop_at_target()) RequestStop("target return reached", 0, now);
  }
  if (s.env_frames() >= stop.total_env_frames()) {
    RequestStop("frame budget of " + std::to_string(stop.total_env_frames()) + " spent", 0, now);
  } else if (stop.max_learner_steps() > 0 && s.learner_steps() >= stop.max_learner_steps()) {
    RequestStop("learner step budget spent", 0, now);
  }
}

void Core::OnExit(ProcessId id, ExitStatus how_ended, int interrupt_signal, Clock::time_point now) {
  if (finished_) return;
  Process* found = procs_.FindLocal(id);
  if (found == nullptr) return;
  const Process c = *found;
  procs_.Remove(c.role, c.index);
  sinks_->Processes(procs_.Text());
  const std::string how = how_ended.Describe();
  const std::string who = c.Name();
  const std::string log = launcher_->LogPath(c.role, c.index);
  if (c.role == wire::ROLE_ACTOR && retiring_.count(c.index)) {
    // Taken out by `stampede scale`: not restarted, whatever the stop's stage.
    if (!how_ended.ok()) {
      sinks_->Warn("stampede: " + who + " " + how + " while leaving the fleet (log: " + log + ")\n");
    }
    Retired(c.index, how, now);
    if (stop_.stopping) {
      StopNextStage();
      if (procs_.AllGone()) Finish(now);
    }
    return;
  }
  if (stop_.stopping) {
    if (how_ended.ok() && c.role == wire::ROLE_LEARNER && c.index == 0 && !cfg_.run_dir().empty()) {
      stop_.final_checkpoint = true;
    }
    if (!how_ended.ok() && !stop_.killed) {
      // A learner or PS that fails on the way out, before the final checkpoint is
      // complete, fails the run; after it, nothing is lost and the death is only said.
      const bool holds_state = c.role != wire::ROLE_ACTOR && c.role != wire::ROLE_EVALUATOR;
      // Judged by what is on disk: the chief may not have exited yet when its final
      // checkpoint is already whole.
      if (holds_state && !stop_.final_checkpoint && FinalCheckpointOnDisk()) stop_.final_checkpoint = true;
      const bool counts = holds_state && !stop_.final_checkpoint;
      sinks_->Warn("stampede: " + who + " " + how + " while stopping" +
                   (holds_state && !counts ? ", after the final checkpoint was complete: nothing was lost" : "") +
                   " (log: " + log + ")\n");
      Event("process_exit", {{"process", who}, {"pid", id}, {"how", how}, {"while_stopping", true},
                             {"counted", counts}}, now);
      if (counts && result_->exit_code == 0) {
        result_->exit_code = 1;
        stop_.reason += "; then " + who + " " + how + " while stopping";
      }
    }
    StopNextStage();
    if (procs_.AllGone()) Finish(now);
    return;
  }
  Event("process_exit", {{"process", who}, {"pid", id}, {"how", how}}, now);
  if (interrupt_signal != 0) {
    // Ctrl-C reaches the whole process group at once: a child may exit before the
    // signal has become a stop request. It is not a crash.
    RequestStop("interrupted (signal " + std::to_string(interrupt_signal) + ")", 130, now);
    if (procs_.AllGone()) Finish(now);
    return;
  }
  if (c.role == wire::ROLE_EVALUATOR && how_ended.exited && how_ended.code == base::kExitRefused) {
    // Its envs or config would fail the same way again.
    const std::string tail = launcher_->LogTail(c.role, c.index, 2000);
    sinks_->Warn(Printf("stampede: %s (pid %lld) %s; its log (%s) ends:\n", who.c_str(), (long long)id, how.c_str(),
                        log.c_str()) +
                 tail);
    RequestStop(who + " " + how + " (it refused its config or could not make its envs; see its log)", 1, now);
    return;
  }
  if (c.role == wire::ROLE_ACTOR || c.role == wire::ROLE_EVALUATOR) {
    if (actor_restarts_ >= cfg_.coordinator().max_actor_restarts()) {
      RequestStop(who + " " + how + " and the restart budget (coordinator.max_actor_restarts) is spent", 1, now);
      return;
    }
    ++actor_restarts_;
    const ProcessId fresh = StartProcess(c.role, c.index, 0, now);
    // The end of its log says why (an env's error, a Python traceback).
    const std::string tail = launcher_->LogTail(c.role, c.index, 1000);
    sinks_->Warn(Printf("stampede: %s (pid %lld) %s; restarted as pid %lld; its log (%s) %s\n", who.c_str(),
                        (long long)id, how.c_str(), (long long)fresh, log.c_str(), tail.empty() ? "is empty" : "ends:") +
                 tail);
    if (c.role == wire::ROLE_ACTOR) {
      Event("actor_restart", {{"actor", c.index}, {"old_pid", id}, {"new_pid", fresh}, {"how", how}}, now);
    } else {
      Event("restart", {{"process", who}, {"old_pid", id}, {"pid", fresh}, {"how", how}}, now);
    }
    return;
  }
  const std::string tail = launcher_->LogTail(c.role, c.index, 2000);
  sinks_->Warn(Printf("stampede: %s (pid %lld) %s; its log (%s) %s\n", who.c_str(), (long long)id, how.c_str(),
                      log.c_str(), tail.empty() ? "is empty" : "ends:") +
               tail);
  // A learner or shard that refused its config or input, or hit a device error, would
  // fail the same way again: not restarted. Anything else (a crash, a kill) is restarted
  // within the budget.
  const bool refused = how_ended.exited && how_ended.code == base::kExitRefused;
  const bool device = how_ended.exited && how_ended.code == base::kExitDeviceError;
  int& n = restarts_[{int(c.role), c.index}];
  const int budget = cfg_.coordinator().max_restarts();
  if (refused || device || n >= budget) {
    std::string why = who + " " + how;
    if (device) {
      why += " (a device error: not restarted; its log says which)";
    } else if (!refused) {
      why += " and its restart budget (coordinator.max_restarts = " + std::to_string(budget) + ") is spent";
    }
    RequestStop(why, 1, now);
    return;
  }
  ++n;
  ++role_restarts_;
  const double backoff = cfg_.coordinator().restart_backoff_s() * std::pow(2.0, n - 1);
  sinks_->Warn(Printf("stampede: restarting %s in %.1f s (restart %d of %d)\n", who.c_str(), backoff, n, budget));
  Event("restart_scheduled",
        {{"process", who}, {"old_pid", id}, {"how", how}, {"restart", n}, {"backoff_s", backoff}}, now);
  respawns_.push_back({c.role, c.index,
                       now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff))});
}

// The watchdog: true when the learner's step count has not moved for
// coordinator.stall_timeout_s while actors are alive.
bool Core::Stalled(Clock::time_point now) {
  const double limit = cfg_.coordinator().stall_timeout_s();
  if (limit <= 0) return false;
  const int64_t steps = figures_.have_status ? figures_.merged.learner_steps() : -1;
  if (steps != watched_steps_ || procs_.Alive(wire::ROLE_ACTOR) == 0) {
    watched_steps_ = steps;
    steps_moved_ = now;
    return false;
  }
  return now - steps_moved_ > std::chrono::duration<double>(limit);
}

void Core::OnTick(Clock::time_point now) {
  if (finished_) return;
  const double grace = cfg_.coordinator().shutdown_grace_s();
  if (stop_.stopping) {
    // Only the evaluator left, on its final round: it has evaluation.final_timeout_s.
    const bool only_evaluator = procs_.Alive(wire::ROLE_ACTOR) + procs_.Alive(wire::ROLE_LEARNER) +
                                    procs_.Alive(wire::ROLE_PS) == 0 &&
                                EvaluationPending();
    if (!stop_.killed && now > stop_.deadline && !(only_evaluator && now < eval_final_deadline_)) {
      for (auto& [key, p] : procs_.all()) {
        if (p.local) {
          sinks_->Warn(Printf("stampede: %s did not exit within %.0f s of SIGTERM (last: %s); killing it\n",
                              p.Name().c_str(), grace, p.activity.c_str()));
          launcher_->Kill(p.id);
        } else if (!p.stopped) {
          sinks_->Warn(Printf("stampede: %s (pid %d, started elsewhere) did not say it stopped within %.0f s "
                              "(last: %s); not waiting for it\n",
                              p.Name().c_str(), p.pid, grace, p.activity.c_str()));
          p.stopped = true;
        }
      }
      stop_.killed = true;
    }
    // Processes started elsewhere that went quiet are gone; the stop moves on.
    for (auto& [key, p] : procs_.all()) {
      if (!p.local && !p.stopped && now - p.last_heard > std::chrono::seconds(3)) p.stopped = true;
    }
    StopNextStage();
    if (procs_.AllGone()) Finish(now);
    return;
  }
  // Actors scaled down that are still there past the grace: killed (a local one), or no
  // longer waited for (one started elsewhere).
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    const int i = it->first;
    Process* p = procs_.Find(wire::ROLE_ACTOR, i);
    if (now <= it->second || p == nullptr) {
      ++it;
      continue;
    }
    sinks_->Warn(Printf("stampede: actor %d did not leave within %.0f s of being scaled down (last: %s); %s\n", i,
                        grace, p->activity.c_str(), p->local ? "killing it" : "not waiting for it"));
    if (p->local) {
      launcher_->Kill(p->id);  // its exit ends the retirement
      it->second = Clock::time_point::max();
      ++it;
    } else {
      p->stopped = true;
      it = retiring_.erase(it);
      Event("actor_retired", {{"actor", i}, {"how", "silent"}}, now);
      PublishRetireStops();
    }
  }
  // Restarts whose backoff has passed.
  for (size_t i = 0; i < respawns_.size();) {
    if (respawns_[i].due > now) {
      ++i;
      continue;
    }
    const PendingRespawn r = respawns_[i];
    respawns_.erase(respawns_.begin() + long(i));
    const int n = restarts_[{int(r.role), r.index}];
    const ProcessId fresh = StartProcess(r.role, r.index, n, now);
    Say(Printf("stampede: restarted %s as pid %lld\n", Who(r.role, r.index).c_str(), (long long)fresh));
    Event("restart", {{"process", Who(r.role, r.index)}, {"pid", fresh}, {"restart", n}}, now);
  }
  // Heartbeats: a silent process is reported with what it was last doing; a local one
  // is killed (and restarted within its budget when its exit is seen).
  const auto timeout = std::chrono::duration<double>(cfg_.coordinator().heartbeat_timeout_s());
  for (auto& [key, p] : procs_.all()) {
    if ((!p.local && p.stopped) || now - p.last_heard < timeout) continue;
    if (p.local) {
      sinks_->Warn(Printf("stampede: %s (pid %lld) silent for %.0f s; last doing: %s\n", p.Name().c_str(),
                          (long long)p.id, timeout.count(), p.activity.c_str()));
    } else {
      sinks_->Warn(Printf("stampede: %s (pid %d, started elsewhere) silent for %.0f s; last doing: %s\n",
                          p.Name().c_str(), p.pid, timeout.count(), p.activity.c_str()));
    }
    Event("silent", {{"process", p.Name()}, {"last_activity", p.activity}}, now);
    if (p.local) {
      launcher_->Kill(p.id);
      p.last_heard = now;
    } else {
      p.stopped = true;  // reported once; it counts again when it reports
    }
  }
  if (now - last_row_ >= std::chrono::duration<double>(cfg_.coordinator().progress_interval_s())) Progress(now);
  for (const ActorFinding& f : actors_.Check(now)) {
    sinks_->Warn("stampede: WARNING: " + f.message + "\n");
    Event(f.event,
          {{"actor", f.actor}, {"policy_version", f.version}, {"lag", f.lag}, {"unchanged_s", f.unchanged_s},
           {"message", f.message}},
          now);
  }
  CheckPendingLearnerStatus(now);
  if (Stalled(now)) {
    const std::string diagnosis = Views::Diagnose(*this);
    const double limit = cfg_.coordinator().stall_timeout_s();
    sinks_->Warn(Printf("stampede: no learner step for %.0f s (coordinator.stall_timeout_s); diagnosis:\n", limit) +
                 diagnosis);
    Event("stall", {{"diagnosis", diagnosis}}, now);
    RequestStop("stalled: no learner step for " + std::to_string(int(limit)) + " s\n" + diagnosis, 1, now);
  }
}

}  // namespace stampede::coordinator
