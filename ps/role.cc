#include "ps/role.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "base/log.h"
#include "net/from_config.h"
#include "ps/checkpoints.h"
#include "ps/shard.h"
#include "wire/auth.h"
#include "config/config.h"
#include "wire/status_channel.h"
#include "wire/zmq_util.h"

namespace stampede::ps {

namespace {
// A shard reports to the coordinator this often (its heartbeat and counters).
constexpr double kStatusIntervalS = 1.0;
}  // namespace

base::Status RunPsRole(const config::Config& cfg, int task_index, int restarts, std::atomic<bool>& stop) {
  if (task_index < 0 || task_index >= cfg.cluster().ps_size()) {
    return base::InvalidArgument("task index " + std::to_string(task_index) + ", but cluster.ps lists " +
                                 std::to_string(cfg.cluster().ps_size()) + " endpoints");
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<const wire::Curve> curve, wire::RunCurve(cfg, wire::Identity("ps", task_index)));
  zmq::context_t ctx(1);
  // CURVE: gets from actors and learners, puts (checked per request) from learners.
  std::unique_ptr<wire::ZapHandler> zap;
  if (curve) zap = std::make_unique<wire::ZapHandler>(ctx, *curve, wire::RunAllowList(), "ps " + std::to_string(task_index));
  ShardOptions opt;
  opt.shard = task_index;
  opt.num_shards = cfg.ps().num_shards();
  opt.versions_kept = cfg.ps().versions_kept();
  opt.max_message_bytes = cfg.cluster().max_message_bytes();
  opt.incarnation = wire::NewIncarnation();
  opt.curve = curve.get();
  opt.mode = UpdateModeOf(cfg.learner().update_mode());
  opt.num_learners = cfg.learner().num_learners();
  opt.replicas_to_aggregate =
      cfg.learner().replicas_to_aggregate() > 0 ? cfg.learner().replicas_to_aggregate() : cfg.learner().num_learners();
  opt.max_staleness = cfg.learner().max_gradient_staleness();
  opt.optimizer = net::OptimizerHyperFromConfig(cfg.learner().optimizer());
  if (opt.mode != UpdateMode::kRelay && !cfg.run_dir().empty()) {
    // The shard owns its slice's optimizer: it numbers versions above anything it served
    // before (the mark), and starts from the newest complete checkpoint if there is one.
    opt.version_mark_path = cfg.run_dir() + "/ps-" + std::to_string(task_index) + ".version";
    opt.checkpoint_root = cfg.run_dir() + "/checkpoints";
    FoundCheckpoint found;
    std::vector<std::string> warnings;
    const bool have = FindNewestCheckpoint(cfg.run_dir() + "/checkpoints", &found, &warnings);
    for (const auto& w : warnings) base::LogWarning("ps %d: WARNING: %s\n", task_index, w.c_str());
    if (have) {
      auto part = std::make_shared<ShardPart>();
      std::string bytes;
      const ManifestPart* listed = nullptr;
      for (const auto& p : found.manifest.parts) {
        if (p.file == ShardPartName(task_index)) listed = &p;
      }
      base::Status usable = listed == nullptr ? base::InvalidArgument("not listed in its MANIFEST")
                                              : ReadPart(found.dir, *listed, &bytes);
      if (usable.ok()) usable = ParseShardPart(bytes, found.dir + "/" + ShardPartName(task_index), part.get());
      if (usable.ok() && (part->shard != task_index || part->num_shards != opt.num_shards)) {
        usable = base::InvalidArgument("it is shard " + std::to_string(part->shard) + " of " +
                                       std::to_string(part->num_shards));
      }
      if (!usable.ok()) {
        return base::InvalidArgument("checkpoint " + found.dir + " has no usable part for this shard: " +
                                     usable.message());
      }
      const int64_t mark = ReadVersionMark(opt.version_mark_path);
      base::LogInfo("ps %d: restored the parameters and optimizer state of version %lld from %s%s; serving them as version %lld\n",
                   task_index, (long long)part->version, found.dir.c_str(), restarts > 0 ? " after a restart" : "",
                   (long long)std::max(part->version, mark));
      opt.restore = part;
    }
  }
  wire::StatusChannel channel(ctx, cfg.cluster().coordinator(),
                              wire::MakeSender(wire::ROLE_PS, task_index, opt.incarnation), curve.get(),
                              cfg.cluster().control(), &stop);
  Shard shard(ctx, opt);
  if (const base::Status bound = shard.Bind(BindEndpoint(cfg, cfg.cluster().ps(task_index))); !bound.ok()) {
    return base::InvalidArgument(bound.message());
  }
  std::thread server([&] { shard.Run(stop); });
  auto report = [&](const char* activity) {
    wire::Status& s = channel.status();
    s.set_policy_version(shard.stats().newest_version.load());
    auto& refused = *s.mutable_refused_by_reason();
    for (size_t r = 0; r < size_t(Refusal::kCount); ++r) {
      if (const int64_t n = shard.stats().refused[r].load()) refused[RefusalName(Refusal(r))] = n;
    }
    if (zap && zap->rejected() > 0) refused["unauthorised_connection"] = zap->rejected();
    s.set_gradients_applied(shard.stats().gradients_applied.load());
    s.set_gradients_dropped(shard.stats().gradients_dropped.load());
    s.clear_staleness_histogram();
    if (opt.mode == UpdateMode::kAsync) {
      for (const auto& n : shard.stats().staleness) s.add_staleness_histogram(n.load());
    }
    channel.Send(activity);
  };
  while (!stop.load()) {
    report("serving");
    wire::SleepUnlessStopped(kStatusIntervalS, stop);
  }
  server.join();
  if (!opt.version_mark_path.empty() && shard.stats().newest_version.load() >= 0) {
    // A clean stop: nothing above the newest version was served, so a resumed run can
    // number on from exactly there.
    if (const base::Status marked = WriteVersionMark(opt.version_mark_path, shard.stats().newest_version.load());
        !marked.ok()) {
      base::LogInfo("ps %d: %s\n", task_index, marked.message().c_str());
    }
  }
  report("stopped");
  return base::OkStatus();
}

}  // namespace stampede::ps
