// What the coordinator shows of its state: the progress line, the metrics.jsonl row and
// its TensorBoard scalars, summary.json, the per-task table, the stall diagnosis. Pure
// functions of the core's state (a friend of `Core`); the core writes what they return.
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "coordinator/core.h"

namespace stampede::coordinator {

struct ProgressRow {
  std::string line;  // the console's progress line(s), empty when quiet
  nlohmann::json row;
  Scalars scalars;  // TensorBoard, env frames as the step
};

// An evaluation round as the coordinator writes it: the metrics.jsonl event's fields,
// TensorBoard scalars (eval/...) and the console line.
struct EvaluationView {
  nlohmann::json event;
  Scalars scalars;
  std::string line;
};

struct Views {
  static EvaluationView Evaluation(const Core& c, const wire::EvaluationReport& r);
  static ProgressRow Progress(const Core& c, Clock::time_point now);
  static nlohmann::json Summary(const Core& c, double frames_per_second);
  // "stampede: done in ..." and, for a suite, the per-task table.
  static std::string DoneText(const Core& c, double frames_per_second);
  static std::string Diagnose(const Core& c);
  static nlohmann::json Refused(const Core& c);
  // Mean and median normalised score over the tasks that have one (NaN if none does).
  static std::pair<double, double> NormalisedAggregate(const Core& c);
};

// "1.50M", "425.3k", "12".
std::string Human(double v);
// A target as the config gave it (0.85, not 0.850000).
std::string FormatTarget(double v);
// A 100-episode mean return, or "–" before the first episode has ended.
std::string ReturnText(double mean, int counted);

}  // namespace stampede::coordinator
