#include "learner/role.h"

#include <cstdio>
#include <string>

#include "base/log.h"
#include "learner/learner.h"
#include "wire/auth.h"
#include "config/config.h"
#include "wire/status_channel.h"
#include "wire/zmq_util.h"

namespace stampede::learner {

base::Status RunLearnerRole(const config::Config& cfg, int task_index, int restarts, std::atomic<bool>& stop) {
  if (task_index < 0 || task_index >= cfg.learner().num_learners()) {
    return base::InvalidArgument("task index " + std::to_string(task_index) + ", but learner.num_learners is " +
                                 std::to_string(cfg.learner().num_learners()));
  }
  if (LearnerEndpoint(cfg, task_index).empty()) return base::InvalidArgument("cluster.learners has no endpoint for it");
  ASSIGN_OR_RETURN(const std::shared_ptr<const wire::Curve> curve, wire::RunCurve(cfg, wire::Identity("learner", task_index)));
  zmq::context_t ctx(1);
  const uint64_t incarnation = wire::NewIncarnation();
  // The first status goes out after Start, so the coordinator's first learner status
  // carries real counts (a restored learner starts from its checkpoint's).
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(),
                              wire::MakeSender(wire::ROLE_LEARNER, task_index, incarnation), curve.get(),
                              cfg.cluster().control(), &stop);
  Learner learner(cfg, ctx, BindEndpoint(cfg, LearnerEndpoint(cfg, task_index)), incarnation, curve, task_index, restarts > 0);
  RETURN_IF_ERROR(learner.Start());
  while (!stop.load() && learner.failure().ok()) {
    wire::SleepUnlessStopped(cfg.learner().status_interval_s(), stop);
    learner.FillStatus(&channel.status());
    channel.Send("training");
  }
  learner.Stop();
  if (const base::Status failure = learner.failure(); !failure.ok()) {
    // A device error is not restarted (the same device would fail the same way); a broken
    // ring is. The parameters cannot be trusted, so no final checkpoint either (the last
    // one stands).
    learner.FillStatus(&channel.status());
    channel.Send(("stopped; " + failure.message()).c_str());
    return failure;
  }
  learner.FillStatus(&channel.status());
  if (!cfg.run_dir().empty()) {
    if (const base::Status written = learner.WriteCheckpoint(); !written.ok()) {
      learner.FillStatus(&channel.status());  // carries checkpoint_error
      channel.Send("stopped; final checkpoint FAILED");
      return base::Internal("final checkpoint failed: " + written.message());
    }
    if (task_index == 0) {
      base::LogInfo("learner: final checkpoint at version %lld written to %s/checkpoint.bin\n",
                   (long long)learner.policy_version(), cfg.run_dir().c_str());
    }
  }
  channel.Send("stopped");
  return base::OkStatus();
}

}  // namespace stampede::learner
