// The Slurm launcher's placement of roles and `stampede launch slurm`'s job script, as
// text (the tests on a real cluster are tests/fleet/slurm_test.cc).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/slurm_launcher.h"
#include "tools/launch.h"
#include "wire/zmq_util.h"

using stampede::coordinator::SlurmLauncher;
using stampede::coordinator::SlurmLayout;
namespace wire = stampede::wire;

namespace {
std::string Arg(const std::vector<std::string>& argv, const std::string& prefix) {
  for (const auto& a : argv) {
    if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
  }
  return "<none>";
}
}  // namespace

TEST_CASE("slurm launcher: a heterogeneous job puts servers in group 0 and actor i on node i / K of group 1", "[launch]") {
  SlurmLauncher l("/bin/stampede", "/run/config.textproto", "/run", 2, SlurmLayout{true, 3});
  const auto ps = l.Command(wire::ROLE_PS, 1, 0);
  CHECK(ps.front() == "srun");
  CHECK(Arg(ps, "--het-group=") == "0");
  CHECK(Arg(ps, "--relative=") == "0");
  CHECK(Arg(l.Command(wire::ROLE_LEARNER, 0, 0), "--het-group=") == "0");
  // K = 2: actors 0, 1 on node 0; 2, 3 on node 1; 4, 5 on node 2; 6 wraps to node 0.
  const int expected[] = {0, 0, 1, 1, 2, 2, 0};
  for (int i = 0; i < 7; ++i) {
    const auto a = l.Command(wire::ROLE_ACTOR, i, 0);
    INFO("actor " << i);
    CHECK(Arg(a, "--het-group=") == "1");
    CHECK(Arg(a, "--relative=") == std::to_string(expected[i]));
  }
  // Every step may share CPUs with the others, and runs the role's own command line.
  const auto a = l.Command(wire::ROLE_ACTOR, 3, 2);
  CHECK(std::find(a.begin(), a.end(), "--overlap") != a.end());
  const std::vector<std::string> tail(a.end() - 8, a.end());
  CHECK(tail == std::vector<std::string>{"/bin/stampede", "actor", "--config", "/run/config.textproto", "--task-index",
                                         "3", "--restarts", "2"});
}

TEST_CASE("slurm launcher: one allocation keeps node 0 for the servers and spreads actors over the rest", "[launch]") {
  SlurmLauncher three("/bin/stampede", "/c", "/r", 1, SlurmLayout{false, 3});
  CHECK(Arg(three.Command(wire::ROLE_PS, 0, 0), "--het-group=") == "<none>");
  CHECK(Arg(three.Command(wire::ROLE_PS, 0, 0), "--relative=") == "0");
  CHECK(Arg(three.Command(wire::ROLE_ACTOR, 0, 0), "--relative=") == "1");
  CHECK(Arg(three.Command(wire::ROLE_ACTOR, 1, 0), "--relative=") == "2");
  CHECK(Arg(three.Command(wire::ROLE_ACTOR, 2, 0), "--relative=") == "1");
  SlurmLauncher alone("/bin/stampede", "/c", "/r", 4, SlurmLayout{false, 1});
  CHECK(Arg(alone.Command(wire::ROLE_ACTOR, 5, 0), "--relative=") == "0");
}

TEST_CASE("launch slurm: the job script asks for the components, finds the head's address and resumes", "[launch]") {
  stampede::tools::SlurmLaunchOptions o;
  o.config_path = "configs/catch.textproto";
  o.run_dir = "/shared/run";
  o.actor_nodes = 4;
  o.actors_per_node = 8;
  o.partition = "cpu";
  o.time = "2:00:00";
  o.learner_gres = "gpu:1";
  o.actor_constraint = "avx2";
  o.requeue = true;
  o.stampede_exe = "/opt/stampede/bin/stampede";
  const std::string s = stampede::tools::SlurmJobScript(o, {"/shared/run/launch-config.textproto"}, {"/shared/run"});
  INFO(s);
  CHECK(s.rfind("#!/bin/bash\n", 0) == 0);
  for (const char* line : {"#SBATCH --job-name=stampede-catch\n", "#SBATCH --output=/shared/run/slurm-%j.out\n",
                           "#SBATCH --requeue\n", "#SBATCH --partition=cpu\n", "#SBATCH --time=2:00:00\n",
                           "#SBATCH --signal=B:TERM@120\n", "#SBATCH --nodes=1 --ntasks=1 --gres=gpu:1\n#SBATCH hetjob\n"
                           "#SBATCH --nodes=4 --ntasks-per-node=8 --constraint=avx2\n",
                           "STAMPEDE='/opt/stampede/bin/stampede'\n",
                           "--set cluster.launcher=slurm --set \"cluster.host=$addr\" --set cluster.actors_per_node=8",
                           "exec \"$STAMPEDE\" run --resume \"$run_dir\"", "NodeAddr="}) {
    CHECK_THAT(s, Catch::Contains(line));
  }
  CHECK_THAT(s, !Catch::Contains("--array"));
  // #SBATCH lines come before the first command, or sbatch ignores them.
  CHECK(s.rfind("#SBATCH") < s.find("\nset -u"));
}

