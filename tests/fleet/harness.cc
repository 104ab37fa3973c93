#include "tests/fleet/harness.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace stampede::fleet {

namespace fs = std::filesystem;

Proc Start(const std::vector<std::string>& args, const std::string& output_path) {
  Proc p;
  p.output_path = output_path;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(STAMPEDE_SOURCE_DIR) != 0) ::_exit(126);
    FILE* f = std::fopen(output_path.c_str(), "w");
    if (f) {
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(STAMPEDE_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(STAMPEDE_BINARY, argv.data());
    ::_exit(127);
  }
  ::setpgid(p.pid, p.pid);
  return p;
}

int Wait(const Proc& p, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(p.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(-p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      FAIL("stampede did not finish within " << limit.count() << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> Metrics(const std::string& run_dir) {
  std::vector<json> rows;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(json::parse(line));
  }
  return rows;
}

std::map<int, std::string> Spawned(const std::vector<json>& rows) {
  std::map<int, std::string> out;
  for (const auto& r : rows) {
    if (r.value("event", "") == "spawn") {
      out[r["pid"].get<int>()] = r["role"].get<std::string>() + " " + std::to_string(r["index"].get<int>());
    }
  }
  return out;
}

bool Alive(int pid) { return ::kill(pid, 0) == 0; }

std::string FreshRunDir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("stampede_fleet_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}


int PidOnceTraining(const std::string& run_dir, const std::string& who, int min_steps) {
  int pid = -1;
  WaitFor([&] {
    const auto rows = Metrics(run_dir);
    bool training = false;
    for (const auto& r : rows) training = training || r.value("learner_step", 0) > min_steps;
    const auto spawned = Spawned(rows);
    for (const auto& [p, w] : spawned) {
      if (w == who) pid = p;
    }
    return training && pid > 0 && spawned.size() >= 5;
  }, std::chrono::seconds(60));
  return pid;
}

bool CheckpointOnDisk(const std::string& run_dir) {
  std::error_code ec;
  if (std::filesystem::exists(run_dir + "/checkpoint.bin", ec)) return true;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    if (std::filesystem::exists(e.path() / "MANIFEST", ec)) return true;
  }
  return false;
}

void CheckNoneLeft(const std::map<int, std::string>& spawned) {
  for (const auto& [pid, who] : spawned) {
    INFO(who << " (pid " << pid << ") is still running");
    // A child that exited is reaped by the coordinator before it exits itself.
    CHECK_FALSE(Alive(pid));
  }
}

json RunReachingTarget(const std::string& tag, std::vector<std::string> args, std::chrono::seconds timeout,
                       long long max_frames, std::string* run_dir_out) {
  const std::string run_dir = FreshRunDir(tag);
  args.insert(args.begin() + 2, {"--run-dir", run_dir});
  Proc p = Start(args, run_dir + ".out");
  const int code = Wait(p, timeout);
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  json summary = json::parse(Slurp(run_dir + "/summary.json"));
  const long long reached = summary["frames_to_target"].get<long long>();
  CHECK(reached > 0);
  CHECK(reached <= max_frames);
  *run_dir_out = run_dir;
  return summary;
}

void CheckNeverBackwards(const std::vector<json>& rows) {
  int64_t step = -1, version = -1;
  std::map<std::string, int64_t> shard_versions;
  for (const auto& r : rows) {
    if (r.contains("event")) continue;
    CHECK(r["learner_step"].get<int64_t>() >= step);
    CHECK(r["policy_version"].get<int64_t>() >= version);
    step = r["learner_step"].get<int64_t>();
    version = r["policy_version"].get<int64_t>();
    if (!r.contains("ps")) continue;
    for (const auto& [shard, s] : r["ps"].items()) {
      INFO("ps " << shard);
      const int64_t v = s["version"].get<int64_t>();
      if (shard_versions.count(shard)) CHECK(v >= shard_versions[shard]);
      shard_versions[shard] = v;
    }
  }
}

int WaitRestart(const std::string& run_dir, const std::string& who) {
  int pid = -1;
  WaitFor([&] {
    for (const auto& r : Metrics(run_dir)) {
      if (r.value("event", "") == "restart" && r.value("process", "") == who) pid = r["pid"].get<int>();
    }
    return pid > 0;
  }, std::chrono::seconds(30));
  return pid;
}

void RequireVenv(const char* modules) {
  const char* configured = std::getenv("STAMPEDE_VENV");
  const std::string venv = configured && *configured ? configured : std::string(STAMPEDE_SOURCE_DIR) + "/.venv";
  const std::string cmd = venv + "/bin/python -c 'import " + modules + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::printf("SKIPPED: needs the Python venv at %s with %s (tools/setup.sh makes it)\n", venv.c_str(), modules);
    std::fflush(stdout);
    std::_Exit(77);
  }
}

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = FreshRunDir(name) + ".textproto";
  std::ofstream(path) << text;
  return path;
}

}  // namespace stampede::fleet
