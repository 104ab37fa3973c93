// Several learners (issue 9): sync aggregation and async staleness on PS shards that own
// the optimizer, and sharded checkpoints that survive torn writes.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <random>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <limits>

#include "learner/loss.h"
#include "learner/optimizer.h"
#include "net/model.h"
#include "ps/checkpoints.h"
#include "ps/placement.h"
#include "ps/shard.h"
#include "tests/random_batch.h"
#include "base/durable_file.h"
#include "wire/zmq_util.h"

using namespace stampede;

namespace {
constexpr uint64_t kFingerprint = 42;

net::ModelSpec Spec() {
  net::ModelSpec s;
  s.obs_shape = {3};
  s.hidden_sizes = {6, 5};
  s.policy = net::CategoricalPolicy(3);
  return s;
}

// A learner's gradient of a fixed batch, clipped by the global norm as the learner does.
std::vector<float> Gradient(const net::ModelSpec& spec, const std::vector<float>& params, uint64_t seed) {
  auto net = net::MakeCpuModel<float>(spec);
  const learner::Batch batch = testing::RandomBatch(5, 4, 3, 3, seed);
  std::vector<float> grad(params.size(), 0.f);
  learner::LossOptions lo;
  learner::ComputeLossAndGrad(*net, params.data(), batch, lo, grad.data());
  learner::ClipGlobalNorm(grad, 40.0);
  return grad;
}

// What the shard's ROUTER socket hands Handle: routing id, header, the slice's floats.
std::vector<zmq::message_t> Message(const wire::PsRequest& req, const float* data, int64_t count) {
  std::vector<zmq::message_t> parts;
  parts.emplace_back(std::string("learner"));
  parts.emplace_back(req.SerializeAsString());
  parts.emplace_back(data, size_t(count) * sizeof(float));
  return parts;
}

void Geometry(const ps::Placement& plan, int shard, int64_t version, int learner, wire::ParamsSlice* s) {
  *s->mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, learner, 1);
  s->set_has_params(true);
  s->set_version(version);
  s->set_shard(shard);
  s->set_num_shards(plan.num_shards());
  s->set_offset(plan.Start(shard));
  s->set_count(plan.Count(shard));
  s->set_total_size(plan.total_size);
  s->set_layout_fingerprint(kFingerprint);
  s->set_learner_index(learner);
}

void Put(ps::Shard& shard, const ps::Placement& plan, int s, const std::vector<float>& params) {
  wire::PsRequest req;
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
  Geometry(plan, s, 0, 0, req.mutable_put());
  std::vector<float> slice(size_t(plan.Count(s)));
  plan.Gather(s, params.data(), slice.data());
  shard.Handle(Message(req, slice.data(), plan.Count(s)));
}

void Push(ps::Shard& shard, const ps::Placement& plan, int s, const std::vector<float>& grad, int64_t version,
          int learner, double lr) {
  wire::PsRequest req;
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, learner, 1);
  req.mutable_push()->set_learning_rate(lr);
  Geometry(plan, s, version, learner, req.mutable_push()->mutable_slice());
  std::vector<float> slice(size_t(plan.Count(s)));
  plan.Gather(s, grad.data(), slice.data());
  shard.Handle(Message(req, slice.data(), plan.Count(s)));
}

ps::ShardOptions Options(ps::UpdateMode mode, int shard, int shards) {
  ps::ShardOptions o;
  o.shard = shard;
  o.num_shards = shards;
  o.mode = mode;
  o.num_learners = 2;
  o.replicas_to_aggregate = 2;
  o.max_staleness = 2;
  return o;
}
}  // namespace

