// stampede-forge: the attacker of tools/drills.sh. Reads a running fleet's
// RUN_DIR/config.textproto and sends what a local attacker would: forged PS puts,
// poisoned or oversized trajectories, forged or flooding statuses. By default it
// signs with a key of its own (an outsider's); `--key IDENTITY` uses one of the run's
// keys instead (a compromised or confused process of the run), `--plain` no CURVE.
// It also writes a NaN-poisoned copy of a checkpoint. Not part of `stampede`: it only
// exists to show that the fleet refuses these.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "actors/actor.h"
#include "base/log.h"
#include "ps/placement.h"
#include "learner/checkpoint.h"
#include "net/model.h"
#include "wire/auth.h"
#include "config/config.h"
#include "wire/trajectory.h"
#include "wire/zmq_util.h"

using namespace stampede;

namespace {

struct Attacker {
  config::Config cfg;
  std::shared_ptr<const wire::Curve> curve;  // null: --plain
  zmq::context_t ctx{1};

  // CURVE toward `server` at `endpoint` (over ipc:// the server checks the process's
  // credentials and its STAMPEDE_IDENTITY instead).
  void Secure(zmq::socket_t& s, const std::string& server, const std::string& endpoint) {
    if (curve) curve->MakeClient(s, server, endpoint);
  }
};

void Pause(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// A socket's handshake with its server, watched from before it connects. The forger's
// sockets have no linger (ConfigureSender), so what they queued leaves only if the
// handshake is done before they close. On a loaded machine it can take longer than a
// fixed pause (one CI run counted none of the three budget-spent statuses sent with the
// learner's key, over ipc and once over TCP).
class Handshake {
 public:
  Handshake(zmq::context_t& ctx, zmq::socket_t& socket) : events_(ctx, zmq::socket_type::pair) {
    static int next = 0;
    const std::string address = "inproc://forge-handshake-" + std::to_string(next++);
    constexpr int kEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(socket.handle(), address.c_str(), kEvents) == 0) {
      events_.connect(address);
      watching_ = true;
    }
  }

  // True once the server accepted the connection; false when it refused it (the first
  // outcome counts: a refused client retries) or nothing was heard within `max_wait`.
  bool Accepted(std::chrono::milliseconds max_wait) {
    if (outcome_ || !watching_) return outcome_.value_or(false);
    zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, max_wait) <= 0 || !(item.revents & ZMQ_POLLIN)) return false;
    zmq::message_t head, endpoint;
    if (!events_.recv(head) || head.size() < sizeof(uint16_t)) return false;
    if (head.more()) (void)events_.recv(endpoint);
    uint16_t event = 0;
    std::memcpy(&event, head.data(), sizeof event);
    outcome_ = event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    return *outcome_;
  }

 private:
  zmq::socket_t events_;
  bool watching_ = false;
  std::optional<bool> outcome_;
};

// Connects `s` (CURVE toward `server` where the run uses it) and watches its handshake.
std::unique_ptr<Handshake> Connect(Attacker& a, zmq::socket_t& s, const std::string& server,
                                   const std::string& endpoint) {
  a.Secure(s, server, endpoint);
  auto handshake = std::make_unique<Handshake>(a.ctx, s);
  s.connect(endpoint);
  return handshake;
}

// Before the socket closes: once the server has accepted it, let what was queued reach
// it (a linger, and over ipc the wait an actor does before it stops, zeromq/libzmq#4660).
// A refused socket has nothing to deliver. Says which it was: "accepted, read" (over ipc,
// the server had read every byte), "accepted" (a linger does the rest), "refused or no
// handshake within 10 s".
std::string Deliver(zmq::socket_t& s, Handshake& handshake, const std::string& endpoint) {
  if (!handshake.Accepted(std::chrono::seconds(10))) return "refused or no handshake within 10 s";
  s.set(zmq::sockopt::linger, 5000);
  if (wire::IsIpcEndpoint(endpoint)) {
    return wire::WaitUnixPeerRead(endpoint.substr(6), std::chrono::seconds(5)) ? "accepted, read"
                                                                                 : "accepted, not all read within 5 s";
  }
  return "accepted";
}

