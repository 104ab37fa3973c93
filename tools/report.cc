#include "tools/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "base/log.h"
#include "envs/python_env.h"
#include "config/atari.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "config/tasks.h"

namespace stampede::tools {

namespace {
std::string Num(double v, int digits = 4) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits + 2, v);
  return buf;
}
// The Atari-5 estimate (percent) from the tasks that run the five games, each scored by
// the table's random and human scores; NaN where one of the five is missing or unscored.
double Atari5Estimate(const config::Config& cfg, const std::vector<TaskReport>& tasks, bool eval) {
  std::array<double, 5> hns;
  for (size_t i = 0; i < atari::kAtari5.size(); ++i) {
    const atari::GameScores* want = atari::FindGame(atari::kAtari5[i].game);
    bool found = false;
    for (int t = 0; t < cfg.tasks_size() && !found; ++t) {
      if (atari::GameOf(cfg.tasks(t).env()) != want) continue;
      const TaskReport& tr = tasks[size_t(t)];
      if (eval ? tr.eval_episodes <= 0 : !tr.scored) return std::nan("");
      hns[i] = atari::HumanNormalisedPercent(*want, eval ? tr.eval_score : tr.final_score);
      found = true;
    }
    if (!found) return std::nan("");
  }
  return atari::Atari5MedianPercent(hns);
}
}  // namespace

base::StatusOr<RunReport> ComputeReport(const std::string& run_dir) {
  config::Config cfg;
  {
    std::ifstream in(run_dir + "/config.textproto");
    if (!in) return base::InvalidArgument(run_dir + "/config.textproto: cannot be read (is " + run_dir + " a run directory?)");
    std::stringstream text;
    text << in.rdbuf();
    RETURN_IF_ERROR(ParseConfigText(text.str(), run_dir + "/config.textproto", &cfg));
  }
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  if (!metrics) return base::InvalidArgument(run_dir + "/metrics.jsonl: cannot be read");
  RunReport r;
  const int n = config::NumTasks(cfg);
  r.tasks.resize(size_t(n));
  std::vector<bool> full_best(size_t(n), false);
  for (int t = 0; t < n; ++t) {
    TaskReport& tr = r.tasks[size_t(t)];
    tr.name = config::TaskName(cfg, t);
    if (cfg.tasks_size() > 0) {
      tr.random_score = cfg.tasks(t).random_score();
      tr.reference_score = cfg.tasks(t).reference_score();
      tr.has_reference = cfg.tasks(t).has_reference_score();
    } else if (const atari::GameScores* g = atari::GameOf(cfg.env())) {
      // One Atari game run alone: normalised by the same table as a suite's.
      tr.random_score = g->random;
      tr.reference_score = g->human;
      tr.has_reference = true;
    }
  }
  std::string line;
  int rows = 0;
  while (std::getline(metrics, line)) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_discarded() && row.is_object() && row.value("event", "") == "evaluation" && row.contains("tasks") &&
        row["tasks"].is_object()) {
      for (TaskReport& tr : r.tasks) {
        if (!row["tasks"].contains(tr.name) || !row["tasks"][tr.name].is_object()) continue;
        const auto& t = row["tasks"][tr.name];
        tr.eval_score = t.value("eval_return_mean", 0.0);
        tr.eval_episodes = t.value("episodes", 0);
        tr.eval_frames = row.value("env_frames", 0LL);
        r.evaluated = true;
      }
      continue;
    }
    if (row.is_discarded() || !row.is_object() || row.contains("event") || !row.contains("env_frames")) continue;
    ++rows;
    r.elapsed_s = row.value("elapsed_s", 0.0);
    r.env_frames = row.value("env_frames", 0LL);
    if (!row.contains("tasks") || !row["tasks"].is_object()) continue;
    for (TaskReport& tr : r.tasks) {
      if (!row["tasks"].contains(tr.name)) continue;
      const auto& t = row["tasks"][tr.name];
      const int counted = t.value("returns_counted", 0);
      tr.env_frames = t.value("env_frames", 0LL);
      tr.episodes = t.value("episodes", 0LL);
      if (counted <= 0) continue;
      const double mean = t.value("mean_return_100", 0.0);
      const size_t k = size_t(&tr - r.tasks.data());
      const bool full = counted >= 100;
      // The best over full windows once there are any (a mean of 3 episodes is luck).
      if (!tr.scored || (full && !full_best[k]) || (full == full_best[k] && mean > tr.best_score)) {
        tr.best_score = mean;
        full_best[k] = full;
      }
      tr.final_score = mean;
      tr.scored = true;
    }
  }
  if (rows == 0) return base::Unavailable(run_dir + "/metrics.jsonl: no progress rows yet");
  std::vector<double> normalised, eval_normalised;
  for (TaskReport& tr : r.tasks) {
    config::TaskConfig task;
    task.set_random_score(tr.random_score);
    if (tr.has_reference) task.set_reference_score(tr.reference_score);
    tr.normalised = tr.scored ? config::NormalisedScore(task, tr.final_score) : std::nan("");
    if (!std::isnan(tr.normalised)) normalised.push_back(tr.normalised);
    tr.eval_normalised = tr.eval_episodes > 0 ? config::NormalisedScore(task, tr.eval_score) : std::nan("");
    if (!std::isnan(tr.eval_normalised)) eval_normalised.push_back(tr.eval_normalised);
  }
  r.atari5_median_percent = Atari5Estimate(cfg, r.tasks, /*eval=*/false);
  r.eval_atari5_median_percent = Atari5Estimate(cfg, r.tasks, /*eval=*/true);
  std::tie(r.mean_normalised, r.median_normalised) = config::MeanAndMedian(std::move(normalised));
  std::tie(r.eval_mean_normalised, r.eval_median_normalised) = config::MeanAndMedian(std::move(eval_normalised));
  r.frames_per_s = r.elapsed_s > 0 ? double(r.env_frames) / r.elapsed_s : 0;
  std::error_code ec;
  r.finished = std::filesystem::exists(run_dir + "/summary.json", ec);
  return r;
}

