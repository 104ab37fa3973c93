#include "tools/coordinator.h"
#include "tools/spec.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <zmq.hpp>

#include "learner/checkpoint.h"
#include "ps/checkpoints.h"
#include "tools/actor_watch.h"
#include "tools/signals.h"
#include "wire/config.h"
#include "wire/auth.h"
#include "wire/durable_file.h"
#include "wire/tasks.h"
#include "wire/tensorboard.h"
#include "wire/trace.h"
#include "wire/log_limit.h"
#include "wire/zmq_util.h"

namespace stampede::tools {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using status_atom = caf::atom_constant<caf::atom("status")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using respawn_atom = caf::atom_constant<caf::atom("respawn")>;

namespace {

// Binds a TCP socket to 127.0.0.1:`port` (0: any) and closes it; the port it got, or 0.
int TryLoopbackPort(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  socklen_t len = sizeof(addr);
  int got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    got = ntohs(addr.sin_port);
  }
  ::close(fd);
  return got;
}

// A free loopback port outside the kernel's ephemeral range: a port from that range
// can be taken, between this check and the process's bind, as the local port of any
// outgoing connection (the run's own processes make dozens).
int FreeLoopbackPort() {
  static std::mt19937 rng(std::random_device{}());
  static std::set<int> given;  // never the same port twice in one run
  int lo = 32768, hi = 60999;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> lo >> hi;
  const int from = lo > 12000 ? 10000 : hi + 1, to = lo > 12000 ? lo - 1 : 65535;
  for (int attempt = 0; attempt < 500 && from < to; ++attempt) {
    const int port = std::uniform_int_distribution<int>(from, to)(rng);
    if (given.count(port) || TryLoopbackPort(port) != port) continue;
    given.insert(port);
    return port;
  }
  return TryLoopbackPort(0);
}

std::string Loopback() { return "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort()); }

double UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Durable write of a run file; a failure is reported, the run goes on.
void WriteRunFile(const std::string& path, const std::string& text) {
  std::string error;
  if (!wire::WriteFileAtomically(path, text, &error)) {
    std::fprintf(stderr, "stampede: %s\n", error.c_str());
  }
}

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

std::string Human(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (std::fabs(v) >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

struct Child {
  wire::Role role = wire::ROLE_UNSPECIFIED;
  int index = 0;
  pid_t pid = -1;
  Clock::time_point last_heard;
  std::string activity = "starting";
  std::string log_path;
};

// What the coordinator's control socket says (the Watcher thread owns the socket): the
// stop messages of the current stop stage, sent again twice a second with the heartbeat.
struct ControlBoard {
  std::mutex mu;
  std::vector<wire::Control> stops;
};

// A process the coordinator did not start (`stampede coordinator`, roles started by
// hand), known from its statuses.
struct Remote {
  wire::Role role = wire::ROLE_UNSPECIFIED;
  int index = 0;
  int pid = 0;
  Clock::time_point last_heard;
  std::string activity;
  bool stopped = false;  // said "stopped", or went silent while the run stops
};

struct SupervisorState {
  config::Config cfg;
  RunOptions opt;
  std::string self_exe;
  std::string config_path;
  std::map<pid_t, Child> children;
  std::ofstream metrics;
  Clock::time_point start;
  wire::Status learner;  // the learners' newest statuses merged (MergeLearners)
  bool have_learner_status = false;
  std::map<int, wire::Status> learners;  // newest status per learner index
  std::map<int, wire::Status> ps_status;  // newest status per PS shard
  // Learners and PS shards restarted after dying, per (role, index); and how many in all.
  std::map<std::pair<int, int>, int> restarts;
  int role_restarts = 0;
  std::string resumed_from;  // --resume: the checkpoint the run continues from
  std::shared_ptr<ControlBoard> control;
  std::map<std::pair<int, int>, Remote> remote;  // (role, index) -> a process started elsewhere
  int64_t start_frames = 0;  // the learner's count at its first status (non-zero on a restore)
  double lag_mean_acc = 0;
  int lag_mean_n = 0;
  int64_t lag_max_acc = 0;
  int64_t last_frames = 0;
  Clock::time_point last_tick;
  bool stopping = false;
  Clock::time_point stop_deadline;
  bool killed = false;
  int actor_restarts = 0;
  // Per actor process (pid): frames produced and seconds blocked on a full learner
  // queue, both cumulative over that process's life.
  std::map<pid_t, std::pair<int64_t, double>> actor_stats;
  RunResult* result = nullptr;
  std::shared_ptr<std::atomic<bool>> done;
  // CURVE: a status counts only if ZAP's identity for its connection is the sender it
  // claims; the ZAP handler of the status socket (its refusals are reported).
  bool curve = false;
  const wire::ZapHandler* zap = nullptr;
  int64_t forged_statuses = 0, implausible_statuses = 0;
  wire::LogLimiter status_log;
  // Refused requests and connections per process ("ps 0" -> reason -> count).
  std::map<std::string, std::map<std::string, int64_t>> refused;
  std::map<int, int64_t> ps_versions;  // newest version per PS shard
  // Watchdog: when the learner's step count last moved.
  int64_t watched_steps = -1;
  Clock::time_point steps_moved;
  // Plausibility of the learner's frame count: the actors' own counts (per process)
  // bound it; peak actor frames/s covers the ~1 s their reports lag.
  int64_t prev_actor_total = 0;
  Clock::time_point prev_actor_time;
  double peak_actor_rate = 0;
  std::optional<wire::Status> pending_learner;  // a learner status the actors cannot vouch for yet
  Clock::time_point pending_since;
  std::string stop_reason;
  std::string checkpoint_error;  // a failed checkpoint write reported by the learner
  // Per task: frames at which it reached its target (-1: not yet), and the best
  // full-window mean return seen.
  std::vector<int64_t> task_reached;
  int progress_rows = 0;
  wire::TensorBoardWriter tb;  // RUN_DIR/tb
  // Per actor: its policy version, lag and fetcher counters (tools/actor_watch.h).
  ActorWatch actors{0};
};

using Supervisor = caf::stateful_actor<SupervisorState>;
// How long a learner status may wait for the actors' counts to vouch for it.
constexpr auto kPendingStatusLimit = std::chrono::seconds(3);

void WriteProcesses(SupervisorState& st) {
  std::ostringstream os;
  for (const auto& [pid, c] : st.children) {
    os << wire::RoleName(c.role) << " " << c.index << " " << pid << "\n";
  }
  WriteRunFile(st.cfg.run_dir() + "/processes.txt", os.str());
}

void Event(SupervisorState& st, const std::string& name, nlohmann::json extra) {
  extra["event"] = name;
  extra["wall_time"] = UnixTime();
  extra["elapsed_s"] = std::chrono::duration<double>(Clock::now() - st.start).count();
  extra["env_frames"] = st.learner.env_frames();
  extra["learner_step"] = st.learner.learner_steps();
  st.metrics << extra.dump() << "\n";
  st.metrics.flush();
}

nlohmann::json RefusedJson(const SupervisorState& st) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [who, reasons] : st.refused) {
    for (const auto& [reason, n] : reasons) j[who][reason] = n;
  }
  if (st.zap && st.zap->rejected() > 0) j["coordinator"]["unauthorised_connection"] = st.zap->rejected();
  return j;
}

pid_t Spawn(SupervisorState& st, wire::Role role, int index, int restarts = 0) {
  const std::string role_name = wire::RoleName(role);
  const std::string log = st.cfg.run_dir() + "/logs/" + role_name + "-" + std::to_string(index) + ".log";
  const std::string index_str = std::to_string(index);
  const std::string restarts_str = std::to_string(restarts);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // A child never outlives the coordinator.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    // Its own process group: a terminal's Ctrl-C reaches only the coordinator, which
    // stops the children in order (StopNextStage).
    ::setpgid(0, 0);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::execl(st.self_exe.c_str(), st.self_exe.c_str(), role_name.c_str(), "--config",
            st.config_path.c_str(), "--task-index", index_str.c_str(), "--restarts", restarts_str.c_str(),
            (char*)nullptr);
    ::_exit(127);
  }
  Child c;
  c.role = role;
  c.index = index;
  c.pid = pid;
  c.last_heard = Clock::now();
  c.log_path = log;
  st.children[pid] = c;
  WriteProcesses(st);
  Event(st, "spawn", {{"role", role_name}, {"index", index}, {"pid", pid}});
  return pid;
}

void Progress(SupervisorState& st, Clock::time_point now);

// Per actor ("0", "1", ...): its policy version, the newest version its fetcher heard of,
// its trajectories' lag on arrival (newest, mean and largest since the last row; in the
// summary the largest over the run), fetcher resets and mixed assemblies.
nlohmann::json ActorsJson(const ActorWatch& watch, bool summary) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [index, a] : watch.actors()) {
    nlohmann::json one = {{"policy_version", a.version},
                          {"newest_heard_version", a.heard},
                          {"lag", a.lag},
                          {"fetcher_resets", a.fetcher_resets},
                          {"mixed_assemblies", a.mixed_assemblies},
                          {"trajectories", a.trajectories}};
    if (summary) {
      one["lag_max"] = a.lag_max_run;
    } else {
      one["lag_mean"] = a.lag_mean;
      one["lag_max"] = a.lag_max;
    }
    j[std::to_string(index)] = one;
  }
  return j;
}

