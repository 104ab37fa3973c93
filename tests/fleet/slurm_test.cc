// Slurm launcher tests on a real Slurm cluster started on this machine
// (tools/slurm/test_cluster.sh: munged, slurmctld and three slurmd as nodes g1, c1, c2):
// `stampede launch slurm --submit` jobs that learn, are cancelled, lose an actor, or run
// as an array. Reported as skipped (exit 77, with the reason) where Slurm cannot start.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fleet/harness.h"

namespace fs = std::filesystem;
using namespace stampede::fleet;

namespace {

// `cmd`'s stdout (stderr too), and its exit code in *code.
std::string Shell(const std::string& cmd, int* code = nullptr) {
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  if (pipe == nullptr) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = ::pclose(pipe);
  if (code != nullptr) *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// The test's own cluster, stopped (by PID) when the test ends.
struct Cluster {
  std::string dir;
  Cluster() {
    dir = FreshRunDir("slurm_cluster");
    int code = 0;
    const std::string out = Shell(std::string(STAMPEDE_SOURCE_DIR) + "/tools/slurm/test_cluster.sh start " + dir, &code);
    if (code == 3) {
      std::printf("SKIPPED: no Slurm cluster here: %s\n", out.c_str());
      std::fflush(stdout);
      std::_Exit(77);
    }
    INFO(out);
    REQUIRE(code == 0);
    ::setenv("SLURM_CONF", (dir + "/slurm.conf").c_str(), 1);
  }
  ~Cluster() { Shell(std::string(STAMPEDE_SOURCE_DIR) + "/tools/slurm/test_cluster.sh stop " + dir); }
};

// `stampede launch slurm ARGS --submit`: the job id (its last line of output).
std::string Submit(const std::vector<std::string>& args, const std::string& run_dir) {
  std::vector<std::string> all = {"launch", "slurm"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--run-dir", run_dir, "--submit"});
  Proc p = Start(all, run_dir + ".launch.out");
  const int code = Wait(p, std::chrono::seconds(30));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  REQUIRE(code == 0);
  std::string last = out.substr(0, out.find_last_not_of('\n') + 1);
  last = last.substr(last.find_last_of('\n') + 1);
  REQUIRE(!last.empty());
  REQUIRE(last.find_first_not_of("0123456789") == std::string::npos);
  return last;
}

// A field of `scontrol show job J` (its first component's), e.g. "JobState".
std::string JobField(const std::string& job, const std::string& field) {
  const std::string out = Shell("scontrol show job " + job);
  const size_t at = out.find(field + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + field.size() + 1;
  return out.substr(from, out.find_first_of(" \n", from) - from);
}

// Waits for the job (every array task or het component) to leave the queue; its final
// JobState. Cancels it if that takes longer than `limit`.
std::string WaitJob(const std::string& job, std::chrono::seconds limit) {
  const bool ended = WaitFor([&] { return Shell("squeue -h -j " + job).find_first_not_of(" \n") == std::string::npos; }, limit);
  if (!ended) {
    Shell("scancel " + job);
    FAIL("job " << job << " still queued or running after " << limit.count() << " s: " << Shell("squeue"));
  }
  return JobField(job, "JobState");
}

// Processes whose command line names the run directory (roles, srun clients).
std::string Leftovers(const std::string& run_dir) { return Shell("pgrep -af -- '" + run_dir + "/' | grep -v pgrep || true"); }

}  // namespace

TEST_CASE("slurm: a Catch fleet launched with --submit learns to its budget and the job completes with 0", "[slurm]") {
  Cluster cluster;
  const std::string run_dir = FreshRunDir("slurm_catch");
  const std::string job = Submit({"configs/catch.textproto", "--actor-nodes", "2", "--actors-per-node", "1",
                                  "--learner-gres", "gpu:1"},
                                 run_dir);
  CHECK(WaitJob(job, std::chrono::seconds(120)) == "COMPLETED");
  CHECK(JobField(job, "ExitCode") == "0:0");
  const std::string out = Slurp(run_dir + "/slurm-" + job + ".out");
  INFO(out);
  // Component 0 got the node with the GPU; the actors ran on the two others.
  CHECK_THAT(out, Catch::Contains("coordinator, PS and learners on g1 (127.0.0.1); actors on c1,c2"));
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["env_frames"].get<long long>() >= 500000);
  CHECK(summary["mean_return_100"].get<double>() >= 0.9);
  CHECK(summary["actors"].size() == 2);
  const auto spawned = Spawned(Metrics(run_dir));
  CHECK(spawned.size() == 5);  // 2 PS shards, 1 learner, 2 actors: each a job step
  CHECK(fs::exists(run_dir + "/checkpoint.bin"));
  CHECK(Leftovers(run_dir).empty());
}

TEST_CASE("slurm: scancel stops the roles in order, writes the final checkpoint and leaves no process", "[slurm]") {
  Cluster cluster;
  const std::string run_dir = FreshRunDir("slurm_cancel");
  const std::string job = Submit({"configs/catch.textproto", "--actor-nodes", "2", "--actors-per-node", "1",
                                  "--set", "stop.total_env_frames=1000000000"},
                                 run_dir);
  REQUIRE(WaitFor([&] {
    for (const auto& r : Metrics(run_dir)) {
      if (r.value("learner_step", 0) > 200) return true;
    }
    return false;
  }, std::chrono::seconds(60)));
  Shell("scancel " + job);
  CHECK(WaitJob(job, std::chrono::seconds(60)) == "CANCELLED");
  const std::string out = Slurp(run_dir + "/slurm-" + job + ".out");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("stopping: interrupted (signal 15)"));
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["learner_steps"].get<long long>() > 200);
  // The final checkpoint is the newest and complete, at the run's last version.
  int code = -1;
  const std::string ckpt = Shell(std::string(STAMPEDE_BINARY) + " checkpoints " + run_dir, &code);
  INFO(ckpt);
  CHECK(code == 0);
  CHECK_THAT(ckpt, Catch::Contains("version " + std::to_string(summary["learner_steps"].get<long long>())));
  CHECK(Leftovers(run_dir).empty());
}

