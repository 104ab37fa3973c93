// Population-based training end to end (config `pbt`, coordinator/pbt_run.cc): the shipped
// Catch population, one member's learner killed with -9 while it trains.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fleet/harness.h"

namespace fs = std::filesystem;
using namespace stampede::fleet;

TEST_CASE("pbt: the Catch population exploits its leader, survives a member's learner killed with -9, and exits 0",
          "[fleet][pbt]") {
  const std::string run_dir = FreshRunDir("pbt_catch");
  Proc p = Start({"run", "configs/pbt_catch.textproto", "--run-dir", run_dir, "--set", "stop.total_env_frames=300000"},
                 run_dir + ".out");
  // Member 3 starts at the shipped learning rate: kill its learner once it trains.
  const std::string member3 = run_dir + "/member-3";
  const int learner = PidOnceTraining(member3, "learner 0", 20);
  REQUIRE(learner > 0);
  REQUIRE(::kill(learner, SIGKILL) == 0);
  const int code = Wait(p, std::chrono::seconds(240));
  const std::string out = Slurp(p.output_path);
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(Slurp(member3 + ".log"), Catch::Contains("was killed by signal 9") && Catch::Contains("restarted learner 0"));
  // Every member's rows and events: frames never go back, through exploits, resumes and the kill.
  for (int m = 0; m < 4; ++m) {
    INFO("member " << m);
    int64_t frames = 0;
    for (const auto& r : Metrics(run_dir + "/member-" + std::to_string(m))) {
      CHECK(r["env_frames"].get<int64_t>() >= frames);
      frames = std::max(frames, r["env_frames"].get<int64_t>());
    }
    CHECK(frames >= 300000);
  }
  // The lineage: 4 starts, decisions, and at least one exploit whose copy was written.
  int starts = 0, exploits = 0, copied = 0;
  std::ifstream lineage(run_dir + "/pbt.jsonl");
  for (std::string line; std::getline(lineage, line);) {
    const json row = json::parse(line);
    starts += row["event"] == "start";
    if (row["event"] == "exploit") {
      ++exploits;
      CHECK(row["leader_objective"].get<double>() > row["objective"].get<double>() + 0.05);  // pbt.min_gap
      CHECK(row["new_hyper"].size() == 2);
    }
    copied += row["event"] == "copied" && row["ok"] == true;
  }
  CHECK(starts == 4);
  CHECK(exploits >= 1);
  CHECK(copied >= 1);
  const json summary = json::parse(Slurp(run_dir + "/pbt_summary.json"));
  CHECK(summary["given_up"] == 0);
  for (const auto& [m, one] : summary["members"].items()) CHECK(one["finished"] == true);
  CHECK(summary["best_objective"].get<double>() >= 0.9);
  CHECK(fs::exists(run_dir + "/pbt.md"));
}

TEST_CASE("pbt: a population stopped with Ctrl-C exits 1, and --resume continues every member to its budget",
          "[fleet][pbt]") {
  const std::string run_dir = FreshRunDir("pbt_resume");
  Proc p = Start({"run", "configs/pbt_catch.textproto", "--run-dir", run_dir, "--set", "stop.total_env_frames=300000"},
                 run_dir + ".out");
  REQUIRE(PidOnceTraining(run_dir + "/member-0", "learner 0", 20) > 0);
  REQUIRE(::kill(-p.pid, SIGINT) == 0);  // the whole group, as a terminal's Ctrl-C
  CHECK(Wait(p, std::chrono::seconds(60)) == 1);
  INFO(Slurp(p.output_path));
  Proc r = Start({"run", "--resume", run_dir}, run_dir + ".resume.out");
  const int code = Wait(r, std::chrono::seconds(240));
  INFO(Slurp(r.output_path));
  CHECK(code == 0);
  int resumed = 0;
  std::ifstream lineage(run_dir + "/pbt.jsonl");
  for (std::string line; std::getline(lineage, line);) resumed += json::parse(line)["event"] == "resume";
  CHECK(resumed >= 1);  // every member not already at its budget
  const json summary = json::parse(Slurp(run_dir + "/pbt_summary.json"));
  for (const auto& [m, one] : summary["members"].items()) {
    CHECK(one["finished"] == true);
    CHECK(one["frames"].get<long long>() >= 300000);
  }
}
