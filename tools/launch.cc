#include "tools/launch.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "base/log.h"
#include "coordinator/run.h"
#include "coordinator/slurm_launcher.h"
#include "tools/sweep.h"
#include "config/config.h"
#include "base/durable_file.h"

namespace stampede::tools {

namespace fs = std::filesystem;

namespace {

// `s` as one word for bash.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

std::string SlurmJobScript(const SlurmLaunchOptions& opt, const std::vector<std::string>& configs,
                           const std::vector<std::string>& dirs) {
  const bool array = configs.size() > 1;
  const std::string root = fs::absolute(opt.run_dir).lexically_normal().string();
  std::ostringstream s;
  s << "#!/bin/bash\n";
  if (opt.population > 0) {
    s << "# Written by `stampede launch slurm " << opt.config_path << "`: a population of " << opt.population
      << " members in one allocation\n# of " << opt.actor_nodes << " node(s). This script runs the population (config `pbt`); "
      << "each member's whole fleet\n# is a job step on one node. scancel stops every member in order; "
      << "submitted again, the job resumes them.\n";
  } else {
    s << "# Written by `stampede launch slurm " << opt.config_path << "`: the fleet as one heterogeneous job.\n"
      << "# Component 0: this script (the coordinator), the PS shards and the learners, on one node.\n"
      << "# Component 1: the actors, " << opt.actor_nodes << " node(s) x " << opt.actors_per_node << ".\n"
      << "# The coordinator starts every role as a job step (srun) and makes the restart and stop\n"
      << "# decisions; scancel stops the roles in order and writes the final checkpoint.\n";
  }
  s << "#SBATCH --job-name=stampede-" << fs::path(opt.config_path).stem().string() << "\n";
  s << "#SBATCH --output=" << root << (array ? "/slurm-%A_%a.out" : "/slurm-%j.out") << "\n";
  s << "#SBATCH --open-mode=append\n";
  s << (opt.requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
  if (!opt.partition.empty()) s << "#SBATCH --partition=" << opt.partition << "\n";
  if (!opt.time.empty()) {
    s << "#SBATCH --time=" << opt.time << "\n";
    // At the time limit Slurm signals every step at once and kills after KillWait; a
    // SIGTERM to this script 120 s before lets the coordinator stop in order first.
    s << "#SBATCH --signal=B:TERM@120\n";
  }
  if (array) s << "#SBATCH --array=0-" << configs.size() - 1 << "\n";
  // Slurm runs no heterogeneous job arrays: each task is one allocation, its first node
  // for the coordinator, PS shards and learners, the others for the actors (the launcher
  // finds the layout from the job's environment).
  const auto layout = coordinator::SlurmLayout::Requested(!array, opt.actor_nodes);
  const auto requests = layout.SbatchRequests(opt.actors_per_node);
  if (opt.population > 0) {
    // A population: one allocation; the script runs the population, each member's fleet
    // a job step on one of its nodes (pbt.member_job_steps).
    s << "#SBATCH --nodes=" << opt.actor_nodes << " --ntasks=" << opt.population;
    if (!opt.learner_gres.empty()) s << " --gres=" << opt.learner_gres;
    if (!opt.learner_constraint.empty()) s << " --constraint=" << opt.learner_constraint;
    s << "\n\nset -u\nSTAMPEDE=" << Quote(opt.stampede_exe) << "\nconfig=" << Quote(configs[0])
      << "\nrun_dir=" << Quote(dirs[0]) << "\n";
    s << R"SH(echo "stampede job ${SLURM_JOB_ID}: a population on $(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -); run directory $run_dir"
if [ -e "$run_dir/population.textproto" ]; then
  # Requeued or submitted again: every member goes on from its newest checkpoint.
  exec "$STAMPEDE" run --resume "$run_dir" --set pbt.member_job_steps=true
fi
exec "$STAMPEDE" run "$config" --run-dir "$run_dir" --set pbt.member_job_steps=true
)SH";
    return s.str();
  }
  for (size_t c = 0; c < requests.size(); ++c) {
    if (c > 0) s << "#SBATCH hetjob\n";
    s << "#SBATCH " << requests[c];
    // The servers' component (or the one allocation) gets the learner's GPUs.
    if (c == 0 && !opt.learner_gres.empty()) s << " --gres=" << opt.learner_gres;
    const std::string& constraint = c == 0 && (layout.heterogeneous || !opt.learner_constraint.empty())
                                        ? opt.learner_constraint
                                        : opt.actor_constraint;
    if (!constraint.empty()) s << " --constraint=" << constraint;
    s << "\n";
  }
  s << "\nset -u\n";
  s << "STAMPEDE=" << Quote(opt.stampede_exe) << "\n";
  s << "CONFIGS=(";
  for (const auto& c : configs) s << " " << Quote(c);
  s << " )\nDIRS=(";
  for (const auto& d : dirs) s << " " << Quote(d);
  s << " )\n";
  s << R"SH(i=${SLURM_ARRAY_TASK_ID:-0}
config=${CONFIGS[$i]}
run_dir=${DIRS[$i]}
# The address the actors' nodes reach this one at: its name where the name resolves,
# else Slurm's NodeAddr for it.
if [ -n "${SLURM_JOB_NODELIST_HET_GROUP_1:-}" ]; then
  head=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n 1)
  actors=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_1" | paste -sd, -)
else
  head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  actors=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n +2 | paste -sd, -)
fi
addr=$(getent ahostsv4 "$head" | awk '{print $1; exit}')
if [ -z "$addr" ]; then
  addr=$(scontrol show node "$head" | grep -o 'NodeAddr=[^ ]*' | head -n 1 | cut -d= -f2)
fi
if [ -z "$addr" ]; then
  echo "stampede job: no address for node $head (scontrol show node $head has no NodeAddr)" >&2
  exit 2
fi
echo "stampede job ${SLURM_JOB_ID}: coordinator, PS and learners on $head ($addr); actors on $actors; run directory $run_dir"
)SH";
  s << "common=(--set cluster.launcher=slurm --set \"cluster.host=$addr\" --set cluster.actors_per_node="
    << opt.actors_per_node << ")\n";
  s << R"SH(mkdir -p "$run_dir"
