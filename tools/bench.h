// `stampede bench`: raw env steps/s on one core, actor steps/s with batched inference
// (no learner, no sockets), learner steps/s on one core, and end-to-end fleet frames/s
// with learning. Prints figures
// next to the limits DESIGN.md gives for this machine; asserts nothing.
#pragma once

#include <string>
#include <vector>

namespace stampede::tools {

struct BenchOptions {
  std::string config_path = "configs/cartpole.textproto";
  std::vector<std::string> sets;
  double seconds = 2.0;
  long long fleet_frames = 1000000;
};

int RunBench(const BenchOptions& opt);

}  // namespace stampede::tools