// A target as the config gave it (0.85, not 0.8 or 0.850000).
std::string FormatTarget(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A 100-episode mean return, or "–" before the first episode has ended.
std::string ReturnText(double mean, int counted) {
  if (counted <= 0) return "\u2013";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", mean);
  return buf;
}

// Per task from the newest learner status: name -> episodes, mean_return_100,
// returns_counted, env_frames, policy_lag_mean, frames_to_target (and normalised_score
// where the task gives random and reference scores).
// The learners' replay tables (learner.replay) in one: sums of sizes and counters, the
// mean of their sampled ages and the largest.
nlohmann::json ReplayJson(const SupervisorState& st) {
  double size = 0, bytes = 0, inserts = 0, samples = 0, removed_oldest = 0, removed_sampled = 0;
  double refused = 0, dropped = 0, age = 0, fraction = 0;
  int64_t age_max = 0;
  bool can_sample = true;
  std::string selector;
  for (const auto& [index, s] : st.learners) {
    const auto& r = s.replay();
    size += double(r.size());
    bytes += double(r.bytes());
    inserts += double(r.inserts());
    samples += double(r.samples());
    removed_oldest += double(r.removed_oldest());
    removed_sampled += double(r.removed_sampled());
    refused += double(r.inserts_refused());
    dropped += double(r.trust_region_dropped());
    age += r.sampled_age_mean();
    fraction += r.replayed_fraction();
    age_max = std::max(age_max, r.sampled_age_max());
    can_sample = can_sample && r.can_sample();
    selector = r.selector();
  }
  const double n = std::max<double>(1, double(st.learners.size()));
  return {{"size", size}, {"bytes", bytes}, {"inserts", inserts}, {"samples", samples},
          {"sampled_age_mean", age / n}, {"sampled_age_max", age_max}, {"selector", selector},
          {"can_sample", can_sample}, {"removed_oldest", removed_oldest}, {"removed_sampled", removed_sampled},
          {"inserts_refused", refused}, {"trust_region_dropped", dropped}, {"replayed_fraction", fraction / n}};
}

nlohmann::json TasksJson(const SupervisorState& st) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& ts : st.learner.tasks()) {
    if (ts.task() < 0 || ts.task() >= wire::NumTasks(st.cfg)) continue;
    nlohmann::json t = {{"episodes", ts.episodes()},
                        {"mean_return_100", ts.mean_return_100()},
                        {"returns_counted", ts.returns_counted()},
                        {"mean_episode_length_100", ts.mean_episode_length_100()},
                        {"env_frames", ts.env_frames()},
                        {"policy_lag_mean", ts.policy_lag_mean()},
                        {"frames_to_target", ts.frames_to_target()}};
    if (st.cfg.learner().popart()) {
      t["popart_mean"] = ts.popart_mean();
      t["popart_scale"] = ts.popart_scale();
    }
    if (st.cfg.tasks_size() > 0) {
      const double norm = wire::NormalisedScore(st.cfg.tasks(ts.task()), ts.mean_return_100());
      if (!std::isnan(norm) && ts.returns_counted() > 0) t["normalised_score"] = norm;
    }
    j[wire::TaskName(st.cfg, ts.task())] = t;
  }
  return j;
}

// Per learner: frames it trained on, gradients or steps, its window's mean return.
nlohmann::json LearnersJson(const SupervisorState& st) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [index, s] : st.learners) {
    j[std::to_string(index)] = {{"env_frames", s.env_frames()},
                                {"steps", s.learner_steps()},
                                {"mean_return_100", s.mean_return_100()},
                                {"returns_counted", s.returns_counted()},
                                {"policy_version", s.policy_version()}};
  }
  return j;
}

// Per PS shard (sync/async): version, gradients applied and dropped, staleness histogram.
nlohmann::json PsJson(const SupervisorState& st) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [shard, s] : st.ps_status) {
    nlohmann::json one = {{"version", s.policy_version()},
                          {"gradients_applied", s.gradients_applied()},
                          {"gradients_dropped", s.gradients_dropped()}};
    if (s.staleness_histogram_size() > 0) {
      one["staleness_histogram"] = std::vector<int64_t>(s.staleness_histogram().begin(), s.staleness_histogram().end());
    }
    j[std::to_string(shard)] = one;
  }
  return j;
}

// Mean and median normalised score over the tasks that have one (NaN if none does).
std::pair<double, double> NormalisedAggregate(const SupervisorState& st) {
  std::vector<double> v;
  for (const auto& ts : st.learner.tasks()) {
    if (st.cfg.tasks_size() == 0 || ts.task() < 0 || ts.task() >= st.cfg.tasks_size() || ts.returns_counted() == 0) continue;
    const double norm = wire::NormalisedScore(st.cfg.tasks(ts.task()), ts.mean_return_100());
    if (!std::isnan(norm)) v.push_back(norm);
  }
  return wire::MeanAndMedian(std::move(v));
}

// The per-task table at the end of a suite's run.
void PrintTaskTable(const SupervisorState& st) {
  std::printf("%-20s %10s %8s %12s %10s\n", "task", "return(100)", "episodes", "frames", "normalised");
  for (const auto& ts : st.learner.tasks()) {
    if (ts.task() < 0 || ts.task() >= st.cfg.tasks_size()) continue;
    const double norm = wire::NormalisedScore(st.cfg.tasks(ts.task()), ts.mean_return_100());
    std::printf("%-20s %10s %8lld %12lld %10s\n", st.cfg.tasks(ts.task()).name().c_str(),
                ReturnText(ts.mean_return_100(), ts.returns_counted()).c_str(), (long long)ts.episodes(),
                (long long)ts.env_frames(),
                std::isnan(norm) || ts.returns_counted() == 0 ? "\u2013" : FormatTarget(std::round(norm * 1000) / 1000 + 0.0).c_str());
  }
  const auto [mean, median] = NormalisedAggregate(st);
  if (!std::isnan(mean)) std::printf("normalised score: mean %.3f, median %.3f\n", mean, median);
}

// The order of a stop: actors and the learners other than the chief first, then the
// chief (its final checkpoint then holds every gradient the shards applied), then the
// PS shards (the chief's final checkpoint needs them). Called again at every exit while
// stopping; a second SIGTERM to a process changes nothing.
void StopNextStage(SupervisorState& st) {
  bool others = false, chief = false;
  for (const auto& [pid, c] : st.children) {
    others = others || (c.role == wire::ROLE_LEARNER && c.index != 0);
    chief = chief || (c.role == wire::ROLE_LEARNER && c.index == 0);
  }
  for (const auto& [key, r] : st.remote) {
    if (r.stopped) continue;
    others = others || (r.role == wire::ROLE_LEARNER && r.index != 0);
    chief = chief || (r.role == wire::ROLE_LEARNER && r.index == 0);
  }
  auto now = [&](wire::Role role, int index) {
    return role == wire::ROLE_ACTOR || (role == wire::ROLE_LEARNER && (index != 0 || !others)) ||
           (role == wire::ROLE_PS && !others && !chief);
  };
  for (const auto& [pid, c] : st.children) {
    if (now(c.role, c.index)) ::kill(pid, SIGTERM);
  }
  // The same stage for every process, wherever it runs, over the control socket.
  std::vector<wire::Control> stops;
  auto stop = [&](wire::Role role, int index) {
    wire::Control c;
    *c.mutable_sender() = wire::MakeSender(wire::ROLE_COORDINATOR, 0, 0);
    c.set_stop(true);
    c.set_stop_role(role);
    c.set_stop_index(index);
    c.set_reason(st.stop_reason);
    stops.push_back(c);
  };
  stop(wire::ROLE_ACTOR, -1);
  for (int l = 1; l < st.cfg.learner().num_learners(); ++l) stop(wire::ROLE_LEARNER, l);
  if (!others) stop(wire::ROLE_LEARNER, 0);
  if (!others && !chief) stop(wire::ROLE_PS, -1);
  std::lock_guard lock(st.control->mu);
  st.control->stops = std::move(stops);
}

// Every process of the run is gone: children reaped, remote ones stopped.
bool AllGone(const SupervisorState& st) {
  if (!st.children.empty()) return false;
  for (const auto& [key, r] : st.remote) {
    if (!r.stopped) return false;
  }
  return true;
}

void BeginStop(Supervisor* self, const std::string& reason, int exit_code) {
  auto& st = self->state;
  if (st.stopping) return;
  st.stopping = true;
  st.stop_reason = reason;
  st.result->exit_code = exit_code;
  if (!st.opt.quiet || exit_code != 0) std::fprintf(stderr, "stampede: stopping: %s\n", reason.c_str());
  Event(st, "stop", {{"reason", reason}, {"exit_code", exit_code}});
  st.stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(st.cfg.coordinator().shutdown_grace_s()));
  StopNextStage(st);
}