if "$STAMPEDE" checkpoints "$run_dir" > /dev/null 2>&1; then
  # Requeued (preempted or timed out) or submitted again: go on from the newest complete
  # checkpoint, as `stampede run --resume` does.
  exec "$STAMPEDE" run --resume "$run_dir" "${common[@]}"
fi
if [ -e "$run_dir/metrics.jsonl" ]; then
  # Stopped before its first checkpoint: keep what it wrote and start again.
  mv "$run_dir/metrics.jsonl" "$run_dir/metrics.jsonl.before-restart-${SLURM_RESTART_COUNT:-0}"
fi
exec "$STAMPEDE" run "$config" --run-dir "$run_dir" "${common[@]}"
)SH";
  return s.str();
}

int LaunchSlurm(const SlurmLaunchOptions& opt_in) {
  SlurmLaunchOptions opt = opt_in;
  auto fail = [](const std::string& why) {
    base::LogError("stampede launch slurm: %s\n", why.c_str());
    return 2;
  };
  if (opt.run_dir.empty()) return fail("--run-dir is required (the job's run directory, on a file system every node shares)");
  if (opt.actor_nodes < 1 || opt.actors_per_node < 1) return fail("--actor-nodes and --actors-per-node must be at least 1");
  if (!opt.learner_gres.empty() && !opt.learner_constraint.empty()) {
    return fail("--learner-gres and --learner-constraint: give one (a GPU, or a node feature)");
  }
  if (opt.stampede_exe.empty()) opt.stampede_exe = coordinator::SelfExePath();
  const base::StatusOr<std::vector<std::vector<std::string>>> grid = GridPoints(opt.sweep_grids);
  if (!grid.ok()) return fail(grid.status().message());
  const std::vector<std::vector<std::string>>& points = *grid;
  const std::string root = fs::absolute(opt.run_dir).lexically_normal().string();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return fail("cannot create " + root + ": " + ec.message());
  const int actors = opt.actor_nodes * opt.actors_per_node;
  {
    // A population keeps its members' fleets as the config says (each on one node).
    LoadedConfig probe;
    if (LoadConfig(opt.config_path, opt.sets, &probe).ok()) opt.population = probe.config.pbt().population();
  }
  if (opt.population > 0 && points.size() > 1) return fail("a population (pbt) is one job: give no --sweep-grid with it");
  std::vector<std::string> configs, dirs;
  for (size_t p = 0; p < points.size(); ++p) {
    std::vector<std::string> sets = opt.sets;
    sets.insert(sets.end(), points[p].begin(), points[p].end());
    if (opt.population == 0) sets.push_back("actors.num_actors=" + std::to_string(actors));
    LoadedConfig loaded;
    if (const base::Status st = LoadConfig(opt.config_path, sets, &loaded); !st.ok()) {
      return fail(points.size() > 1 ? "point " + std::to_string(p) + ": " + st.message() : st.message());
    }
    config::Config cfg = loaded.config;
    // The job picks the endpoints on the node it gets.
    auto* cl = cfg.mutable_cluster();
    if (!cl->coordinator().empty() || cl->ps_size() > 0 || !cl->learner().empty() || cl->inference_size() > 0 ||
        cl->allreduce_size() > 0) {
      base::LogWarning("stampede launch slurm: cluster endpoints in the config are dropped: the job picks them on its node\n");
    }
    cl->clear_coordinator();
    cl->clear_control();
    cl->clear_learner();
    cl->clear_learners();
    cl->clear_ps();
    cl->clear_inference();
    cl->clear_allreduce();
    cfg.clear_run_dir();
    std::string dir = root, name = root + "/launch-config.textproto";
    if (points.size() > 1) {
      char tag[24];
      std::snprintf(tag, sizeof tag, "p%03zu", p);
      dir = root + "/" + tag;
      name = root + "/launch-config-" + tag + ".textproto";
    }
    std::string header = "# stampede launch slurm: " + opt.config_path;
    for (const auto& s : sets) header += " --set " + s;
    if (const base::Status st = base::WriteFileAtomically(name, header + "\n" + ConfigToText(cfg)); !st.ok()) {
      return fail(st.message());
    }
    configs.push_back(name);
    dirs.push_back(dir);
  }
  const std::string script = root + "/job.sbatch";
  if (const base::Status st = base::WriteFileAtomically(script, SlurmJobScript(opt, configs, dirs)); !st.ok()) {
    return fail(st.message());
  }
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add, ec);
  std::printf("stampede launch slurm: wrote %s (%zu run%s, %d actor node(s) x %d actors)\n", script.c_str(),
              configs.size(), configs.size() > 1 ? "s: a job array" : "", opt.actor_nodes, opt.actors_per_node);
  if (points.size() > 1) {
    for (size_t p = 0; p < points.size(); ++p) {
      std::string what;
      for (const auto& s : points[p]) what += (what.empty() ? "" : " ") + s;
      std::printf("  task %zu: %s -> %s\n", p, what.c_str(), dirs[p].c_str());
    }
  }
  if (!opt.submit) {
    std::printf("submit it with: sbatch %s\n", script.c_str());
    return 0;
  }
  const std::string cmd = "sbatch --parsable " + Quote(script) + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return fail("cannot run sbatch");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (status != 0) {
    base::LogError("stampede launch slurm: sbatch failed: %s\n", out.c_str());
    return 1;
  }
  const std::string job = out.substr(0, out.find(';'));
  std::printf("stampede launch slurm: submitted job %s; its output: %s/slurm-%s%s.out\n", job.c_str(), root.c_str(),
              job.c_str(), points.size() > 1 ? "_N" : "");
  std::printf("%s\n", job.c_str());
  return 0;
}

}  // namespace stampede::tools