base::Status WriteReport(const std::string& run_dir, const RunReport& r) {
  std::ostringstream csv;
  csv << "task,final_score,best_score,env_frames,episodes,random_score,reference_score,normalised_score,"
         "eval_score,eval_episodes,eval_normalised_score\n";
  for (const auto& t : r.tasks) {
    csv << t.name << "," << (t.scored ? Num(t.final_score) : "") << "," << (t.scored ? Num(t.best_score) : "") << ","
        << t.env_frames << "," << t.episodes << "," << Num(t.random_score) << ","
        << (t.has_reference ? Num(t.reference_score) : "") << ","
        << Num(t.normalised) << "," << (t.eval_episodes > 0 ? Num(t.eval_score) : "") << "," << t.eval_episodes
        << "," << Num(t.eval_normalised) << "\n";
  }
  csv << "(mean),,,,,,," << Num(r.mean_normalised) << ",,," << Num(r.eval_mean_normalised) << "\n";
  csv << "(median),,,,,,," << Num(r.median_normalised) << ",,," << Num(r.eval_median_normalised) << "\n";
  if (!std::isnan(r.atari5_median_percent)) {
    // In the normalised columns' units (a fraction), as the mean and median rows.
    csv << "(atari5 median estimate),,,,,,," << Num(r.atari5_median_percent / 100) << ",,,"
        << Num(r.eval_atari5_median_percent / 100) << "\n";
  }
  std::ostringstream md;
  md << "# Suite report: " << std::filesystem::path(run_dir).filename().string() << "\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s after %.0f s: %lld env frames (%.0f frames/s).\n\n",
                r.finished ? "Finished" : "Interrupted (no summary.json)", r.elapsed_s, r.env_frames, r.frames_per_s);
  md << buf;
  md << "| task | final score (last 100 episodes) | best score | frames | episodes | random | reference | normalised |\n";
  md << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& t : r.tasks) {
    const bool has_norm = !std::isnan(t.normalised);
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %lld | %lld | %s | %s | %s |\n", t.name.c_str(),
                  t.scored ? Num(t.final_score).c_str() : "\u2013", t.scored ? Num(t.best_score).c_str() : "\u2013",
                  t.env_frames, t.episodes, Num(t.random_score).c_str(),
                  has_norm ? Num(t.reference_score).c_str() : "", has_norm ? Num(t.normalised, 3).c_str() : "\u2013");
    md << buf;
  }
  if (!std::isnan(r.mean_normalised)) {
    md << "\nNormalised score, (score - random) / (reference - random): **mean " << Num(r.mean_normalised, 3)
       << "**, **median " << Num(r.median_normalised, 3) << "**.\n";
  }
  if (!std::isnan(r.atari5_median_percent)) {
    md << "\nAtari-5 estimate of the Atari-57 median human-normalised score (Aitchison, Sweetser and Hutter "
          "2023: 10^(sum w_i log10(1 + max(0, HNS_i %))) - 1 over BattleZone, DoubleDunk, NameThisGame, Phoenix "
          "and Qbert; fitted on agents above a 40% median, so below that it is an extrapolation): **"
       << Num(r.atari5_median_percent, 3) << "%**"
       << (std::isnan(r.eval_atari5_median_percent)
               ? std::string()
               : "; from the last evaluation round: **" + Num(r.eval_atari5_median_percent, 3) + "%**")
       << ".\n";
  }
  if (r.evaluated) {
    md << "\n## Evaluation (the last round, config `evaluation`)\n\n";
    md << "| task | mean return | episodes | at frames | normalised |\n|---|---:|---:|---:|---:|\n";
    for (const auto& t : r.tasks) {
      std::snprintf(buf, sizeof buf, "| %s | %s | %d | %lld | %s |\n", t.name.c_str(),
                    t.eval_episodes > 0 ? Num(t.eval_score).c_str() : "\u2013", t.eval_episodes, t.eval_frames,
                    std::isnan(t.eval_normalised) ? "\u2013" : Num(t.eval_normalised, 3).c_str());
      md << buf;
    }
    if (!std::isnan(r.eval_mean_normalised)) {
      md << "\nEvaluation normalised score: **mean " << Num(r.eval_mean_normalised, 3) << "**, **median "
         << Num(r.eval_median_normalised, 3) << "**.\n";
    }
  }
  md << "\nLearning curves: report.png (one panel per task, its own frames on the x axis"
     << (std::isnan(r.mean_normalised) ? "" : "; the last panel the normalised mean and median") << ").\n";
  RETURN_IF_ERROR(base::WriteFileAtomically(run_dir + "/report.csv", csv.str()));
  return base::WriteFileAtomically(run_dir + "/report.md", md.str());
}