void CheckPendingLearnerStatus(Supervisor* self);
void ApplyLearnerStatus(Supervisor* self, const wire::Status& s);

void Finish(Supervisor* self) {
  auto& st = self->state;
  CheckPendingLearnerStatus(self);  // the learner's last status, if the actors vouch for it
  Progress(st, Clock::now());  // the final row
  RunResult& r = *st.result;
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - st.start).count();
  r.env_frames = st.learner.env_frames();
  r.learner_steps = st.learner.learner_steps();
  r.mean_return_100 = st.learner.mean_return_100();
  r.actor_restarts = st.actor_restarts;
  // Frames this run produced (a restored learner starts from its checkpoint's count).
  const double fps = r.wall_seconds > 0 ? double(r.env_frames - st.start_frames) / r.wall_seconds : 0;
  if (!st.checkpoint_error.empty()) {
    // A run whose checkpoint could not be written did not end well, whatever stopped it.
    std::fprintf(stderr, "stampede: a checkpoint write failed: %s\n", st.checkpoint_error.c_str());
    if (r.exit_code == 0) r.exit_code = 1;
  }
  nlohmann::json summary = {{"exit_code", r.exit_code},
                            {"stop_reason", st.stop_reason},
                            {"wall_seconds", r.wall_seconds},
                            {"env_frames", r.env_frames},
                            {"learner_steps", r.learner_steps},
                            {"mean_return_100", r.mean_return_100},
                            {"episodes", st.learner.episodes()},
                            {"frames_per_second", fps},
                            {"frames_to_target", r.frames_to_target},
                            {"seconds_to_target", r.seconds_to_target},
                            {"target_return", st.cfg.stop().target_return()},
                            {"actor_restarts", r.actor_restarts}};
  if (!st.checkpoint_error.empty()) summary["checkpoint_error"] = st.checkpoint_error;
  if (st.forged_statuses > 0) summary["forged_statuses"] = st.forged_statuses;
  if (st.implausible_statuses > 0) summary["implausible_statuses"] = st.implausible_statuses;
  if (!st.refused.empty() || (st.zap && st.zap->rejected() > 0)) summary["refused"] = RefusedJson(st);
  summary["tasks"] = TasksJson(st);
  summary["actors"] = ActorsJson(st.actors, true);
  if (st.cfg.learner().num_learners() > 1 || ShardsOwnOptimizer(st.cfg)) {
    summary["learners"] = LearnersJson(st);
    summary["ps"] = PsJson(st);
  }
  summary["restarts"] = st.role_restarts;
  if (st.cfg.tasks_size() > 0) {
    summary.erase("mean_return_100");  // over a mix of scales: meaningless in a suite
    const auto [mean, median] = NormalisedAggregate(st);
    if (!std::isnan(mean)) {
      summary["mean_normalised_score"] = mean;
      summary["median_normalised_score"] = median;
    }
  }
  WriteRunFile(st.cfg.run_dir() + "/summary.json", summary.dump(2) + "\n");
  if (!st.opt.quiet) {
    std::printf("stampede: done in %.1f s: %s frames (%s/s), %lld learner steps", r.wall_seconds,
                Human(double(r.env_frames)).c_str(), Human(fps).c_str(), r.learner_steps);
    if (st.cfg.tasks_size() == 0) {
      std::printf(", mean return(100) %s", ReturnText(r.mean_return_100, st.learner.returns_counted()).c_str());
    }
    if (r.frames_to_target >= 0) {
      std::printf("; target %s reached at %lld frames, %.1f s",
                  st.cfg.tasks_size() > 0 ? "of every task" : FormatTarget(st.cfg.stop().target_return()).c_str(),
                  r.frames_to_target, r.seconds_to_target);
    }
    std::printf("\n");
    if (st.cfg.tasks_size() > 0) PrintTaskTable(st);
    std::printf("stampede: run directory %s\n", st.cfg.run_dir().c_str());
    std::fflush(stdout);
  }
  st.done->store(true);
  self->quit();
}

// Frames made and seconds waited to send, summed over every actor process of the run.
std::pair<int64_t, double> ActorTotals(const SupervisorState& st) {
  std::pair<int64_t, double> total{0, 0};
  for (const auto& [pid, fw] : st.actor_stats) {
    total.first += fw.first;
    total.second += fw.second;
  }
  return total;
}
int64_t ActorFrames(const SupervisorState& st) { return ActorTotals(st).first; }

// Empty if the learner's counters are believable, else why not: frames never go back
// within one learner process, and never run ahead of what the actors say they made
// (with room for what they have not reported yet and for messages in flight).
std::string Implausible(const SupervisorState& st, const wire::Status& s) {
  const auto prev = st.learners.find(s.sender().task_index());
  if (prev != st.learners.end() && s.sender().incarnation() == prev->second.sender().incarnation() &&
      (s.env_frames() < prev->second.env_frames() || s.learner_steps() < prev->second.learner_steps())) {
    return "frames or steps went backwards (" + std::to_string(prev->second.env_frames()) + " -> " +
           std::to_string(s.env_frames()) + " frames)";
  }
  if (s.sender().task_index() < 0 || s.sender().task_index() >= st.cfg.learner().num_learners()) {
    return "learner index " + std::to_string(s.sender().task_index()) + " is not one of the run's";
  }
  if (s.env_frames() < 0 || s.learner_steps() < 0 || s.start_env_frames() < 0 ||
      s.start_env_frames() > s.env_frames()) {
    return "negative counts or a start above the current count";
  }
  const auto& a = st.cfg.actors();
  const double per_message = double(a.unroll_length()) * a.envs_per_actor() *
                             std::max(1, st.cfg.env().resolved_spec().frames_per_step());
  // Messages between the actors and the trainer: the learner's queue (in unrolls, E per
  // message), one in each actor's socket, a few in the kernel's buffers.
  const double in_flight =
      per_message * (double(st.cfg.learner().queue_capacity()) / a.envs_per_actor() + 2.0 * a.num_actors() + 8);
  // What each actor process made but has not reported: actors report after sends 1, 2,
  // 4, ... and then every 100 ms, so at most what it has reported (a young or dead one)
  // and at most a second of the whole fleet's peak rate (a live one), plus a message.
  double unreported = 0;
  for (const auto& [pid, fw] : st.actor_stats) {
    unreported += std::min(double(fw.first), std::max(per_message * 64, st.peak_actor_rate)) + per_message;
  }
  const double bound = double(ActorFrames(st)) + unreported + st.peak_actor_rate + in_flight;
  const double claimed = double(s.env_frames() - s.start_env_frames());
  if (claimed > bound) {
    return std::to_string(int64_t(claimed)) + " frames trained on, but the actors report " +
           std::to_string(ActorFrames(st)) + " made";
  }
  return {};
}

void OnStatus(Supervisor* self, const std::string& bytes, const std::string& peer) {
  auto& st = self->state;
  wire::Status s;
  if (!s.ParseFromString(bytes) || !wire::CheckProtocol(s.sender()).empty()) return;
  const std::string claimed = wire::Identity(wire::RoleName(s.sender().role()), s.sender().task_index());
  if (st.curve && peer != claimed) {
    ++st.forged_statuses;
    int64_t unlogged = 0;
    if (st.status_log.Allow("forged", &unlogged)) {
      std::fprintf(stderr, "stampede: ignored a status claiming to be %s from %s's connection%s\n", claimed.c_str(),
                   peer.c_str(), wire::LogLimiter::More(unlogged).c_str());
    }
    return;
  }
  const std::string who = std::string(wire::RoleName(s.sender().role())) + " " + std::to_string(s.sender().task_index());
  if (!s.refused_by_reason().empty()) {
    auto& r = st.refused[who];
    for (const auto& [reason, n] : s.refused_by_reason()) r[reason] = n;
  }
  if (s.sender().role() == wire::ROLE_PS) {
    st.ps_versions[s.sender().task_index()] = s.policy_version();
    st.ps_status[s.sender().task_index()] = s;
  }
  if (s.sender().role() == wire::ROLE_LEARNER && !s.checkpoint_error().empty() &&
      s.checkpoint_error() != st.checkpoint_error) {
    st.checkpoint_error = s.checkpoint_error();
    std::fprintf(stderr, "stampede: learner checkpoint failed: %s\n", st.checkpoint_error.c_str());
    Event(st, "checkpoint_failed", {{"error", st.checkpoint_error}, {"failures", s.checkpoint_failures()}});
  }
  auto it = st.children.find(pid_t(s.pid()));
  if (it != st.children.end()) {
    it->second.last_heard = Clock::now();
    it->second.activity = s.activity();
  } else if (st.opt.standalone) {
    // A process started elsewhere: known from its statuses.
    Remote& r = st.remote[{int(s.sender().role()), s.sender().task_index()}];
    if (r.pid == 0 && !st.opt.quiet) {
      std::printf("stampede: %s joined (pid %d)\n", who.c_str(), s.pid());
      std::fflush(stdout);
    }
    if (r.pid != 0 && r.pid != s.pid()) Event(st, "rejoined", {{"process", who}, {"pid", s.pid()}});
    r.role = s.sender().role();
    r.index = s.sender().task_index();
    r.pid = s.pid();
    r.last_heard = Clock::now();
    r.activity = s.activity();
    const bool stopped = s.activity().rfind("stopped", 0) == 0;
    if (stopped && !r.stopped) Event(st, "process_exit", {{"process", who}, {"pid", s.pid()}, {"how", "stopped"}});
    r.stopped = stopped;
    if (st.stopping) {
      StopNextStage(st);
      if (AllGone(st)) {
        Finish(self);
        return;
      }
    }
  }
  if (s.sender().role() == wire::ROLE_ACTOR) {
    st.actor_stats[pid_t(s.pid())] = {s.actor_frames(), s.actor_send_wait_s()};
    const int a = s.sender().task_index();
    if (a >= 0 && a < st.cfg.actors().num_actors()) {
      st.actors.OnActorStatus(a, s.actor_policy_version(), s.actor_newest_heard_version(), s.actor_fetcher_resets(),
                              s.actor_mixed_assemblies(), Clock::now());
    }
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - st.prev_actor_time).count();
    if (dt >= 0.5) {
      const int64_t total = ActorFrames(st);
      st.peak_actor_rate = std::max(st.peak_actor_rate, double(total - st.prev_actor_total) / dt);
      st.prev_actor_total = total;
      st.prev_actor_time = now;
    }
  }
  if (s.sender().role() != wire::ROLE_LEARNER) {
    CheckPendingLearnerStatus(self);  // the actors' newer counts may vouch for it now
    return;
  }
  if (!Implausible(st, s).empty()) {
    // Held, not applied: the actors report their counts only every second, so a true
    // count can run ahead of them for a moment. It is dropped if they never catch up.
    if (!st.pending_learner) st.pending_since = Clock::now();
    st.pending_learner = s;
    return;
  }
  // A held status that a newer, believable one overtakes is checked once more: if the
  // actors still cannot vouch for it, it was never true.
  if (st.pending_learner) st.pending_since = Clock::now() - kPendingStatusLimit - std::chrono::seconds(1);
  CheckPendingLearnerStatus(self);
  st.pending_learner.reset();
  ApplyLearnerStatus(self, s);
}

