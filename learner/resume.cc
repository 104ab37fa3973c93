#include "learner/resume.h"

#include "learner/checkpoint.h"
#include "ps/checkpoints.h"
#include "config/config.h"

namespace stampede::learner {

base::Status FindResumePoint(const config::Config& cfg, ResumePoint* point, std::vector<std::string>* warnings) {
  const std::string dir = cfg.run_dir();
  *point = ResumePoint{};
  if (ShardsOwnOptimizer(cfg)) {
    point->sharded = true;
    const std::string root = dir + "/checkpoints";
    const int64_t newest = ps::NextCheckpointSequence(root) - 1;  // 0: no directory at all
    if (newest > 0) point->newest_dir = ps::CheckpointDir(root, newest);
    ps::FoundCheckpoint found;
    if (!ps::FindNewestCheckpoint(root, &found, warnings)) {
      return base::Unavailable("no complete checkpoint in " + root + " to resume from");
    }
    point->from = found.dir;
    point->version = found.manifest.version;
    std::string bytes;
    for (const auto& p : found.manifest.parts) {
      ps::ShardPart part;
      if (p.file == ps::ShardPartName(0) && ps::ReadPart(found.dir, p, &bytes).ok() &&
          ps::ParseShardPart(bytes, found.dir + "/" + p.file, &part).ok()) {
        for (int64_t f : part.learner_frames) point->env_frames += f;
      }
    }
    return base::OkStatus();
  }
  const std::string path = cfg.learner().restore_from().empty() ? dir + "/checkpoint.bin" : cfg.learner().restore_from();
  CheckpointData d;
  RETURN_IF_ERROR(LoadCheckpoint(path, &d));
  point->from = path;
  point->newest_dir = path;
  point->version = d.version;
  point->env_frames = d.env_frames;
  return base::OkStatus();
}

}  // namespace stampede::learner