TEST_CASE("slurm: an actor task killed mid-run is started again as a new job step and the run completes", "[slurm]") {
  Cluster cluster;
  const std::string run_dir = FreshRunDir("slurm_kill");
  const std::string job = Submit({"configs/catch.textproto", "--actor-nodes", "2", "--actors-per-node", "1",
                                  "--set", "stop.total_env_frames=4000000", "--set", "stop.stop_at_target=false"},
                                 run_dir);
  // The actor's own process (not its srun client, whose command line starts with srun).
  const std::string pattern = "'^" + std::string(STAMPEDE_BINARY) + " actor --config " + run_dir + "/config.textproto --task-index 0 '";
  std::string pid;
  REQUIRE(WaitFor([&] {
    pid = Shell("pgrep -f " + pattern);
    return !pid.empty() && !Metrics(run_dir).empty() && Metrics(run_dir).back().value("learner_step", 0) > 100;
  }, std::chrono::seconds(60)));
  pid = pid.substr(0, pid.find('\n'));
  REQUIRE(::kill(std::stoi(pid), SIGKILL) == 0);
  CHECK(WaitJob(job, std::chrono::seconds(120)) == "COMPLETED");
  CHECK(JobField(job, "ExitCode") == "0:0");
  const std::string out = Slurp(run_dir + "/slurm-" + job + ".out");
  INFO(out);
  const json summary = json::parse(Slurp(run_dir + "/summary.json"));
  CHECK(summary["actor_restarts"].get<int>() == 1);
  CHECK(summary["env_frames"].get<long long>() >= 4000000);
  bool restarted = false;
  for (const auto& r : Metrics(run_dir)) restarted = restarted || r.value("event", "") == "actor_restart";
  CHECK(restarted);
  CHECK(Leftovers(run_dir).empty());
}

TEST_CASE("slurm: --sweep-grid makes a job array whose two points both finish in their own run directories", "[slurm]") {
  Cluster cluster;
  const std::string run_dir = FreshRunDir("slurm_array");
  const std::string job = Submit({"configs/catch.textproto", "--actor-nodes", "1", "--actors-per-node", "1",
                                  "--sweep-grid", "learner.optimizer.learning_rate=0.002,0.004",
                                  "--set", "stop.total_env_frames=300000"},
                                 run_dir);
  WaitJob(job, std::chrono::seconds(180));
  const std::string states = Shell("grep -h 'JobId=' " + cluster.dir + "/log/jobcomp.log");
  INFO(states);
  for (const char* point : {"p000", "p001"}) {
    INFO(point);
    const std::string dir = run_dir + "/" + point;
    REQUIRE(fs::exists(dir + "/summary.json"));
    const json summary = json::parse(Slurp(dir + "/summary.json"));
    CHECK(summary["env_frames"].get<long long>() >= 300000);
  }
  CHECK_THAT(Slurp(run_dir + "/p001/config.textproto"), Catch::Contains("learning_rate: 0.004"));
  // Both array tasks' components completed with 0 (the job-completion log has a line each).
  int completed = 0;
  size_t at = 0;
  while ((at = states.find("JobState=COMPLETED", at)) != std::string::npos) {
    ++completed;
    ++at;
  }
  CHECK(completed >= 2);
  CHECK(states.find("JobState=FAILED") == std::string::npos);
  CHECK(Leftovers(run_dir).empty());
}

TEST_CASE("slurm: a Catch population runs each member's fleet as a job step, exits 0 and writes the lineage",
          "[slurm][pbt]") {
  Cluster cluster;
  const std::string run_dir = FreshRunDir("slurm_pbt");
  const std::string job = Submit({"configs/pbt_catch.textproto", "--actor-nodes", "3", "--set",
                                  "stop.total_env_frames=200000"},
                                 run_dir);
  CHECK(WaitJob(job, std::chrono::seconds(240)) == "COMPLETED");
  CHECK(JobField(job, "ExitCode") == "0:0");
  const std::string out = Slurp(run_dir + "/slurm-" + job + ".out");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("a population on c1,c2,g1") || Catch::Contains("a population on g1,c1,c2"));
  std::ifstream lineage(run_dir + "/pbt.jsonl");
  int starts = 0, decisions = 0;
  for (std::string line; std::getline(lineage, line);) {
    const json row = json::parse(line);
    if (row["event"] == "start") {
      ++starts;
      CHECK(row["job_step"] == true);
    }
    decisions += row["event"] == "keep" || row["event"] == "exploit";
  }
  CHECK(starts == 4);
  CHECK(decisions > 0);
  // An exploit's stop is the member's ordered stop (RUN_DIR/stop.request), not srun
  // cancelling its step.
  for (int m = 0; m < 4; ++m) CHECK_THAT(Slurp(run_dir + "/member-" + std::to_string(m) + ".log"), !Catch::Contains("CANCELLED"));
  const json summary = json::parse(Slurp(run_dir + "/pbt_summary.json"));
  for (const auto& [m, one] : summary["members"].items()) {
    CHECK(one["frames"].get<long long>() >= 200000);
    CHECK(one["finished"] == true);
  }
  CHECK(Leftovers(run_dir).empty());
}
