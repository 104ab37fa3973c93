// `stampede run` and `stampede coordinator`: the checks before anything starts, the run
// directory, keys and resolved config, then the supervisor (a CAF actor around the
// decision core, core.h) and the status server (status_server.h) until the run ends.
#include "coordinator/run.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "base/log.h"
#include "learner/resume.h"
#include "ps/checkpoints.h"
#include "coordinator/core.h"
#include "coordinator/local_launcher.h"
#include "coordinator/slurm_launcher.h"
#include "coordinator/sinks.h"
#include "coordinator/status_server.h"
#include "base/signals.h"
#include "coordinator/spec.h"
#include "wire/auth.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "config/tasks.h"
#include "base/trace.h"

namespace stampede::coordinator {

namespace fs = std::filesystem;

namespace {

// The IPv4 address of `host` (a dotted quad or a name that resolves); false if none.
bool HostAddress(const std::string& host, in_addr* out) {
  if (::inet_pton(AF_INET, host.c_str(), out) == 1) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  *out = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return true;
}

// Binds a TCP socket to `host`:`port` (0: any) and closes it; the port it got, or 0.
int TryPort(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (!HostAddress(host, &addr.sin_addr)) return 0;
  addr.sin_port = htons(uint16_t(port));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof(addr);
  int got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    got = ntohs(addr.sin_port);
  }
  ::close(fd);
  return got;
}

// A free port on `host` outside the kernel's ephemeral range: a port from that range
// can be taken, between this check and the process's bind, as the local port of any
// outgoing connection (the run's own processes make dozens).
int FreePort(const std::string& host) {
  static std::mt19937 rng(std::random_device{}());
  static std::set<int> given;  // never the same port twice in one run
  int lo = 32768, hi = 60999;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> lo >> hi;
  const int from = lo > 12000 ? 10000 : hi + 1, to = lo > 12000 ? lo - 1 : 65535;
  for (int attempt = 0; attempt < 500 && from < to; ++attempt) {
    const int port = std::uniform_int_distribution<int>(from, to)(rng);
    if (given.count(port) || TryPort(host, port) != port) continue;
    given.insert(port);
    return port;
  }
  return TryPort(host, 0);
}

// A fresh endpoint on cluster.host (the loopback unless a cluster launcher set it).
std::string FreeEndpoint(const config::Config& cfg) {
  return "tcp://" + cfg.cluster().host() + ":" + std::to_string(FreePort(cfg.cluster().host()));
}

double UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The supervisor: the decision core with the local launcher and the run's files, fed by
// the status server's messages and its own 100 ms timer.
struct SupervisorState {
  std::unique_ptr<coordinator::Launcher> launcher;
  std::unique_ptr<coordinator::FileSinks> sinks;
  std::unique_ptr<coordinator::Core> core;
  const wire::ZapHandler* zap = nullptr;
  std::string run_dir;
  std::string keys_dir;  // where actors added by `stampede scale` get their keys ("": no CURVE)
};

constexpr const char* kScaleRequest = "scale.request";
constexpr const char* kScaleAnswer = "scale.answer";

// RUN_DIR/stop.request (kStopRequest): the ordered stop, as SIGTERM asks for it, from
// whoever can write the run directory but not signal this process (a population whose
// member runs as a Slurm job step: srun cancels a step it forwards SIGTERM to).
void ServeStopRequest(SupervisorState& st) {
  const std::string path = st.run_dir + "/" + kStopRequest;
  std::error_code ec;
  if (st.run_dir.empty() || st.core->stopping() || !fs::exists(path, ec)) return;
  fs::remove(path, ec);
  st.core->RequestStop("asked to stop (" + std::string(kStopRequest) + ")", 130, Clock::now());
}

// `stampede scale`'s request, if one is waiting: the keys of any actor the new count adds
// (before it starts, so every server's ZAP handler finds them), then the core's decision,
// written back for the command to print.
void ServeScaleRequest(SupervisorState& st) {
  const std::string path = st.run_dir + "/" + kScaleRequest;
  std::error_code ec;
  if (st.run_dir.empty() || !fs::exists(path, ec)) return;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(path, ec);
  nlohmann::json request = nlohmann::json::parse(text.str(), nullptr, false);
  coordinator::ScaleAnswer answer;
  std::string id;
  if (request.is_discarded() || !request.is_object() || !request.contains("actors") ||
      !request["actors"].is_number_integer()) {
    answer.message = path + ": not a scale request (expected {\"actors\": N, \"id\": \"...\"})";
  } else {
    if (request.contains("id") && request["id"].is_string()) id = request["id"].get<std::string>();
    const int64_t n = request["actors"].get<int64_t>();
    std::vector<std::string> missing;
    for (int64_t i = 0; !st.keys_dir.empty() && i < std::min<int64_t>(n, config::kMaxActors); ++i) {
      const std::string identity = wire::Identity("actor", int(i));
      if (!fs::exists(st.keys_dir + "/" + identity + ".key", ec)) missing.push_back(identity);
    }
    const base::Status keys = n > st.core->actors_target() && !missing.empty()
                                  ? wire::GenerateKeys(st.keys_dir, missing)
                                  : base::OkStatus();
    if (!keys.ok()) {
      answer.message = "cannot make the new actors' keys: " + keys.message();
    } else {
      answer = st.core->Scale(int(std::clamp<int64_t>(n, -1, config::kMaxActors + 1)), coordinator::Clock::now());
    }
  }
  if (!answer.ok) base::LogError("stampede: scale refused: %s\n", answer.message.c_str());
  const nlohmann::json out = {{"id", id}, {"ok", answer.ok}, {"message", answer.message},
                              {"actors", st.core->actors_target()}};
  if (const base::Status written = base::WriteFileAtomically(st.run_dir + "/" + kScaleAnswer, out.dump() + "\n");
      !written.ok()) {
    base::LogError("stampede: cannot answer the scale request: %s\n", written.message().c_str());
  }
}
using Supervisor = caf::stateful_actor<SupervisorState>;

// After every event: once the core has finished, this actor quits, and the status server,
// which monitors it, stops.
void AfterEvent(Supervisor* self) {
  if (self->state.core->finished()) self->quit();
}

caf::behavior Running(Supervisor* self) {
  using coordinator::Clock;
  return {
      [=](coordinator::status_atom, const std::string& bytes, const std::string& peer) {
        self->state.core->OnStatus(bytes, peer, Clock::now());
        AfterEvent(self);
      },
      [=](coordinator::exited_atom, int64_t id, bool exited, int code, int signal) {
        const int interrupt = base::StopFlag().load() ? base::StopSignal() : 0;
        self->state.core->OnExit(id, coordinator::ExitStatus{exited, code, signal}, interrupt, Clock::now());
        AfterEvent(self);
      },
      [=](coordinator::tick_atom) {
        auto& st = self->state;
        if (st.zap) st.core->SetRejectedConnections(st.zap->rejected());
        ServeScaleRequest(st);
        ServeStopRequest(st);
        st.core->OnTick(Clock::now());
        AfterEvent(self);
        if (!st.core->finished()) self->delayed_send(self, coordinator::Core::kTick, coordinator::tick_atom::value);
      },
      [=](coordinator::stop_atom, const std::string& reason, int code) {
        self->state.core->RequestStop(reason, code, Clock::now());
        AfterEvent(self);
      },
  };
}

// Until the status server has bound its sockets, nothing starts; then the core starts
// the roles and the timer runs.
caf::behavior Supervising(Supervisor* self, RunResult* result) {
  return {
      [=](coordinator::ready_atom, bool bound) {
        if (!bound) {
          result->exit_code = 2;
          self->quit();
          return;
        }
        // The heartbeat's contents go to the status server (the sender) as messages.
        const caf::actor server = caf::actor_cast<caf::actor>(self->current_sender());
        coordinator::ControlOut out;
        out.stops = [server](const std::vector<wire::Control>& stops) {
          std::vector<std::string> bytes;
          for (const auto& c : stops) bytes.push_back(c.SerializeAsString());
          caf::anon_send(server, coordinator::stops_atom::value, std::move(bytes));
        };
        out.evaluation = [server](int64_t round, int64_t frames) {
          caf::anon_send(server, coordinator::evaluate_atom::value, round, frames);
        };
        self->state.sinks->ConnectControl(std::move(out));
        self->state.core->Start(coordinator::Clock::now());
        self->send(self, coordinator::tick_atom::value);
        self->become(Running(self));
      },
  };
}

}  // namespace