TEST_CASE("launch slurm: a sweep is a job array of one-allocation tasks, each with its config and run directory", "[launch]") {
  stampede::tools::SlurmLaunchOptions o;
  o.config_path = "configs/catch.textproto";
  o.run_dir = "/shared/sweep";
  o.actor_nodes = 2;
  o.actors_per_node = 4;
  o.stampede_exe = "/bin/stampede";
  const std::string s = stampede::tools::SlurmJobScript(o, {"/shared/sweep/a b.textproto", "/shared/sweep/it's.textproto"},
                                                        {"/shared/sweep/p000", "/shared/sweep/p001"});
  INFO(s);
  CHECK_THAT(s, Catch::Contains("#SBATCH --array=0-1\n"));
  CHECK_THAT(s, Catch::Contains("#SBATCH --output=/shared/sweep/slurm-%A_%a.out\n"));
  CHECK_THAT(s, Catch::Contains("#SBATCH --nodes=3 --ntasks-per-node=4\n"));
  CHECK_THAT(s, !Catch::Contains("hetjob"));
  // Quoted for bash, a quote in a path too.
  CHECK_THAT(s, Catch::Contains("CONFIGS=( '/shared/sweep/a b.textproto' '/shared/sweep/it'\\''s.textproto' )"));
  CHECK_THAT(s, Catch::Contains("DIRS=( '/shared/sweep/p000' '/shared/sweep/p001' )"));
}

TEST_CASE("launch slurm: the nodes the job script asks for are the nodes the launcher places actors on", "[launch]") {
  // One layout serves both sides: the script's #SBATCH requests and, from the environment
  // Slurm gives that request, each actor's node. Every actor node gets exactly K actors and
  // no actor lands on a node that was not asked for.
  for (const bool array : {false, true}) {
    stampede::tools::SlurmLaunchOptions o;
    o.config_path = "configs/catch.textproto";
    o.run_dir = "/shared/run";
    o.actor_nodes = 3;
    o.actors_per_node = 2;
    o.stampede_exe = "/bin/stampede";
    std::vector<std::string> configs = {"/shared/run/a.textproto"};
    std::vector<std::string> dirs = {"/shared/run/a"};
    if (array) configs.push_back("/shared/run/b.textproto"), dirs.push_back("/shared/run/b");
    const std::string s = stampede::tools::SlurmJobScript(o, configs, dirs);
    INFO("array " << array << "\n" << s);
    // The component the actors run in: the last #SBATCH --nodes line.
    const size_t at = s.rfind("#SBATCH --nodes=");
    REQUIRE(at != std::string::npos);
    const int asked = std::stoi(s.substr(at + 16));
    const SlurmLayout got{!array, asked};  // what SLURM_JOB_NUM_NODES(_HET_GROUP_1) says
    std::vector<int> per_node(size_t(asked), 0);
    for (int i = 0; i < o.actor_nodes * o.actors_per_node; ++i) {
      const int node = got.Node(wire::ROLE_ACTOR, i, o.actors_per_node);
      REQUIRE(node >= 0);
      REQUIRE(node < asked);
      ++per_node[size_t(node)];
    }
    // A job array's allocation keeps node 0 for the servers.
    for (int n = 0; n < asked; ++n) CHECK(per_node[size_t(n)] == (array && n == 0 ? 0 : o.actors_per_node));
    CHECK(got.Node(wire::ROLE_PS, 0, o.actors_per_node) == 0);
    CHECK(got.HetGroup(wire::ROLE_LEARNER) == (array ? -1 : 0));
  }
}

TEST_CASE("coordinator: the Slurm launcher has room for the actors its allocation asked for", "[launch][scale]") {
  const SlurmLayout het = SlurmLayout::Requested(true, 2);
  CHECK(het.ActorCapacity(4) == 8);
  const SlurmLayout one = SlurmLayout::Requested(false, 2);  // node 0 holds the servers
  CHECK(one.ActorCapacity(4) == 8);
  SlurmLauncher launcher("stampede", "config.textproto", "/run", 4, het);
  CHECK(launcher.NoRoom(stampede::wire::ROLE_ACTOR, 7).empty());
  CHECK_THAT(launcher.NoRoom(stampede::wire::ROLE_ACTOR, 8), Catch::Contains("room for 8 actors"));
  CHECK(launcher.NoRoom(stampede::wire::ROLE_LEARNER, 8).empty());
}

TEST_CASE("launch slurm: a population is one allocation whose script runs it, members as job steps", "[launch][pbt]") {
  stampede::tools::SlurmLaunchOptions o;
  o.config_path = "configs/pbt_catch.textproto";
  o.run_dir = "/shared/pbt";
  o.actor_nodes = 2;
  o.population = 4;
  o.time = "1:00:00";
  o.stampede_exe = "/opt/stampede/bin/stampede";
  const std::string s = stampede::tools::SlurmJobScript(o, {"/shared/pbt/launch-config.textproto"}, {"/shared/pbt"});
  INFO(s);
  for (const char* line : {"#SBATCH --nodes=2 --ntasks=4\n", "#SBATCH --signal=B:TERM@120\n",
                           "exec \"$STAMPEDE\" run --resume \"$run_dir\" --set pbt.member_job_steps=true\n",
                           "exec \"$STAMPEDE\" run \"$config\" --run-dir \"$run_dir\" --set pbt.member_job_steps=true\n"}) {
    CHECK_THAT(s, Catch::Contains(line));
  }
  CHECK_THAT(s, !Catch::Contains("hetjob") && !Catch::Contains("cluster.launcher=slurm"));
  CHECK(s.rfind("#SBATCH") < s.find("\nset -u"));
}

TEST_CASE("launch k8s: a population is refused with the reason, not launched as one fleet", "[launch][pbt]") {
  stampede::tools::K8sLaunchOptions o;
  o.config_path = std::string(STAMPEDE_SOURCE_DIR) + "/configs/pbt_catch.textproto";
  std::vector<std::pair<std::string, std::string>> files;
  const stampede::base::Status st = stampede::tools::K8sManifests(o, &files);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("pbt.population 4: the Kubernetes manifests hold one fleet, not a population"));
  CHECK(files.empty());
}
