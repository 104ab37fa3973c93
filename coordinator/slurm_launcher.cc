#include "coordinator/slurm_launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "wire/zmq_util.h"

namespace stampede::coordinator {

SlurmLauncher::SlurmLauncher(std::string self_exe, std::string config_path, std::string run_dir, int actors_per_node,
                             SlurmLayout layout, std::string srun)
    : LocalLauncher(std::move(self_exe), std::move(config_path), std::move(run_dir)),
      actors_per_node_(actors_per_node < 1 ? 1 : actors_per_node),
      layout_(layout),
      srun_(std::move(srun)) {}

namespace {
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}
}  // namespace

SlurmLayout SlurmLayout::Requested(bool heterogeneous, int actor_nodes) {
  return SlurmLayout{heterogeneous, heterogeneous ? actor_nodes : 1 + actor_nodes};
}

SlurmLayout SlurmLayout::FromEnvironment() {
  SlurmLayout l;
  const char* het = std::getenv("SLURM_JOB_NODELIST_HET_GROUP_1");
  l.heterogeneous = het != nullptr && *het != '\0';
  l.nodes = std::max(1, EnvInt(l.heterogeneous ? "SLURM_JOB_NUM_NODES_HET_GROUP_1" : "SLURM_JOB_NUM_NODES", 1));
  return l;
}

std::vector<std::string> SlurmLayout::SbatchRequests(int actors_per_node) const {
  const std::string actors = "--nodes=" + std::to_string(nodes) + " --ntasks-per-node=" + std::to_string(actors_per_node);
  if (heterogeneous) return {"--nodes=1 --ntasks=1", actors};
  return {actors};
}

int SlurmLayout::HetGroup(wire::Role role) const {
  if (!heterogeneous) return -1;
  return role == wire::ROLE_ACTOR ? 1 : 0;
}

int SlurmLayout::Node(wire::Role role, int index, int actors_per_node) const {
  if (role != wire::ROLE_ACTOR) return 0;
  const int k = std::max(1, actors_per_node);
  if (heterogeneous) return (index / k) % std::max(1, nodes);
  return nodes > 1 ? 1 + (index / k) % (nodes - 1) : 0;
}

int SlurmLayout::ActorCapacity(int actors_per_node) const {
  const int actor_nodes = heterogeneous ? nodes : std::max(1, nodes - 1);
  return std::max(1, actors_per_node) * std::max(1, actor_nodes);
}

std::string SlurmLauncher::NoRoom(wire::Role role, int index) const {
  const int capacity = layout_.ActorCapacity(actors_per_node_);
  if (role != wire::ROLE_ACTOR || index < capacity) return {};
  return "the Slurm allocation has room for " + std::to_string(capacity) + " actors (" +
         std::to_string(capacity / actors_per_node_) + " actor node(s) x cluster.actors_per_node " +
         std::to_string(actors_per_node_) + "); actor " + std::to_string(index) +
         " would need more (submit the job with more --actor-nodes or --actors-per-node)";
}

std::vector<std::string> SlurmLauncher::Command(wire::Role role, int index, int restarts) const {
  std::vector<std::string> argv = {srun_};
  if (const int group = layout_.HetGroup(role); group >= 0) argv.push_back("--het-group=" + std::to_string(group));
  const int node = layout_.Node(role, index, actors_per_node_);
  for (std::string a : {std::string("--nodes=1"), std::string("--ntasks=1"), "--relative=" + std::to_string(node),
                        // Steps share the allocation's CPUs (the batch step holds node 0's;
                        // a restarted actor need not wait for its old step to be released).
                        std::string("--overlap"),
                        std::string("--job-name=stampede-") + wire::RoleName(role) + "-" + std::to_string(index)}) {
    argv.push_back(std::move(a));
  }
  for (auto& a : RoleCommand(self_exe_, config_path_, role, index, restarts)) argv.push_back(std::move(a));
  return argv;
}

ProcessId SlurmLauncher::Start(wire::Role role, int index, int restarts) {
  return SpawnLogged(Command(role, index, restarts), LogPath(role, index), {{"STAMPEDE_STOP_SIGNAL", "USR1"}});
}

void SlurmLauncher::Terminate(ProcessId id) {
  if (id > 0) ::kill(pid_t(id), SIGUSR1);
}

std::string SlurmLauncherUnavailable() {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0') return "not inside a Slurm job (SLURM_JOB_ID is unset)";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && ::access((dir + "/srun").c_str(), X_OK) == 0) return "";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "srun is not on PATH";
}

}  // namespace stampede::coordinator
