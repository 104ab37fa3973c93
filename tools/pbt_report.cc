#include "tools/pbt_report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/durable_file.h"
#include "base/log.h"
#include "envs/python_env.h"

namespace stampede::tools {

namespace {
std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}
}  // namespace

int RunPbtReport(const std::string& run_dir) {
  std::ifstream in(run_dir + "/pbt.jsonl");
  if (!in) {
    base::LogError("stampede report: %s holds no population (no pbt.jsonl)\n", run_dir.c_str());
    return 2;
  }
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.is_object()) rows.push_back(std::move(row));  // a torn last line is skipped
  }
  nlohmann::json summary;
  {
    std::ifstream s(run_dir + "/pbt_summary.json");
    if (s) summary = nlohmann::json::parse(s, nullptr, false);
  }
  std::ostringstream md;
  md << "# Population " << run_dir << "\n\n";
  if (summary.is_object() && summary.contains("members")) {
    md << "Objective: " << summary.value("objective", std::string("return_100"));
    if (summary.contains("best_member")) {
      md << "; best member " << summary["best_member"].get<int>() << " at " << Num(summary["best_objective"].get<double>());
    }
    md << ".\n\n| member | frames | objective | exploits | restarts | exit | hyperparameters |\n|---|---|---|---|---|---|---|\n";
    for (const auto& [m, one] : summary["members"].items()) {
      std::string hyper;
      for (const auto& [path, v] : one["hyper"].items()) hyper += (hyper.empty() ? "" : ", ") + path + " " + Num(v.get<double>());
      md << "| " << m << " | " << one.value("frames", int64_t(0)) << " | "
         << (one.contains("objective") ? Num(one["objective"].get<double>()) : std::string("-")) << " | "
         << one.value("exploits", 0) << " | " << one.value("restarts", 0) << " | " << one.value("exit_code", -1) << " | "
         << hyper << " |\n";
    }
  } else {
    md << "No pbt_summary.json: the population has not ended.\n";
  }
  md << "\n## Exploits and replacements\n\n| s | member | frames | objective | leader | leader's | new hyperparameters |\n"
        "|---|---|---|---|---|---|---|\n";
  int shown = 0;
  for (const auto& r : rows) {
    const std::string ev = r.value("event", std::string());
    if (ev != "exploit" && ev != "replace") continue;
    std::string hyper;
    if (r.contains("new_hyper")) {
      for (const auto& [path, v] : r["new_hyper"].items()) hyper += (hyper.empty() ? "" : ", ") + path + " " + Num(v.get<double>());
    }
    md << "| " << Num(r.value("elapsed_s", 0.0)) << " | " << r.value("member", -1) << (ev == "replace" ? " (replaced)" : "")
       << " | " << r.value("frames", int64_t(0)) << " | "
       << (r.contains("objective") ? Num(r["objective"].get<double>()) : std::string("-")) << " | "
       << r.value("leader", -1) << " | " << Num(r.value("leader_objective", 0.0)) << " | " << hyper << " |\n";
    ++shown;
  }
  if (shown == 0) md << "| - | - | - | - | - | - | none |\n";
  if (const base::Status st = base::WriteFileAtomically(run_dir + "/pbt.md", md.str()); !st.ok()) {
    base::LogError("stampede report: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("%s", md.str().c_str());
  const std::string why = envs::PythonUnavailableReason(envs::PythonVenvPath(""));
  if (!why.empty()) {
    std::printf("stampede report: no pbt.png (%s)\n", why.c_str());
    return 1;
  }
  const std::string cmd = envs::PythonVenvPath("") + "/bin/python " STAMPEDE_SOURCE_DIR "/tools/plot_pbt.py " + run_dir;
  if (std::system(cmd.c_str()) != 0) {
    std::printf("stampede report: the plot failed (%s)\n", cmd.c_str());
    return 1;
  }
  std::printf("stampede report: wrote %s/pbt.md, pbt.png\n", run_dir.c_str());
  return 0;
}

}  // namespace stampede::tools
