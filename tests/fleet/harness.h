// The fleet tests' harness: the real `stampede` binary started in its own process group,
// waited for with a deadline, and the run directory it leaves (metrics.jsonl,
// summary.json, logs) read back. Shared by tests/fleet/*_test.cc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace stampede::fleet {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Proc {
  pid_t pid = -1;
  std::string output_path;
};

// Starts `stampede args...` from the source dir in its own process group (as a shell
// does for a foreground job), with stdout+stderr to a file.
Proc Start(const std::vector<std::string>& args, const std::string& output_path);
// Waits for exit (killing the group and failing the test after `limit`); returns the
// exit code, or -signal.
int Wait(const Proc& p, std::chrono::seconds limit);
// A file's whole text ("" if it cannot be read).
std::string Slurp(const std::string& path);
// RUN_DIR/metrics.jsonl, one object per line.
std::vector<json> Metrics(const std::string& run_dir);
// pid -> "role index" for every process the coordinator spawned.
std::map<int, std::string> Spawned(const std::vector<json>& rows);
bool Alive(int pid);
// A run directory under the temp dir named after `name` and this test process, removed
// if it exists.
std::string FreshRunDir(const std::string& name);

// Waits until `pred` holds or `limit` passes, looking every `poll` (the processes are not
// ours to signal, so there is no event to wait on).
template <class Pred>
bool WaitFor(Pred pred, std::chrono::seconds limit, std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

// The pid of `who` ("actor 0", "learner 0", ...) once all five processes are up and the
// learner has taken more than `min_steps` steps; -1 if that does not happen in time.
int PidOnceTraining(const std::string& run_dir, const std::string& who, int min_steps = 10);
// Every spawned process is gone (CHECKs each).
void CheckNoneLeft(const std::map<int, std::string>& spawned);
// `stampede run ARGS --run-dir D` (D fresh, named after tag) must end with 0 and pass its
// config's target within max_frames; returns D's summary.
json RunReachingTarget(const std::string& tag, std::vector<std::string> args, std::chrono::seconds timeout,
                       long long max_frames, std::string* run_dir_out);
// Every progress row's learner step and policy version, and each PS shard's version,
// never go down.
void CheckNeverBackwards(const std::vector<json>& rows);
// Waits for `who`'s restart event; the pid it was restarted as (-1: none in time).
int WaitRestart(const std::string& run_dir, const std::string& who);
// A complete checkpoint is in `run_dir`: checkpoint.bin (relay, allreduce) or a sharded
// one's MANIFEST.
bool CheckpointOnDisk(const std::string& run_dir);
// Catch2 v2 has no SKIP: unless the project venv imports `modules`, prints why and exits
// 77, which CTest reports as skipped.
void RequireVenv(const char* modules);
// Writes `text` to a fresh .textproto named after `name`; returns its path.
std::string WriteConfig(const std::string& name, const std::string& text);

}  // namespace stampede::fleet
