#include "tools/roles.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "actors/actor.h"
#include "learner/learner.h"
#include "ps/shard.h"
#include "tools/signals.h"
#include "wire/auth.h"
#include "wire/status_channel.h"
#include "wire/zmq_util.h"

namespace stampede::tools {

namespace {
void SleepUnlessStopped(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!StopFlag().load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
}  // namespace

int RunLearnerRole(const config::Config& cfg, int task_index) {
  if (task_index != 0) {
    std::fprintf(stderr, "learner: only one learner (task index 0) is supported, got %d\n", task_index);
    return 2;
  }
  std::string error;
  auto curve = wire::RunCurve(cfg, wire::Identity("learner", task_index), &error);
  if (!curve && !error.empty()) {
    std::fprintf(stderr, "learner: %s\n", error.c_str());
    return 2;
  }
  zmq::context_t ctx(1);
  const uint64_t incarnation = wire::NewIncarnation();
  // The first status goes out after Start, so the coordinator's first learner status
  // carries real counts (a restored learner starts from its checkpoint's).
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(),
                              wire::MakeSender(wire::ROLE_LEARNER, task_index, incarnation), curve.get());
  learner::Learner learner(cfg, ctx, cfg.cluster().learner(), incarnation, curve);
  if (!learner.Start(&error)) {
    std::fprintf(stderr, "learner: %s\n", error.c_str());
    return 2;
  }
  while (!StopFlag().load()) {
    SleepUnlessStopped(cfg.learner().status_interval_s());
    learner.FillStatus(&channel.status());
    channel.Send("training");
  }
  learner.Stop();
  learner.FillStatus(&channel.status());
  if (!cfg.run_dir().empty()) {
    if (!learner.WriteCheckpoint(&error)) {
      std::fprintf(stderr, "learner: final checkpoint failed: %s\n", error.c_str());
      learner.FillStatus(&channel.status());  // carries checkpoint_error
      channel.Send("stopped; final checkpoint FAILED");
      return 1;
    }
    std::fprintf(stderr, "learner: final checkpoint at version %lld written to %s/checkpoint.bin\n",
                 (long long)learner.policy_version(), cfg.run_dir().c_str());
  }
  channel.Send("stopped");
  return 0;
}

int RunPsRole(const config::Config& cfg, int task_index) {
  if (task_index < 0 || task_index >= cfg.cluster().ps_size()) {
    std::fprintf(stderr, "ps: task index %d, but cluster.ps lists %d endpoints\n", task_index,
                 cfg.cluster().ps_size());
    return 2;
  }
  std::string error;
  auto curve = wire::RunCurve(cfg, wire::Identity("ps", task_index), &error);
  if (!curve && !error.empty()) {
    std::fprintf(stderr, "ps %d: %s\n", task_index, error.c_str());
    return 2;
  }
  zmq::context_t ctx(1);
  // CURVE: gets from actors and learners, puts (checked per request) from learners.
  std::unique_ptr<wire::ZapHandler> zap;
  if (curve) zap = std::make_unique<wire::ZapHandler>(ctx, *curve, wire::RunAllowList(), "ps " + std::to_string(task_index));
  ps::ShardOptions opt;
  opt.shard = task_index;
  opt.num_shards = cfg.ps().num_shards();
  opt.versions_kept = cfg.ps().versions_kept();
  opt.max_message_bytes = cfg.cluster().max_message_bytes();
  opt.incarnation = wire::NewIncarnation();
  opt.curve = curve.get();
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(),
                              wire::MakeSender(wire::ROLE_PS, task_index, opt.incarnation), curve.get());
  ps::Shard shard(ctx, opt);
  if (!shard.Bind(cfg.cluster().ps(task_index), &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  std::thread server([&] { shard.Run(StopFlag()); });
  auto report = [&](const char* activity) {
    wire::Status& s = channel.status();
    s.set_policy_version(shard.stats().newest_version.load());
    auto& refused = *s.mutable_refused_by_reason();
    for (size_t r = 0; r < size_t(ps::Refusal::kCount); ++r) {
      if (const int64_t n = shard.stats().refused[r].load()) refused[ps::RefusalName(ps::Refusal(r))] = n;
    }
    if (zap && zap->rejected() > 0) refused["unauthorised_connection"] = zap->rejected();
    channel.Send(activity);
  };
  while (!StopFlag().load()) {
    report("serving");
    SleepUnlessStopped(1.0);
  }
  server.join();
  report("stopped");
  return 0;
}

int RunActorRole(const config::Config& cfg, int task_index) {
  return actors::RunActor(cfg, task_index, StopFlag());
}

}  // namespace stampede::tools
