// The learner's step metrics, declared once: each one's name, unit, how the figures of
// several learners merge, where it shows (the progress line, the metrics.jsonl row,
// TensorBoard, summary.json) and what it means. The learner fills a StepFigures; the wire
// carries it by name (Status.step_metrics); the coordinator's merge, its progress line,
// rows, TensorBoard scalars and summary, and the reference docs/metrics.md
// (`ninja metrics_reference`) all iterate kStepMetrics. A new metric is one line here and
// the code that computes it.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace stampede::base {

// How the figures of several learners become the fleet's one.
enum class Merge {
  kMean,   // the learners' mean
  kChief,  // learner 0's (a value they share, such as the scheduled learning rate)
};

// Where a metric shows, a bit set.
enum Show : unsigned {
  kShowProgress = 1u << 0,     // the progress line, as `label value`
  kShowRow = 1u << 1,          // RUN_DIR/metrics.jsonl, under `name`
  kShowTensorBoard = 1u << 2,  // RUN_DIR/tensorboard, under `tensorboard`
  kShowSummary = 1u << 3,      // RUN_DIR/summary.json (the run's last value), under `name`
};

struct MetricDecl {
  std::string_view name;         // the key in rows, the summary and on the wire
  std::string_view tensorboard;  // TensorBoard's tag
  std::string_view label;        // on the progress line ("H"); used with kShowProgress
  const char* format;            // printf format of the progress line's value
  std::string_view unit;
  Merge merge;
  unsigned shows;
  std::string_view about;  // one or two sentences for the reference
};

// The learner's figures of its newest training step, in the order they show.
enum class StepMetric : int {
  kPgLoss,
  kBaselineLoss,
  kEntropy,
  kGradNorm,
  kExplainedVariance,
  kApproxKl,
  kRhoClipFraction,
  kUpdateToParamRatio,
  kLearningRate,
  kStepSeconds,
  kComputeThreads,
  kCount,
};

inline constexpr unsigned kShowLogs = kShowRow | kShowTensorBoard;

inline constexpr std::array<MetricDecl, static_cast<size_t>(StepMetric::kCount)> kStepMetrics = {{
    {"pg_loss", "loss/pg", "", "", "", Merge::kMean, kShowLogs,
     "The policy-gradient term of the newest step's loss: -rho-clipped advantage times log pi, summed over the "
     "batch's valid steps."},
    {"baseline_loss", "loss/baseline", "", "", "", Merge::kMean, kShowLogs,
     "The baseline term: learner.baseline_cost times half the squared error to the V-trace targets, summed."},
    {"entropy", "loss/entropy", "H", "%.2f", "nats", Merge::kMean, kShowProgress | kShowLogs | kShowSummary,
     "The policy's mean entropy per step. ln(actions) is uniform; near 0 the policy has committed to one action "
     "(docs/diagnostics.md)."},
    {"grad_norm", "learner/grad_norm", "", "", "", Merge::kMean, kShowLogs,
     "The gradient's global norm before clipping (learner.max_grad_norm)."},
    {"explained_variance", "learner/explained_variance", "ev", "%.2f", "", Merge::kMean, kShowProgress | kShowLogs | kShowSummary,
     "1 - Var(vs - V) / Var(vs): how much of the V-trace targets the baseline explains (1: all, 0: no better than "
     "their mean, below 0: worse)."},
    {"approx_kl", "learner/approx_kl", "kl", "%.3g", "nats", Merge::kMean, kShowProgress | kShowLogs,
     "KL(behaviour || current) on the taken actions, by the estimator E[(rho - 1) - log rho]: how far the "
     "policy moved from the one that acted."},
    {"rho_clip_fraction", "learner/rho_clip_fraction", "", "", "", Merge::kMean, kShowLogs,
     "The share of steps whose importance weight pi/mu exceeded V-trace's rho-bar (learner.vtrace_rho_bar)."},
    {"update_to_param_ratio", "learner/update_to_param_ratio", "upd", "%.1e", "", Merge::kMean,
     kShowProgress | kShowLogs,
     "RMS(update) / RMS(parameters) of the newest step: about 1e-3 is healthy; far below, the learning rate is "
     "too small to move the network."},
    {"learning_rate", "learner/learning_rate", "", "", "", Merge::kChief, kShowLogs,
     "The learning rate the newest step used (learner.optimizer's schedule over env frames)."},
    {"step_seconds", "learner/step_seconds", "", "", "s", Merge::kMean, kShowLogs,
     "Wall-clock seconds of the newest training step, from the batch to the applied update: with the batch's "
     "frames it says how fast the learner can consume them (`stampede bench` times the same step alone)."},
    {"compute_threads", "learner/compute_threads", "", "", "threads", Merge::kMean, kShowLogs | kShowSummary,
     "Threads the newest CPU step ran its oneDNN kernels on (learner.threads; with 0, what the learner chose: "
     "more while it bounds the fleet, one while it waits for data)."},
}};

// A learner's newest value of each step metric.
class StepFigures {
 public:
  double& operator[](StepMetric m) { return v_[static_cast<size_t>(m)]; }
  double operator[](StepMetric m) const { return v_[static_cast<size_t>(m)]; }
  double& at(size_t i) { return v_[i]; }
  double at(size_t i) const { return v_[i]; }

 private:
  std::array<double, kStepMetrics.size()> v_{};
};

}  // namespace stampede::base