std::string SelfExePath() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("stampede") : p.string();
}

std::string DefaultRunDir(const std::string& name) {
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
  return "runs/" + name + "-" + stamp + "-" + std::to_string(::getpid());
}

void ResolveRunConfig(config::Config* cfg, const RunOptions& opt, std::string* socket_dir) {
  auto* cl = cfg->mutable_cluster();
  socket_dir->clear();
  // Unix-domain sockets for a run whose roles all start here: the same checks of who
  // connects, without encrypting what never leaves the machine (wire/auth.h).
  const bool loopback = cl->host() == "localhost" || cl->host().rfind("127.", 0) == 0;
  const bool needs_fresh = cl->coordinator().empty() || cl->control().empty() || cl->learner().empty() ||
                           cl->ps_size() == 0 ||
                           (InferenceOf(*cfg) == config::Inference::central && cl->inference_size() == 0) ||
                           (UpdateModeOf(*cfg) == config::UpdateMode::allreduce && cl->allreduce_size() == 0);
  // Not for `stampede coordinator`: the roles it supervises were started elsewhere, by hand.
  if (ChoiceOf<config::LocalTransport>(cl->local_transport()) == config::LocalTransport::ipc &&
      ChoiceOf<config::Launcher>(cl->launcher()) == config::Launcher::local && loopback && needs_fresh &&
      !opt.standalone) {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    // Room for the longest socket name within the 107 bytes of a socket path.
    if (base.size() > 60) base = "/tmp";
    std::string pattern = base + "/stampede-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) {  // mode 0700
      *socket_dir = pattern;
    } else {
      base::LogWarning("stampede: WARNING: cannot make a private socket directory in %s (%s): the roles talk "
                   "over loopback TCP instead (cluster.local_transport \"tcp\")\n", base.c_str(), std::strerror(errno));
    }
  }
  const auto fresh = [&](const std::string& name) {
    return socket_dir->empty() ? FreeEndpoint(*cfg) : "ipc://" + *socket_dir + "/" + name;
  };
  if (cl->coordinator().empty()) cl->set_coordinator(fresh("coordinator"));
  if (cl->control().empty()) cl->set_control(fresh("control"));
  // (The actors' trajectory sockets over ipc: see RunActor's end and the learner's linger.)
  if (cl->learner().empty()) cl->set_learner(cl->learners_size() > 0 ? cl->learners(0) : fresh("learner-0"));
  if (cfg->learner().num_learners() > 1 && cl->learners_size() == 0) {
    cl->add_learners(cl->learner());
    for (int l = 1; l < cfg->learner().num_learners(); ++l) cl->add_learners(fresh("learner-" + std::to_string(l)));
  }
  if (cl->ps_size() == 0) {
    for (int s = 0; s < cfg->ps().num_shards(); ++s) cl->add_ps(fresh("ps-" + std::to_string(s)));
  }
  if (InferenceOf(*cfg) == config::Inference::central && cl->inference_size() == 0) {
    for (int l = 0; l < cfg->learner().num_learners(); ++l) cl->add_inference(fresh("inference-" + std::to_string(l)));
  }
  if (UpdateModeOf(*cfg) == config::UpdateMode::allreduce && cl->allreduce_size() == 0) {
    for (int l = 0; l < cfg->learner().num_learners(); ++l) cl->add_allreduce(fresh("allreduce-" + std::to_string(l)));
  }
  if (cfg->run_dir().empty()) cfg->set_run_dir(DefaultRunDir(opt.config_name));
}

