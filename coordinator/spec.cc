#include "coordinator/spec.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <google/protobuf/text_format.h>

#include "actors/env_source.h"
#include "base/log.h"
#include "envs/vector_env.h"
#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "config/config.h"
#include "config/tasks.h"
#include "ps/checkpoints.h"
#include "ps/placement.h"
#include "coordinator/run.h"
#include "wire/trajectory.h"

namespace stampede::coordinator {

int RunSpecCommand(const config::Config& cfg) {
  int code = 0;
  if (cfg.tasks_size() == 0) {
    const base::StatusOr<envs::EnvSpec> spec = envs::ResolveSpec(actors::EnvSourceFromConfig(cfg));
    if (!spec.ok()) {
      base::LogError("%s\n", spec.status().message().c_str());
      code = 2;
    } else {
      std::string text;
      google::protobuf::TextFormat::PrintToString(actors::SpecToProto(*spec), &text);
      std::fputs(text.c_str(), stdout);
    }
  } else {
    // A suite: each task's spec, then the joint one the network is built for.
    config::Config resolved = cfg;
    for (int t = 0; t < cfg.tasks_size() && code == 0; ++t) {
      const base::StatusOr<envs::EnvSpec> spec = envs::ResolveSpec(actors::EnvSourceFromConfig(config::TaskEnvConfig(cfg, t)));
      if (!spec.ok()) {
        base::LogError("task \"%s\": %s\n", cfg.tasks(t).name().c_str(), spec.status().message().c_str());
        code = 2;
        break;
      }
      *resolved.mutable_tasks(t)->mutable_env()->mutable_resolved_spec() = actors::SpecToProto(*spec);
      std::string text;
      google::protobuf::TextFormat::PrintToString(actors::SpecToProto(*spec), &text);
      std::printf("# task %s\n%s", cfg.tasks(t).name().c_str(), text.c_str());
    }
    config::EnvSpec joint;
    const base::Status joined = code == 0 ? config::JoinTaskSpecs(resolved, &joint) : base::OkStatus();
    if (!joined.ok()) {
      base::LogError("%s\n", joined.message().c_str());
      code = 2;
    } else if (code == 0) {
      std::string text;
      google::protobuf::TextFormat::PrintToString(joint, &text);
      std::printf("# joint (suite.obs_rule \"%s\"; actions masked per task)\n%s", cfg.suite().obs_rule().c_str(),
                  text.c_str());
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // A Python env may have started threads of its own: leave without running exit-time
  // destructors (the interpreter is never finalised).
  ::_exit(code);
}

namespace {
std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

namespace {
// Resolves the one env of `one` (a config without tasks) in a child process.
base::Status ResolveOne(const std::string& self_exe, config::Config one, config::EnvSpec* out) {
  one.mutable_env()->clear_resolved_spec();
  char dir_template[] = "/tmp/stampede-spec-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    return base::InvalidArgument("cannot make a temporary directory to resolve the env spec");
  }
  const std::string dir = dir_template;
  const std::string config_path = dir + "/config.textproto", out_path = dir + "/spec.textproto",
                    err_path = dir + "/stderr.txt";
  std::ofstream(config_path) << ConfigToText(one);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0) ::_exit(126);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execl(self_exe.c_str(), self_exe.c_str(), "spec", config_path.c_str(), (char*)nullptr);
    ::_exit(127);
  }
  int status = 0;
  while (pid > 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string text = ReadAll(out_path), err = ReadAll(err_path);
  std::filesystem::remove_all(dir);
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = err;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    if (why.empty()) {
      why = WIFSIGNALED(status) ? "the env crashed (signal " + std::to_string(WTERMSIG(status)) + ")"
                                : "`stampede spec` failed with exit code " + std::to_string(WEXITSTATUS(status));
    }
    return base::InvalidArgument("cannot resolve the env's spec: " + why);
  }
  if (!google::protobuf::TextFormat::ParseFromString(text, out)) {
    return base::InvalidArgument("`stampede spec` printed an unreadable spec:\n" + text);
  }
  config::Config with = one;
  *with.mutable_env()->mutable_resolved_spec() = *out;
  wire::StepShape shape;
  return ResolvedStepShape(with, &shape);
}

void AbsolutePlugin(config::EnvConfig* env) {
  if (!env->plugin().empty()) env->set_plugin(std::filesystem::absolute(env->plugin()).string());
}
}  // namespace

base::Status ResolveEnvSpec(const std::string& self_exe, config::Config* cfg) {
  if (cfg->tasks_size() == 0) {
    AbsolutePlugin(cfg->mutable_env());
    config::EnvSpec spec;
    if (const base::Status one = ResolveOne(self_exe, *cfg, &spec); !one.ok()) return one.Within("env");
    *cfg->mutable_env()->mutable_resolved_spec() = spec;
    return base::OkStatus();
  }
  // A suite: every task's env on its own, then the joint spec the network is built for.
  for (int t = 0; t < cfg->tasks_size(); ++t) {
    config::EnvConfig* env = cfg->mutable_tasks(t)->mutable_env();
    AbsolutePlugin(env);
    config::Config one = config::TaskEnvConfig(*cfg, t);
    one.clear_tasks();
    config::EnvSpec spec;
    if (const base::Status resolved = ResolveOne(self_exe, one, &spec); !resolved.ok()) {
      return resolved.Within("task \"" + cfg->tasks(t).name() + "\"");
    }
    *env->mutable_resolved_spec() = spec;
  }
  config::EnvSpec joint;
  RETURN_IF_ERROR(config::JoinTaskSpecs(*cfg, &joint));
  *cfg->mutable_env()->mutable_resolved_spec() = joint;
  wire::StepShape shape;
  if (const base::Status st = ResolvedStepShape(*cfg, &shape); !st.ok()) {
    return base::InvalidArgument("the suite's joint spec: " + st.message());
  }
  return base::OkStatus();
}

int RunPsPlanCommand(config::Config cfg) {
  auto model = [&]() -> base::StatusOr<std::unique_ptr<net::Model<float>>> {
    RETURN_IF_ERROR(ResolveEnvSpec(SelfExePath(), &cfg));
    wire::StepShape shape;
    RETURN_IF_ERROR(ResolvedStepShape(cfg, &shape));
    return net::MakeModelFromConfig(cfg, shape);
  }();
  if (!model.ok()) {
    base::LogError("stampede ps-plan: %s\n", model.status().message().c_str());
    return 2;
  }
  std::fputs(ps::PlacementText(ps::PlacementFromConfig(cfg, (*model)->layout())).c_str(), stdout);
  return 0;
}

base::Status CheckNetworkAndDevice(const config::Config& cfg) {
  wire::StepShape shape;
  RETURN_IF_ERROR(ResolvedStepShape(cfg, &shape));
  auto made = net::MakeModelFromConfig(cfg, shape);
  if (!made.ok()) return base::InvalidArgument("net: " + made.status().message());
  const std::unique_ptr<net::Model<float>> model = std::move(made).value();
  // Every message the run implies must fit what its receivers accept.
  const int64_t params = model->layout().total_size();
  constexpr int64_t kMaxParams = int64_t(1) << 29;  // 2 GiB of float32
  if (params > kMaxParams) {
    return base::InvalidArgument("net: " + std::to_string(params) + " parameters, more than the " +
             std::to_string(kMaxParams) + " a run accepts");
  }
  const int64_t max_bytes = cfg.cluster().max_message_bytes();
  const int64_t trajectory = wire::TrajectoryBytes(cfg.actors().unroll_length(), cfg.actors().envs_per_actor(), shape) +
                             64 * 1024;  // the header: episodes, array descriptions
  if (trajectory > max_bytes) {
    return base::InvalidArgument("cluster.max_message_bytes: " + std::to_string(max_bytes) + " cannot carry one trajectory (" +
             std::to_string(trajectory) + " bytes for actors.unroll_length " +
             std::to_string(cfg.actors().unroll_length()) + " x actors.envs_per_actor " +
             std::to_string(cfg.actors().envs_per_actor()) + ")");
  }
  const int64_t slice = (params + cfg.ps().num_shards() - 1) / cfg.ps().num_shards() * 4 + 4096;
  if (slice > max_bytes) {
    return base::InvalidArgument("cluster.max_message_bytes: " + std::to_string(max_bytes) + " cannot carry one parameter slice (" +
             std::to_string(slice) + " bytes: " + std::to_string(params) + " parameters over " +
             std::to_string(cfg.ps().num_shards()) + " shards)");
  }
  // A lower bound of what the fleet holds on this machine (`stampede run` starts every
  // process here): the learner's parameters, gradient and optimizer state, its queue of
  // trajectories and its batch; every PS version kept; each actor's parameters and the
  // trajectory it fills and sends. Activations and libraries come on top.
  {
    const double param_bytes = double(params) * 4;
    const double T = cfg.actors().unroll_length(), B = cfg.learner().batch_size();
    // The queue holds unrolls; each trajectory brings actors.envs_per_actor of them.
    const double queued = std::ceil(double(cfg.learner().queue_capacity()) / cfg.actors().envs_per_actor()) + 1;
    // Replay: the table keeps the received trajectories its unrolls came in. Oldest-first
    // removal lets a trajectory's unrolls go together; with max_times_sampled one
    // surviving unroll can hold its whole trajectory (the worst case is counted).
    const auto& rc = cfg.learner().replay();
    double table = 0;
    if (rc.fraction() > 0) {
      double unrolls = double(rc.capacity());
      const double unroll_bytes = double(wire::TrajectoryBytes(int(T), 1, shape));
      if (rc.max_bytes() > 0) unrolls = std::min(unrolls, std::ceil(double(rc.max_bytes()) / unroll_bytes));
      const double held = rc.max_times_sampled() > 0 ? unrolls : std::ceil(unrolls / cfg.actors().envs_per_actor()) + 1;
      table = held * double(trajectory);
    }
    const double learner = 4 * param_bytes + queued * double(trajectory) + table +
                           2 * double(wire::TrajectoryBytes(int(T), int(B), shape));
    const double ps = param_bytes * cfg.ps().versions_kept();
    const double actors = cfg.actors().num_actors() * (2 * param_bytes + 2 * double(trajectory));
    const double need = learner + ps + actors;
    const double machine = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
    if (machine > 0 && need > 0.9 * machine) {
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "the fleet needs at least %.1f GiB of memory (learner %.1f: parameters, optimizer state, "
                    "learner.queue_capacity %d unrolls in %.0f trajectories of %.2f MiB, learner.replay table %.1f; "
                    "PS %.1f: ps.versions_kept %d versions; actors %.1f) but this machine has %.1f GiB",
                    need / (1 << 30), learner / (1 << 30), cfg.learner().queue_capacity(), queued,
                    double(trajectory) / (1 << 20), table / (1 << 30), ps / (1 << 30), cfg.ps().versions_kept(),
                    actors / (1 << 30), machine / (1 << 30));
      return base::InvalidArgument(buf);
    }
  }
  const std::string device = cfg.learner().device();
  if (device == "cpu") return base::OkStatus();
  // Ask in a child, so this process (which starts the fleet) never initialises CUDA.
  int fds[2];
  if (::pipe(fds) != 0) {
    return base::InvalidArgument("learner.device: cannot make a pipe to query CUDA");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const base::StatusOr<int> count = net::cuda::DeviceCount();
    const std::string msg = std::to_string(count.ok() ? *count : 0) + "\n" + count.status().message();
    [[maybe_unused]] ssize_t w = ::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string reply;
  char buf[512];
  ssize_t got;
  while ((got = ::read(fds[0], buf, sizeof buf)) > 0) reply.append(buf, size_t(got));
  ::close(fds[0]);
  int status = 0;
  while (pid > 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int index = device == "cuda" ? 0 : std::atoi(device.c_str() + 5);  // "cuda": any GPU will do
  const size_t nl = reply.find('\n');
  const int count = nl == std::string::npos ? 0 : std::atoi(reply.substr(0, nl).c_str());
  const std::string why = nl == std::string::npos ? "the CUDA query failed" : reply.substr(nl + 1);
  if (index >= count) {
    return base::InvalidArgument("learner.device: \"" + device + "\" asks for a GPU, but " +
             (count == 0 ? why : "this machine has " + std::to_string(count) + " CUDA devices") +
             "; use learner.device: \"cpu\"");
  }
  return base::OkStatus();
}

base::Status ReshardForResume(const config::Config& cfg, std::string* said) {
  said->clear();
  const std::string root = cfg.run_dir() + "/checkpoints";
  ps::FoundCheckpoint found;
  std::vector<std::string> warnings;  // PrepareResume said them
  if (!ps::FindNewestCheckpoint(root, &found, &warnings)) return base::OkStatus();
  // The old layout of the shards: the checkpoint's own config (the chief's part).
  const ps::ManifestPart* listed = nullptr;
  for (const auto& p : found.manifest.parts) {
    if (p.file == "config.textproto") listed = &p;
  }
  if (listed == nullptr) return base::InvalidArgument(found.dir + ": its MANIFEST lists no config.textproto");
  std::string text;
  if (base::Status st = ps::ReadPart(found.dir, *listed, &text); !st.ok()) return st;
  config::Config old;
  RETURN_IF_ERROR(ParseConfigText(text, found.dir + "/config.textproto", &old));
  const auto& o = old.ps();
  const auto& n = cfg.ps();
  if (o.num_shards() == n.num_shards() && o.placement() == n.placement() && o.partition_bytes() == n.partition_bytes()) {
    return base::OkStatus();
  }
  wire::StepShape shape;
  RETURN_IF_ERROR(ResolvedStepShape(cfg, &shape));
  auto made = net::MakeModelFromConfig(cfg, shape);
  if (!made.ok()) return base::InvalidArgument("net: " + made.status().message());
  const std::unique_ptr<net::Model<float>> model = std::move(made).value();
  const ps::Placement from = ps::PlaceTensors(model->layout(), o.num_shards(), o.placement(), o.partition_bytes() / 4);
  const ps::Placement to = ps::PlacementFromConfig(cfg, model->layout());
  std::string written;
  if (base::Status st = ps::ReshardCheckpoint(found, from, to, root, ConfigToText(cfg), &written); !st.ok()) return st;
  // Every new shard numbers on from the highest version any shard served or holds.
  int64_t mark = found.manifest.version;
  for (int s = 0; s < std::max(o.num_shards(), n.num_shards()); ++s) {
    mark = std::max(mark, ps::ReadVersionMark(cfg.run_dir() + "/ps-" + std::to_string(s) + ".version"));
  }
  for (int s = 0; s < n.num_shards(); ++s) {
    if (base::Status st = ps::WriteVersionMark(cfg.run_dir() + "/ps-" + std::to_string(s) + ".version", mark); !st.ok()) {
      return st;
    }
  }
  *said = "resharded " + found.dir + " (" + std::to_string(o.num_shards()) + " shards, placement \"" + o.placement() +
          "\") into " + written + " (" + std::to_string(n.num_shards()) + " shards, placement \"" + n.placement() +
          "\"): the same parameters and optimizer state, version " + std::to_string(found.manifest.version);
  return base::OkStatus();
}

}  // namespace stampede::coordinator
