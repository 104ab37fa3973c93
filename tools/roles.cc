#include "tools/roles.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "actors/actor.h"
#include "learner/learner.h"
#include "ps/checkpoints.h"
#include "ps/shard.h"
#include "wire/exit_codes.h"
#include "wire/config.h"
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

int RunLearnerRole(const config::Config& cfg, int task_index, int restarts) {
  if (task_index < 0 || task_index >= cfg.learner().num_learners()) {
    std::fprintf(stderr, "learner: task index %d, but learner.num_learners is %d\n", task_index,
                 cfg.learner().num_learners());
    return 2;
  }
  if (LearnerEndpoint(cfg, task_index).empty()) {
    std::fprintf(stderr, "learner %d: cluster.learners has no endpoint for it\n", task_index);
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
                              wire::MakeSender(wire::ROLE_LEARNER, task_index, incarnation), curve.get(),
                              cfg.cluster().control(), &StopFlag());
  learner::Learner learner(cfg, ctx, LearnerEndpoint(cfg, task_index), incarnation, curve, task_index, restarts > 0);
  if (!learner.Start(&error)) {
    std::fprintf(stderr, "learner: %s\n", error.c_str());
    return 2;
  }
  while (!StopFlag().load() && learner.failure().empty()) {
    SleepUnlessStopped(cfg.learner().status_interval_s());
    learner.FillStatus(&channel.status());
    channel.Send("training");
  }
  learner.Stop();
  if (const std::string failure = learner.failure(); !failure.empty()) {
    // Not restarted: the same device would fail the same way. The parameters on the
    // device cannot be trusted, so no final checkpoint either (the last one stands).
    learner.FillStatus(&channel.status());
    channel.Send(("stopped; " + failure).c_str());
    return wire::kExitDeviceError;
  }
  learner.FillStatus(&channel.status());
  if (!cfg.run_dir().empty()) {
    if (!learner.WriteCheckpoint(&error)) {
      std::fprintf(stderr, "learner: final checkpoint failed: %s\n", error.c_str());
      learner.FillStatus(&channel.status());  // carries checkpoint_error
      channel.Send("stopped; final checkpoint FAILED");
      return 1;
    }
    if (task_index == 0) {
      std::fprintf(stderr, "learner: final checkpoint at version %lld written to %s/checkpoint.bin\n",
                   (long long)learner.policy_version(), cfg.run_dir().c_str());
    }
  }
  channel.Send("stopped");
  return 0;
}

int RunPsRole(const config::Config& cfg, int task_index, int restarts) {
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
  opt.mode = ps::UpdateModeOf(cfg.learner().update_mode());
  opt.num_learners = cfg.learner().num_learners();
  opt.replicas_to_aggregate =
      cfg.learner().replicas_to_aggregate() > 0 ? cfg.learner().replicas_to_aggregate() : cfg.learner().num_learners();
  opt.max_staleness = cfg.learner().max_gradient_staleness();
  opt.rms_decay = float(cfg.learner().optimizer().decay());
  opt.rms_momentum = float(cfg.learner().optimizer().momentum());
  opt.rms_epsilon = float(cfg.learner().optimizer().epsilon());
  if (opt.mode != ps::UpdateMode::kRelay && !cfg.run_dir().empty()) {
    // The shard owns its slice's optimizer: it numbers versions above anything it served
    // before (the mark), and starts from the newest complete checkpoint if there is one.
    opt.version_mark_path = cfg.run_dir() + "/ps-" + std::to_string(task_index) + ".version";
    opt.checkpoint_root = cfg.run_dir() + "/checkpoints";
    ps::FoundCheckpoint found;
    std::vector<std::string> warnings;
    const bool have = ps::FindNewestCheckpoint(cfg.run_dir() + "/checkpoints", &found, &warnings);
    for (const auto& w : warnings) std::fprintf(stderr, "ps %d: WARNING: %s\n", task_index, w.c_str());
    if (have) {
      auto part = std::make_shared<ps::ShardPart>();
      std::string bytes;
      const ps::ManifestPart* listed = nullptr;
      for (const auto& p : found.manifest.parts) {
        if (p.file == ps::ShardPartName(task_index)) listed = &p;
      }
      if (listed == nullptr || !ps::ReadPart(found.dir, *listed, &bytes, &error) ||
          !ps::ParseShardPart(bytes, found.dir + "/" + ps::ShardPartName(task_index), part.get(), &error) ||
          part->shard != task_index || part->num_shards != opt.num_shards) {
        std::fprintf(stderr, "ps %d: checkpoint %s has no usable part for this shard%s%s\n", task_index,
                     found.dir.c_str(), error.empty() ? "" : ": ", error.c_str());
        return 2;
      }
      const int64_t mark = ps::ReadVersionMark(opt.version_mark_path);
      std::fprintf(stderr, "ps %d: restored the parameters and optimizer state of version %lld from %s%s; serving them as version %lld\n",
                   task_index, (long long)part->version, found.dir.c_str(), restarts > 0 ? " after a restart" : "",
                   (long long)std::max(part->version, mark));
      opt.restore = part;
    }
  }
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(),
                              wire::MakeSender(wire::ROLE_PS, task_index, opt.incarnation), curve.get(),
                              cfg.cluster().control(), &StopFlag());
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
    s.set_gradients_applied(shard.stats().gradients_applied.load());
    s.set_gradients_dropped(shard.stats().gradients_dropped.load());
    s.clear_staleness_histogram();
    if (opt.mode == ps::UpdateMode::kAsync) {
      for (const auto& n : shard.stats().staleness) s.add_staleness_histogram(n.load());
    }
    channel.Send(activity);
  };
  while (!StopFlag().load()) {
    report("serving");
    SleepUnlessStopped(1.0);
  }
  server.join();
  if (!opt.version_mark_path.empty() && shard.stats().newest_version.load() >= 0) {
    // A clean stop: nothing above the newest version was served, so a resumed run can
    // number on from exactly there.
    std::string mark_error;
    if (!ps::WriteVersionMark(opt.version_mark_path, shard.stats().newest_version.load(), &mark_error)) {
      std::fprintf(stderr, "ps %d: %s\n", task_index, mark_error.c_str());
    }
  }
  report("stopped");
  return 0;
}

int RunActorRole(const config::Config& cfg, int task_index) {
  return actors::RunActor(cfg, task_index, StopFlag());
}

}  // namespace stampede::tools
