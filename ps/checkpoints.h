// Sharded checkpoints (learner.update_mode "sync"/"async"), in
// RUN_DIR/checkpoints/ckpt-<sequence>/:
//   shard-<i>.bin     each PS shard's slice, its RMSProp state, its version and the
//                     learners' frame counts it holds (written by the shard);
//   config.textproto  the run's resolved config, and counters.txt the global counters
//                     (written by the chief learner);
//   MANIFEST          written last by the chief (temp file, fsync, rename): every part's
//                     size and checksum. A directory without one, or whose parts do not
//                     match it, is not a checkpoint.
// The newest complete one is used; damaged ones are skipped with a warning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::ps {

struct ShardPart {
  int32_t shard = 0, num_shards = 1;
  int64_t version = 0, offset = 0, count = 0, total_size = 0;
  uint64_t layout_fingerprint = 0;
  std::vector<int64_t> learner_frames;  // per learner, the newest count the shard saw
  std::vector<float> params, mean_square, momentum;  // count each
};

std::string SerializeShardPart(const ShardPart& part);
// Refuses (invalid argument, naming `path` and the problem) a truncated or damaged part,
// one with another magic, and non-finite parameters or optimizer state.
base::Status ParseShardPart(const std::string& bytes, const std::string& path, ShardPart* part);

struct ManifestPart {
  std::string file;
  int64_t bytes = 0;
  uint64_t checksum = 0;
};

struct Manifest {
  int64_t sequence = 0;
  int64_t version = 0;  // shard 0's version at the checkpoint (the global step)
  std::vector<int64_t> learner_frames;
  std::vector<ManifestPart> parts;
  // Written by the chief learner's ordered stop (its last checkpoint of the run), not by a
  // periodic round: the coordinator judges a death during the stop by it.
  bool final = false;
  int64_t env_frames() const;
};

std::string CheckpointDir(const std::string& root, int64_t sequence);
std::string ShardPartName(int shard);
// Writes `dir`/MANIFEST atomically: the checkpoint is complete once this returns ok
// (internal: the OS error).
base::Status WriteManifest(const std::string& dir, const Manifest& m);
// Invalid argument, naming the directory, when the MANIFEST is missing or malformed.
base::Status ReadManifest(const std::string& dir, Manifest* m);
// Reads `dir`/`part.file` and checks its size and checksum against the manifest (invalid
// argument, naming the file and the problem, when they differ).
base::Status ReadPart(const std::string& dir, const ManifestPart& part, std::string* bytes);

struct FoundCheckpoint {
  std::string dir;
  Manifest manifest;
};
// The newest complete checkpoint under `root` whose every part matches its manifest and
// whose shard parts parse (finite); each one skipped on the way adds a line to
// `warnings`. False when there is none.
bool FindNewestCheckpoint(const std::string& root, FoundCheckpoint* found, std::vector<std::string>* warnings);
// The sequence number a new checkpoint under `root` gets (one above every directory there).
int64_t NextCheckpointSequence(const std::string& root);
// Keeps the newest `keep` intact checkpoints and anything newer than them (a checkpoint
// being written, or a damaged one to look at); removes everything older.
void PruneCheckpoints(const std::string& root, int keep);

struct Placement;

// `stampede run --resume` with another ps.num_shards (or ps.placement / partition_bytes):
// reads every shard's part of `from` (laid out by `old_placement`), and writes a new
// checkpoint under `root` (the next sequence) with one part per shard of `new_placement`:
// the same parameters and optimizer state, value for value, each part at the version the
// old parts were at (their newest) with every learner's newest frame count, and
// `config_text` as its config.textproto (the other chief parts copied). Invalid argument,
// naming the file, when an old part is missing or does not match `old_placement`.
// *written: the new checkpoint's directory.
base::Status ReshardCheckpoint(const FoundCheckpoint& from, const Placement& old_placement,
                               const Placement& new_placement, const std::string& root,
                               const std::string& config_text, std::string* written);

// A version high-water mark per shard (RUN_DIR/ps-<i>.version): before it serves a
// version above the mark, a shard raises the mark by a block and syncs the file, so a
// restarted shard numbers above anything it ever served.
int64_t ReadVersionMark(const std::string& path);
base::Status WriteVersionMark(const std::string& path, int64_t mark);

}  // namespace stampede::ps