void CheckPendingLearnerStatus(Supervisor* self) {
  auto& st = self->state;
  if (!st.pending_learner) return;
  const std::string why = Implausible(st, *st.pending_learner);
  if (why.empty()) {
    const wire::Status s = *st.pending_learner;
    st.pending_learner.reset();
    ApplyLearnerStatus(self, s);
  } else if (Clock::now() - st.pending_since > kPendingStatusLimit) {
    ++st.implausible_statuses;
    int64_t unlogged = 0;
    if (st.status_log.Allow("implausible", &unlogged)) {
      std::fprintf(stderr, "stampede: ignored the learner's counters: %s%s\n", why.c_str(),
                   wire::LogLimiter::More(unlogged).c_str());
    }
    Event(st, "implausible_status", {{"why", why}});
    st.pending_learner.reset();
  }
}

// Window means of several learners: each learner's 100-episode mean weighted by how
// many returns it holds.
struct WeightedMean {
  double sum = 0, length_sum = 0;
  int64_t counted = 0;
  void Add(double mean, double length, int n) {
    sum += mean * n;
    length_sum += length * n;
    counted += n;
  }
  double mean() const { return counted ? sum / double(counted) : 0; }
  double length() const { return counted ? length_sum / double(counted) : 0; }
};

// The run's learner figures from every learner's newest status: counts add up, window
// means are weighted by returns counted, the step is the PS's global version (sync and
// async) or the learner's steps (relay). One learner: its status as it is.
wire::Status MergeLearners(const SupervisorState& st) {
  if (st.cfg.learner().num_learners() == 1 && !st.learners.empty()) return st.learners.begin()->second;
  const bool sharded = ShardsOwnOptimizer(st.cfg);
  wire::Status m = st.learners.begin()->second;  // the chief's (lowest index) identity
  int64_t frames = 0, start = 0, episodes = 0, steps = 0, depth = 0, dropped = 0, skipped = 0, version = 0, lag_max = 0;
  double wait = 0, pg = 0, baseline = 0, entropy = 0, norm = 0, lag = 0, train = 0;
  WeightedMean all;
  std::map<std::string, int64_t> by_reason;
  const int T = wire::NumTasks(st.cfg);
  std::vector<WeightedMean> task_means(static_cast<size_t>(T));
  std::vector<wire::TaskStatus> tasks(static_cast<size_t>(T));
  std::vector<double> task_lag(static_cast<size_t>(T), 0.0);
  for (const auto& [index, s] : st.learners) {
    frames += s.env_frames();
    start += s.start_env_frames();
    episodes += s.episodes();
    steps += s.learner_steps();
    depth += s.queue_depth();
    dropped += s.dropped_trajectories();
    skipped += s.skipped_steps();
    version = std::max(version, s.policy_version());
    lag_max = std::max(lag_max, s.policy_lag_max());
    wait += s.receive_wait_s();
    pg += s.pg_loss();
    baseline += s.baseline_loss();
    entropy += s.entropy();
    norm += s.grad_norm();
    lag += s.policy_lag_mean();
    train = std::max(train, s.train_seconds());
    all.Add(s.mean_return_100(), s.mean_episode_length_100(), s.returns_counted());
    for (const auto& [reason, n] : s.dropped_by_reason()) by_reason[reason] += n;
    for (const auto& ts : s.tasks()) {
      if (ts.task() < 0 || ts.task() >= T) continue;
      auto& t = tasks[size_t(ts.task())];
      t.set_task(ts.task());
      t.set_episodes(t.episodes() + ts.episodes());
      t.set_env_frames(t.env_frames() + ts.env_frames());
      task_means[size_t(ts.task())].Add(ts.mean_return_100(), ts.mean_episode_length_100(), ts.returns_counted());
      task_lag[size_t(ts.task())] += ts.policy_lag_mean();
      t.set_popart_mean(ts.popart_mean());
      t.set_popart_scale(ts.popart_scale());
    }
  }
  const double n = double(st.learners.size());
  m.set_env_frames(frames);
  m.set_start_env_frames(start);
  m.set_episodes(episodes);
  m.set_learner_steps(sharded ? version : steps);
  m.set_policy_version(version);
  m.set_queue_depth(int(depth));
  m.set_dropped_trajectories(dropped);
  m.set_skipped_steps(skipped);
  m.set_policy_lag_max(lag_max);
  m.set_receive_wait_s(wait);
  m.set_pg_loss(pg / n);
  m.set_baseline_loss(baseline / n);
  m.set_entropy(entropy / n);
  m.set_grad_norm(norm / n);
  m.set_policy_lag_mean(lag / n);
  m.set_train_seconds(train);
  m.set_mean_return_100(all.mean());
  m.set_mean_episode_length_100(all.length());
  m.set_returns_counted(int(all.counted));
  m.clear_dropped_by_reason();
  for (const auto& [reason, c] : by_reason) (*m.mutable_dropped_by_reason())[reason] = c;
  m.clear_tasks();
  for (int t = 0; t < T; ++t) {
    auto* out = m.add_tasks();
    *out = tasks[size_t(t)];
    out->set_task(t);
    out->set_mean_return_100(task_means[size_t(t)].mean());
    out->set_mean_episode_length_100(task_means[size_t(t)].length());
    out->set_returns_counted(int(task_means[size_t(t)].counted));
    out->set_policy_lag_mean(task_lag[size_t(t)] / n);
    out->set_frames_to_target(-1);
  }
  // Targets: over the learners' windows together (each up to 100 episodes), once they
  // hold at least 100 returns.
  m.set_frames_to_target(-1);
  const auto& stop = st.cfg.stop();
  if (st.cfg.tasks_size() == 0 && (stop.target_return() != 0 || stop.stop_at_target()) && all.counted >= 100 &&
      all.mean() >= stop.target_return()) {
    m.set_frames_to_target(frames);
  }
  if (st.cfg.tasks_size() > 0) {
    bool every = true, any = false;
    for (int t = 0; t < T; ++t) {
      const double target = st.cfg.tasks(t).target_return();
      auto* out = m.mutable_tasks(t);
      if (target != 0 && task_means[size_t(t)].counted >= 100 && task_means[size_t(t)].mean() >= target) {
        out->set_frames_to_target(frames);
      }
      if (target == 0) continue;
      any = true;
      every = every && out->frames_to_target() >= 0;
    }
    if (any && every) m.set_frames_to_target(frames);
  }
  return m;
}

