// `stampede sweep CONFIG --grid field=v1,v2,... [--grid ...] [--seeds N] [--parallel K]`:
// every point of the grid (the product of the --grid lists) times N seeds, each a normal
// `stampede run` in its own run directory under one sweep directory, K at a time; then
// sweep.csv (one row per run), sweep.md (per point: final and best 100-episode mean,
// frames to the target, frames/s, mean +- std over the seeds) and sweep.png (the curves,
// where the venv has matplotlib).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::tools {

struct SweepOptions {
  std::string config_path;
  std::vector<std::string> grids;  // "field=v1,v2,..."
  std::vector<std::string> sets;   // --set overrides for every run
  int seeds = 1;
  int parallel = 1;
  std::string dir;      // the sweep directory (default: runs/sweep-<config>-<time>)
  double target = 0;    // frames-to-target threshold; 0: the config's stop.target_return
};

int RunSweep(const SweepOptions& opt);

// The points of a grid: the product of the "field=v1,v2,..." lists, each point the
// "field=v" overrides in --grid order (one empty point for no grids); an error for a
// malformed list.
base::StatusOr<std::vector<std::vector<std::string>>> GridPoints(const std::vector<std::string>& grids);

}  // namespace stampede::tools
