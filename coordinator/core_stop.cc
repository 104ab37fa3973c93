// The core's ordered stop, `stampede scale`'s changes of the actor count and the
// evaluation rounds: the decisions that end or reshape a run (core.h).
#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/core.h"
#include "coordinator/core_detail.h"
#include "coordinator/views.h"
#include "config/config.h"
#include "config/tasks.h"

namespace stampede::coordinator {

using core_detail::Printf;
using core_detail::Who;

namespace {
// A stop for `role` `index` (-1: all of that role) over the control socket.
wire::Control StopMessage(wire::Role role, int index, const std::string& reason) {
  wire::Control c;
  *c.mutable_sender() = wire::MakeSender(wire::ROLE_COORDINATOR, 0, 0);
  c.set_stop(true);
  c.set_stop_role(role);
  c.set_stop_index(index);
  c.set_reason(reason);
  return c;
}

// "2, 3" (or "none").
std::string IndexList(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out.empty() ? "none" : out;
}
}  // namespace

ScaleAnswer Core::Scale(int n, Clock::time_point now) {
  const int before = actors_target_;
  if (stop_.stopping || finished_) return {false, "the run is stopping (" + stop_.reason + ")"};
  const int floor = std::max({1, cfg_.learner().num_learners(), cfg_.tasks_size()});
  if (n < floor || n > config::kMaxActors) {
    return {false, Printf("--actors %d is out of range: this run takes %d to %d actors (every learner and every "
                          "task needs one)",
                          n, floor, config::kMaxActors)};
  }
  if (!retiring_.empty()) {
    std::vector<int> still;
    for (const auto& [i, deadline] : retiring_) still.push_back(i);
    return {false, "actors " + IndexList(still) + " are still stopping from the last scale-down; ask again once they "
                   "have exited"};
  }
  if (n == before) return {true, Printf("the fleet already has %d actors", n)};
  std::vector<int> changed;
  if (n > before) {
    if (!opt_.standalone) {
      for (int i = before; i < n; ++i) {
        if (const std::string why = launcher_->NoRoom(wire::ROLE_ACTOR, i); !why.empty()) {
          return {false, Printf("cannot grow to %d actors: %s", n, why.c_str())};
        }
      }
    }
    for (int i = before; i < n; ++i) {
      actors_.SetRetired(i, false);
      if (!opt_.standalone) StartProcess(wire::ROLE_ACTOR, i, 0, now);
      changed.push_back(i);
    }
  } else {
    const auto grace = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(cfg_.coordinator().shutdown_grace_s()));
    for (int i = n; i < before; ++i) {
      actors_.SetRetired(i, true);
      changed.push_back(i);
      Process* p = procs_.Find(wire::ROLE_ACTOR, i);
      if (p == nullptr || (!p->local && p->stopped)) continue;
      retiring_[i] = now + grace;
      if (p->local) launcher_->Terminate(p->id);
    }
    PublishRetireStops();
  }
  actors_target_ = n;
  Event("scale", {{"actors_before", before}, {"actors", n}, {n > before ? "started" : "stopping", changed}}, now);
  std::string message = Printf("actors %d -> %d: ", before, n);
  if (n < before) {
    message += "stopping actors " + IndexList(changed) + " (each sends the unroll it holds, then exits)";
  } else if (!opt_.standalone) {
    message += "started actors " + IndexList(changed);
  } else {
    message += "start actors " + IndexList(changed) + " where the run's processes run: `stampede actor --config " +
               opt_.config_path + " --task-index I`" + (cfg_.cluster().curve() ? " (their keys are made)" : "");
  }
  Say("stampede: scale: " + message + "\n");
  return {true, message};
}

void Core::Retired(int actor, const std::string& how, Clock::time_point now) {
  retiring_.erase(actor);
  Event("actor_retired", {{"actor", actor}, {"how", how}}, now);
  PublishRetireStops();
}

// Actors started elsewhere leave over the control socket: a stop for each one retiring,
// with every heartbeat until it says it stopped.
void Core::PublishRetireStops() {
  if (stop_.stopping) return;  // the stop's own stages are on the heartbeat now
  std::vector<wire::Control> stops;
  for (const auto& [i, deadline] : retiring_) {
    const Process* p = procs_.Find(wire::ROLE_ACTOR, i);
    if (p == nullptr || p->local) continue;
    stops.push_back(StopMessage(wire::ROLE_ACTOR, i, "the fleet was scaled down (stampede scale)"));
  }
  sinks_->StopMessages(std::move(stops));
}

