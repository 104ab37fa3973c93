#include <algorithm>
#include "wire/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/log.h"
#include "config/config.pb.h"
#include "base/log_limit.h"

namespace stampede::wire {

namespace fs = std::filesystem;

std::string Identity(const char* role, int index) { return std::string(role) + "-" + std::to_string(index); }

std::string IdentityRole(const std::string& identity) {
  if (identity == "coordinator") return identity;
  const size_t dash = identity.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == identity.size()) return {};
  return identity.substr(0, dash);
}

namespace {

constexpr size_t kZ85KeyChars = 40;

base::Status WritePrivateFile(const std::string& path, const std::string& text) {
  // Created 0600 from the start (never readable by others, even briefly).
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return base::InvalidArgument(path + ": cannot create: " + std::strerror(errno));
  const ssize_t w = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  if (::close(fd) != 0 || w != ssize_t(text.size())) {
    ::unlink(path.c_str());
    return base::Internal(path + ": write failed: " + std::strerror(w < 0 ? write_errno : ENOSPC));
  }
  return base::OkStatus();
}

base::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::InvalidArgument(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 4096) return base::InvalidArgument(path + ": not a key file (over 4 KiB)");
  return text;
}

bool ValidZ85Key(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t bin[32];
  return zmq_z85_decode(bin, key.c_str()) != nullptr;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The environment a process started with (NUL-separated), or empty if it cannot be read.
std::string ReadEnviron(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > (1u << 20)) s.resize(1u << 20);
  return s;
}

}  // namespace

base::Status GenerateKeys(const std::string& dir, const std::vector<std::string>& identities) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return base::InvalidArgument(dir + ": cannot create the keys directory: " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0) {
    return base::InvalidArgument(dir + ": cannot make the keys directory private: " + std::strerror(errno));
  }
  for (const std::string& id : identities) {
    char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
    if (zmq_curve_keypair(pub, sec) != 0) {
      return base::Internal("cannot make a CURVE keypair (libzmq without CURVE?): " +
                            std::string(zmq_strerror(zmq_errno())));
    }
    RETURN_IF_ERROR(WritePrivateFile(dir + "/" + id + ".key", std::string("public ") + pub + "\nsecret " + sec + "\n"));
    RETURN_IF_ERROR(WritePrivateFile(dir + "/" + id + ".pub", std::string(pub) + "\n"));
  }
  return base::OkStatus();
}

base::StatusOr<std::shared_ptr<const Curve>> Curve::Load(const std::string& dir, const std::string& identity) {
  auto c = std::make_shared<Curve>();
  c->dir_ = dir;
  c->identity_ = identity;
  const std::string key_path = dir + "/" + identity + ".key";
  ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(key_path));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("public ", 0) == 0) c->public_key_ = Trim(line.substr(7));
    if (line.rfind("secret ", 0) == 0) c->secret_key_ = Trim(line.substr(7));
  }
  if (!ValidZ85Key(c->public_key_) || !ValidZ85Key(c->secret_key_)) {
    return base::InvalidArgument(key_path +
                                 ": not a key file (expected 'public <40 Z85 chars>' and 'secret <40 Z85 chars>' lines)");
  }
  ASSIGN_OR_RETURN(c->peers_, ReadPublicKeys(dir));
  return std::shared_ptr<const Curve>(std::move(c));
}

base::StatusOr<std::map<std::string, std::string>> ReadPublicKeys(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (p.extension() != ".pub") continue;
    ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(p.string()));
    const std::string key = Trim(text);
    if (!ValidZ85Key(key)) {
      return base::InvalidArgument(p.string() + ": not a public key file (expected 40 Z85 characters)");
    }
    out[p.stem().string()] = key;
  }
  if (ec) return base::InvalidArgument(dir + ": cannot list the keys directory: " + ec.message());
  return out;
}

bool IsIpcEndpoint(const std::string& endpoint) { return endpoint.rfind("ipc://", 0) == 0; }

void Curve::MakeServer(zmq::socket_t& socket, const char* domain, const std::string& endpoint) const {
  if (IsIpcEndpoint(endpoint)) {
    // NULL mechanism: ZAP still sees every connection, with the peer's credentials.
    socket.set(zmq::sockopt::zap_domain, domain);
    return;
  }
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, secret_key_);
  socket.set(zmq::sockopt::zap_domain, domain);
}

void Curve::MakeClient(zmq::socket_t& socket, const std::string& server_identity, const std::string& endpoint) const {
  if (IsIpcEndpoint(endpoint)) return;
  auto it = peers_.find(server_identity);
  if (it == peers_.end()) {
    throw std::invalid_argument("no public key for " + server_identity + " in the keys directory");
  }
  socket.set(zmq::sockopt::curve_serverkey, it->second);
  socket.set(zmq::sockopt::curve_publickey, public_key_);
  socket.set(zmq::sockopt::curve_secretkey, secret_key_);
}