void ApplyLearnerStatus(Supervisor* self, const wire::Status& one) {
  auto& st = self->state;
  if (!st.learners.count(one.sender().task_index())) {
    // Frames a learner starts from (restored) are not this run's work.
    st.start_frames += one.start_env_frames();
    st.last_frames += one.start_env_frames();
  }
  st.learners[one.sender().task_index()] = one;
  for (const auto& a : one.actor_lags()) {
    if (a.actor() < 0 || a.actor() >= st.cfg.actors().num_actors()) continue;
    st.actors.OnLearnerActorLag(a.actor(), a.policy_version(), a.lag(), a.lag_mean(), a.lag_max(), a.trajectories());
  }
  const wire::Status s = MergeLearners(st);
  st.actors.OnLearnerVersion(s.policy_version());
  if (s.skipped_steps() > st.learner.skipped_steps()) {
    // A step with a non-finite loss or gradient was not applied (learner/learner.cc).
    Event(st, "skipped_steps", {{"skipped_steps", s.skipped_steps()},
                                {"new", s.skipped_steps() - st.learner.skipped_steps()}});
  }
  st.learner = s;
  st.have_learner_status = true;
  st.lag_mean_acc += s.policy_lag_mean();
  ++st.lag_mean_n;
  st.lag_max_acc = std::max(st.lag_max_acc, s.policy_lag_max());
  RunResult& r = *st.result;
  const auto& stop = st.cfg.stop();
  const bool suite = st.cfg.tasks_size() > 0;
  bool target_set = stop.target_return() != 0 || stop.stop_at_target();
  for (const auto& t : st.cfg.tasks()) target_set = target_set || t.target_return() != 0;
  if (suite) {
    for (const auto& ts : s.tasks()) {
      const size_t k = size_t(ts.task());
      if (k >= st.task_reached.size() || st.task_reached[k] >= 0 || ts.frames_to_target() < 0) continue;
      st.task_reached[k] = ts.frames_to_target();
      if (!st.opt.quiet) {
        std::printf("stampede: task %s: mean return(100) reached its target %s at %lld frames of its own\n",
                    wire::TaskName(st.cfg, int(k)).c_str(), FormatTarget(st.cfg.tasks(int(k)).target_return()).c_str(),
                    (long long)ts.env_frames());
        std::fflush(stdout);
      }
      Event(st, "task_target_reached", {{"task", wire::TaskName(st.cfg, int(k))},
                                        {"mean_return_100", ts.mean_return_100()},
                                        {"task_env_frames", ts.env_frames()}});
    }
  }
  if (target_set && r.frames_to_target < 0 && s.frames_to_target() > 0) {
    r.frames_to_target = s.frames_to_target();
    r.seconds_to_target = std::chrono::duration<double>(Clock::now() - st.start).count();
    if (!st.opt.quiet) {
      if (suite) {
        std::printf("stampede: every task with a target reached it by %lld frames (%.1f s)\n",
                    (long long)r.frames_to_target, r.seconds_to_target);
      } else {
        std::printf("stampede: mean return(100) reached the target %s at %lld frames (%.1f s)\n",
                    FormatTarget(stop.target_return()).c_str(), (long long)r.frames_to_target, r.seconds_to_target);
      }
      std::fflush(stdout);
    }
    Event(st, "target_reached", {{"mean_return_100", s.mean_return_100()},
                                 {"frames_to_target", r.frames_to_target}});
    if (stop.stop_at_target()) BeginStop(self, "target return reached", 0);
  }
  if (s.env_frames() >= stop.total_env_frames()) {
    BeginStop(self, "frame budget of " + std::to_string(stop.total_env_frames()) + " spent", 0);
  } else if (stop.max_learner_steps() > 0 && s.learner_steps() >= stop.max_learner_steps()) {
    BeginStop(self, "learner step budget spent", 0);
  }
}

void OnExit(Supervisor* self, int pid, int wstatus) {
  auto& st = self->state;
  auto it = st.children.find(pid_t(pid));
  if (it == st.children.end()) return;
  Child c = it->second;
  st.children.erase(it);
  WriteProcesses(st);
  std::string how = WIFEXITED(wstatus) ? "exited with status " + std::to_string(WEXITSTATUS(wstatus))
                                       : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
  const std::string who = std::string(wire::RoleName(c.role)) + " " + std::to_string(c.index);
  if (st.stopping) {
    if (!(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) && !st.killed) {
      std::fprintf(stderr, "stampede: %s %s while stopping (log: %s)\n", who.c_str(), how.c_str(),
                   c.log_path.c_str());
      // A learner or PS that fails on the way out (its final checkpoint) fails the run.
      if (c.role != wire::ROLE_ACTOR && st.result->exit_code == 0) {
        st.result->exit_code = 1;
        st.stop_reason += "; then " + who + " " + how + " while stopping";
      }
    }
    StopNextStage(st);
    if (AllGone(st)) Finish(self);
    return;
  }
  Event(st, "process_exit", {{"process", who}, {"pid", pid}, {"how", how}});
  if (StopFlag().load()) {
    // Ctrl-C reaches the whole process group at once: a child may exit before the
    // watcher has turned the signal into a stop request. It is not a crash.
    BeginStop(self, std::string("interrupted (signal ") + std::to_string(StopSignal()) + ")", 130);
    if (st.children.empty()) Finish(self);
    return;
  }
  if (c.role == wire::ROLE_ACTOR) {
    if (st.actor_restarts >= st.cfg.coordinator().max_actor_restarts()) {
      BeginStop(self, who + " " + how + " and the restart budget (coordinator.max_actor_restarts) is spent", 1);
      return;
    }
    ++st.actor_restarts;
    const pid_t fresh = Spawn(st, wire::ROLE_ACTOR, c.index);
    // The end of its log says why (an env's error, a Python traceback).
    const std::string tail = TailOfFile(c.log_path, 1000);
    std::fprintf(stderr, "stampede: %s (pid %d) %s; restarted as pid %d; its log (%s) %s\n%s",
                 who.c_str(), pid, how.c_str(), int(fresh), c.log_path.c_str(),
                 tail.empty() ? "is empty" : "ends:", tail.c_str());
    Event(st, "actor_restart", {{"actor", c.index}, {"old_pid", pid}, {"new_pid", fresh}, {"how", how}});
    return;
  }
  const std::string tail = TailOfFile(c.log_path, 2000);
  std::fprintf(stderr, "stampede: %s (pid %d) %s; its log (%s) %s\n%s", who.c_str(), pid,
               how.c_str(), c.log_path.c_str(), tail.empty() ? "is empty" : "ends:", tail.c_str());
  // A learner or shard that exits with status 2 refused its config or input: starting
  // it again cannot help. Anything else (a crash, a kill) is restarted within the budget.
  const bool refused = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 2;
  int& n = st.restarts[{int(c.role), c.index}];
  if (refused || n >= st.cfg.coordinator().max_restarts()) {
    BeginStop(self, who + " " + how + (refused ? "" : " and its restart budget (coordinator.max_restarts = " +
                                                          std::to_string(st.cfg.coordinator().max_restarts()) +
                                                          ") is spent"), 1);
    return;
  }
  ++n;
  ++st.role_restarts;
  const double backoff = st.cfg.coordinator().restart_backoff_s() * std::pow(2.0, n - 1);
  std::fprintf(stderr, "stampede: restarting %s in %.1f s (restart %d of %d)\n", who.c_str(), backoff, n,
               st.cfg.coordinator().max_restarts());
  Event(st, "restart_scheduled", {{"process", who}, {"old_pid", pid}, {"how", how}, {"restart", n}, {"backoff_s", backoff}});
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(backoff)),
                     respawn_atom::value, int(c.role), c.index);
}

void OnRespawn(Supervisor* self, int role, int index) {
  auto& st = self->state;
  if (st.stopping) return;
  const int n = st.restarts[{role, index}];
  const pid_t fresh = Spawn(st, wire::Role(role), index, n);
  if (!st.opt.quiet) {
    std::printf("stampede: restarted %s %d as pid %d\n", wire::RoleName(wire::Role(role)), index, int(fresh));
    std::fflush(stdout);
  }
  Event(st, "restart", {{"process", std::string(wire::RoleName(wire::Role(role))) + " " + std::to_string(index)},
                        {"pid", fresh}, {"restart", n}});
}

