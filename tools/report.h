// Suite reports: report.md and report.csv (per task: final and best 100-episode mean
// return, frames, normalised score; aggregate: mean and median normalised score) from a
// run directory's config.textproto and metrics.jsonl, and report.png (learning curves,
// drawn by tools/plot_report.py with matplotlib from the project venv).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::tools {

struct TaskReport {
  std::string name;
  double final_score = 0;   // mean return over the last 100 episodes at the last row
  double best_score = 0;    // the best such mean over the run (full windows where there are any)
  long long env_frames = 0; // the task's own frames
  long long episodes = 0;
  double random_score = 0, reference_score = 0;
  bool has_reference = false;
  double normalised = 0;    // NaN: the task gives no random/reference scores
  bool scored = false;      // false: no episode ended
  // The last evaluation round (config `evaluation`): its mean return, at which global
  // frames, over how many episodes (0: no round), and its normalised score (NaN: none).
  double eval_score = 0;
  long long eval_frames = 0;
  int eval_episodes = 0;
  double eval_normalised = 0;
};

struct RunReport {
  std::vector<TaskReport> tasks;
  double mean_normalised = 0, median_normalised = 0;  // NaN when no task is normalised
  double eval_mean_normalised = 0, eval_median_normalised = 0;  // the last evaluation's; NaN: none
  bool evaluated = false;  // an evaluation round is in metrics.jsonl
  // The Atari-5 estimate of the Atari-57 median human-normalised score, in percent, from
  // the final (and the last evaluation's) scores, where the run's tasks include the five
  // Atari-5 games (config/atari.h); NaN otherwise.
  double atari5_median_percent = 0, eval_atari5_median_percent = 0;
  double elapsed_s = 0;
  long long env_frames = 0;
  double frames_per_s = 0;  // over the run
  bool finished = false;    // summary.json exists
};

// Reads RUN_DIR/config.textproto and RUN_DIR/metrics.jsonl (a torn last line, from an
// interrupted run, is skipped). False with the reason.
base::StatusOr<RunReport> ComputeReport(const std::string& run_dir);
// Writes RUN_DIR/report.csv and RUN_DIR/report.md.
base::Status WriteReport(const std::string& run_dir, const RunReport& report);
// Draws RUN_DIR/report.png with the venv's matplotlib; false with the reason.
base::Status PlotReport(const std::string& run_dir);

// `stampede report RUN_DIR`: all three; prints the table. Exit code 0, 1 (no plot), 2.
int RunReportCommand(const std::string& run_dir);

}  // namespace stampede::tools