base::Status PlotReport(const std::string& run_dir) {
  const std::string python = envs::PythonVenvPath("") + "/bin/python";
  const std::string script = std::string(STAMPEDE_SOURCE_DIR) + "/tools/plot_report.py";
  if (::access(python.c_str(), X_OK) != 0) {
    return base::Unavailable("no Python venv at " + envs::PythonVenvPath("") +
                             " (make it with tools/setup.sh, or set STAMPEDE_VENV)");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(python.c_str(), python.c_str(), script.c_str(), run_dir.c_str(), (char*)nullptr);
    ::_exit(127);
  }
  int status = 0;
  while (pid > 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return base::Internal(script + " failed (exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  }
  return base::OkStatus();
}

int RunReportCommand(const std::string& run_dir) {
  base::StatusOr<RunReport> r = ComputeReport(run_dir);
  const base::Status written = r.ok() ? WriteReport(run_dir, *r) : r.status();
  if (!written.ok()) {
    base::LogError("stampede report: %s\n", written.message().c_str());
    return 2;
  }
  std::ifstream md(run_dir + "/report.md");
  std::stringstream text;
  text << md.rdbuf();
  std::fputs(text.str().c_str(), stdout);
  if (const base::Status plotted = PlotReport(run_dir); !plotted.ok()) {
    base::LogError("stampede report: report.md and report.csv written, but no curves: %s\n", plotted.message().c_str());
    return 1;
  }
  std::printf("stampede report: %s/report.md, report.csv, report.png\n", run_dir.c_str());
  return 0;
}

}  // namespace stampede::tools