// One progress line and one metrics.jsonl row, from the newest learner status.
void Progress(SupervisorState& st, Clock::time_point now) {
  const double dt = std::chrono::duration<double>(now - st.last_tick).count();
  const double elapsed = std::chrono::duration<double>(now - st.start).count();
  const auto& s = st.learner;
  const double fps = dt > 0 ? double(s.env_frames() - st.last_frames) / dt : 0;
  const double lag_mean = st.lag_mean_n ? st.lag_mean_acc / st.lag_mean_n : 0;
  int actors_alive = 0;
  for (auto& [pid, c] : st.children) actors_alive += c.role == wire::ROLE_ACTOR;
  for (auto& [key, r] : st.remote) actors_alive += r.role == wire::ROLE_ACTOR && !r.stopped;
  const auto [actor_frames, actor_wait] = ActorTotals(st);
  const bool suite = st.cfg.tasks_size() > 0;
  const auto [norm_mean, norm_median] = NormalisedAggregate(st);
  if (!st.opt.quiet) {
    // A suite's line shows the normalised mean (its returns have different scales).
    std::string score = suite ? (std::isnan(norm_mean) ? "" : "norm.score " + FormatTarget(std::round(norm_mean * 100) / 100) + " | ")
                              : "return(100) " + ReturnText(s.mean_return_100(), s.returns_counted()) + " | ";
    // The worst actor's lag: one frozen actor among many hides in the mean.
    std::string worst;
    if (st.actors.worst_actor() >= 0) {
      worst = " (worst actor " + std::to_string(st.actors.worst_actor()) + ": " + std::to_string(st.actors.worst_lag()) + ")";
    }
    std::printf("[%7.1fs] frames %s (%s/s) | episodes %lld | %ssteps %lld | "
                "lag %.1f/%lld%s | queue %d | dropped %lld | actors %d\n",
                elapsed, Human(double(s.env_frames())).c_str(), Human(fps).c_str(),
                (long long)s.episodes(), score.c_str(), (long long)s.learner_steps(),
                lag_mean, (long long)st.lag_max_acc, worst.c_str(), s.queue_depth(),
                (long long)s.dropped_trajectories(), actors_alive);
    const int every = st.cfg.suite().task_lines_every();
    if (suite && every > 0 && st.progress_rows % every == 0) {
      std::string line = "          tasks:";
      for (const auto& ts : s.tasks()) {
        if (ts.task() < 0 || ts.task() >= st.cfg.tasks_size()) continue;
        line += " " + st.cfg.tasks(ts.task()).name() + " " + ReturnText(ts.mean_return_100(), ts.returns_counted()) +
                " (" + std::to_string(ts.episodes()) + " ep) |";
      }
      line.resize(line.size() - 2);
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }
  ++st.progress_rows;
  nlohmann::json row = {{"wall_time", UnixTime()},
                        {"elapsed_s", elapsed},
                        {"env_frames", s.env_frames()},
                        {"frames_per_s", fps},
                        {"learner_step", s.learner_steps()},
                        {"episodes", s.episodes()},
                        {"mean_return_100", s.mean_return_100()},
                        {"mean_episode_length_100", s.mean_episode_length_100()},
                        {"returns_counted", s.returns_counted()},
                        {"policy_lag_mean", lag_mean},
                        {"policy_lag_max", st.lag_max_acc},
                        {"policy_version", s.policy_version()},
                        {"queue_depth", s.queue_depth()},
                        {"dropped_trajectories", s.dropped_trajectories()},
                        {"pg_loss", s.pg_loss()},
                        {"baseline_loss", s.baseline_loss()},
                        {"entropy", s.entropy()},
                        {"grad_norm", s.grad_norm()},
                        {"learning_rate", s.learning_rate()},
                        {"train_seconds", s.train_seconds()},
                        {"learner_receive_wait_s", s.receive_wait_s()},
                        {"learner_skipped_steps", s.skipped_steps()},
                        {"actors_alive", actors_alive},
                        {"actor_frames", actor_frames},
                        {"actor_send_wait_s", actor_wait},
                        {"actor_restarts", st.actor_restarts}};
  if (!st.refused.empty() || (st.zap && st.zap->rejected() > 0)) row["refused"] = RefusedJson(st);
  if (st.forged_statuses > 0) row["forged_statuses"] = st.forged_statuses;
  if (st.implausible_statuses > 0) row["implausible_statuses"] = st.implausible_statuses;
  if (!s.dropped_by_reason().empty()) {
    nlohmann::json by_reason = nlohmann::json::object();
    for (const auto& [reason, n] : s.dropped_by_reason()) by_reason[reason] = n;
    row["dropped_by_reason"] = by_reason;
  }
  row["tasks"] = TasksJson(st);
  row["actors"] = ActorsJson(st.actors, false);
  row["worst_actor_lag"] = st.actors.worst_lag();
  nlohmann::json replay_row;
  if (st.cfg.learner().replay().fraction() > 0) row["replay"] = replay_row = ReplayJson(st);
  if (st.cfg.learner().num_learners() > 1 || ShardsOwnOptimizer(st.cfg)) row["learners"] = LearnersJson(st);
  if (ShardsOwnOptimizer(st.cfg)) row["ps"] = PsJson(st);
  if (st.role_restarts > 0) row["restarts"] = st.role_restarts;
  if (suite && !std::isnan(norm_mean)) {
    row["mean_normalised_score"] = norm_mean;
    row["median_normalised_score"] = norm_median;
  }
  st.metrics << row.dump() << "\n";
  st.metrics.flush();
  if (st.tb.is_open()) {
    // TensorBoard: the same figures, with env frames as the step.
    std::vector<std::pair<std::string, double>> scalars = {
        {"frames_per_s", fps},
        {"learner/steps", double(s.learner_steps())},
        {"loss/pg", s.pg_loss()},
        {"loss/baseline", s.baseline_loss()},
        {"loss/entropy", s.entropy()},
        {"learner/grad_norm", s.grad_norm()},
        {"learner/learning_rate", s.learning_rate()},
        {"policy_lag/mean", lag_mean},
        {"policy_lag/max", double(st.lag_max_acc)},
        {"policy_lag/worst_actor", double(st.actors.worst_lag())},
        {"queue/depth", double(s.queue_depth())},
        {"queue/learner_receive_wait_s", s.receive_wait_s()},
        {"queue/actor_send_wait_s", actor_wait},
        {"dropped_trajectories", double(s.dropped_trajectories())}};
    if (!suite && s.returns_counted() > 0) scalars.push_back({"return_100", s.mean_return_100()});
    if (!replay_row.is_null()) {
      scalars.push_back({"replay/size", replay_row["size"].get<double>()});
      scalars.push_back({"replay/sampled_age_mean", replay_row["sampled_age_mean"].get<double>()});
      scalars.push_back({"replay/replayed_fraction", replay_row["replayed_fraction"].get<double>()});
    }
    for (const auto& ts : s.tasks()) {
      if (ts.task() < 0 || ts.task() >= wire::NumTasks(st.cfg) || ts.returns_counted() == 0) continue;
      const std::string name = wire::TaskName(st.cfg, ts.task());
      scalars.push_back({"return_100/" + name, ts.mean_return_100()});
      scalars.push_back({"policy_lag/" + name, ts.policy_lag_mean()});
      if (suite) {
        const double norm = wire::NormalisedScore(st.cfg.tasks(ts.task()), ts.mean_return_100());
        if (!std::isnan(norm)) scalars.push_back({"normalised_score/" + name, norm});
      }
    }
    if (suite && !std::isnan(norm_mean)) {
      scalars.push_back({"normalised_score/mean", norm_mean});
      scalars.push_back({"normalised_score/median", norm_median});
    }
    st.tb.WriteScalars(s.env_frames(), UnixTime(), scalars);
  }
  st.last_tick = now;
  st.last_frames = s.env_frames();
  st.lag_mean_acc = 0;
  st.lag_mean_n = 0;
  st.lag_max_acc = 0;
  st.actors.EndRow();
}

// The watchdog: true when the learner's step count has not moved for
// coordinator.stall_timeout_s while actors are alive.
bool Stalled(SupervisorState& st, Clock::time_point now) {
  const double limit = st.cfg.coordinator().stall_timeout_s();
  if (limit <= 0) return false;
  bool actors_alive = false;
  for (const auto& [pid, c] : st.children) actors_alive = actors_alive || c.role == wire::ROLE_ACTOR;
  for (const auto& [key, r] : st.remote) actors_alive = actors_alive || (r.role == wire::ROLE_ACTOR && !r.stopped);
  const int64_t steps = st.have_learner_status ? st.learner.learner_steps() : -1;
  if (steps != st.watched_steps || !actors_alive) {
    st.watched_steps = steps;
    st.steps_moved = now;
    return false;
  }
  return now - st.steps_moved > std::chrono::duration<double>(limit);
}

// What the counters say about a stalled run, one finding per line.
std::string Diagnose(const SupervisorState& st) {
  std::ostringstream os;
  const auto& s = st.learner;
  if (!st.have_learner_status) {
    os << "  the learner has sent no status (is it stuck before its first step?)\n";
  } else {
    const int cap = st.cfg.learner().queue_capacity();
    os << "  learner: step " << s.learner_steps() << ", policy version " << s.policy_version() << ", queue "
       << s.queue_depth() << "/" << cap
       << (s.queue_depth() == 0 ? " (empty: no usable trajectories arrive)"
                                : s.queue_depth() >= cap ? " (full: the trainer is not taking batches)" : "")
       << ", doing: ";
    for (const auto& [pid, c] : st.children) {
      if (c.role == wire::ROLE_LEARNER) os << c.activity;
    }
    os << "\n";
    os << "  dropped trajectories: " << s.dropped_trajectories();
    for (const auto& [reason, n] : s.dropped_by_reason()) os << ", " << reason << " " << n;
    os << (s.dropped_trajectories() > 0 ? " (the actors' trajectories are refused)" : "") << "\n";
    if (s.skipped_steps() > 0) os << "  skipped (non-finite) steps: " << s.skipped_steps() << "\n";
  }
  os << "  PS versions:";
  for (const auto& [shard, v] : st.ps_versions) os << " shard " << shard << " " << v;
  os << (st.ps_versions.empty() ? " none reported" : "") << "\n";
  const auto [frames, wait] = ActorTotals(st);
  os << "  actors: " << frames << " frames made, " << wait << " s waiting to send in all";
  std::map<std::string, int> doing;
  for (const auto& [pid, c] : st.children) {
    if (c.role == wire::ROLE_ACTOR) ++doing[c.activity];
  }
  for (const auto& [key, r] : st.remote) {
    if (r.role == wire::ROLE_ACTOR && !r.stopped) ++doing[r.activity];
  }
  for (const auto& [activity, n] : doing) os << "; " << n << " " << activity;
  os << "\n";
  for (const auto& [who, reasons] : st.refused) {
    os << "  " << who << " refused:";
    for (const auto& [reason, n] : reasons) os << " " << reason << " " << n;
    os << "\n";
  }
  return os.str();
}

void OnTick(Supervisor* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  if (st.stopping) {
    if (!st.killed && now > st.stop_deadline) {
      for (auto& [pid, c] : st.children) {
        std::fprintf(stderr, "stampede: %s %d did not exit within %.0f s of SIGTERM (last: %s); killing it\n",
                     wire::RoleName(c.role), c.index, st.cfg.coordinator().shutdown_grace_s(),
                     c.activity.c_str());
        ::kill(pid, SIGKILL);
      }
      for (auto& [key, r] : st.remote) {
        if (r.stopped) continue;
        std::fprintf(stderr, "stampede: %s %d (pid %d, started elsewhere) did not say it stopped within %.0f s "
                             "(last: %s); not waiting for it\n",
                     wire::RoleName(r.role), r.index, r.pid, st.cfg.coordinator().shutdown_grace_s(), r.activity.c_str());
        r.stopped = true;
      }
      st.killed = true;
    }
    // Processes started elsewhere that went quiet are gone; the stop moves on.
    for (auto& [key, r] : st.remote) {
      if (!r.stopped && now - r.last_heard > std::chrono::seconds(3)) r.stopped = true;
    }
    StopNextStage(st);
    if (AllGone(st)) {
      Finish(self);
      return;
    }
    self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
    return;
  }
  for (auto& [key, r] : st.remote) {
    if (r.stopped || now - r.last_heard < std::chrono::duration<double>(st.cfg.coordinator().heartbeat_timeout_s())) continue;
    std::fprintf(stderr, "stampede: %s %d (pid %d, started elsewhere) silent for %.0f s; last doing: %s\n",
                 wire::RoleName(r.role), r.index, r.pid, st.cfg.coordinator().heartbeat_timeout_s(), r.activity.c_str());
    Event(st, "silent", {{"process", std::string(wire::RoleName(r.role)) + " " + std::to_string(r.index)},
                         {"last_activity", r.activity}});
    r.stopped = true;  // reported once; it counts again when it reports
  }
  // Heartbeats: a silent process is reported with what it was last doing.
  const auto timeout = std::chrono::duration<double>(st.cfg.coordinator().heartbeat_timeout_s());
  for (auto& [pid, c] : st.children) {
    if (now - c.last_heard < timeout) continue;
    std::fprintf(stderr, "stampede: %s %d (pid %d) silent for %.0f s; last doing: %s\n",
                 wire::RoleName(c.role), c.index, int(pid), timeout.count(), c.activity.c_str());
    Event(st, "silent", {{"process", std::string(wire::RoleName(c.role)) + " " + std::to_string(c.index)},
                         {"last_activity", c.activity}});
    ::kill(pid, SIGKILL);  // restarted (within its budget) when its exit is seen
    c.last_heard = now;
  }
  if (now - st.last_tick >= std::chrono::duration<double>(st.cfg.coordinator().progress_interval_s())) {
    Progress(st, now);
  }
  for (const ActorFinding& f : st.actors.Check(now)) {
    std::fprintf(stderr, "stampede: WARNING: %s\n", f.message.c_str());
    Event(st, f.event, {{"actor", f.actor}, {"policy_version", f.version}, {"lag", f.lag},
                        {"unchanged_s", f.unchanged_s}, {"message", f.message}});
  }
  CheckPendingLearnerStatus(self);
  if (Stalled(st, now)) {
    const std::string diagnosis = Diagnose(st);
    std::fprintf(stderr, "stampede: no learner step for %.0f s (coordinator.stall_timeout_s); diagnosis:\n%s",
                 st.cfg.coordinator().stall_timeout_s(), diagnosis.c_str());
    Event(st, "stall", {{"diagnosis", diagnosis}});
    BeginStop(self, "stalled: no learner step for " + std::to_string(int(st.cfg.coordinator().stall_timeout_s())) +
                        " s\n" + diagnosis, 1);
  }
  self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
}

caf::behavior SupervisorBehavior(Supervisor* self) {
  auto& st = self->state;
  st.start = Clock::now();
  st.last_tick = st.start;
  st.steps_moved = st.start;
  st.prev_actor_time = st.start;
  if (!st.opt.standalone) {
    for (int s = 0; s < st.cfg.ps().num_shards(); ++s) Spawn(st, wire::ROLE_PS, s);
    for (int l = 0; l < st.cfg.learner().num_learners(); ++l) Spawn(st, wire::ROLE_LEARNER, l);
    for (int a = 0; a < st.cfg.actors().num_actors(); ++a) Spawn(st, wire::ROLE_ACTOR, a);
  } else if (!st.opt.quiet) {
    std::printf("stampede: coordinator for a run whose processes are started elsewhere: status on %s, control on %s; "
                "start each with `stampede ROLE --config %s --task-index I`\n",
                st.cfg.cluster().coordinator().c_str(), st.cfg.cluster().control().c_str(), st.config_path.c_str());
    std::fflush(stdout);
  }
  Event(st, "start", {{"config", st.config_path}});
  if (!st.resumed_from.empty()) Event(st, "resume", {{"checkpoint", st.resumed_from}});
  self->send(self, tick_atom::value);
  return {
      [=](status_atom, const std::string& bytes, const std::string& peer) { OnStatus(self, bytes, peer); },
      [=](exited_atom, int pid, int wstatus) { OnExit(self, pid, wstatus); },
      [=](tick_atom) { OnTick(self); },
      [=](stop_atom, const std::string& reason, int code) { BeginStop(self, reason, code); },
      [=](respawn_atom, int role, int index) { OnRespawn(self, role, index); },
  };
}

// One thread of its own: owns the coordinator's PULL socket, reaps exited children
// and turns Ctrl-C into a stop request.
// `ctx` (and its ZAP handler, with CURVE) outlive this thread.
void Watcher(caf::blocking_actor* self, caf::actor supervisor, zmq::context_t* ctx, const wire::Curve* curve,
             std::string endpoint, std::string control_endpoint, std::shared_ptr<ControlBoard> board,
             int64_t max_bytes, std::shared_ptr<std::atomic<bool>> done, std::shared_ptr<std::atomic<int>> bound) {
  zmq::socket_t control(*ctx, zmq::socket_type::pub);
  wire::ConfigureSender(control, 1000, 0);
  if (curve != nullptr) curve->MakeServer(control, wire::kDomainControl);
  try {
    control.bind(control_endpoint);
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "stampede: cannot bind the coordinator's control socket %s (cluster.control): %s\n",
                 control_endpoint.c_str(), e.what());
    bound->store(-1);
    return;
  }
  zmq::socket_t pull(*ctx, zmq::socket_type::pull);
  // Statuses are small: a bounded size and queue keep a flood from growing memory.
  wire::ConfigureReceiver(pull, max_bytes);
  pull.set(zmq::sockopt::rcvhwm, 256);
  if (curve != nullptr) curve->MakeServer(pull, wire::kDomainStatus);
  try {
    pull.bind(endpoint);
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "stampede: cannot bind the coordinator's status socket %s (cluster.coordinator): %s\n",
                 endpoint.c_str(), e.what());
    bound->store(-1);
    return;
  }
  bound->store(1);
  bool signalled = false;
  auto last_beat = Clock::now() - std::chrono::seconds(1);
  zmq::pollitem_t items[] = {{pull.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::message_t msg;
  while (!done->load()) {
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
      // EINTR from Ctrl-C
    }
    // At most a bounded batch per turn, so the supervisor's mailbox stays small.
    for (int n = 0; n < 256 && pull.recv(msg, zmq::recv_flags::dontwait); ++n) {
      if (msg.more()) {  // statuses are one part; drain and ignore anything else
        while (msg.more() && pull.recv(msg, zmq::recv_flags::dontwait)) {}
        continue;
      }
      self->send(supervisor, status_atom::value, msg.to_string(), wire::PeerIdentity(msg));
    }
    int wstatus = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wstatus, WNOHANG)) > 0) {
      self->send(supervisor, exited_atom::value, int(pid), wstatus);
    }
    if (Clock::now() - last_beat > std::chrono::milliseconds(500)) {
      // The heartbeat, and the current stop stage's messages, to every process.
      last_beat = Clock::now();
      wire::Control beat;
      *beat.mutable_sender() = wire::MakeSender(wire::ROLE_COORDINATOR, 0, 0);
      std::vector<wire::Control> out = {beat};
      {
        std::lock_guard lock(board->mu);
        out.insert(out.end(), board->stops.begin(), board->stops.end());
      }
      for (const auto& c : out) (void)wire::SendMessage(control, c);
    }
    if (!signalled && StopFlag().load()) {
      signalled = true;
      self->send(supervisor, stop_atom::value, std::string("interrupted (signal ") +
                                                   std::to_string(StopSignal()) + ")",
                 130);
    }
  }
}

