// Where the coordinator's decisions are written: the console, RUN_DIR/metrics.jsonl,
// TensorBoard, summary.json, processes.txt, and the stop messages the status server
// broadcasts. The core (core.h) writes only through this interface; `FileSinks` is the
// real one, the unit tests record.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/messages.pb.h"

namespace stampede::coordinator {

using Scalars = std::vector<std::pair<std::string, double>>;

class Sinks {
 public:
  virtual ~Sinks() = default;
  virtual void Say(const std::string& text) = 0;   // stdout
  virtual void Warn(const std::string& text) = 0;  // stderr
  virtual void Metrics(const nlohmann::json& row) = 0;  // one metrics.jsonl line (row or event)
  virtual void TensorBoard(int64_t env_frames, double wall_time, const Scalars& scalars) = 0;
  virtual void Summary(const nlohmann::json& summary) = 0;
  virtual void Processes(const std::string& text) = 0;  // processes.txt
  // The current stop stage's messages, sent with every heartbeat from now on.
  virtual void StopMessages(std::vector<wire::Control> stops) = 0;
  // The newest evaluation round asked for, sent with every heartbeat from now on.
  virtual void EvaluationRequest(int64_t round, int64_t env_frames) = 0;
};

// Where the heartbeat's contents go once the status server is up (run.cc sends them to it
// as messages): the current stop stage's messages and the newest evaluation request.
struct ControlOut {
  std::function<void(const std::vector<wire::Control>&)> stops;
  std::function<void(int64_t round, int64_t env_frames)> evaluation;
};

class FileSinks final : public Sinks {
 public:
  // Opens RUN_DIR/metrics.jsonl (appending) and RUN_DIR/tb; a TensorBoard failure is a
  // warning, the run goes on.
  explicit FileSinks(const std::string& run_dir);
  ~FileSinks() override;
  void Say(const std::string& text) override;
  void Warn(const std::string& text) override;
  void Metrics(const nlohmann::json& row) override;
  void TensorBoard(int64_t env_frames, double wall_time, const Scalars& scalars) override;
  void Summary(const nlohmann::json& summary) override;
  void Processes(const std::string& text) override;
  void StopMessages(std::vector<wire::Control> stops) override;
  void EvaluationRequest(int64_t round, int64_t env_frames) override;
  // From now on the heartbeat's contents go to `out`; what was set before is sent now.
  void ConnectControl(ControlOut out);

 private:
  struct Files;
  std::string run_dir_;
  std::unique_ptr<Files> files_;
  ControlOut control_;
  std::vector<wire::Control> stops_;  // the newest of each, for ConnectControl
  int64_t eval_round_ = 0, eval_frames_ = 0;
};

}  // namespace stampede::coordinator
