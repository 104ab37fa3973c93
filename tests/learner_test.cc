// The learner resumes from its checkpoint (parameters, optimizer state, version) and
// refuses one written for another network with both layouts in the message.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <filesystem>
#include <limits>
#include <thread>

#include "learner/checkpoint.h"
#include "learner/learner.h"
#include "ps/client.h"
#include "config/config.h"
#include "net/from_config.h"
#include "ps/placement.h"
#include "ps/shard.h"
#include "tests/in_process_shards.h"
#include "tests/resolved_spec.h"
#include "wire/zmq_util.h"

using namespace stampede;

namespace {
// In-process shards whose endpoints are written into the config.
struct Shards : testing::InProcessShards {
  Shards(zmq::context_t& ctx, config::Config* cfg) : InProcessShards(ctx, 2) {
    cfg->mutable_ps()->set_num_shards(2);
    for (const auto& ep : endpoints) cfg->mutable_cluster()->add_ps(ep);
  }
};

config::Config Base(const std::string& run_dir, int hidden) {
  config::Config cfg;
  cfg.set_run_dir(run_dir);
  cfg.mutable_env()->set_name("Catch");
  cfg.mutable_net()->add_hidden_sizes(hidden);
  cfg.mutable_actors()->set_unroll_length(5);
  cfg.mutable_learner()->set_batch_size(2);
  testing::ResolveSpecInPlace(&cfg);
  return cfg;
}
}  // namespace

TEST_CASE("learner: restores version and parameters from a checkpoint", "[learner]") {
  const auto dir = std::filesystem::temp_directory_path() / ("stampede_restore_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  zmq::context_t ctx(1);
  std::string error;
  // A first learner writes its checkpoint at version 0.
  {
    config::Config cfg = Base(dir.string(), 16);
    Shards shards(ctx, &cfg);
    learner::Learner first(cfg, ctx, "tcp://127.0.0.1:*", 1);
    REQUIRE_OK(first.Start());
    first.Stop();
    REQUIRE_OK(first.WriteCheckpoint());
  }
  learner::CheckpointData saved;
  REQUIRE(learner::LoadCheckpoint((dir / "checkpoint.bin").string(), &saved).ok());
  // Pretend it trained: version 41 and shifted parameters.
  saved.version = 41;
  saved.env_frames = 123450;
  for (auto& p : saved.params) p += 0.5f;
  const std::string edited = (dir / "edited.bin").string();
  REQUIRE(learner::SaveCheckpoint(edited, saved).ok());

  SECTION("the same network resumes at the saved version and serves the saved parameters") {
    config::Config cfg = Base("", 16);
    cfg.mutable_learner()->set_restore_from(edited);
    Shards shards(ctx, &cfg);
    learner::Learner resumed(cfg, ctx, "tcp://127.0.0.1:*", 2);
    REQUIRE_OK(resumed.Start());
    CHECK(resumed.policy_version() == 41);
    CHECK(resumed.env_frames() == 123450);  // the global count goes on
    wire::Status status;
    resumed.FillStatus(&status);
    CHECK(status.start_env_frames() == 123450);
    ps::ClientOptions co;
    co.endpoints.assign(cfg.cluster().ps().begin(), cfg.cluster().ps().end());
    co.total_size = int64_t(saved.params.size());
    co.layout_fingerprint = saved.layout_fingerprint;
    co.sender = wire::MakeSender(wire::ROLE_ACTOR, 0, 3);
    {
      wire::StepShape shape;
      REQUIRE_OK(ResolvedStepShape(cfg, &shape));
      auto net = ::stampede::testing::ValueOr(net::MakeModelFromConfig(cfg, shape), &error);
      co.placement = std::make_shared<ps::Placement>(ps::PlacementFromConfig(cfg, net->layout()));
    }
    ps::ParamsFetcher fetch(ctx, co);
    std::vector<float> params(saved.params.size());
    int64_t version = -1;
    REQUIRE(fetch.WaitFirst(params, &version, std::chrono::seconds(10), nullptr));
    CHECK(version == 41);
    CHECK(params == saved.params);
    resumed.Stop();
  }
  SECTION("another network is refused with both layouts named") {
    config::Config cfg = Base("", 32);
    cfg.mutable_learner()->set_restore_from(edited);
    Shards shards(ctx, &cfg);
    learner::Learner other(cfg, ctx, "tcp://127.0.0.1:*", 2);
    const base::Status refused = other.Start();
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.message(), Catch::Contains("checkpoint is for another network") &&
                          Catch::Contains("torso/0/w [50,16]") && Catch::Contains("torso/0/w [50,32]"));
  }
  SECTION("the same shapes with another activation are refused") {
    config::Config cfg = Base("", 16);
    cfg.mutable_net()->set_activation("tanh");  // the checkpoint's network is relu
    cfg.mutable_learner()->set_restore_from(edited);
    Shards shards(ctx, &cfg);
    learner::Learner other(cfg, ctx, "tcp://127.0.0.1:*", 2);
    const base::Status refused = other.Start();
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.message(), Catch::Contains("checkpoint is for another network") &&
                          Catch::Contains("mlp activation relu") && Catch::Contains("mlp activation tanh"));
  }
  SECTION("a checkpoint holding NaN is refused") {
    learner::CheckpointData poisoned = saved;
    poisoned.params[3] = std::numeric_limits<float>::quiet_NaN();
    const std::string nan_path = (dir / "nan.bin").string();
    REQUIRE(learner::SaveCheckpoint(nan_path, poisoned).ok());
    config::Config cfg = Base("", 16);
    cfg.mutable_learner()->set_restore_from(nan_path);
    Shards shards(ctx, &cfg);
    learner::Learner other(cfg, ctx, "tcp://127.0.0.1:*", 2);
    const base::Status refused = other.Start();
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.message(), Catch::Contains("non-finite parameters"));
  }
  SECTION("a damaged checkpoint is refused") {
    config::Config cfg = Base("", 16);
    const std::string bad = (dir / "bad.bin").string();
    std::filesystem::copy_file(edited, bad, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(bad, std::filesystem::file_size(bad) - 5);
    cfg.mutable_learner()->set_restore_from(bad);
    Shards shards(ctx, &cfg);
    learner::Learner damaged(cfg, ctx, "tcp://127.0.0.1:*", 2);
    const base::Status refused = damaged.Start();
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.message(), Catch::Contains(bad));
  }
}