std::string SelfExe() { return SelfExePath(); }

}  // namespace

std::string SelfExePath() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("stampede") : p.string();
}

void ResolveRunConfig(config::Config* cfg, const RunOptions& opt) {
  auto* cl = cfg->mutable_cluster();
  if (cl->coordinator().empty()) cl->set_coordinator(Loopback());
  if (cl->control().empty()) cl->set_control(Loopback());
  if (cl->learner().empty()) cl->set_learner(cl->learners_size() > 0 ? cl->learners(0) : Loopback());
  if (cfg->learner().num_learners() > 1 && cl->learners_size() == 0) {
    cl->add_learners(cl->learner());
    for (int l = 1; l < cfg->learner().num_learners(); ++l) cl->add_learners(Loopback());
  }
  if (cl->ps_size() == 0) {
    for (int s = 0; s < cfg->ps().num_shards(); ++s) cl->add_ps(Loopback());
  }
  if (cfg->run_dir().empty()) {
    char stamp[32];
    std::time_t t = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
    cfg->set_run_dir("runs/" + opt.config_name + "-" + stamp + "-" + std::to_string(::getpid()));
  }
}

namespace {
// `--resume`: the run's newest complete checkpoint, fresh loopback endpoints (the old
// ports may be taken), and a warning when the budget is already spent.
bool PrepareResume(config::Config* cfg, std::string* from) {
  const std::string dir = cfg->run_dir();
  int64_t frames = 0, version = 0;
  if (ShardsOwnOptimizer(*cfg)) {
    ps::FoundCheckpoint found;
    std::vector<std::string> warnings;
    const bool have = ps::FindNewestCheckpoint(dir + "/checkpoints", &found, &warnings);
    for (const auto& w : warnings) std::fprintf(stderr, "stampede: WARNING: %s\n", w.c_str());
    if (!have) {
      std::fprintf(stderr, "stampede: --resume %s: no complete checkpoint in %s/checkpoints to resume from\n",
                   dir.c_str(), dir.c_str());
      return false;
    }
    *from = found.dir;
    version = found.manifest.version;
    std::string bytes, error;
    for (const auto& p : found.manifest.parts) {
      ps::ShardPart part;
      if (p.file == ps::ShardPartName(0) && ps::ReadPart(found.dir, p, &bytes, &error) &&
          ps::ParseShardPart(bytes, found.dir + "/" + p.file, &part, &error)) {
        for (int64_t f : part.learner_frames) frames += f;
      }
    }
  } else {
    const std::string path = cfg->learner().restore_from().empty() ? dir + "/checkpoint.bin" : cfg->learner().restore_from();
    learner::CheckpointData d;
    std::string error;
    if (!learner::LoadCheckpoint(path, &d, &error)) {
      std::fprintf(stderr, "stampede: --resume %s: %s\n", dir.c_str(), error.c_str());
      return false;
    }
    cfg->mutable_learner()->set_restore_from(path);
    *from = path;
    frames = d.env_frames;
    version = d.version;
  }
  auto* cl = cfg->mutable_cluster();
  cl->clear_coordinator();
  cl->clear_learner();
  cl->clear_learners();
  cl->clear_ps();
  cl->clear_control();
  std::printf("stampede: resuming %s from %s: version %lld, %lld env frames\n", dir.c_str(), from->c_str(),
              (long long)version, (long long)frames);
  if (frames >= cfg->stop().total_env_frames()) {
    std::fprintf(stderr, "stampede: WARNING: the checkpoint's %lld frames already spend stop.total_env_frames (%lld): "
                         "the run stops at once (raise it with --set stop.total_env_frames=N)\n",
                 (long long)frames, (long long)cfg->stop().total_env_frames());
  }
  std::fflush(stdout);
  return true;
}
}  // namespace