base::StatusOr<std::string> LocalPeerIdentity(const std::string& address, uint32_t uid,
                                              const std::function<std::string(int64_t pid)>& environ_of) {
  // "...:UID:GID:PID": the last three fields.
  int64_t fields[3] = {-1, -1, -1};
  size_t end = address.size();
  for (int f = 2; f >= 0; --f) {
    const size_t colon = address.rfind(':', end == 0 ? 0 : end - 1);
    if (colon == std::string::npos || colon + 1 >= end) {
      return base::InvalidArgument("no peer credentials in the connection's address '" + address + "'");
    }
    const std::string digits = address.substr(colon + 1, end - colon - 1);
    if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return base::InvalidArgument("no peer credentials in the connection's address '" + address + "'");
    }
    fields[f] = std::stoll(digits);
    end = colon;
  }
  const int64_t peer_uid = fields[0], pid = fields[2];
  if (peer_uid != int64_t(uid)) {
    return base::InvalidArgument("a process of user " + std::to_string(peer_uid) + " (the run's user is " + std::to_string(uid) + ")");
  }
  if (pid <= 0) {
    return base::InvalidArgument("a process whose id the kernel did not give");
  }
  const std::string env = environ_of(pid);
  const std::string key = std::string(kIdentityEnv) + "=";
  for (size_t at = 0; at < env.size();) {
    size_t nul = env.find('\0', at);
    if (nul == std::string::npos) nul = env.size();
    if (env.compare(at, key.size(), key) == 0 && nul > at + key.size()) return env.substr(at + key.size(), nul - at - key.size());
    at = nul + 1;
  }
  return base::InvalidArgument("process " + std::to_string(pid) + ", which names no identity (" + kIdentityEnv + " is not in its environment)");
}

std::string PeerIdentity(const zmq::message_t& msg) {
  const char* v = zmq_msg_gets(const_cast<zmq_msg_t*>(msg.handle()), "User-Id");
  return v == nullptr ? std::string() : std::string(v);
}

std::string KeysDir(const config::Config& cfg) {
  if (!cfg.cluster().keys_dir().empty()) return cfg.cluster().keys_dir();
  if (!cfg.run_dir().empty()) return cfg.run_dir() + "/keys";
  return {};
}

std::vector<std::string> RunIdentities(const config::Config& cfg) {
  std::vector<std::string> ids = {"coordinator"};
  for (int l = 0; l < std::max(1, cfg.learner().num_learners()); ++l) ids.push_back(Identity("learner", l));
  for (int s = 0; s < cfg.ps().num_shards(); ++s) ids.push_back(Identity("ps", s));
  for (int a = 0; a < cfg.actors().num_actors(); ++a) ids.push_back(Identity("actor", a));
  if (cfg.evaluation().interval_frames() > 0) ids.push_back(Identity("evaluator", 0));
  return ids;
}

base::StatusOr<std::shared_ptr<const Curve>> RunCurve(const config::Config& cfg, const std::string& identity) {
  if (!cfg.cluster().curve()) return std::shared_ptr<const Curve>();
  const std::string dir = KeysDir(cfg);
  if (dir.empty()) {
    return base::InvalidArgument(
        "cluster.curve is on but there are no keys: set cluster.keys_dir to a directory made by "
        "`stampede keys CONFIG DIR` (or run_dir to a run that `stampede run` made), or set "
        "cluster.curve: false");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Curve> curve, Curve::Load(dir, identity));
  for (const std::string& id : RunIdentities(cfg)) {
    if (!curve->peers().count(id)) {
      return base::InvalidArgument(dir + ": no public key for " + id + " (" + id +
                                   ".pub); the keys were made for another config? Make them again with `stampede keys`");
    }
  }
  return curve;
}

std::map<std::string, std::set<std::string>> RunAllowList() {
  return {{kDomainTrajectories, {"actor"}},
          {kDomainInference, {"actor"}},
          {kDomainAllreduce, {"learner"}},
          {kDomainParams, {"actor", "learner", "evaluator"}},
          {kDomainStatus, {"actor", "learner", "ps", "coordinator", "evaluator"}},
          {kDomainControl, {"actor", "learner", "ps", "coordinator", "evaluator"}}};
}

ZapHandler::ZapHandler(zmq::context_t& ctx, const Curve& curve,
                       std::map<std::string, std::set<std::string>> allowed, std::string log_prefix)
    : socket_(ctx, zmq::socket_type::rep),
      keys_dir_(curve.dir()),
      allowed_(std::move(allowed)),
      log_prefix_(std::move(log_prefix)) {
  SetKeys(curve.peers());
  struct stat st;
  if (!keys_dir_.empty() && ::stat(keys_dir_.c_str(), &st) == 0) {
    dir_mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { Serve(); });
}