namespace {
// `--resume`: the run's newest complete checkpoint, fresh loopback endpoints (the old
// ports may be taken), and a warning when the budget is already spent.
bool PrepareResume(config::Config* cfg, std::string* from, int64_t* resumed_frames) {
  const std::string dir = cfg->run_dir();
  learner::ResumePoint point;
  std::vector<std::string> warnings;
  const base::Status found = learner::FindResumePoint(*cfg, &point, &warnings);
  for (const auto& w : warnings) base::LogWarning("stampede: WARNING: %s\n", w.c_str());
  if (!found.ok()) {
    base::LogError("stampede: --resume %s: %s\n", dir.c_str(), found.message().c_str());
    return false;
  }
  if (!point.sharded) cfg->mutable_learner()->set_restore_from(point.from);
  *from = point.from;
  const int64_t frames = point.env_frames, version = point.version;
  *resumed_frames = frames;
  auto* cl = cfg->mutable_cluster();
  cl->clear_coordinator();
  cl->clear_learner();
  cl->clear_learners();
  cl->clear_ps();
  cl->clear_control();
  cl->clear_inference();
  cl->clear_allreduce();
  std::printf("stampede: resuming %s from %s: version %lld, %lld env frames\n", dir.c_str(), from->c_str(),
              (long long)version, (long long)frames);
  if (frames >= cfg->stop().total_env_frames()) {
    base::LogWarning("stampede: WARNING: the checkpoint's %lld frames already spend stop.total_env_frames (%lld): "
                         "the run stops at once (raise it with --set stop.total_env_frames=N)\n",
                 (long long)frames, (long long)cfg->stop().total_env_frames());
  }
  std::fflush(stdout);
  return true;
}
}  // namespace