// The order of a stop: actors and the learners other than the chief first, then the
// chief (its final checkpoint then holds every gradient the shards applied), then the
// PS shards (the chief's final checkpoint needs them). Called again at every exit while
// stopping; a second request to the same process changes nothing.
void Core::StopNextStage() {
  const bool others = procs_.AnyAlive(wire::ROLE_LEARNER, false);
  const bool chief = procs_.AnyAlive(wire::ROLE_LEARNER, true);
  // The evaluator goes once the round asked for last (the final one) is in.
  const bool evaluated = !EvaluationPending();
  auto now = [&](wire::Role role, int index) {
    return role == wire::ROLE_ACTOR || (role == wire::ROLE_LEARNER && (index != 0 || !others)) ||
           (role == wire::ROLE_PS && !others && !chief) || (role == wire::ROLE_EVALUATOR && evaluated);
  };
  for (const auto& [key, p] : procs_.all()) {
    if (p.local && now(p.role, p.index)) launcher_->Terminate(p.id);
  }
  // The same stage for every process, wherever it runs, over the control socket.
  std::vector<wire::Control> stops;
  auto stop = [&](wire::Role role, int index) { stops.push_back(StopMessage(role, index, stop_.reason)); };
  stop(wire::ROLE_ACTOR, -1);
  if (evaluated && cfg_.evaluation().interval_frames() > 0) stop(wire::ROLE_EVALUATOR, -1);
  for (int l = 1; l < cfg_.learner().num_learners(); ++l) stop(wire::ROLE_LEARNER, l);
  if (!others) stop(wire::ROLE_LEARNER, 0);
  if (!others && !chief) stop(wire::ROLE_PS, -1);
  sinks_->StopMessages(std::move(stops));
}

void Core::RequestStop(const std::string& reason, int exit_code, Clock::time_point now) {
  if (stop_.stopping || finished_) return;
  stop_.stopping = true;
  stop_.reason = reason;
  if (opt_.checkpoints.next_sequence) stop_.first_sequence = opt_.checkpoints.next_sequence();
  result_->exit_code = exit_code;
  if (!opt_.quiet || exit_code != 0) sinks_->Warn("stampede: stopping: " + reason + "\n");
  Event("stop", {{"reason", reason}, {"exit_code", exit_code}}, now);
  stop_.deadline = now + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(cfg_.coordinator().shutdown_grace_s()));
  const auto& ev = cfg_.evaluation();
  eval_final_deadline_ = now + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, ev.final_timeout_s())));
  if (exit_code == 0 && ev.final_round() && procs_.Alive(wire::ROLE_EVALUATOR) > 0) {
    MaybeRequestEvaluation(figures_.merged.env_frames(), true, now);
  }
  StopNextStage();
}

bool Core::FinalCheckpointOnDisk() const {
  if (!opt_.checkpoints.final_sequence || cfg_.run_dir().empty()) return false;
  const int64_t final_sequence = opt_.checkpoints.final_sequence();
  return final_sequence > 0 && final_sequence >= stop_.first_sequence;
}

void Core::MaybeRequestEvaluation(int64_t frames, bool final_round, Clock::time_point now) {
  const int64_t interval = cfg_.evaluation().interval_frames();
  if (interval <= 0 || !figures_.have_status) return;
  // The first multiple of the interval past where the run starts (a restored run's
  // frames start from its checkpoint's).
  if (eval_next_ < 0) eval_next_ = (figures_.start_frames / interval + 1) * interval;
  const bool due = frames >= eval_next_ || (final_round && frames > eval_frames_);
  if (!due) return;
  eval_next_ = (frames / interval + 1) * interval;
  ++eval_round_;
  eval_frames_ = frames;
  sinks_->EvaluationRequest(eval_round_, eval_frames_);
  Event("evaluation_requested", {{"round", eval_round_}, {"final", final_round}}, now);
}

void Core::OnEvaluation(const wire::EvaluationReport& r, Clock::time_point now) {
  if (r.round() <= eval_reported_ || r.round() > eval_round_) return;  // seen, or not asked for
  eval_reported_ = r.round();
  EvaluationView v = Views::Evaluation(*this, r);
  last_eval_ = v.event;
  Say(v.line);
  sinks_->TensorBoard(r.env_frames(), UnixAt(now), v.scalars);
  Event("evaluation", v.event, now);
  if (stop_.stopping) {
    StopNextStage();  // the evaluator may go now
    if (procs_.AllGone()) Finish(now);
  }
}

void Core::Finish(Clock::time_point now) {
  CheckPendingLearnerStatus(now);  // the learner's last status, if the actors vouch for it
  Progress(now);                   // the final row
  RunResult& r = *result_;
  const auto& s = figures_.merged;
  r.wall_seconds = Elapsed(now);
  r.env_frames = s.env_frames();
  r.learner_steps = s.learner_steps();
  r.mean_return_100 = s.mean_return_100();
  r.actor_restarts = actor_restarts_;
  // Frames this run produced (a restored learner starts from its checkpoint's count).
  const double fps = r.wall_seconds > 0 ? double(r.env_frames - figures_.start_frames) / r.wall_seconds : 0;
  if (const std::string error = figures_.CheckpointError(); !error.empty()) {
    // A run that could not end with a complete checkpoint did not end well, whatever stopped it.
    sinks_->Warn("stampede: a checkpoint write failed: " + error + "\n");
    if (r.exit_code == 0) r.exit_code = 1;
  }
  sinks_->Summary(Views::Summary(*this, fps));
  Say(Views::DoneText(*this, fps));
  finished_ = true;
}

}  // namespace stampede::coordinator
