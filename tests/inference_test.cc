// Central inference (actors.inference "central"): an actor acting through its learner's
// inference server records the same unrolls as one acting locally with the same
// parameters (logits, actions, LSTM states carried across unrolls and reset at episode
// starts, truncation values), the version stamped is the server's, and a bad request
// gets an error reply that names the problem while the server goes on serving.
#include <catch2/catch.hpp>

#include <atomic>

#include "actors/actor.h"
#include "actors/inference.h"
#include "net/model.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "tests/in_process_shards.h"
#include "tests/resolved_spec.h"
#include "config/config.h"
#include "wire/messages.pb.h"
#include "wire/zmq_util.h"
#include "tests/status_testing.h"

using namespace stampede;

namespace {
struct CentralFixture {
  zmq::context_t ctx{1};
  testing::InProcessShards shards{ctx, 2};
  config::Config cfg;
  std::atomic<bool> stop{false};
  std::unique_ptr<actors::InferenceServer> server;
  std::unique_ptr<ps::ParamsPublisher> publisher;

  explicit CentralFixture(int E, int T) {
    cfg.mutable_env()->set_name("Catch");
    cfg.mutable_env()->set_max_episode_steps(5);  // Catch's 9-step episodes are cut: truncation values
    cfg.mutable_net()->add_hidden_sizes(8);
    cfg.mutable_net()->set_lstm_size(6);
    cfg.mutable_actors()->set_envs_per_actor(E);
    cfg.mutable_actors()->set_unroll_length(T);
    cfg.mutable_actors()->set_num_actors(1);
    cfg.mutable_actors()->set_inference("central");
    cfg.mutable_actors()->set_first_params_timeout_s(20);
    cfg.mutable_ps()->set_num_shards(2);
    cfg.mutable_cluster()->set_curve(false);
    for (const auto& ep : shards.endpoints) cfg.mutable_cluster()->add_ps(ep);
    cfg.mutable_cluster()->add_inference("tcp://127.0.0.1:*");
    cfg.set_seed(11);
    testing::ResolveSpecInPlace(&cfg);
    server = std::make_unique<actors::InferenceServer>(cfg, 0, stop);
    REQUIRE_OK(server->Start());
    cfg.mutable_cluster()->set_inference(0, server->endpoint());
  }
  ~CentralFixture() {
    stop = true;
    server->Stop();
    publisher.reset();
  }
  // What a learner does: put the parameters as `version` on the shards.
  void Publish(const actors::ActorCore& core, const std::vector<float>& params, int64_t version) {
    ps::ClientOptions co;
    co.endpoints = shards.endpoints;
    co.total_size = core.param_count();
    co.layout_fingerprint = core.layout_fingerprint();
    co.placement = std::make_shared<ps::Placement>(ps::PlacementFromConfig(cfg, core.layout()));
    co.sender = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
    // Kept: a closed socket may drop what it has not delivered yet.
    publisher = std::make_unique<ps::ParamsPublisher>(ctx, co);
    REQUIRE(publisher->PutAll(params, version, nullptr));
  }
};
}  // namespace

