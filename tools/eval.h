// `stampede eval` (a checkpoint's policy without learning: per-task mean +- std return,
// optionally an episode saved as a GIF) and `stampede export` (a checkpoint's tensors as
// numpy's .npz, named by the layout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::tools {

struct EvalOptions {
  std::string checkpoint;
  std::string config;   // empty: config.textproto next to the checkpoint
  std::string task;     // empty: every task
  int episodes = 10;
  bool greedy = false;  // the most likely action instead of a sample
  std::string record;   // a .gif of the first episode (of the first task evaluated)
  uint64_t seed = 12345;
  // An episode still running after this many agent steps ends there (a greedy policy
  // can loop forever in an env without a time limit, e.g. MinAtar); the env's own
  // max_episode_steps applies first.
  int max_steps = 10000;
};
struct EvalTaskResult {
  std::string name;
  double mean = 0, std = 0;
  int episodes = 0;
  int capped = 0;  // episodes ended by max_steps, not by the env
};
int RunEvalCommand(const EvalOptions& opt, const std::string& self_exe);
// The evaluation itself (what the command prints), or why not.
[[nodiscard]] base::Status Evaluate(const EvalOptions& opt, const std::string& self_exe,
                                    std::vector<EvalTaskResult>* out);

int RunExportCommand(const std::string& checkpoint, const std::string& out_path, const std::string& config);

// Writes frames (each H x W RGB, row-major) as an animated GIF (256-colour palette,
// 3-3-2 bits per channel), `delay_cs` hundredths of a second per frame.
base::Status WriteGif(const std::string& path, int width, int height,
                      const std::vector<std::vector<uint8_t>>& rgb_frames, int delay_cs);

}  // namespace stampede::tools
