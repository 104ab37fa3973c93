#include "tools/roles.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "actors/actor.h"
#include "learner/learner.h"
#include "ps/shard.h"
#include "tools/signals.h"
#include "wire/zmq_util.h"

namespace stampede::tools {

namespace {
// PUSH socket to the coordinator, if there is one (a role started by hand may have none).
class StatusChannel {
 public:
  StatusChannel(zmq::context_t& ctx, const config::Config& cfg, const wire::Sender& sender) {
    status_.mutable_sender()->CopyFrom(sender);
    status_.set_pid(int(::getpid()));
    if (cfg.cluster().coordinator().empty()) return;
    socket_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
    wire::ConfigureSender(*socket_, 100, 0);
    socket_->connect(cfg.cluster().coordinator());
  }
  wire::Status& status() { return status_; }
  void Send(const char* activity) {
    status_.set_activity(activity);
    if (socket_) (void)wire::SendMessage(*socket_, status_);
  }

 private:
  std::unique_ptr<zmq::socket_t> socket_;
  wire::Status status_;
};

void SleepUnlessStopped(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!StopFlag().load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
}  // namespace

int RunLearnerRole(const config::Config& cfg, int task_index) {
  if (task_index != 0) {
    std::fprintf(stderr, "learner: only one learner (task index 0) is supported, got %d\n", task_index);
    return 2;
  }
  zmq::context_t ctx(1);
  const uint64_t incarnation = wire::NewIncarnation();
  // The first status goes out after Start, so the coordinator's first learner status
  // carries real counts (a restored learner starts from its checkpoint's).
  StatusChannel channel(ctx, cfg, wire::MakeSender(wire::ROLE_LEARNER, task_index, incarnation));
  learner::Learner learner(cfg, ctx, cfg.cluster().learner(), incarnation);
  std::string error;
  if (!learner.Start(&error)) {
    std::fprintf(stderr, "learner: %s\n", error.c_str());
    return 2;
  }
  while (!StopFlag().load()) {
    SleepUnlessStopped(cfg.learner().status_interval_s());
    learner.FillStatus(&channel.status());
    channel.Send("training");
  }
  learner.Stop();
  learner.FillStatus(&channel.status());
  if (!cfg.run_dir().empty()) {
    if (!learner.WriteCheckpoint(&error)) {
      std::fprintf(stderr, "learner: final checkpoint failed: %s\n", error.c_str());
      channel.Send("stopped; final checkpoint FAILED");
      return 1;
    }
    std::fprintf(stderr, "learner: final checkpoint at version %lld written to %s/checkpoint.bin\n",
                 (long long)learner.policy_version(), cfg.run_dir().c_str());
  }
  channel.Send("stopped");
  return 0;
}

int RunPsRole(const config::Config& cfg, int task_index) {
  if (task_index < 0 || task_index >= cfg.cluster().ps_size()) {
    std::fprintf(stderr, "ps: task index %d, but cluster.ps lists %d endpoints\n", task_index,
                 cfg.cluster().ps_size());
    return 2;
  }
  zmq::context_t ctx(1);
  ps::ShardOptions opt;
  opt.shard = task_index;
  opt.num_shards = cfg.ps().num_shards();
  opt.versions_kept = cfg.ps().versions_kept();
  opt.max_message_bytes = cfg.cluster().max_message_bytes();
  opt.incarnation = wire::NewIncarnation();
  StatusChannel channel(ctx, cfg, wire::MakeSender(wire::ROLE_PS, task_index, opt.incarnation));
  ps::Shard shard(ctx, opt);
  std::string error;
  if (!shard.Bind(cfg.cluster().ps(task_index), &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  std::thread server([&] { shard.Run(StopFlag()); });
  while (!StopFlag().load()) {
    channel.status().set_policy_version(shard.stats().newest_version.load());
    channel.Send("serving");
    SleepUnlessStopped(1.0);
  }
  server.join();
  channel.Send("stopped");
  return 0;
}

int RunActorRole(const config::Config& cfg, int task_index) {
  return actors::RunActor(cfg, task_index, StopFlag());
}

}  // namespace stampede::tools