int RunScaleCommand(const std::string& run_dir, int actors, double timeout_s) {
  std::error_code ec;
  if (!fs::exists(run_dir + "/config.textproto", ec)) {
    base::LogError("stampede scale: %s is not a run directory (no config.textproto)\n", run_dir.c_str());
    return 2;
  }
  const std::string id = std::to_string(::getpid()) + "-" + std::to_string(UnixTime());
  const nlohmann::json request = {{"actors", actors}, {"id", id}};
  if (const base::Status st = base::WriteFileAtomically(run_dir + "/" + kScaleRequest, request.dump() + "\n");
      !st.ok()) {
    base::LogError("stampede scale: %s\n", st.message().c_str());
    return 2;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(run_dir + "/" + kScaleAnswer);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json answer = nlohmann::json::parse(text.str(), nullptr, false);
    if (answer.is_discarded() || !answer.is_object() || answer.value("id", std::string()) != id) continue;
    const bool ok = answer.value("ok", false);
    std::fprintf(ok ? stdout : stderr, "stampede scale: %s%s\n", ok ? "" : "refused: ",
                 answer.value("message", std::string()).c_str());
    return ok ? 0 : 1;
  }
  fs::remove(run_dir + "/" + kScaleRequest, ec);
  base::LogError("stampede scale: no coordinator answered within %.0f s: is the run in %s going?\n", timeout_s,
               run_dir.c_str());
  return 1;
}

int RunCheckpointsCommand(const config::Config& cfg) {
  learner::ResumePoint point;
  std::vector<std::string> warnings;
  const base::Status found = learner::FindResumePoint(cfg, &point, &warnings);
  for (const auto& w : warnings) base::LogWarning("stampede: WARNING: %s\n", w.c_str());
  if (!found.ok()) {
    base::LogError("stampede checkpoints: %s\n", found.message().c_str());
    return 1;
  }
  std::printf("%s: version %lld, %lld env frames (%s)\n", point.from.c_str(), (long long)point.version,
              (long long)point.env_frames, point.sharded ? "sharded" : "one file");
  if (fs::path(point.from).filename() != fs::path(point.newest_dir).filename()) {
    base::LogError("stampede checkpoints: the newest checkpoint directory %s is not complete\n",
                 point.newest_dir.c_str());
    return 1;
  }
  return 0;
}