TEST_CASE("sync: two learners' gradients make one RMSProp step on their mean, element by element", "[ps][sync]") {
  const auto spec = Spec();
  const auto layout = net::ModelLayout(spec);
  const int64_t total = layout.total_size();
  std::vector<float> params(static_cast<size_t>(total));
  net::InitParams(spec, 7, params);
  const auto g1 = Gradient(spec, params, 1), g2 = Gradient(spec, params, 2);
  REQUIRE(g1 != g2);
  const double lr = 0.01;
  // Independently: one step on the mean gradient over the whole vector.
  std::vector<float> mean(static_cast<size_t>(total)), expect = params;
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = (g1[i] + g2[i]) / 2.f;
  learner::Optimizer rms(total, {});
  rms.Step(expect, mean, lr, 1);

  const ps::Placement plan = ps::PlaceTensors(layout, 3, "greedy", 16);  // some tensors partitioned
  zmq::context_t ctx(1);
  std::vector<float> got(static_cast<size_t>(total), std::numeric_limits<float>::quiet_NaN());
  for (int s = 0; s < 3; ++s) {
    ps::Shard shard(ctx, Options(ps::UpdateMode::kSync, s, 3));
    Put(shard, plan, s, params);
    REQUIRE(shard.stats().newest_version.load() == 0);
    Push(shard, plan, s, g1, 0, 0, lr);
    CHECK(shard.stats().newest_version.load() == 0);  // waits for the second replica
    CHECK(shard.stats().gradients_applied.load() == 0);
    Push(shard, plan, s, g2, 0, 1, lr);
    CHECK(shard.stats().newest_version.load() == 1);
    CHECK(shard.stats().gradients_applied.load() == 1);
    plan.Scatter(s, shard.current().data(), got.data());
    // A gradient of version 0 now is too old: dropped and counted, nothing changes.
    Push(shard, plan, s, g1, 0, 0, lr);
    CHECK(shard.stats().gradients_dropped.load() == 1);
    CHECK(shard.stats().newest_version.load() == 1);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == expect[i]);
  }
}

TEST_CASE("sync: one learner's second gradient for the same version does not count twice", "[ps][sync]") {
  const auto spec = Spec();
  const auto layout = net::ModelLayout(spec);
  std::vector<float> params(static_cast<size_t>(layout.total_size()));
  net::InitParams(spec, 7, params);
  const auto g = Gradient(spec, params, 3);
  const auto plan = ps::ContiguousPlacement(layout.total_size(), 1);
  zmq::context_t ctx(1);
  ps::Shard shard(ctx, Options(ps::UpdateMode::kSync, 0, 1));
  Put(shard, plan, 0, params);
  Push(shard, plan, 0, g, 0, 0, 0.01);
  Push(shard, plan, 0, g, 0, 0, 0.01);
  CHECK(shard.stats().newest_version.load() == 0);
  CHECK(shard.stats().gradients_dropped.load() == 1);
}

TEST_CASE("async: gradients apply on arrival and one past max_gradient_staleness is dropped and counted", "[ps][async]") {
  const auto spec = Spec();
  const auto layout = net::ModelLayout(spec);
  const int64_t total = layout.total_size();
  std::vector<float> params(static_cast<size_t>(total));
  net::InitParams(spec, 7, params);
  std::vector<std::vector<float>> grads;
  for (uint64_t seed = 1; seed <= 4; ++seed) grads.push_back(Gradient(spec, params, seed));
  const auto plan = ps::ContiguousPlacement(total, 1);
  zmq::context_t ctx(1);
  ps::Shard shard(ctx, Options(ps::UpdateMode::kAsync, 0, 1));  // max staleness 2
  Put(shard, plan, 0, params);
  // Four gradients all computed on version 0: staleness 0, 1, 2 apply, 3 does not.
  for (int k = 0; k < 4; ++k) Push(shard, plan, 0, grads[size_t(k)], 0, k % 2, 0.01);
  CHECK(shard.stats().gradients_applied.load() == 3);
  CHECK(shard.stats().gradients_dropped.load() == 1);
  CHECK(shard.stats().newest_version.load() == 3);
  for (int k = 0; k < 3; ++k) CHECK(shard.stats().staleness[k].load() == 1);
  CHECK(shard.stats().staleness[3].load() == 0);
  std::vector<float> expect = params;
  learner::Optimizer rms(total, {});
  for (int k = 0; k < 3; ++k) rms.Step(expect, grads[size_t(k)], 0.01, k + 1);
  CHECK(shard.current() == expect);
  CHECK(shard.mean_square() == rms.mean_square());
}