// Forged puts to every PS shard: version 10^12, each slice NaN (`nan`) or a finite
// but wrong pattern, with the layout a get would reveal (total size, fingerprint).
int ForgePuts(Attacker& a, bool nan, int count) {
  std::string error;
  auto made = actors::ActorCore::Create(a.cfg, 0);
  if (!made.ok()) {
    base::LogError("forge: %s\n", made.status().message().c_str());
    return 2;
  }
  const std::unique_ptr<actors::ActorCore> core = std::move(made).value();
  const int S = a.cfg.cluster().ps_size();
  std::vector<zmq::socket_t> sockets;
  std::vector<std::unique_ptr<Handshake>> handshakes;
  for (int s = 0; s < S; ++s) {
    zmq::socket_t sock(a.ctx, zmq::socket_type::dealer);
    wire::ConfigureSender(sock, 100, 0);
    handshakes.push_back(Connect(a, sock, wire::Identity("ps", s), a.cfg.cluster().ps(s)));
    sockets.push_back(std::move(sock));
  }
  const int64_t total = core->param_count();
  std::vector<float> data(size_t(total), nan ? std::numeric_limits<float>::quiet_NaN() : 1.0f);
  // The run's own placement, so a put is refused for what it holds, not for its shape.
  const ps::Placement plan = ps::PlacementFromConfig(a.cfg, core->layout());
  for (int i = 0; i < count; ++i) {
    for (int s = 0; s < S; ++s) {
      const int64_t offset = plan.Start(s), end = offset + plan.Count(s);
      wire::PsRequest req;
      *req.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
      wire::ParamsSlice* put = req.mutable_put();
      *put->mutable_sender() = req.sender();
      put->set_has_params(true);
      put->set_version(1000000000000LL + i);
      put->set_shard(s);
      put->set_num_shards(S);
      put->set_offset(offset);
      put->set_count(end - offset);
      put->set_total_size(total);
      put->set_layout_fingerprint(core->layout_fingerprint());
      const wire::Frame frames[] = {{data.data(), size_t(end - offset) * sizeof(float)}};
      (void)wire::SendMessage(sockets[s], req, frames);
    }
    Pause(0.05);
  }
  for (int s = 0; s < S; ++s) Deliver(sockets[s], *handshakes[s], a.cfg.cluster().ps(s));
  std::printf("forge: sent %d %s puts to %d shards\n", count, nan ? "NaN" : "finite", S);
  return 0;
}

// Trajectories made by a real actor core (well-formed), then poisoned.
int ForgeTrajectories(Attacker& a, const std::string& kind, int count) {
  std::string error;
  auto made = actors::ActorCore::Create(a.cfg, 0);
  if (!made.ok()) {
    base::LogError("forge: %s\n", made.status().message().c_str());
    return 2;
  }
  const std::unique_ptr<actors::ActorCore> core = std::move(made).value();
  std::vector<float> params(size_t(core->param_count()));
  net::InitParams(core->net_spec(), 1, params);
  zmq::socket_t push(a.ctx, zmq::socket_type::push);
  wire::ConfigureSender(push, 10, 1000);
  const auto handshake = Connect(a, push, "learner-0", a.cfg.cluster().learner());
  wire::TrajectoryBatch b;
  *b.meta.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 99);
  int sent = 0;
  for (int i = 0; i < count; ++i) {
    core->CollectUnroll(params, 0, &b);
    if (kind == "reward") {
      for (float& r : b.rewards) r = 3e38f;
    } else if (kind == "observation") {
      for (float& o : b.observations) o = 3e38f;
      for (auto& o : b.observations_u8) o = 255;  // uint8 is bounded by type: still accepted
    } else if (kind == "episodes") {
      b.meta.clear_episodes();
      for (int e = 0; e < 100; ++e) {
        auto* ep = b.meta.add_episodes();
        ep->set_episode_return(1e30);
        ep->set_length(1);
      }
    } else if (kind == "unrolls") {
      // Claims 20x the configured unrolls: a well-formed message of the wrong size.
      wire::TrajectoryBatch big;
      big.meta = b.meta;
      big.Resize(b.T(), b.n() * 20, b.shape);
      if (wire::SendTrajectory(push, big)) ++sent;
      continue;
    }
    if (wire::SendTrajectory(push, b)) ++sent;
  }
  Deliver(push, *handshake, a.cfg.cluster().learner());
  std::printf("forge: sent %d of %d '%s' trajectories\n", sent, count, kind.c_str());
  return 0;
}