RunResult RunCoordinator(config::Config cfg, const RunOptions& opt) {
  RunResult result;
  std::string resumed_from;
  int64_t resumed_frames = 0;
  if (opt.resume && !PrepareResume(&cfg, &resumed_from, &resumed_frames)) {
    result.exit_code = 2;
    return result;
  }
  if (ChoiceOf<config::Launcher>(cfg.cluster().launcher()) == config::Launcher::slurm && !opt.standalone) {
    if (const std::string why = coordinator::SlurmLauncherUnavailable(); !why.empty()) {
      base::LogError("stampede: cluster.launcher \"slurm\": %s\n", why.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  {
    in_addr unused;
    if (!HostAddress(cfg.cluster().host(), &unused)) {
      base::LogError("stampede: cluster.host \"%s\" does not resolve to an IPv4 address\n",
                   cfg.cluster().host().c_str());
      result.exit_code = 2;
      return result;
    }
  }
  std::string socket_dir;
  ResolveRunConfig(&cfg, opt, &socket_dir);
  // The ipc sockets' directory goes with the run, however it ends.
  struct RemoveDir {
    const std::string& dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } remove_socket_dir{socket_dir};
  {
    // Before any process or socket starts: a missing plug-in, a bad kwarg or an
    // unsupported space stops the run here.
    base::Status checked = ResolveEnvSpec(SelfExePath(), &cfg);
    if (checked.ok()) checked = CheckNetworkAndDevice(cfg);
    if (checked.ok() && opt.resume && ShardsOwnOptimizer(cfg)) {
      std::string said;
      checked = ReshardForResume(cfg, &said);
      if (checked.ok() && !said.empty()) std::printf("stampede: %s\n", said.c_str());
    }
    if (!checked.ok()) {
      base::LogError("stampede: %s\n", checked.message().c_str());
      result.exit_code = 2;
      return result;
    }
  }
  if (cfg.tasks_size() > 0 && !opt.quiet) {
    // The suite as it will run: who runs which task, and the one network's shapes.
    const auto assigned = config::AssignActors(cfg);
    const auto limits = config::TaskActionLimits(cfg);
    std::string shape;
    for (int d : cfg.env().resolved_spec().obs_shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("stampede: %d tasks, one network: observations [%s] (suite.obs_rule \"%s\"), %d actions\n",
                cfg.tasks_size(), shape.c_str(), cfg.suite().obs_rule().c_str(),
                cfg.env().resolved_spec().num_actions());
    for (int t = 0; t < cfg.tasks_size(); ++t) {
      std::string actors;
      for (size_t a = 0; a < assigned.size(); ++a) {
        if (assigned[a] == t) actors += (actors.empty() ? "" : ",") + std::to_string(a);
      }
      std::string obs;
      for (int d : cfg.tasks(t).env().resolved_spec().obs_shape()) obs += (obs.empty() ? "" : ", ") + std::to_string(d);
      std::printf("  %-16s actors %-10s observations [%s], %d actions\n", cfg.tasks(t).name().c_str(), actors.c_str(),
                  obs.c_str(), limits[size_t(t)]);
    }
    std::fflush(stdout);
  }
  std::error_code exists_ec;
  if (!opt.resume && fs::exists(cfg.run_dir() + "/metrics.jsonl", exists_ec)) {
    base::LogError("stampede: %s already holds a run (metrics.jsonl); choose another --run-dir or "
                 "remove it (to continue it: stampede run --resume %s)\n",
                 cfg.run_dir().c_str(), cfg.run_dir().c_str());
    result.exit_code = 2;
    return result;
  }
  {
    // The run directory must be creatable and writable: a clean error with the OS's
    // reason (a full disk says so), never an exception.
    std::error_code ec;
    fs::create_directories(cfg.run_dir() + "/logs", ec);
    std::string why = ec ? ec.message() : "";
    if (!ec) {
      const std::string probe = cfg.run_dir() + "/.write-test";
      if (const base::Status st = base::WriteFileAtomically(probe, std::string(4096, 'x')); !st.ok()) why = st.message();
      std::error_code removed;
      fs::remove(probe, removed);
    }
    if (!why.empty()) {
      base::LogError("stampede: run directory %s cannot be created or written: %s\n", cfg.run_dir().c_str(),
                   why.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  result.run_dir = cfg.run_dir();
  {
    // A scale request or answer left by an earlier run of this directory is not this run's.
    std::error_code ec;
    fs::remove(cfg.run_dir() + "/" + kScaleRequest, ec);
    fs::remove(cfg.run_dir() + "/" + kStopRequest, ec);  // an old request must not stop this run
    fs::remove(cfg.run_dir() + "/" + kScaleAnswer, ec);
  }
  std::shared_ptr<const wire::Curve> curve;
  {
    // CURVE keys: made here for this run (RUN_DIR/keys), or taken from cluster.keys_dir
    // (made by `stampede keys`), where every process reads them.
    base::Status keys;
    if (!cfg.cluster().curve()) {
      base::LogWarning("stampede: WARNING: cluster.curve is false: the run's sockets accept anyone who can "
                           "reach them (forged trajectories, parameters and statuses)\n");
    } else if (cfg.cluster().keys_dir().empty()) {
      keys = wire::GenerateKeys(wire::KeysDir(cfg), wire::RunIdentities(cfg));
    }
    if (keys.ok() && cfg.cluster().curve()) {
      base::StatusOr<std::shared_ptr<const wire::Curve>> loaded = wire::RunCurve(cfg, "coordinator");
      if (loaded.ok()) curve = std::move(loaded).value();
      else keys = loaded.status();
    }
    if (!keys.ok()) {
      base::LogError("stampede: %s\n", keys.message().c_str());
      result.exit_code = 2;
      return result;
    }
  }
  const std::string config_path = cfg.run_dir() + "/config.textproto";
  {
    // Every process reads this file: without it nothing may start.
    if (const base::Status st = base::WriteFileAtomically(config_path, ConfigToText(cfg)); !st.ok()) {
      base::LogError("stampede: cannot write the run's config: %s\n", st.message().c_str());
      result.exit_code = 2;
      return result;
    }
  }
  {
    zmq::context_t ctx(1);
    std::unique_ptr<wire::ZapHandler> zap;
    if (curve) zap = std::make_unique<wire::ZapHandler>(ctx, *curve, wire::RunAllowList(), "stampede");
    caf::actor_system_config sys_cfg;
    // Workers that sleep on a condition variable when there is nothing to do. CAF's default
    // work-stealing workers poll: after each message, hundreds of 50 us sleeps per worker,
    // so the coordinator's 100 ms tick kept about 12% of a core busy waking them, which
    // the fleet's roles want on a small machine.
    sys_cfg.set("scheduler.policy", caf::atom("sharing"));
    caf::actor_system sys{sys_cfg};
    coordinator::CoreOptions core_opt;
    core_opt.quiet = opt.quiet;
    core_opt.standalone = opt.standalone;
    core_opt.curve = curve != nullptr;
    core_opt.config_path = config_path;
    core_opt.resumed_from = resumed_from;
    core_opt.resumed_frames = resumed_frames;
    const std::string checkpoints_root = cfg.run_dir() + "/checkpoints";
    core_opt.checkpoints.next_sequence = [checkpoints_root] { return ps::NextCheckpointSequence(checkpoints_root); };
    core_opt.checkpoints.final_sequence = [checkpoints_root]() -> int64_t {
      ps::FoundCheckpoint found;
      std::vector<std::string> skipped;
      const bool any = ps::FindNewestCheckpoint(checkpoints_root, &found, &skipped);
      return any && found.manifest.final ? found.manifest.sequence : 0;
    };
    auto sup = sys.spawn([&](Supervisor* self) {
      auto& st = self->state;
      if (ChoiceOf<config::Launcher>(cfg.cluster().launcher()) == config::Launcher::slurm) {
        st.launcher = std::make_unique<coordinator::SlurmLauncher>(SelfExePath(), config_path, cfg.run_dir(),
                                                             cfg.cluster().actors_per_node(),
                                                             coordinator::SlurmLayout::FromEnvironment());
      } else {
        st.launcher = std::make_unique<coordinator::LocalLauncher>(SelfExePath(), config_path, cfg.run_dir());
      }
      st.sinks = std::make_unique<coordinator::FileSinks>(cfg.run_dir());
      st.core = std::make_unique<coordinator::Core>(cfg, core_opt, st.launcher.get(), st.sinks.get(), &result,
                                              coordinator::Clock::now(), UnixTime());
      st.zap = zap.get();
      st.run_dir = cfg.run_dir();
      if (curve) st.keys_dir = wire::KeysDir(cfg);
      return Supervising(self, &result);
    });
    coordinator::StatusServerOptions server;
    server.status_endpoint = BindEndpoint(cfg, cfg.cluster().coordinator());
    server.control_endpoint = BindEndpoint(cfg, cfg.cluster().control());
    server.max_status_bytes = std::min(cfg.cluster().max_message_bytes(), cfg.coordinator().max_status_bytes());
    server.curve = curve.get();
    sys.spawn<caf::detached>(coordinator::StatusServer, sup, &ctx, server);
    sys.await_all_actors_done();
  }
  if (cfg.trace()) {
    // Every process has exited (and written its trace): one timeline for Perfetto.
    const base::Status merged = base::MergeTraces(cfg.run_dir() + "/trace", cfg.run_dir() + "/trace.json");
    if (merged.ok()) {
      if (!opt.quiet) std::printf("stampede: timeline of every process in %s/trace.json (ui.perfetto.dev)\n", cfg.run_dir().c_str());
    } else {
      base::LogError("stampede: cannot merge the traces: %s\n", merged.message().c_str());
    }
  }
  return result;
}

}  // namespace stampede::coordinator