TEST_CASE("inference: an actor acting through the central server records what a local actor records", "[actors][inference]") {
  const int E = 3, T = 7;
  CentralFixture f(E, T);
  std::string error;
  auto local = ::stampede::testing::ValueOr(actors::ActorCore::Create(f.cfg, 0), &error);
  auto central = ::stampede::testing::ValueOr(actors::ActorCore::Create(f.cfg, 0), &error);
  INFO(error);
  REQUIRE(local);
  REQUIRE(central);
  const net::ModelSpec& spec = local->net_spec();
  std::vector<float> params(size_t(local->param_count()));
  net::InitParams(spec, 3, params);
  for (auto& p : params) p *= 3;  // a state-dependent policy and non-zero values
  f.Publish(*local, params, 4);

  actors::InferenceClient client(f.ctx, f.cfg, 0, wire::MakeSender(wire::ROLE_ACTOR, 0, 99), nullptr, *central,
                                 &f.stop, nullptr);
  central->SetRemote(&client);
  wire::TrajectoryBatch a, b;
  int truncations = 0;
  bool carried = false;
  for (int u = 0; u < 4; ++u) {
    local->CollectUnroll(params, 4, &a);
    central->CollectUnroll({}, -1, &b);
    CHECK(b.meta.policy_version() == 4);  // the server's version, not the caller's
    REQUIRE(a.actions == b.actions);      // same logits, same draws: same actions
    REQUIRE(a.behaviour_logits.size() == b.behaviour_logits.size());
    for (size_t i = 0; i < a.behaviour_logits.size(); ++i) {
      CHECK(b.behaviour_logits[i] == Approx(a.behaviour_logits[i]).margin(1e-6));
    }
    REQUIRE(a.initial_core_state.size() == b.initial_core_state.size());
    for (size_t i = 0; i < a.initial_core_state.size(); ++i) {
      CHECK(b.initial_core_state[i] == Approx(a.initial_core_state[i]).margin(1e-6));
      carried = carried || a.initial_core_state[i] != 0.f;
    }
    for (size_t i = 0; i < a.truncation_values.size(); ++i) {
      CHECK(b.truncation_values[i] == Approx(a.truncation_values[i]).margin(1e-5));
      truncations += a.truncated[i];
    }
    CHECK(a.rewards == b.rewards);
  }
  CHECK(truncations > 0);  // truncation values were asked of the server
  CHECK(carried);          // states crossed unroll boundaries mid-episode
  CHECK(f.server->errors() == 0);
  CHECK(f.server->batches() >= 4 * T);
}

TEST_CASE("inference: a bad request gets an error naming the problem, and the server serves on", "[actors][inference]") {
  const int E = 2, T = 3;
  CentralFixture f(E, T);
  std::string error;
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(f.cfg, 0), &error);
  REQUIRE(core);
  std::vector<float> params(size_t(core->param_count()), 0.01f);
  f.Publish(*core, params, 1);

  zmq::socket_t raw(f.ctx, zmq::socket_type::dealer);
  raw.connect(f.cfg.cluster().inference(0));
  wire::InferRequest req;
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 5);
  req.set_sequence(7);
  req.set_num_envs(E);
  req.set_episode_start(std::string(size_t(E), '\1'));
  std::vector<std::byte> short_obs(core->shape().obs_bytes() * E - 1);
  const wire::Frame frames[] = {{short_obs.data(), short_obs.size()}};
  REQUIRE(wire::SendMessage(raw, req, frames));
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t items[] = {{raw.handle(), 0, ZMQ_POLLIN, 0}};
  REQUIRE(wire::Poll(items, 1, std::chrono::seconds(10)) == 1);
  REQUIRE(wire::RecvMultipart(raw, &parts, true));
  wire::InferReply reply;
  REQUIRE(wire::ParseFrame(parts[0], &reply));
  CHECK(reply.sequence() == 7);
  CHECK_THAT(reply.error(), Catch::Contains("observations are") && Catch::Contains("expected"));

  // An actor index no run has (past config::kMaxActors: `stampede scale` may add actors past
  // actors.num_actors, up to it).
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 1024, 5);
  req.set_sequence(8);
  std::vector<std::byte> obs(core->shape().obs_bytes() * E);
  const wire::Frame good[] = {{obs.data(), obs.size()}};
  REQUIRE(wire::SendMessage(raw, req, good));
  REQUIRE(wire::Poll(items, 1, std::chrono::seconds(10)) == 1);
  REQUIRE(wire::RecvMultipart(raw, &parts, true));
  REQUIRE(wire::ParseFrame(parts[0], &reply));
  CHECK_THAT(reply.error(), Catch::Contains("not an actor of this run"));

  // Still serving: a well-formed request gets logits.
  *req.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 5);
  req.set_sequence(9);
  REQUIRE(wire::SendMessage(raw, req, good));
  REQUIRE(wire::Poll(items, 1, std::chrono::seconds(10)) == 1);
  REQUIRE(wire::RecvMultipart(raw, &parts, true));
  REQUIRE(wire::ParseFrame(parts[0], &reply));
  CHECK(reply.error().empty());
  CHECK(reply.policy_version() == 1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].size() == size_t(E) * core->num_actions() * sizeof(float));
  CHECK(f.server->errors() == 2);
}
