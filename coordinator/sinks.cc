#include "coordinator/sinks.h"

#include <cstdio>
#include <fstream>

#include "base/log.h"
#include "base/durable_file.h"
#include "coordinator/tensorboard.h"

namespace stampede::coordinator {

struct FileSinks::Files {
  std::ofstream metrics;
  coordinator::TensorBoardWriter tb;
};

namespace {
// Durable write of a run file; a failure is reported, the run goes on.
void WriteRunFile(const std::string& path, const std::string& text) {
  if (const base::Status st = base::WriteFileAtomically(path, text); !st.ok()) {
    base::LogError("stampede: %s\n", st.message().c_str());
  }
}
}  // namespace

FileSinks::FileSinks(const std::string& run_dir) : run_dir_(run_dir), files_(std::make_unique<Files>()) {
  files_->metrics.open(run_dir + "/metrics.jsonl", std::ios::app);
  if (const base::Status st = files_->tb.Open(run_dir + "/tb"); !st.ok()) {
    base::LogWarning("stampede: WARNING: no TensorBoard events: %s\n", st.message().c_str());
  }
}

FileSinks::~FileSinks() = default;

void FileSinks::Say(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void FileSinks::Warn(const std::string& text) { std::fputs(text.c_str(), stderr); }

void FileSinks::Metrics(const nlohmann::json& row) {
  files_->metrics << row.dump() << "\n";
  files_->metrics.flush();
}

void FileSinks::TensorBoard(int64_t env_frames, double wall_time, const Scalars& scalars) {
  if (files_->tb.is_open()) files_->tb.WriteScalars(env_frames, wall_time, scalars);
}

void FileSinks::Summary(const nlohmann::json& summary) {
  WriteRunFile(run_dir_ + "/summary.json", summary.dump(2) + "\n");
}

void FileSinks::Processes(const std::string& text) { WriteRunFile(run_dir_ + "/processes.txt", text); }

void FileSinks::StopMessages(std::vector<wire::Control> stops) {
  stops_ = std::move(stops);
  if (control_.stops) control_.stops(stops_);
}

void FileSinks::EvaluationRequest(int64_t round, int64_t env_frames) {
  eval_round_ = round;
  eval_frames_ = env_frames;
  if (control_.evaluation) control_.evaluation(round, env_frames);
}

void FileSinks::ConnectControl(ControlOut out) {
  control_ = std::move(out);
  if (!stops_.empty() && control_.stops) control_.stops(stops_);
  if (eval_round_ > 0 && control_.evaluation) control_.evaluation(eval_round_, eval_frames_);
}

}  // namespace stampede::coordinator
