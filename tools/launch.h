// `stampede launch slurm CONFIG --run-dir D ...`: writes D/job.sbatch, a heterogeneous
// Slurm job for the config's fleet (component 0: the coordinator, PS shards and
// learners on one node; component 1: the actors, N nodes x K tasks), and with --submit
// runs sbatch and prints the job id. Inside the job, `stampede run` starts each role as
// a job step (cluster.launcher "slurm", coordinator/slurm_launcher.h) and keeps
// its restart and stop decisions. --sweep-grid makes a job array, one grid point per task,
// each in its own run directory D/pNNN.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

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
  int population = 0;        // the config's pbt.population (set by LaunchSlurm): one allocation, members as job steps
};

// The job script for `points` (one run per point; more than one makes a job array);
// `configs[i]` is point i's config file, `dirs[i]` its run directory (absolute paths).
std::string SlurmJobScript(const SlurmLaunchOptions& opt, const std::vector<std::string>& configs,
                           const std::vector<std::string>& dirs);

// The whole command; its exit code (2: bad arguments or config, with the reason).
int LaunchSlurm(const SlurmLaunchOptions& opt);

}  // namespace stampede::tools

namespace stampede::tools {

// `stampede launch k8s CONFIG --out DIR ...`: plain Kubernetes manifests for the fleet (no
// custom resources). The PS shards and the learners are StatefulSets behind headless
// Services (stable DNS names: the config's endpoints), the actors an Indexed Job (task
// index from JOB_COMPLETION_INDEX), the coordinator a Job (`stampede coordinator`, which
// supervises from the statuses and makes the stop decisions); the resolved config is a
// ConfigMap, the CURVE keys a Secret, the run directory a ReadWriteMany volume claim.
struct K8sLaunchOptions {
  std::string config_path;
  std::vector<std::string> sets;
  std::string out_dir;
  std::string name;                 // prefix of every object (default: stampede-CONFIGSTEM)
  std::string ns = "default";
  std::string image = "stampede:latest";
  int actors = 0;                   // 0: the config's actors.num_actors
  // Keys for this many actors (0: `actors`), so that the actor Job can be scaled up to it
  // while the run goes on (an Indexed Job's parallelism and completions, together).
  int max_actors = 0;
  int learner_gpus = 0;             // nvidia.com/gpu per learner pod
  std::string storage = "10Gi";     // the run directory's claim
  std::string storage_class;        // "" : the cluster's default class
  std::string keys_dir;             // "" : fresh keys; else these (the golden tests pin them)
};

// The manifests, file name -> text; an error for a bad config or options.
base::Status K8sManifests(const K8sLaunchOptions& opt, std::vector<std::pair<std::string, std::string>>* files);

int LaunchK8s(const K8sLaunchOptions& opt);

}  // namespace stampede::tools
