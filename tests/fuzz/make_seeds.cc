// Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): well-formed
// messages, configs and a checkpoint, plus a few broken ones. Run by tools/fuzz.sh
// --seeds; the output is committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "learner/checkpoint.h"
#include "tests/fuzz/frames.h"
#include "wire/trajectory.h"
#include "wire/zmq_util.h"

using namespace stampede;
namespace fs = std::filesystem;

namespace {

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// A trajectory's frames as the learner would receive them.
std::vector<std::string> Frames(zmq::context_t& ctx, const wire::TrajectoryBatch& b) {
  zmq::socket_t out(ctx, zmq::socket_type::pair), in(ctx, zmq::socket_type::pair);
  // A fresh endpoint per call: an inproc name is released asynchronously after close.
  static int calls = 0;
  const std::string endpoint = "inproc://seeds-" + std::to_string(calls++);
  in.bind(endpoint);
  out.connect(endpoint);
  if (!wire::SendTrajectory(out, b)) std::abort();
  std::vector<zmq::message_t> parts;
  if (!wire::RecvMultipart(in, &parts, true)) std::abort();
  std::vector<std::string> frames;
  for (auto& p : parts) frames.push_back(p.to_string());
  return frames;
}

wire::TrajectoryBatch Batch(const wire::StepShape& shape) {
  wire::TrajectoryBatch b;
  *b.meta.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 1);
  b.Resize(5, 2, shape);
  std::fill(b.valid.begin(), b.valid.end(), 1);
  for (size_t i = 0; i < b.observations.size(); ++i) b.observations[i] = 0.01f * float(i);
  for (size_t i = 0; i < b.observations_u8.size(); ++i) b.observations_u8[i] = uint8_t(i);
  for (size_t i = 0; i < b.rewards.size(); ++i) b.rewards[i] = 1.f;
  auto* ep = b.meta.add_episodes();
  ep->set_episode_return(3.f);
  ep->set_length(3);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  zmq::context_t ctx(1);
  // Trajectories: the first byte picks the expected shape (trajectory_fuzz.cc).
  wire::StepShape vec{{4}, wire::DType::kFloat32, 2};
  wire::StepShape pix{{1, 6, 5}, wire::DType::kUint8, 3};
  pix.core_state_size = 8;
  wire::StepShape box{{3}, wire::DType::kFloat32, 2};
  box.action_kind = wire::ActionKind::kBox;
  box.action_low = {-2.f};
  box.action_high = {2.f};
  const fs::path traj = root / "trajectory";
  Write(traj, "vector", std::string(1, '\0') + fuzz::JoinFrames(Frames(ctx, Batch(vec))));
  Write(traj, "pixels_lstm", std::string(1, '\1') + fuzz::JoinFrames(Frames(ctx, Batch(pix))));
  Write(traj, "box", std::string(1, '\2') + fuzz::JoinFrames(Frames(ctx, Batch(box))));
  auto poisoned = Batch(vec);
  poisoned.rewards[3] = 3e38f;
  Write(traj, "reward_3e38", std::string(1, '\0') + fuzz::JoinFrames(Frames(ctx, poisoned)));
  auto episodes = Batch(vec);
  episodes.meta.mutable_episodes(0)->set_episode_return(1e30f);
  Write(traj, "episode_1e30", std::string(1, '\0') + fuzz::JoinFrames(Frames(ctx, episodes)));
  wire::TrajectoryBatch many = Batch(vec);
  many.Resize(5, 40, vec);
  Write(traj, "forty_unrolls", std::string(1, '\0') + fuzz::JoinFrames(Frames(ctx, many)));

  // PS requests: routing id, header, data.
  const fs::path ps = root / "ps_request";
  wire::PsRequest get;
  *get.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 1);
  get.mutable_get()->set_min_version(0);
  Write(ps, "get", fuzz::JoinFrames({"peer-a", get.SerializeAsString()}));
  wire::PsRequest put;
  *put.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
  auto* p = put.mutable_put();
  *p->mutable_sender() = put.sender();
  p->set_has_params(true);
  p->set_version(3);
  p->set_shard(0);
  p->set_num_shards(2);
  p->set_offset(0);
  p->set_count(5);
  p->set_total_size(10);
  p->set_layout_fingerprint(9);
  std::vector<float> slice = {1, 2, 3, 4, 5};
  const std::string data(reinterpret_cast<const char*>(slice.data()), slice.size() * 4);
  Write(ps, "put", fuzz::JoinFrames({"peer-l", put.SerializeAsString(), data}));
  slice[2] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_data(reinterpret_cast<const char*>(slice.data()), slice.size() * 4);
  p->set_version(4);
  Write(ps, "put_nan", fuzz::JoinFrames({"peer-l", put.SerializeAsString(), nan_data}));
  get.mutable_get()->set_exact_version(3);
  Write(ps, "get_exact", fuzz::JoinFrames({"peer-b", get.SerializeAsString()}));
  // Sync/async: a gradient push of version 3 from learner 1, and a checkpoint request.
  wire::PsRequest push;
  *push.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 1, 1);
  push.mutable_push()->set_learning_rate(0.01);
  *push.mutable_push()->mutable_slice() = *p;
  push.mutable_push()->mutable_slice()->set_version(3);
  push.mutable_push()->mutable_slice()->set_learner_index(1);
  push.mutable_push()->mutable_slice()->set_learner_env_frames(12345);
  Write(ps, "push", fuzz::JoinFrames({"peer-l", push.SerializeAsString(), data}));
  wire::PsRequest checkpoint;
  *checkpoint.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
  checkpoint.mutable_checkpoint()->set_sequence(7);
  Write(ps, "checkpoint", fuzz::JoinFrames({"peer-l", checkpoint.SerializeAsString()}));

  // Configs: one with overrides. The shipped configs are seeds as they are: tools/fuzz.sh
  // hands configs/ to the config target as a second corpus, so no copy can drift.
  const fs::path cfg = root / "config";
  Write(cfg, "overrides",
        "env { name: \"CartPole\" }\nnet { hidden_sizes: [8] }\n--\nlearner.batch_size=4\n"
        "net.hidden_sizes=16\ncluster.curve=false\nstop.total_env_frames=1e9\n");

  // Checkpoints: a valid small one and a truncated one.
  learner::CheckpointData d;
  d.layout_fingerprint = 77;
  d.layout_text = "w [2, 3] 0\nb [3] 6\n";
  d.version = 5;
  d.params = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  d.rms_mean_square.assign(9, 0.5f);
  d.rms_momentum.assign(9, 0.f);
  const fs::path ck = root / "checkpoint";
  fs::create_directories(ck);
  if (const base::Status st = learner::SaveCheckpoint((ck / "valid").string(), d); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  std::ifstream in(ck / "valid", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  // Without its checksum: the target appends a valid one.
  Write(ck, "unsealed", bytes.substr(0, bytes.size() - 8));
  Write(ck, "truncated", bytes.substr(0, bytes.size() / 2));
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
