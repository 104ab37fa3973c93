// CURVE and ZAP: who may connect to which socket, and who may put parameters.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "ps/client.h"
#include "ps/shard.h"
#include "tests/in_process_shards.h"
#include "wire/auth.h"
#include "wire/zmq_util.h"
#include "tests/wait.h"
#include "tests/status_testing.h"

using namespace stampede;
namespace fs = std::filesystem;

namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("stampede-auth-" + name + "-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  return dir;
}

std::shared_ptr<const wire::Curve> Load(const std::string& dir, const std::string& id) {
  auto c = wire::Curve::Load(dir, id);
  REQUIRE_OK(c);
  return *c;
}

// A learner's trajectory socket, set up as the learner sets it up: the run's keys in
// `dir`, its ZAP handler, and a PULL socket bound `at` (a TCP wildcard or an ipc:// path).
struct TrajectoryServer {
  TrajectoryServer(const std::string& dir, const std::string& at)
      : curve(Load(dir, "learner-0")), zap(ctx, *curve, wire::RunAllowList(), "learner") {
    wire::ConfigureReceiver(pull, 1 << 20);
    curve->MakeServer(pull, wire::kDomainTrajectories, at);
    pull.bind(at);
    endpoint = pull.get(zmq::sockopt::last_endpoint);
  }
  zmq::context_t ctx{1};
  std::shared_ptr<const wire::Curve> curve;
  wire::ZapHandler zap;
  zmq::socket_t pull{ctx, zmq::socket_type::pull};
  std::string endpoint;
};

}  // namespace

