// The Slurm launcher (cluster.launcher "slurm"): the coordinator runs in the batch step of
// a heterogeneous job (`stampede launch slurm` writes it) and starts each role as a job
// step of that allocation, `srun --het-group=G --nodes=1 --ntasks=1 --overlap ...`:
// PS shards and learners on the first node of het group 0, actor i on node
// i / cluster.actors_per_node of het group 1 (a job array's tasks, which Slurm cannot make
// heterogeneous, use one allocation: SlurmLayout). The srun client is the coordinator's child,
// so exits, restarts and logs work as with the local launcher: srun exits with its
// task's status, and a restart is a new job step.
//
// Stopping: `scancel` sends SIGTERM to every step of the job at once, so roles started
// here ignore SIGTERM (STAMPEDE_STOP_SIGNAL=USR1, base/signals.cc) and the coordinator,
// which gets it too, stops them in its usual order with SIGUSR1, which srun forwards.
// SIGKILL to srun ends the step. Slurm's KillWait bounds the whole stop: after it, Slurm
// kills whatever is left.
#pragma once

#include <string>
#include <vector>

#include "coordinator/local_launcher.h"

namespace stampede::coordinator {

// The fleet's shape on Slurm, declared once: `stampede launch slurm` asks for it in the job
// script (SbatchRequests) and the launcher places every role by it (HetGroup, Node).
struct SlurmLayout {
  // A heterogeneous job (`stampede launch slurm`'s): group 0 (one node, one task) for the
  // coordinator, the PS shards and the learners, group 1 for the actors. Otherwise one
  // allocation (a job array's task, which Slurm cannot make heterogeneous): node 0 for the
  // coordinator, PS shards and learners, nodes 1.. for the actors (node 0 too if alone).
  bool heterogeneous = true;
  // Group 1's nodes (heterogeneous), or the whole allocation's (one allocation).
  int nodes = 1;

  // What a job script asks for: `actor_nodes` nodes of actors beside the servers' node.
  static SlurmLayout Requested(bool heterogeneous, int actor_nodes);
  // What the job got: SLURM_JOB_NODELIST_HET_GROUP_1 and SLURM_JOB_NUM_NODES(_HET_GROUP_1).
  static SlurmLayout FromEnvironment();
  // The #SBATCH node and task requests, one per component (two for a heterogeneous job).
  std::vector<std::string> SbatchRequests(int actors_per_node) const;
  // The role's het group (-1: the job is not heterogeneous) and node, relative to it.
  int HetGroup(wire::Role role) const;
  int Node(wire::Role role, int index, int actors_per_node) const;
  // Actors the allocation holds: its actor nodes x actors_per_node (the tasks it asked for).
  int ActorCapacity(int actors_per_node) const;
};

class SlurmLauncher final : public LocalLauncher {
 public:
  SlurmLauncher(std::string self_exe, std::string config_path, std::string run_dir, int actors_per_node,
                SlurmLayout layout, std::string srun = "srun");

  ProcessId Start(wire::Role role, int index, int restarts) override;
  void Terminate(ProcessId id) override;
  // The task runs on another node: its pid comes with its first status.
  int Pid(ProcessId) const override { return 0; }
  // An actor index past the allocation's tasks (`stampede scale` beyond the job).
  std::string NoRoom(wire::Role role, int index) const override;

  // The srun command line for a role (exposed for tests).
  std::vector<std::string> Command(wire::Role role, int index, int restarts) const;

 private:
  int actors_per_node_;
  SlurmLayout layout_;
  std::string srun_;
};

// Why this process cannot start roles as Slurm job steps ("" if it can): not inside a
// Slurm job, or srun not on PATH.
std::string SlurmLauncherUnavailable();

}  // namespace stampede::coordinator
