// `stampede run`: starts the PS shards, the learner and the actors as processes on
// this machine, supervises them (CAF actors inside this process), prints progress,
// writes RUN_DIR/metrics.jsonl, stops everything at the global budget or on Ctrl-C.
#pragma once

#include <string>

#include "config/config.pb.h"

namespace stampede::coordinator {

struct RunOptions {
  std::string config_name = "run";  // for the default run directory
  bool quiet = false;                // no progress lines (bench)
  // `stampede run --resume`: the run directory holds a stopped run; continue it from its
  // newest complete checkpoint (metrics.jsonl is appended to).
  bool resume = false;
  // `stampede coordinator`: start no process; supervise the ones started elsewhere (by
  // hand or a cluster scheduler) from their statuses, and stop them over cluster.control.
  bool standalone = false;
};

struct RunResult {
  int exit_code = 0;
  std::string run_dir;
  double wall_seconds = 0;
  long long env_frames = 0;
  long long learner_steps = 0;
  double mean_return_100 = 0;
  long long frames_to_target = -1;  // first frames at which the target was met
  double seconds_to_target = -1;
  int actor_restarts = 0;
};

// runs/NAME-<date>-<time>-<pid>: a run directory for a config that names none.
std::string DefaultRunDir(const std::string& name);
// Fills endpoints for any cluster address left empty (free loopback ports, or with
// cluster.local_transport "ipc" on the local launcher sockets in a fresh private directory,
// whose path goes to *socket_dir for the run to remove at its end; else it is made empty)
// and the run dir.
void ResolveRunConfig(config::Config* cfg, const RunOptions& opt, std::string* socket_dir);
RunResult RunCoordinator(config::Config cfg, const RunOptions& opt);
// `stampede checkpoints RUN_DIR`: prints the run's newest complete checkpoint; 0 if it is
// also the newest one there is, 1 if none is complete or a newer one is not.
int RunCheckpointsCommand(const config::Config& cfg);
// `stampede scale RUN_DIR --actors N`: asks the run's coordinator (through
// RUN_DIR/scale.request, which it reads every 100 ms) for N actors and prints its answer
// (RUN_DIR/scale.answer). 0: done; 1: refused, or no coordinator answered within
// `timeout_s`; 2: RUN_DIR is not a run directory.
int RunScaleCommand(const std::string& run_dir, int actors, double timeout_s);
// A file whose appearance in RUN_DIR makes the run's coordinator stop in order (exit 130,
// as SIGTERM); it reads it every 100 ms and removes it.
inline constexpr const char* kStopRequest = "stop.request";
// This executable's path (children and the spec resolver run it).
std::string SelfExePath();

}  // namespace stampede::coordinator