void ZapHandler::SetKeys(const std::map<std::string, std::string>& peers) {
  role_of_key_.clear();
  for (const auto& [identity, z85] : peers) {
    std::string bin(32, '\0');
    zmq_z85_decode(reinterpret_cast<uint8_t*>(bin.data()), z85.c_str());
    role_of_key_[bin] = identity;
  }
}

bool ZapHandler::Rescan() {
  if (keys_dir_.empty()) return false;
  struct stat st;
  if (::stat(keys_dir_.c_str(), &st) != 0) return false;
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  // The directory is read again when its time changed, and at most once a second even if
  // not (a file written within the clock tick of the last read leaves the time as it was).
  const auto now = std::chrono::steady_clock::now();
  if (mtime == dir_mtime_ns_ && now - last_scan_ < std::chrono::seconds(1)) return false;
  last_scan_ = now;
  const base::StatusOr<std::map<std::string, std::string>> peers = ReadPublicKeys(keys_dir_);
  if (!peers.ok()) {
    base::LogError("%s: the keys directory changed but cannot be read again (the keys known stay): %s\n",
                 log_prefix_.c_str(), peers.status().message().c_str());
    return false;
  }
  dir_mtime_ns_ = mtime;
  SetKeys(*peers);
  return true;
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  thread_.join();
}

bool ZapHandler::Allowed(const std::string& domain, const std::string& identity) const {
  const auto it = allowed_.find(domain);
  return it != allowed_.end() && it->second.count(IdentityRole(identity)) > 0;
}

void ZapHandler::Serve() {
  base::LogLimiter limiter;
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
  std::vector<zmq::message_t> req;
  while (!stop_.load()) {
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t&) {
      continue;  // EINTR
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    req.clear();
    while (true) {
      zmq::message_t part;
      if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
      const bool more = part.more();
      req.push_back(std::move(part));
      if (!more) break;
    }
    // RFC 27: version, request id, domain, address, routing id, mechanism, credentials.
    if (req.size() < 6) continue;
    const std::string request_id = req[1].to_string();
    const std::string domain = req[2].to_string(), address = req[3].to_string();
    const std::string mechanism = req[5].to_string();
    std::string identity, why;
    if (mechanism == "NULL") {
      // An ipc:// server (MakeServer): the peer's identity from its credentials; it must
      // be one of the run's (its key is in the keys directory, as for CURVE).
      const base::StatusOr<std::string> peer = LocalPeerIdentity(address, uint32_t(::geteuid()), ReadEnviron);
      const std::string claimed = peer.ok() ? *peer : std::string();
      if (!peer.ok()) why = peer.status().message();
      bool known = false;
      for (int pass = 0; pass < 2 && !claimed.empty() && !known; ++pass) {
        for (const auto& [key, id] : role_of_key_) known = known || id == claimed;
        if (!known && (pass == 1 || !Rescan())) break;
      }
      if (claimed.empty()) {
        // why says it
      } else if (!known) {
        why = "process claiming '" + claimed + "', which is no process of this run";
      } else if (!Allowed(domain, claimed)) {
        why = claimed + ", which may not use the '" + domain + "' socket";
      } else {
        identity = claimed;
      }
    } else if (mechanism != "CURVE" || req.size() < 7 || req[6].size() != 32) {
      why = "mechanism " + mechanism + " without a CURVE key";
    } else {
      auto it = role_of_key_.find(req[6].to_string());
      if (it == role_of_key_.end() && Rescan()) it = role_of_key_.find(req[6].to_string());
      if (it == role_of_key_.end()) {
        why = "a key that belongs to no process of this run";
      } else if (!Allowed(domain, it->second)) {
        why = it->second + "'s key, which may not use the '" + domain + "' socket";
      } else {
        identity = it->second;
      }
    }
    const bool ok = !identity.empty();
    (ok ? accepted_ : rejected_).fetch_add(1);
    if (!ok) {
      int64_t unlogged = 0;
      if (limiter.Allow(domain, &unlogged)) {
        base::LogError("%s: refused a connection to the '%s' socket from %s: %s%s\n", log_prefix_.c_str(),
                     domain.c_str(), address.c_str(), why.c_str(), base::LogLimiter::More(unlogged).c_str());
      }
    }
    const std::string code = ok ? "200" : "400", text = ok ? "OK" : "not authorised";
    const std::string parts[] = {"1.0", request_id, code, text, identity, ""};
    for (size_t i = 0; i < 6; ++i) {
      zmq::message_t m(parts[i].data(), parts[i].size());
      (void)socket_.send(m, i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace stampede::wire