// Statuses claiming to be the learner: the frame budget spent (`budget`), or a flood
// of `flood_mb`-megabyte messages.
int ForgeStatuses(Attacker& a, bool flood, int count, int flood_mb) {
  zmq::socket_t push(a.ctx, zmq::socket_type::push);
  wire::ConfigureSender(push, 10, 200);
  const auto handshake = Connect(a, push, "coordinator", a.cfg.cluster().coordinator());
  wire::Status s;
  *s.mutable_sender() = wire::MakeSender(wire::ROLE_LEARNER, 0, 1);
  s.set_env_frames(a.cfg.stop().total_env_frames() + 1);
  s.set_learner_steps(1000000);
  s.set_mean_return_100(1e9);
  s.set_activity("forged");
  if (flood) s.set_activity(std::string(size_t(flood_mb) << 20, 'x'));
  int sent = 0;
  for (int i = 0; i < count; ++i) sent += wire::SendMessage(push, s) ? 1 : 0;
  const std::string delivery = Deliver(push, *handshake, a.cfg.cluster().coordinator());
  std::printf("forge: sent %d of %d %s statuses (%s)\n", sent, count, flood ? "flooding" : "budget-spent",
              delivery.c_str());
  return 0;
}

int PoisonCheckpoint(const std::string& in, const std::string& out) {
  learner::CheckpointData d;
  if (const base::Status st = learner::LoadCheckpoint(in, &d); !st.ok()) {
    base::LogError("forge: %s\n", st.message().c_str());
    return 2;
  }
  d.params[d.params.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  if (const base::Status st = learner::SaveCheckpoint(out, d); !st.ok()) {
    base::LogError("forge: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("forge: %s with one NaN parameter, valid checksum\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stampede-forge: forged messages for the drills (tools/drills.sh)"};
  std::string run_dir, what, key, checkpoint_out;
  bool plain = false;
  int count = 20, flood_mb = 60;
  app.add_option("run_dir", run_dir, "A running fleet's run directory (or a checkpoint for nan-checkpoint)")->required();
  app.add_option("what", what,
                 "put-nan | put-finite | trajectory-reward | trajectory-observation | trajectory-episodes | "
                 "trajectory-unrolls | status-budget | status-flood | nan-checkpoint")
      ->required();
  app.add_option("--key", key, "Sign with this run identity's key (default: an outsider's key)");
  app.add_flag("--plain", plain, "No CURVE at all");
  app.add_option("--count", count, "Messages to send");
  app.add_option("--flood-mb", flood_mb, "Megabytes per flooding status");
  app.add_option("--out", checkpoint_out, "nan-checkpoint: where to write");
  CLI11_PARSE(app, argc, argv);
  if (what == "nan-checkpoint") return PoisonCheckpoint(run_dir, checkpoint_out);

  Attacker a;
  LoadedConfig loaded;
  std::string error;
  if (const base::Status st = LoadConfig(run_dir + "/config.textproto", {}, &loaded); !st.ok()) {
    base::LogError("forge: %s\n", st.message().c_str());
    return 2;
  }
  a.cfg = loaded.config;
  if (!plain && a.cfg.cluster().curve()) {
    const std::string keys = wire::KeysDir(a.cfg);
    if (key.empty()) {
      // An outsider: a key pair of its own, and the servers' public keys (public).
      const std::string own = (std::filesystem::temp_directory_path() / ("stampede-forge-" + std::to_string(::getpid()))).string();
      std::filesystem::remove_all(own);
      if (const base::Status made = wire::GenerateKeys(own, {"outsider"}); !made.ok()) {
        base::LogError("forge: %s\n", made.message().c_str());
        return 2;
      }
      for (const auto& e : std::filesystem::directory_iterator(keys)) {
        if (e.path().extension() == ".pub") std::filesystem::copy_file(e.path(), own + "/" + e.path().filename().string());
      }
      auto loaded = wire::Curve::Load(own, "outsider");
      std::filesystem::remove_all(own);
      if (!loaded.ok()) {
        base::LogError("forge: %s\n", loaded.status().message().c_str());
        return 2;
      }
      a.curve = std::move(loaded).value();
    } else {
      auto loaded = wire::Curve::Load(keys, key);
      if (!loaded.ok()) {
        base::LogError("forge: %s\n", loaded.status().message().c_str());
        return 2;
      }
      a.curve = std::move(loaded).value();
    }
  }
  if (what == "put-nan" || what == "put-finite") return ForgePuts(a, what == "put-nan", count);
  if (what.rfind("trajectory-", 0) == 0) return ForgeTrajectories(a, what.substr(11), count);
  if (what == "status-budget") return ForgeStatuses(a, false, count, 0);
  if (what == "status-flood") return ForgeStatuses(a, true, count, flood_mb);
  base::LogInfo("forge: unknown action %s\n", what.c_str());
  return 2;
}