RunResult RunCoordinator(config::Config cfg, const RunOptions& opt) {
  RunResult result;
  std::string resumed_from;
  if (opt.resume && !PrepareResume(&cfg, &resumed_from)) {
    result.exit_code = 2;
    return result;
  }
  ResolveRunConfig(&cfg, opt);
  {
    // Before any process or socket starts: a missing plug-in, a bad kwarg or an
    // unsupported space stops the run here.
    std::string error;
    if (!ResolveEnvSpec(SelfExe(), &cfg, &error) || !CheckNetworkAndDevice(cfg, &error)) {
      std::fprintf(stderr, "stampede: %s\n", error.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  if (cfg.tasks_size() > 0 && !opt.quiet) {
    // The suite as it will run: who runs which task, and the one network's shapes.
    const auto assigned = wire::AssignActors(cfg);
    const auto limits = wire::TaskActionLimits(cfg);
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
    std::fprintf(stderr,
                 "stampede: %s already holds a run (metrics.jsonl); choose another --run-dir or "
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
      std::string error;
      if (!wire::WriteFileAtomically(probe, std::string(4096, 'x'), &error)) why = error;
      std::error_code removed;
      fs::remove(probe, removed);
    }
    if (!why.empty()) {
      std::fprintf(stderr, "stampede: run directory %s cannot be created or written: %s\n", cfg.run_dir().c_str(),
                   why.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  result.run_dir = cfg.run_dir();
  std::shared_ptr<const wire::Curve> curve;
  {
    // CURVE keys: made here for this run (RUN_DIR/keys), or taken from cluster.keys_dir
    // (made by `stampede keys`), where every process reads them.
    std::string error;
    if (!cfg.cluster().curve()) {
      std::fprintf(stderr, "stampede: WARNING: cluster.curve is false: the run's sockets accept anyone who can "
                           "reach them (forged trajectories, parameters and statuses)\n");
    } else if (cfg.cluster().keys_dir().empty() &&
               !wire::GenerateKeys(wire::KeysDir(cfg), wire::RunIdentities(cfg), &error)) {
      std::fprintf(stderr, "stampede: %s\n", error.c_str());
      result.exit_code = 2;
      return result;
    }
    if (cfg.cluster().curve() && !(curve = wire::RunCurve(cfg, "coordinator", &error))) {
      std::fprintf(stderr, "stampede: %s\n", error.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  const std::string config_path = cfg.run_dir() + "/config.textproto";
  {
    // Every process reads this file: without it nothing may start.
    std::string error;
    if (!wire::WriteFileAtomically(config_path, ConfigToText(cfg), &error)) {
      std::fprintf(stderr, "stampede: cannot write the run's config: %s\n", error.c_str());
      result.exit_code = 2;
      return result;
    }
  }
  {
    zmq::context_t ctx(1);
    std::unique_ptr<wire::ZapHandler> zap;
    if (curve) zap = std::make_unique<wire::ZapHandler>(ctx, *curve, wire::RunAllowList(), "stampede");
    caf::actor_system_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto bound = std::make_shared<std::atomic<int>>(0);  // 1 bound, -1 failed
    auto board = std::make_shared<ControlBoard>();
    auto sup = sys.spawn([&](Supervisor* self) {
      auto& st = self->state;
      st.cfg = cfg;
      st.actors = ActorWatch(cfg.actors().max_params_age_s());
      st.opt = opt;
      st.self_exe = SelfExe();
      st.config_path = config_path;
      st.resumed_from = resumed_from;
      st.control = board;
      st.metrics.open(cfg.run_dir() + "/metrics.jsonl", std::ios::app);
      st.task_reached.assign(size_t(wire::NumTasks(cfg)), -1);
      {
        std::string tb_error;
        if (!st.tb.Open(cfg.run_dir() + "/tb", &tb_error)) {
          std::fprintf(stderr, "stampede: WARNING: no TensorBoard events: %s\n", tb_error.c_str());
        }
      }
      st.result = &result;
      st.done = done;
      st.curve = curve != nullptr;
      st.zap = zap.get();
      while (bound->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (bound->load() < 0) {
        result.exit_code = 2;
        done->store(true);
        self->quit();
        return caf::behavior{};
      }
      return SupervisorBehavior(self);
    });
    sys.spawn<caf::detached>(Watcher, sup, &ctx, curve.get(), cfg.cluster().coordinator(), cfg.cluster().control(),
                             board, std::min(cfg.cluster().max_message_bytes(), cfg.coordinator().max_status_bytes()),
                             done, bound);
    sys.await_all_actors_done();
  }
  if (cfg.trace()) {
    // Every process has exited (and written its trace): one timeline for Perfetto.
    std::string error;
    if (wire::MergeTraces(cfg.run_dir() + "/trace", cfg.run_dir() + "/trace.json", &error)) {
      if (!opt.quiet) std::printf("stampede: timeline of every process in %s/trace.json (ui.perfetto.dev)\n", cfg.run_dir().c_str());
    } else {
      std::fprintf(stderr, "stampede: cannot merge the traces: %s\n", error.c_str());
    }
  }
  return result;
}

}  // namespace stampede::tools
