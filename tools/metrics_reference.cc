// Writes docs/metrics.md, the learner's step metrics as base/metrics.h declares them:
// each one's key, TensorBoard tag, progress-line label, unit, merge across learners and
// meaning. `ninja metrics_reference` rewrites the page; the test metrics_reference_fresh
// fails when the checked-in page differs from what this prints.
#include <cstdio>
#include <string>

#include "base/metrics.h"

namespace {
std::string Code(std::string_view s) { return s.empty() ? "" : "`" + std::string(s) + "`"; }
}  // namespace

int main() {
  using namespace stampede::base;
  std::string out =
      "# Metrics reference\n\n"
      "Generated from `base/metrics.h` by `tools/metrics_reference.cc` (`ninja metrics_reference`); do not edit "
      "by hand. These are the learner's figures of its newest training step. Each learner sends them in its "
      "status; the coordinator merges several learners' as the *merge* column says and shows each where the "
      "*shows* column says: the progress line (under its label), `RUN_DIR/metrics.jsonl` (under its key), "
      "TensorBoard (under its tag) and `RUN_DIR/summary.json` (the run's last value). "
      "[Why is my run not learning?](diagnostics.md) says how to read them together.\n\n"
      "| key | TensorBoard | progress line | unit | merge | shows | what it means |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const MetricDecl& d : kStepMetrics) {
    std::string shows;
    auto add = [&](unsigned bit, const char* name) {
      if (!(d.shows & bit)) return;
      if (!shows.empty()) shows += ", ";
      shows += name;
    };
    add(kShowProgress, "progress");
    add(kShowRow, "row");
    add(kShowTensorBoard, "TensorBoard");
    add(kShowSummary, "summary");
    out += "| " + Code(d.name) + " | " + Code(d.tensorboard) + " | " + Code(d.label) + " | " + std::string(d.unit) +
           " | " + (d.merge == Merge::kMean ? "mean" : "learner 0's") + " | " + shows + " | " + std::string(d.about) +
           " |\n";
  }
  out +=
      "\nBeside them, `grad_clip_factor` (rows; `learner/grad_clip_factor` in TensorBoard) is derived from "
      "`grad_norm` and `learner.max_grad_norm`: the factor the newest gradient was scaled by (1: not clipped).\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