TEST_CASE("auth: keys are private files, and a damaged key file is named in the error", "[auth]") {
  const std::string dir = TempDir("modes");
  REQUIRE_OK(wire::GenerateKeys(dir, {"coordinator", "actor-0"}));
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  for (const char* f : {"actor-0.key", "actor-0.pub", "coordinator.key", "coordinator.pub"}) {
    REQUIRE(::stat((dir + "/" + f).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  auto c = Load(dir, "actor-0");
  CHECK(c->peers().size() == 2);
  { std::ofstream(dir + "/actor-0.key") << "public short\nsecret short\n"; }
  const auto damaged = wire::Curve::Load(dir, "actor-0");
  CHECK_FALSE(damaged.ok());
  CHECK_THAT(damaged.status().message(), Catch::Contains(dir + "/actor-0.key"));
  CHECK(wire::IdentityRole("actor-12") == "actor");
  CHECK(wire::IdentityRole("coordinator") == "coordinator");
  CHECK(wire::IdentityRole("-3").empty());
  fs::remove_all(dir);
}

TEST_CASE("auth: the PS takes puts from learners only and connections from the run's keys only", "[auth]") {
  const std::string dir = TempDir("ps"), outside = TempDir("outsider");
  REQUIRE_OK(wire::GenerateKeys(dir, {"coordinator", "learner-0", "ps-0", "actor-0"}));
  // An outsider's key pair under a run identity's name: ZAP goes by key, not by name.
  REQUIRE_OK(wire::GenerateKeys(outside, {"learner-0"}));
  fs::copy_file(dir + "/ps-0.pub", outside + "/ps-0.pub");

  zmq::context_t server_ctx(1), client_ctx(1);
  auto ps_curve = Load(dir, "ps-0");
  wire::ZapHandler zap(server_ctx, *ps_curve, wire::RunAllowList(), "ps 0");
  testing::InProcessShards servers(server_ctx, 1, 8, ps_curve.get());
  const ps::Shard& shard = *servers.shards[0];

  const int64_t total = 300;
  auto options = [&](std::shared_ptr<const wire::Curve> curve, wire::Role role) {
    ps::ClientOptions o;
    o.endpoints = servers.endpoints;
    o.total_size = total;
    o.layout_fingerprint = 7;
    o.sender = wire::MakeSender(role, 0, 1);
    o.curve = std::move(curve);
    return o;
  };
  std::vector<float> good(total, 0.5f);
  ps::ParamsPublisher learner(client_ctx, options(Load(dir, "learner-0"), wire::ROLE_LEARNER));
  REQUIRE(learner.Put(good, 1));
  REQUIRE(testing::WaitUntil([&] { return shard.stats().newest_version.load() == 1; }));

  // The actor's key connects (gets work) but its put is refused and counted.
  ps::ParamsFetcher fetcher(client_ctx, options(Load(dir, "actor-0"), wire::ROLE_ACTOR));
  std::vector<float> got(total);
  int64_t version = -1;
  REQUIRE(fetcher.WaitFirst(got, &version, std::chrono::seconds(5), nullptr));
  CHECK(version == 1);
  CHECK(got == good);
  ps::ParamsPublisher actor_put(client_ctx, options(Load(dir, "actor-0"), wire::ROLE_LEARNER));
  REQUIRE(actor_put.Put(std::vector<float>(total, 2.f), 1000000000000));
  REQUIRE(testing::WaitUntil([&] { return shard.stats().refused[size_t(ps::Refusal::kUnauthorisedPut)].load() == 1; }));

  // An outsider's key is refused at the handshake by ZAP: its put never arrives.
  const int64_t rejected_before = zap.rejected();
  ps::ParamsPublisher outsider(client_ctx, options(Load(outside, "learner-0"), wire::ROLE_LEARNER));
  (void)outsider.Put(std::vector<float>(total, 3.f), 1000000000000);
  REQUIRE(testing::WaitUntil([&] { return zap.rejected() > rejected_before; }));
  // A client without CURVE fails the handshake too.
  ps::ParamsPublisher plain(client_ctx, options(nullptr, wire::ROLE_LEARNER));
  (void)plain.Put(std::vector<float>(total, 4.f), 1000000000000);
  // Neither put may land: the shard takes no second put within 300 ms.
  CHECK_FALSE(testing::WaitUntil([&] { return shard.stats().puts.load() > 1; }, std::chrono::milliseconds(300)));
  CHECK(shard.stats().newest_version.load() == 1);
  CHECK(shard.stats().puts.load() == 1);

  // The real learner's next version still goes through.
  REQUIRE(learner.Put(good, 2));
  REQUIRE(testing::WaitUntil([&] { return shard.stats().newest_version.load() == 2; }));
  servers.Stop();
  fs::remove_all(dir);
  fs::remove_all(outside);
}

TEST_CASE("auth: the trajectory socket accepts actors only and names each message's sender", "[auth]") {
  const std::string dir = TempDir("traj");
  REQUIRE_OK(wire::GenerateKeys(dir, {"coordinator", "learner-0", "ps-0", "actor-0"}));
  zmq::context_t client_ctx(1);
  TrajectoryServer server(dir, "tcp://127.0.0.1:*");
  wire::ZapHandler& zap = server.zap;
  zmq::socket_t& pull = server.pull;
  const std::string endpoint = server.endpoint;

  auto push_from = [&](const std::string& identity, const std::string& text) {
    zmq::socket_t push(client_ctx, zmq::socket_type::push);
    wire::ConfigureSender(push, 10, 0);
    push.set(zmq::sockopt::linger, 500);
    Load(dir, identity)->MakeClient(push, "learner-0", endpoint);
    push.connect(endpoint);
    const int64_t rejected_before = zap.rejected();
    zmq::message_t m(text.data(), text.size());
    (void)push.send(m, zmq::send_flags::dontwait);
    // A key the socket refuses is refused at the handshake, by ZAP: wait for that, so the
    // messages' order is the senders' order. An actor's message is read below.
    if (identity.rfind("actor-", 0) != 0) REQUIRE(testing::WaitUntil([&] { return zap.rejected() > rejected_before; }));
  };
  push_from("ps-0", "from a ps");             // a run key, but not an actor's
  push_from("coordinator", "from the coordinator");
  push_from("actor-0", "from an actor");
  zmq::message_t msg;
  pull.set(zmq::sockopt::rcvtimeo, 2000);
  REQUIRE(pull.recv(msg));
  CHECK(msg.to_string() == "from an actor");
  CHECK(wire::PeerIdentity(msg) == "actor-0");
  pull.set(zmq::sockopt::rcvtimeo, 200);
  CHECK_FALSE(pull.recv(msg));  // nothing else got through
  CHECK(zap.rejected() >= 2);
  CHECK(zap.accepted() >= 1);
  fs::remove_all(dir);
}

TEST_CASE("auth: a running server takes an actor whose keys were added to the run's keys after it started", "[auth]") {
  // `stampede scale` makes keys for the actors it adds while every server runs.
  const std::string dir = TempDir("added"), outside = TempDir("added-outsider");
  REQUIRE_OK(wire::GenerateKeys(dir, {"coordinator", "learner-0", "actor-0"}));
  zmq::context_t client_ctx(1);
  TrajectoryServer server(dir, "tcp://127.0.0.1:*");
  wire::ZapHandler& zap = server.zap;
  zmq::socket_t& pull = server.pull;
  const std::string endpoint = server.endpoint;
  pull.set(zmq::sockopt::rcvtimeo, 5000);

  // An identity that is not in the run's directory: refused.
  REQUIRE_OK(wire::GenerateKeys(outside, {"actor-6"}));
  fs::copy_file(dir + "/learner-0.pub", outside + "/learner-0.pub");
  {
    zmq::socket_t push(client_ctx, zmq::socket_type::push);
    wire::ConfigureSender(push, 10, 0);
    Load(outside, "actor-6")->MakeClient(push, "learner-0", endpoint);
    push.connect(endpoint);
    zmq::message_t m(std::string("from outside"));
    (void)push.send(m, zmq::send_flags::dontwait);
    REQUIRE(testing::WaitUntil([&] { return zap.rejected() > 0; }));
  }
  // Actor 5's keys made now, in the run's directory: it gets in, as itself.
  REQUIRE_OK(wire::GenerateKeys(dir, {"actor-5"}));
  zmq::socket_t push(client_ctx, zmq::socket_type::push);
  wire::ConfigureSender(push, 10, 0);
  push.set(zmq::sockopt::linger, 500);
  Load(dir, "actor-5")->MakeClient(push, "learner-0", endpoint);
  push.connect(endpoint);
  zmq::message_t m(std::string("from actor 5"));
  (void)push.send(m, zmq::send_flags::dontwait);
  zmq::message_t got;
  REQUIRE(pull.recv(got));
  CHECK(got.to_string() == "from actor 5");
  CHECK(wire::PeerIdentity(got) == "actor-5");
  fs::remove_all(dir);
  fs::remove_all(outside);
}

// ------------------------------------------------------------------ ipc:// (one machine)

TEST_CASE("auth: a local peer's identity comes from its credentials and the environment it started with", "[auth]") {
  const auto environ_of = [](int64_t pid) -> std::string {
    if (pid == 4242) return std::string("PATH=/bin\0STAMPEDE_IDENTITY=actor-3\0HOME=/root\0", 47);
    if (pid == 4343) return std::string("XSTAMPEDE_IDENTITY=learner-0\0STAMPEDE_IDENTITYX=ps-0\0", 53);
    return {};
  };
  std::string why;
  CHECK(testing::ValueOr(wire::LocalPeerIdentity("localhost:1000:100:4242", 1000, environ_of), &why) == "actor-3");
  // Another user's process, even naming an identity.
  CHECK(testing::ValueOr(wire::LocalPeerIdentity("localhost:1001:100:4242", 1000, environ_of), &why).empty());
  CHECK_THAT(why, Catch::Contains("user 1001") && Catch::Contains("1000"));
  // Names that only contain the variable's name are not it.
  CHECK(testing::ValueOr(wire::LocalPeerIdentity("localhost:1000:100:4343", 1000, environ_of), &why).empty());
  CHECK_THAT(why, Catch::Contains("STAMPEDE_IDENTITY is not in its environment"));
  CHECK(testing::ValueOr(wire::LocalPeerIdentity("localhost:1000:100:7", 1000, environ_of), &why).empty());
  CHECK_THAT(why, Catch::Contains("process 7"));
  // No credentials (a TCP peer's address) or a malformed tail.
  for (const char* address : {"127.0.0.1", "", "localhost:1000:100:", "localhost:x:100:4242", ":1000:4242"}) {
    INFO(address);
    CHECK(testing::ValueOr(wire::LocalPeerIdentity(address, 1000, environ_of), &why).empty());
    CHECK_THAT(why, Catch::Contains("no peer credentials"));
  }
  CHECK(testing::ValueOr(wire::LocalPeerIdentity("localhost:1000:100:0", 1000, environ_of), &why).empty());
}

namespace {
// Runs this test binary's hidden helper below in a child process with STAMPEDE_IDENTITY
// `identity` (empty: unset): it connects a PUSH socket to `endpoint` and sends `text`.
int RunIpcClient(const std::string& identity, const std::string& endpoint, const std::string& text) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::unsetenv(wire::kIdentityEnv);
    if (!identity.empty()) ::setenv(wire::kIdentityEnv, identity.c_str(), 1);
    ::setenv("STAMPEDE_TEST_IPC_ENDPOINT", endpoint.c_str(), 1);
    ::setenv("STAMPEDE_TEST_IPC_TEXT", text.c_str(), 1);
    ::execl("/proc/self/exe", "auth-ipc-client", "auth helper: an ipc client sends one message", "--out", "/dev/null",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

TEST_CASE("auth helper: an ipc client sends one message", "[.auth-helper]") {
  const char* endpoint = std::getenv("STAMPEDE_TEST_IPC_ENDPOINT");
  const char* text = std::getenv("STAMPEDE_TEST_IPC_TEXT");
  REQUIRE(endpoint != nullptr);
  REQUIRE(text != nullptr);
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  wire::ConfigureSender(push, 10, 0);
  // The message waits in the socket (immediate off: queued before the handshake) until it
  // is delivered or the linger runs out, so this process lives through the handshake and
  // ZAP's answer either way; the parent waits on the server's side for the outcome.
  push.set(zmq::sockopt::linger, 2000);
  push.connect(endpoint);
  zmq::message_t m(std::string{text});
  REQUIRE(push.send(m, zmq::send_flags::dontwait));
}

TEST_CASE("auth: an ipc:// socket takes the run's actors by their credentials and refuses other processes", "[auth]") {
  const std::string dir = TempDir("ipc");
  REQUIRE_OK(wire::GenerateKeys(dir, {"coordinator", "learner-0", "ps-0", "actor-0"}));
  zmq::context_t client_ctx(1);
  TrajectoryServer server(dir, "ipc://" + dir + "/trajectories");
  wire::ZapHandler& zap = server.zap;
  zmq::socket_t& pull = server.pull;
  const std::string endpoint = server.endpoint;
  pull.set(zmq::sockopt::rcvtimeo, 5000);

  // This test process names no identity: refused at the handshake.
  REQUIRE(std::getenv(wire::kIdentityEnv) == nullptr);
  {
    zmq::socket_t push(client_ctx, zmq::socket_type::push);
    wire::ConfigureSender(push, 10, 0);
    server.curve->MakeClient(push, "learner-0", endpoint);  // nothing to do over ipc
    push.connect(endpoint);
    zmq::message_t m(std::string("from a process with no identity"));
    (void)push.send(m, zmq::send_flags::dontwait);
    REQUIRE(testing::WaitUntil([&] { return zap.rejected() >= 1; }));
  }
  // A PS shard may not send trajectories; an identity with no key in the run's directory is
  // no process of the run.
  CHECK(RunIpcClient("ps-0", endpoint, "from ps 0") == 0);
  CHECK(RunIpcClient("actor-9", endpoint, "from actor 9") == 0);
  CHECK(testing::WaitUntil([&] { return zap.rejected() >= 3; }));
  // Actor 0 gets in, as itself.
  CHECK(RunIpcClient("actor-0", endpoint, "from actor 0") == 0);
  zmq::message_t msg;
  REQUIRE(pull.recv(msg));
  CHECK(msg.to_string() == "from actor 0");
  CHECK(wire::PeerIdentity(msg) == "actor-0");
  pull.set(zmq::sockopt::rcvtimeo, 200);
  CHECK_FALSE(pull.recv(msg));  // nothing else got through
  CHECK(zap.accepted() == 1);
  fs::remove_all(dir);
}
