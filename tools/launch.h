// `stampede launch slurm CONFIG --run-dir D ...`: writes D/job.sbatch, a heterogeneous
// Slurm job for the config's fleet (component 0: the coordinator, PS shards and
// learners on one node; component 1: the actors, N nodes x K tasks), and with --submit
// runs sbatch and prints the job id. Inside the job, `stampede run` starts each role as
// a job step (cluster.launcher "slurm", tools/coordinator/slurm_launcher.h) and keeps
// its restart and stop decisions. --sweep-grid makes a job array, one grid point per task,
// each in its own run directory D/pNNN.
#pragma once

#include <string>
#include <vector>

namespace stampede::tools {

struct SlurmLaunchOptions {
  std::string config_path;
  std::vector<std::string> sets;         // --set, for every point
  std::vector<std::string> sweep_grids;  // --sweep-grid field=v1,v2,... (stampede sweep's syntax)
  std::string run_dir;
  int actor_nodes = 1;
  int actors_per_node = 2;
  std::string partition, time;
  std::string learner_gres, learner_constraint, actor_constraint;
  bool requeue = false;  // a preempted or timed-out job requeues and resumes from its newest checkpoint
  bool submit = false;
  std::string stampede_exe;  // the executable the job runs (default: this one)
};

// The job script for `points` (one run per point; more than one makes a job array);
// `configs[i]` is point i's config file, `dirs[i]` its run directory (absolute paths).
std::string SlurmJobScript(const SlurmLaunchOptions& opt, const std::vector<std::string>& configs,
                           const std::vector<std::string>& dirs);

// The whole command; its exit code (2: bad arguments or config, with the reason).
int LaunchSlurm(const SlurmLaunchOptions& opt);

}  // namespace stampede::tools