TEST_CASE("ps: a relay-mode shard refuses gradient pushes, a sync one refuses puts after the first", "[ps][sync]") {
  const auto plan = ps::ContiguousPlacement(10, 1);
  std::vector<float> params(10, 0.5f), grad(10, 0.1f);
  zmq::context_t ctx(1);
  ps::Shard relay(ctx, Options(ps::UpdateMode::kRelay, 0, 1));
  Put(relay, plan, 0, params);
  Push(relay, plan, 0, grad, 0, 0, 0.01);
  CHECK(relay.stats().refused[size_t(ps::Refusal::kWrongMode)].load() == 1);
  ps::Shard sync(ctx, Options(ps::UpdateMode::kSync, 0, 1));
  Put(sync, plan, 0, params);
  Put(sync, plan, 0, grad);  // a second put (say, a restarted chief's) changes nothing
  CHECK(sync.current() == params);
  CHECK(sync.stats().stale_puts.load() == 1);
}

namespace {
ps::ShardPart Part(int shard, int64_t version, float value) {
  ps::ShardPart p;
  p.shard = shard;
  p.num_shards = 2;
  p.version = version;
  p.offset = shard * 4;
  p.count = 4;
  p.total_size = 8;
  p.layout_fingerprint = kFingerprint;
  p.learner_frames = {1000 + version, 2000 + version};
  p.params = {value, -value, 1e-30f, 3.25f};
  p.mean_square = {0.5f, 0.25f, 0.f, 1e10f};
  p.momentum = {0.f, -1.f, 2.f, 0.125f};
  return p;
}

// A checkpoint directory with both shards' parts and a manifest over them.
void WriteCheckpoint(const std::string& root, int64_t seq, int64_t version, bool final = false) {
  const std::string dir = ps::CheckpointDir(root, seq);
  std::filesystem::create_directories(dir);
  ps::Manifest m;
  m.sequence = seq;
  m.version = version;
  m.final = final;
  for (int s = 0; s < 2; ++s) {
    const std::string bytes = ps::SerializeShardPart(Part(s, version, float(seq)));
    std::string error;
    REQUIRE_OK(base::WriteFileAtomically(dir + "/" + ps::ShardPartName(s), bytes));
    m.parts.push_back({ps::ShardPartName(s), int64_t(bytes.size()), base::Fnv1a64(bytes.data(), bytes.size())});
  }
  REQUIRE(ps::WriteManifest(dir, m).ok());
}

bool Contains(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("sharded checkpoint: a part round-trips bit-exactly", "[checkpoint][ps]") {
  const ps::ShardPart p = Part(1, 1234, 0.1f);
  ps::ShardPart back;
  REQUIRE(ps::ParseShardPart(ps::SerializeShardPart(p), "x", &back).ok());
  CHECK(back.shard == 1);
  CHECK(back.version == 1234);
  CHECK(back.offset == 4);
  CHECK(back.learner_frames == p.learner_frames);
  CHECK(std::memcmp(back.params.data(), p.params.data(), 16) == 0);
  CHECK(back.mean_square == p.mean_square);
  CHECK(back.momentum == p.momentum);
}

TEST_CASE("sharded checkpoint: the manifest says whether the ordered stop wrote it", "[checkpoint][ps]") {
  const std::string root = (std::filesystem::temp_directory_path() / "stampede_sharded_ckpt_final").string();
  std::filesystem::remove_all(root);
  WriteCheckpoint(root, 1, 100);
  WriteCheckpoint(root, 2, 200, /*final=*/true);
  ps::Manifest m;
  REQUIRE(ps::ReadManifest(ps::CheckpointDir(root, 1), &m).ok());
  CHECK_FALSE(m.final);
  REQUIRE(ps::ReadManifest(ps::CheckpointDir(root, 2), &m).ok());
  CHECK(m.final);
  CHECK(m.version == 200);
  CHECK(m.parts.size() == 2);
  ps::FoundCheckpoint found;
  std::vector<std::string> warnings;
  REQUIRE(ps::FindNewestCheckpoint(root, &found, &warnings));
  CHECK(found.manifest.sequence == 2);
  CHECK(found.manifest.final);
  // A periodic round after it (a resumed run's) is the newest, and not final.
  WriteCheckpoint(root, 3, 300);
  REQUIRE(ps::FindNewestCheckpoint(root, &found, &warnings));
  CHECK(found.manifest.sequence == 3);
  CHECK_FALSE(found.manifest.final);
  std::filesystem::remove_all(root);
}

TEST_CASE("sharded checkpoint: without a manifest, truncated or NaN it is skipped and the previous one used", "[checkpoint][ps]") {
  const std::string root = (std::filesystem::temp_directory_path() / "stampede_sharded_ckpt").string();
  std::filesystem::remove_all(root);
  WriteCheckpoint(root, 1, 100);
  WriteCheckpoint(root, 2, 200);
  // 3: the manifest never written (a crash before the chief finished).
  WriteCheckpoint(root, 3, 300);
  std::filesystem::remove(ps::CheckpointDir(root, 3) + "/MANIFEST");
  // 4: a shard's part cut short after the manifest was written.
  WriteCheckpoint(root, 4, 400);
  const std::string cut = ps::CheckpointDir(root, 4) + "/" + ps::ShardPartName(1);
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 8);
  // 5: a complete checkpoint whose parameters are NaN (manifest matching the file).
  {
    const std::string dir = ps::CheckpointDir(root, 5);
    std::filesystem::create_directories(dir);
    ps::Manifest m;
    m.sequence = 5;
    m.version = 500;
    ps::ShardPart bad = Part(0, 500, std::numeric_limits<float>::quiet_NaN());
    const std::string bytes = ps::SerializeShardPart(bad);
    std::string error;
    REQUIRE_OK(base::WriteFileAtomically(dir + "/" + ps::ShardPartName(0), bytes));
    m.parts.push_back({ps::ShardPartName(0), int64_t(bytes.size()), base::Fnv1a64(bytes.data(), bytes.size())});
    REQUIRE(ps::WriteManifest(dir, m).ok());
  }
  ps::FoundCheckpoint found;
  std::vector<std::string> warnings;
  REQUIRE(ps::FindNewestCheckpoint(root, &found, &warnings));
  CHECK(found.manifest.sequence == 2);
  CHECK(found.manifest.version == 200);
  REQUIRE(warnings.size() == 3);
  CHECK(Contains(warnings, "non-finite"));
  CHECK(Contains(warnings, "(truncated?)"));
  CHECK(Contains(warnings, "no MANIFEST"));
  // The part it gives back is the one written, bit for bit.
  std::string bytes, error;
  REQUIRE(ps::ReadPart(found.dir, found.manifest.parts[1], &bytes).ok());
  ps::ShardPart back;
  REQUIRE(ps::ParseShardPart(bytes, "p", &back).ok());
  const ps::ShardPart want = Part(1, 200, 2.f);
  CHECK(back.params == want.params);
  CHECK(back.mean_square == want.mean_square);
  CHECK(ps::NextCheckpointSequence(root) == 6);
  // Keep 1: the newest intact one (2) stays, and the damaged ones newer than it; 1 goes.
  ps::PruneCheckpoints(root, 1);
  CHECK_FALSE(std::filesystem::exists(ps::CheckpointDir(root, 1)));
  for (int64_t seq = 2; seq <= 5; ++seq) CHECK(std::filesystem::exists(ps::CheckpointDir(root, seq)));
  std::filesystem::remove_all(root);
}

TEST_CASE("sharded checkpoint: resharded from 3 shards to 2 and to 5 it holds the same values, optimizer state and counters", "[checkpoint][ps]") {
  const std::string root = (std::filesystem::temp_directory_path() / "stampede_reshard_ckpt").string();
  std::filesystem::remove_all(root);
  const int64_t N = 1001;  // divides evenly by none of the shard counts
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> params(static_cast<size_t>(N)), ms(static_cast<size_t>(N)), mom(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) params[size_t(i)] = d(rng), ms[size_t(i)] = std::abs(d(rng)), mom[size_t(i)] = d(rng);
  const ps::Placement three = ps::ContiguousPlacement(N, 3);
  {
    const std::string dir = ps::CheckpointDir(root, 1);
    std::filesystem::create_directories(dir);
    ps::Manifest m;
    m.sequence = 1;
    m.version = 40;
    std::string error;
    for (int s = 0; s < 3; ++s) {
      ps::ShardPart p;
      p.shard = s, p.num_shards = 3, p.version = 40 + s, p.offset = three.Start(s), p.count = three.Count(s);
      p.total_size = N, p.layout_fingerprint = 9, p.learner_frames = {100 + s, 7 - s};
      for (auto* v : {&p.params, &p.mean_square, &p.momentum}) v->resize(size_t(p.count));
      three.Gather(s, params.data(), p.params.data());
      three.Gather(s, ms.data(), p.mean_square.data());
      three.Gather(s, mom.data(), p.momentum.data());
      const std::string bytes = ps::SerializeShardPart(p);
      REQUIRE_OK(base::WriteFileAtomically(dir + "/" + ps::ShardPartName(s), bytes));
      m.parts.push_back({ps::ShardPartName(s), int64_t(bytes.size()), base::Fnv1a64(bytes.data(), bytes.size())});
    }
    for (const auto& [name, text] : {std::pair<std::string, std::string>{"config.textproto", "old config"},
                                     {"counters.txt", "version 42\n"}}) {
      REQUIRE_OK(base::WriteFileAtomically(dir + "/" + name, text));
      m.parts.push_back({name, int64_t(text.size()), base::Fnv1a64(text.data(), text.size())});
    }
    REQUIRE(ps::WriteManifest(dir, m).ok());
  }
  ps::FoundCheckpoint old;
  std::vector<std::string> warnings;
  REQUIRE(ps::FindNewestCheckpoint(root, &old, &warnings));
  for (const int shards : {2, 5}) {
    INFO(shards << " shards");
    const ps::Placement to = ps::ContiguousPlacement(N, shards);
    std::string written;
    const base::Status st = ps::ReshardCheckpoint(old, three, to, root, "new config", &written);
    INFO(st.message());
    REQUIRE(st.ok());
    ps::FoundCheckpoint now;
    REQUIRE(ps::FindNewestCheckpoint(root, &now, &warnings));
    REQUIRE(now.dir == written);
    CHECK(now.manifest.version == 42);  // the newest part's
    std::vector<float> p2(static_cast<size_t>(N), -1.f), ms2(static_cast<size_t>(N), -1.f), mom2(static_cast<size_t>(N), -1.f);
    for (int s = 0; s < shards; ++s) {
      std::string bytes;
      ps::ShardPart part;
      REQUIRE(ps::ReadPart(now.dir, now.manifest.parts[size_t(s)], &bytes).ok());
      REQUIRE(ps::ParseShardPart(bytes, "p", &part).ok());
      CHECK(part.shard == s);
      CHECK(part.num_shards == shards);
      CHECK(part.version == 42);
      CHECK(part.learner_frames == std::vector<int64_t>{102, 7});  // each learner's newest
      CHECK(part.layout_fingerprint == 9u);
      to.Scatter(s, part.params.data(), p2.data());
      to.Scatter(s, part.mean_square.data(), ms2.data());
      to.Scatter(s, part.momentum.data(), mom2.data());
    }
    CHECK(p2 == params);
    CHECK(ms2 == ms);
    CHECK(mom2 == mom);
    std::string text;
    REQUIRE(ps::ReadPart(now.dir, now.manifest.parts[size_t(shards)], &text).ok());
    CHECK(text == "new config");
    REQUIRE(ps::ReadPart(now.dir, now.manifest.parts[size_t(shards) + 1], &text).ok());
    CHECK(text == "version 42\n");
  }
  // Parts that do not match the placement said to have made them: refused, naming the part.
  std::string written;
  const base::Status wrong = ps::ReshardCheckpoint(old, ps::ContiguousPlacement(N, 4), ps::ContiguousPlacement(N, 2),
                                                   root, "x", &written);
  CHECK(wrong.code() == base::Code::kInvalidArgument);
  CHECK_THAT(wrong.message(), Catch::Contains("shard-0.bin") && Catch::Contains("of 3"));
  std::filesystem::remove_all(root);
}

TEST_CASE("ps: a shard restored from a checkpoint serves above everything it served before", "[ps][checkpoint]") {
  const std::string mark = (std::filesystem::temp_directory_path() / "stampede_ps_mark").string();
  REQUIRE(ps::WriteVersionMark(mark, 1500).ok());
  auto opt = Options(ps::UpdateMode::kSync, 0, 2);
  opt.version_mark_path = mark;
  opt.restore = std::make_shared<ps::ShardPart>(Part(0, 1234, 0.5f));
  zmq::context_t ctx(1);
  ps::Shard shard(ctx, opt);
  CHECK(shard.stats().newest_version.load() == 1500);
  CHECK(shard.current() == opt.restore->params);
  CHECK(shard.mean_square() == opt.restore->mean_square);
  // Serving 1500 moved the mark a block ahead, on disk, before anything was served.
  CHECK(ps::ReadVersionMark(mark) == 2500);
  std::filesystem::remove(mark);
}
