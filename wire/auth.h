// ZeroMQ CURVE on every socket of a run: keys per role instance, and a ZAP handler
// that lets each server socket accept only the roles that may use it.
//
// Identities are "<role>-<index>" ("actor-3", "learner-0", "ps-1") and "coordinator".
//
// Roles that `stampede run` starts on this machine talk over Unix-domain sockets (ipc://
// endpoints, cluster.local_transport "ipc") in a directory only the run's user can open.
// Those connections are not encrypted (their bytes never leave the machine) but are still
// authenticated, per role: the ZAP handler takes the peer's user and process ids from the
// kernel (SO_PEERCRED), accepts only processes of this user, and reads the peer's identity
// from the environment its launcher gave it (STAMPEDE_IDENTITY, kIdentityEnv). The trust
// boundary is the one the key files already draw: a process of the run's user can read
// them, and no other can reach the sockets. Between machines (tcp://) CURVE works as above.
// A keys directory (mode 0700) holds, per identity, "<identity>.key" (public and
// secret key, Z85) and "<identity>.pub" (the public key), both mode 0600. Servers learn
// who may connect from the .pub files; ZAP gives each accepted connection the peer's
// identity as its messages' "User-Id", so a server can also check per request (the PS
// takes puts from learners only).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "base/status.h"

namespace stampede::config {
class Config;
}

namespace stampede::wire {

// ZAP domains, one per kind of server socket.
inline constexpr const char* kDomainTrajectories = "trajectories";  // learner PULL: actors
inline constexpr const char* kDomainParams = "params";              // PS ROUTER: actors, learners, the evaluator
inline constexpr const char* kDomainStatus = "status";              // coordinator PULL: all
inline constexpr const char* kDomainControl = "control";            // coordinator PUB: all
inline constexpr const char* kDomainInference = "inference";        // learner's inference ROUTER: actors
inline constexpr const char* kDomainAllreduce = "allreduce";        // learner's ring PULL: learners

// The environment variable that names a local process's identity ("actor-3"): set by the
// local launcher, read by the ZAP handler of an ipc:// server from /proc/PID/environ.
inline constexpr const char* kIdentityEnv = "STAMPEDE_IDENTITY";

std::string Identity(const char* role, int index);
// The role part of an identity ("actor-3" -> "actor"); empty if malformed.
std::string IdentityRole(const std::string& identity);

// Writes a fresh keypair for each identity into `dir` (created 0700; files 0600).
// Existing files are replaced.
[[nodiscard]] base::Status GenerateKeys(const std::string& dir, const std::vector<std::string>& identities);

// One process's view of the run's keys: its own pair and everyone's public key.
class Curve {
 public:
  // Reads `identity`'s pair and every .pub file from `dir`.
  static base::StatusOr<std::shared_ptr<const Curve>> Load(const std::string& dir, const std::string& identity);
  const std::string& identity() const { return identity_; }
  const std::string& dir() const { return dir_; }  // the keys directory it was read from
  // Public keys (Z85) by identity.
  const std::map<std::string, std::string>& peers() const { return peers_; }
  // A server socket in `domain` that will bind `endpoint` (call before bind): CURVE, or
  // for an ipc:// endpoint only the ZAP domain (the peer is checked by its credentials).
  void MakeServer(zmq::socket_t& socket, const char* domain, const std::string& endpoint) const;
  // A client of the server `server_identity` at `endpoint` (call before connect); nothing
  // to do for an ipc:// endpoint. Throws std::invalid_argument if that identity has no
  // public key (RunCurve checks that every identity of the run has one, so a run never
  // gets here without them).
  void MakeClient(zmq::socket_t& socket, const std::string& server_identity, const std::string& endpoint) const;

 private:
  std::string dir_, identity_, public_key_, secret_key_;
  std::map<std::string, std::string> peers_;
};

// Every public key in `dir` by identity ("actor-3" -> Z85); an error if the directory
// cannot be listed or a .pub file is not a key.
base::StatusOr<std::map<std::string, std::string>> ReadPublicKeys(const std::string& dir);

// True for a Unix-domain endpoint ("ipc://PATH").
bool IsIpcEndpoint(const std::string& endpoint);

// A local peer's identity from a ZAP request's address for an ipc:// connection (libzmq
// appends the kernel's ":UID:GID:PID"): the peer must run as `uid`, and its identity is
// kIdentityEnv in the environment it started with (`environ_of(pid)`: /proc/PID/environ,
// NUL-separated). An error saying why when the address has no credentials, the user
// differs or the process names no identity.
base::StatusOr<std::string> LocalPeerIdentity(const std::string& address, uint32_t uid,
                                              const std::function<std::string(int64_t pid)>& environ_of);

// The peer identity ZAP gave the connection `msg` came on; empty without CURVE.
std::string PeerIdentity(const zmq::message_t& msg);

// The ZAP handler of one context: a thread answering the authentication requests of
// every CURVE server socket in that context. A client key is accepted in a domain if
// it belongs to an identity whose role the domain allows; every refusal is counted and
// logged (the first, then one line per 10 s with how many were not logged). A key it does
// not know sends it back to the keys directory (when the directory changed, else at most
// once a second): actors that `stampede scale` adds get their keys there while the run
// goes on.
class ZapHandler {
 public:
  // `allowed`: domain -> roles that may connect. Binds inproc://zeromq.zap.01 in `ctx`
  // (one handler per context) before returning.
  ZapHandler(zmq::context_t& ctx, const Curve& curve, std::map<std::string, std::set<std::string>> allowed,
             std::string log_prefix);
  ~ZapHandler();
  int64_t accepted() const { return accepted_.load(); }
  int64_t rejected() const { return rejected_.load(); }

 private:
  void Serve();
  void SetKeys(const std::map<std::string, std::string>& peers);
  // Reads the keys directory again if it changed; true if the table was replaced.
  bool Rescan();
  // Whether `identity`'s role may use the `domain` socket (the allow-list).
  bool Allowed(const std::string& domain, const std::string& identity) const;
  zmq::socket_t socket_;
  std::string keys_dir_;
  int64_t dir_mtime_ns_ = -1;
  std::chrono::steady_clock::time_point last_scan_;
  std::map<std::string, std::string> role_of_key_;   // 32-byte binary key -> identity
  std::map<std::string, std::set<std::string>> allowed_;
  std::string log_prefix_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accepted_{0}, rejected_{0};
  std::thread thread_;
};

// Where a run's keys are: cluster.keys_dir, else RUN_DIR/keys; empty if neither is set.
std::string KeysDir(const config::Config& cfg);
// Every identity the config implies: the coordinator, the PS shards, the learner, the
// actors.
std::vector<std::string> RunIdentities(const config::Config& cfg);
// `identity`'s view of the run's keys when cluster.curve is on; null (ok) when it is off;
// an error if the keys cannot be read.
base::StatusOr<std::shared_ptr<const Curve>> RunCurve(const config::Config& cfg, const std::string& identity);

// The standard allow-lists of a run's three server sockets.
std::map<std::string, std::set<std::string>> RunAllowList();

}  // namespace stampede::wire
