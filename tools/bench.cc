#include "tools/bench.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <new>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include <unsupported/Eigen/CXX11/Tensor>

#include "actors/actor.h"
#include "base/cpu.h"
#include "base/huge_pages.h"
#include "actors/env_source.h"
#include "base/log.h"
#include "envs/minatar.h"
#include "envs/python_env.h"
#include "envs/vector_env.h"
#include "envs/rng.h"
#include "learner/backend.h"
#include "learner/batch.h"
#include "learner/loss.h"
#include "learner/optimizer.h"
#include "learner/trainer.h"
#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "net/layers.h"
#include "net/onednn_conv.h"
#include "coordinator/run.h"
#include "config/config.h"
#include "wire/trajectory.h"
#include "wire/zmq_util.h"

namespace stampede::tools {

using Clock = std::chrono::steady_clock;

namespace {
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// CPU seconds every thread of this process has run.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace

int RunMinAtarBench(const BenchOptions& opt) {
  const std::string why = envs::PythonUnavailableReason(envs::PythonVenvPath(""));
  std::printf("stampede bench --minatar: steps/s on one core, random actions (all six), sticky 0.1\n");
  if (!why.empty()) std::printf("  (no package column: %s)\n", why.c_str());
  std::printf("  %-16s %14s %14s %8s\n", "game", "C++", "package", "ratio");
  for (const std::string& game : envs::MinAtarGames()) {
    auto g = envs::MakeMinAtarGame(game, true);
    envs::SplitMixDraws draws;
    draws.Seed(1);
    envs::SplitMix64 actions(2);
    std::vector<uint8_t> obs(size_t(g->channels()) * 100);
    g->Reset(draws);
    int64_t steps = 0;
    int last = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    while ((elapsed = Since(start)) < opt.seconds) {
      for (int i = 0; i < 4096; ++i) {
        int a = int(actions() % 6);
        if (draws.Rand() < 0.1) a = last;  // the package's sticky actions
        last = a;
        if (g->Act(a, draws).second) g->Reset(draws);
        g->State(obs.data(), 255);
      }
      steps += 4096;
    }
    const double ours = double(steps) / elapsed;
    double theirs = 0;
    if (why.empty()) {
      const std::string cmd = envs::PythonVenvPath("") + "/bin/python " STAMPEDE_SOURCE_DIR
                              "/tools/minatar_trace.py speed " + game + " " +
                              std::to_string(std::max(2000, int(opt.seconds * 20000)));
      if (FILE* p = popen(cmd.c_str(), "r")) {
        if (std::fscanf(p, "%lf", &theirs) != 1) theirs = 0;
        pclose(p);
      }
    }
    if (theirs > 0) {
      std::printf("  %-16s %14.0f %14.0f %7.0fx\n", game.c_str(), ours, theirs, ours / theirs);
    } else {
      std::printf("  %-16s %14.0f %14s %8s\n", game.c_str(), ours, "-", "-");
    }
  }
  return 0;
}

namespace {
// numpy's single-thread float32 512^3 matrix product in the project's venv
// (tools/numpy_gemm.py), GFLOP/s; 0 where the venv or numpy is missing.
double NumpyGemmGflops(double seconds) {
  const std::string python = envs::PythonVenvPath("") + "/bin/python";
  if (::access(python.c_str(), X_OK) != 0) return 0;
  char args[64];
  std::snprintf(args, sizeof args, " %.2f 5 2>/dev/null", seconds);
  const std::string cmd = python + " " STAMPEDE_SOURCE_DIR "/tools/numpy_gemm.py" + args;
  double gflops = 0;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    if (std::fscanf(p, "%lf", &gflops) != 1) gflops = 0;
    pclose(p);
  }
  return gflops;
}

// `--copies N`: the bench's processes start each timed part together and average its
// figure. The state lives in a shared anonymous mapping made before the fork; a process
// that does not arrive within a minute (it failed before the part) ends the wait with an
// error instead of a hang.
class Copies {
 public:
  static constexpr int kMax = 256;
  explicit Copies(int n) : n_(n) {
    if (n_ <= 1) return;
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      base::LogError("bench: --copies: cannot map shared memory: %s\n", std::strerror(errno));
      n_ = 1;
      return;
    }
    shared_ = new (mem) Shared();
    std::fflush(nullptr);
    for (int i = 1; i < n_; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        index_ = i;
        // Only the first process prints; the others measure.
        if (!std::freopen("/dev/null", "w", stdout)) std::perror("bench: --copies");
        children_.clear();
        return;
      }
      if (pid < 0) {
        base::LogError("bench: --copies: fork failed: %s; measuring with %d processes\n", std::strerror(errno), i);
        n_ = i;  // the meetings wait for the processes that exist
        break;
      }
      children_.push_back(pid);
    }
  }
  ~Copies() {
    if (n_ <= 1) return;
    if (index_ > 0) {
      std::fflush(nullptr);
      _exit(0);  // a copy ends here, before anything the first process alone does
    }
    for (const pid_t pid : children_) waitpid(pid, nullptr, 0);
    munmap(shared_, sizeof(Shared));
  }
  int n() const { return n_; }
  bool first() const { return index_ == 0; }
  // Waits until every process reached the same point (the start or end of a timed part).
  bool Meet() {
    if (n_ <= 1) return true;
    const int target = n_ * ++meetings_;
    shared_->arrived.fetch_add(1);
    for (int waited_ms = 0; shared_->arrived.load() < target; ++waited_ms) {
      if (waited_ms > 60000) {
        base::LogError("bench: --copies: a copy did not reach part %d within 60 s\n", meetings_);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // This process's figure in, the mean of every process's out (after all gave theirs).
  double Mean(double value) {
    if (n_ <= 1) return value;
    shared_->values[index_] = value;
    if (!Meet()) return value;
    double sum = 0;
    for (int i = 0; i < n_; ++i) sum += shared_->values[i];
    const double mean = sum / n_;
    Meet();  // nobody writes the next part's figure before all have read this one
    return mean;
  }
  // " [mean of N processes at once]" where there are copies.
  std::string Note() const {
    return n_ > 1 ? " [mean of " + std::to_string(n_) + " processes at once]" : std::string();
  }

 private:
  struct Shared {
    std::atomic<int> arrived{0};
    double values[kMax] = {};
  };
  int n_;
  int index_ = 0;
  int meetings_ = 0;
  Shared* shared_ = nullptr;
  std::vector<pid_t> children_;
};
}  // namespace

int RunBench(const BenchOptions& opt) {
  Copies copies(std::min(opt.copies, Copies::kMax));
  LoadedConfig loaded;
  std::string error;
  if (const base::Status st = LoadConfig(opt.config_path, opt.sets, &loaded); !st.ok()) {
    base::LogError("%s\n", st.message().c_str());
    return 2;
  }
  config::Config cfg = loaded.config;
  std::printf("stampede bench: env %s, config %s\n", actors::EnvSourceFromConfig(cfg).Describe().c_str(),
              opt.config_path.c_str());
  std::printf("  CPU: %s; binary built for %s; net.gemm_backend \"%s\"\n  memory: %s\n", base::CpuDescription().c_str(),
              base::BuildTarget().c_str(), cfg.net().gemm_backend().c_str(), base::HugePagesDescription().c_str());

  // 1. Raw env steps/s: the actor's E envs as one vector env, random actions, one core.
  {
    const int E = cfg.actors().envs_per_actor();
    auto made = envs::MakeVectorEnv(actors::EnvSourceFromConfig(cfg), E);
    if (!made.ok()) {
      base::LogError("%s\n", made.status().message().c_str());
      return 2;
    }
    std::unique_ptr<envs::VectorEnv> env = std::move(made).value();
    const size_t obs_bytes = size_t(env->spec().obs_bytes());
    std::vector<std::byte> obs(E * obs_bytes), final_obs(E * obs_bytes);
    std::vector<float> rewards(E);
    std::vector<uint8_t> terminated(E), truncated(E), valid(E);
    // Random actions of the env's kind: indices (per component) or values within the box.
    const envs::EnvSpec& es = env->spec();
    const bool box = es.action_kind == envs::ActionKind::kBox;
    const size_t K = box ? es.action_low.size()
                         : es.action_kind == envs::ActionKind::kMultiDiscrete ? es.action_nvec.size() : 1;
    std::vector<int32_t> actions(E * K);
    std::vector<float> box_actions(box ? E * K : 0);
    envs::VectorStep step{obs.data(), rewards.data(), terminated.data(), truncated.data(),
                          valid.data(), final_obs.data()};
    envs::SplitMix64 rng(1);
    auto draw = [&] {
      for (size_t i = 0; i < E * K; ++i) {
        const size_t k = i % K;
        if (box) {
          box_actions[i] = float(rng.Uniform(es.action_low[k], es.action_high[k]));
        } else {
          const int n = es.action_kind == envs::ActionKind::kMultiDiscrete ? es.action_nvec[k] : es.num_actions;
          actions[i] = int32_t(rng() % uint64_t(std::max(1, n)));
        }
      }
    };
    env->Reset(1, obs.data());
    int64_t steps = 0;
    copies.Meet();
    const auto start = Clock::now();
    double elapsed = 0;
    while ((elapsed = Since(start)) < opt.seconds) {
      for (int i = 0; i < 64; ++i) {
        draw();
        if (box) {
          env->StepBox(box_actions.data(), step);
        } else {
          env->Step(actions.data(), step);
        }
      }
      steps += 64 * E;
    }
    const int fps = env->spec().frames_per_step;
    const double env_sps = copies.Mean(steps / elapsed);
    std::printf("  env steps/s (%d envs as one vector env, random actions): %12.0f  (%.1f ns/step, %.0f frames/s at %d frames/step; C++ CartPole limit ~15 ns/step)%s\n",
                E, env_sps, 1e9 / env_sps, fps * env_sps, fps, copies.Note().c_str());
    // What one actor message weighs: observations travel in the spec's dtype.
    config::Config with_spec = cfg;
    *with_spec.mutable_env()->mutable_resolved_spec() = actors::SpecToProto(env->spec());
    wire::StepShape shape;
    if (const base::Status st = ResolvedStepShape(with_spec, &shape); !st.ok()) {
      base::LogError("%s\n", st.message().c_str());
      return 2;
    }
    const int64_t bytes = wire::TrajectoryBytes(cfg.actors().unroll_length(), E, shape);
    shape.obs_dtype = wire::DType::kFloat32;
    const int64_t as_float = wire::TrajectoryBytes(cfg.actors().unroll_length(), E, shape);
    std::printf("  trajectory message (T=%d, %d envs): %lld bytes of arrays (%s observations); %lld with float32 observations (%.2fx)\n",
                cfg.actors().unroll_length(), E, (long long)bytes, envs::DTypeName(env->spec().obs_dtype),
                (long long)as_float, double(as_float) / double(bytes));
  }

  // What parts 2 and 3 measure, for the limit they imply together (below).
  double actor_fps = 0, learner_fps = 0;
  // learner.threads other than 1: the threads timed, their frames/s and CPU-seconds a frame.
  int learner_threads = 1;
  double learner_fps_threads = 0, learner_cpu_per_frame_threads = 0;

  // 2. Actor steps/s: E envs, batched inference, sampling, unroll assembly; no sockets.
  {
    auto made = actors::ActorCore::Create(cfg, 0);
    if (!made.ok()) {
      base::LogError("%s\n", made.status().message().c_str());
      return 2;
    }
    const std::unique_ptr<actors::ActorCore> core = std::move(made).value();
    std::vector<float> params(core->param_count());
    net::InitParams(core->net_spec(), 1, params);
    wire::TrajectoryBatch batch;
    // The first unroll resets the envs (ALE builds its palettes then: seconds); untimed.
    core->CollectUnroll(params, 0, &batch);
    const int64_t warm = core->frames();
    copies.Meet();
    const auto start = Clock::now();
    double elapsed = 0;
    while ((elapsed = Since(start)) < opt.seconds) core->CollectUnroll(params, 0, &batch);
    const double sps = copies.Mean(double(core->frames() - warm) / elapsed);
    actor_fps = sps;
    std::printf("  actor frames/s (1 core, %d envs, %s inference): %12.0f  (%.2f us/step)%s\n",
                cfg.actors().envs_per_actor(), net::TorsoName(core->net_spec()).c_str(), sps, 1e6 / sps,
                copies.Note().c_str());
    // The last unroll as it travels (wire.stack_frames): its bytes and how its
    // observations went, checked against what the learner decodes.
    zmq::context_t ctx(1);
    zmq::socket_t push(ctx, zmq::socket_type::push), pull(ctx, zmq::socket_type::pull);
    wire::ConfigureReceiver(pull, int64_t(1) << 32);
    pull.bind("inproc://bench-trajectory");
    push.connect("inproc://bench-trajectory");
    batch.stack_frames = cfg.wire().stack_frames();
    *batch.meta.mutable_sender() = wire::MakeSender(wire::ROLE_ACTOR, 0, 1);
    std::vector<zmq::message_t> parts;
    if (wire::SendTrajectory(push, batch) && wire::RecvMultipart(pull, &parts, true)) {
      size_t sent = 0;
      for (const auto& part : parts) sent += part.size();
      wire::Trajectory header;
      const bool single = wire::ParseFrame(parts[0], &header) && header.arrays(0).name() == "first_observations";
      wire::TrajectoryExpectations expect;
      expect.unroll_length = batch.T();
      expect.shape = batch.shape;
      expect.newest_policy_version = 1;
      wire::TrajectoryBatch decoded;
      std::string detail;
      const bool same = wire::DecodeTrajectory(parts, expect, &decoded, &detail) == wire::DropReason::kNone &&
                        decoded.observations_u8 == batch.observations_u8 && decoded.observations == batch.observations;
      std::printf("  trajectory as sent: %zu bytes; observations %s%s\n", sent,
                  single ? ("as single frames, " + std::to_string(header.arrays(2).shape(0)) + " of " +
                            std::to_string(batch.T() * batch.n()) + " rows whole (episode starts)").c_str()
                         : "whole",
                  same ? "; decoded equal" : ("; DECODED DIFFERENT " + detail).c_str());
    }
  }

  // 3. Learner steps/s: V-trace, loss, gradient, clipping and the optimizer step on one
  // batch of B unrolls of T steps, one core, no sockets.
  {
    auto made = actors::ActorCore::Create(cfg, 0);
    if (!made.ok()) {
      base::LogError("%s\n", made.status().message().c_str());
      return 2;
    }
    const std::unique_ptr<actors::ActorCore> core = std::move(made).value();
    auto model = net::MakeCpuModel<float>(core->net_spec());
    std::vector<float> params(model->layout().total_size()), grad(params.size());
    net::InitParams(core->net_spec(), 1, params);
    const int T = cfg.actors().unroll_length(), B = cfg.learner().batch_size();
    // A batch of real unrolls from the actor core (a column per env, as the learner forms them).
    learner::Batch batch;
    batch.Resize(T, B, core->shape());
    wire::TrajectoryBatch unrolls;
    for (int b = 0; b < B; ++b) {
      if (b % cfg.actors().envs_per_actor() == 0) core->CollectUnroll(params, 0, &unrolls);
      learner::CopyUnroll(unrolls, b % unrolls.n(), b, &batch);
    }
    // The loss, clipping and optimizer the config's learner runs (Pong: Adam).
    const learner::LossOptions lo = learner::LossOptionsFrom(cfg);
    learner::Optimizer optimizer(int64_t(params.size()), net::OptimizerHyperFromConfig(cfg.learner().optimizer()));
    // One untimed step first: oneDNN builds its primitives and net.gemm_backend "auto"
    // times its candidates on each product's first use (a steady learner has done both).
    std::fill(grad.begin(), grad.end(), 0.f);
    learner::ComputeLossAndGrad(*model, params.data(), batch, lo, grad.data());
    // The step on `threads` oneDNN threads: steps/s (the copies' mean) and the process's
    // CPU seconds a step (OpenMP's helpers and their spinning included).
    auto time_steps = [&](int threads, double* cpu_per_step) {
      net::SetOneDnnThreads(threads);
      std::fill(grad.begin(), grad.end(), 0.f);
      learner::ComputeLossAndGrad(*model, params.data(), batch, lo, grad.data());  // the team starts untimed
      int64_t steps = 0;
      copies.Meet();
      const double cpu0 = ProcessCpuSeconds();
      const auto start = Clock::now();
      double elapsed = 0;
      while ((elapsed = Since(start)) < opt.seconds) {
        std::fill(grad.begin(), grad.end(), 0.f);
        learner::ComputeLossAndGrad(*model, params.data(), batch, lo, grad.data());
        learner::ClipGlobalNorm(grad, cfg.learner().max_grad_norm());
        optimizer.Step(params, grad, cfg.learner().optimizer().learning_rate(), steps + 1);
        ++steps;
      }
      *cpu_per_step = (ProcessCpuSeconds() - cpu0) / double(std::max<int64_t>(1, steps));
      net::SetOneDnnThreads(1);
      return copies.Mean(steps / elapsed);
    };
    double cpu_per_step = 0;
    const double sps = time_steps(1, &cpu_per_step);
    // Backward costs about twice the forward pass.
    const double flops = 3.0 * double((T + 1) * B) * model->ForwardFlops();
    std::string gemm;
    const double peak = MeasureGemmGflops(0.5, &gemm);
    const double frames_per_step = double(T) * B * core->frames_per_step();
    std::printf("  learner steps/s (1 core, B=%d, T=%d, %s, %lld params): %12.2f  (%.0f frames/s; ~%.1f GFLOP/s; a 512^3 GEMM (%s): %.1f)%s\n",
                B, T, net::TorsoName(core->net_spec()).c_str(), (long long)model->layout().total_size(), sps,
                sps * frames_per_step, sps * flops / 1e9, gemm.c_str(), peak, copies.Note().c_str());
    learner_fps = sps * frames_per_step;
    // The issue-48 yardstick: numpy's single-thread 512^3 sgemm from the project's venv (its
    // own BLAS), beside which the step's GFLOP/s reads as a share.
    if (opt.copies <= 1) {
      const double np_gflops = NumpyGemmGflops(std::max(0.2, opt.seconds / 6));
      if (np_gflops > 0) {
        std::printf("  numpy's single-thread 512^3 sgemm (the venv's BLAS, one thread): %.1f GFLOP/s; the learner step "
                    "at %.0f%% of it\n",
                    np_gflops, 100 * sps * flops / 1e9 / np_gflops);
      }
    }
    // learner.threads other than 1: the same step on the threads the learner takes while
    // it bounds the fleet (auto: the cores shared among the learners).
    const int setting = cfg.learner().threads();
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    const int n = setting == 0 ? learner::ComputeThreads::Most(cores, cfg.learner().num_learners()) : setting;
    if (n > 1 && net::OneDnnBuilt()) {
      double cpu_n = 0;
      const double sps_n = time_steps(n, &cpu_n);
      learner_threads = n;
      learner_fps_threads = sps_n * frames_per_step;
      learner_cpu_per_frame_threads = cpu_n / frames_per_step;
      std::printf("  learner steps/s (%d threads, learner.threads %d): %12.2f  (%.0f frames/s, %.2fx one thread; "
                  "%.3f CPU-seconds a step against %.3f)%s\n",
                  n, setting, sps_n, learner_fps_threads, sps_n / sps, cpu_n, cpu_per_step, copies.Note().c_str());
    }
  }
  if (!copies.first()) return 0;  // a copy's part ends with the parts

  // The fleet these parts allow on this machine's cores, were the PS shards, the sockets and
  // the coordinator free: each fresh frame takes 1/actor core-seconds to act and
  // 1/(learner x fresh share of a batch) to learn from, the actors and learners share the
  // cores, and each actor process and each learner uses at most one core (its acting or
  // training loop is one thread at a time). A fleet's frames/s over this is its share.
  double limit = 0;
  {
    const double fresh = 1.0 - cfg.learner().replay().fraction();
    const double learn_fps = learner_fps * fresh;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    const double shared = cores / (1.0 / actor_fps + 1.0 / learn_fps);
    limit = std::min({shared, cfg.actors().num_actors() * actor_fps, cfg.learner().num_learners() * learn_fps});
    std::printf("  parts' limit on %d cores (%d actors, %d learner(s), %.0f%% of each batch fresh; PS and sockets "
                "free; parts measured %s): %.0f frames/s\n",
                cores, cfg.actors().num_actors(), cfg.learner().num_learners(), 100 * fresh,
                copies.n() > 1 ? ("with " + std::to_string(copies.n()) + " processes at once").c_str() : "alone", limit);
    if (learner_threads > 1) {
      // A learner on more threads costs the CPU it took a frame (OpenMP's helpers
      // included) and is capped by its own faster rate. learner.threads 0 takes the
      // better of the two, as the learner does by watching whether it waits.
      const double shared_n = cores / (1.0 / actor_fps + learner_cpu_per_frame_threads / fresh);
      const double limit_n = std::min({shared_n, cfg.actors().num_actors() * actor_fps,
                                       cfg.learner().num_learners() * learner_fps_threads * fresh});
      std::printf("  parts' limit with the learner on %d threads: %.0f frames/s (%.2fx one thread)\n", learner_threads,
                  limit_n, limit_n / limit);
      limit = cfg.learner().threads() == 0 ? std::max(limit, limit_n) : limit_n;
    }
    std::printf("RESULT parts_limit_frames_per_s=%.0f actor_frames_per_s=%.0f learner_fresh_frames_per_s=%.0f learner_threads=%d\n",
                limit, actor_fps, learn_fps, learner_threads);
  }

  // 4. The whole fleet, learning, on this machine, twice, each run's frames/s over the
  // parts' limit above as its share. Over TCP the runs are with CURVE (the default) and
  // without, so the cost of authenticated sockets is one ratio. With
  // cluster.local_transport "ipc" (the default) nothing is encrypted on one machine (the
  // peers are checked by their credentials) whatever cluster.curve says, so the two runs
  // are the same fleet and their ratio is its spread from run to run.
  if (opt.fleet_frames > 0) {
    const bool cipher = cfg.cluster().local_transport() != "ipc";
    double fps[2] = {0, 0}, steady[2] = {0, 0};
    // Frames/s past the start-up (spawning, imports, the first parameters): from the first
    // metrics row at a fifth of the run's frames to its last, as the parts' limit is
    // steady work. 0 where the rows do not span that.
    auto steady_rate = [](const std::string& run_dir) {
      std::vector<std::pair<double, double>> rows;  // (elapsed_s, env_frames)
      std::ifstream in(run_dir + "/metrics.jsonl");
      for (std::string line; std::getline(in, line);) {
        try {
          const auto row = nlohmann::json::parse(line);
          if (row.contains("env_frames") && row.contains("elapsed_s") && !row.contains("event")) {
            rows.emplace_back(row["elapsed_s"].get<double>(), double(row["env_frames"].get<int64_t>()));
          }
        } catch (const std::exception&) {
        }
      }
      if (rows.size() < 2) return 0.0;
      const auto& last = rows.back();
      for (const auto& r : rows) {
        if (r.second >= 0.2 * last.second) {
          return last.first > r.first ? (last.second - r.second) / (last.first - r.first) : 0.0;
        }
      }
      return 0.0;
    };
    for (int run = 0; run < 2; ++run) {
      const bool curve = cipher ? run == 0 : cfg.cluster().curve();
      config::Config fleet = cfg;
      fleet.mutable_stop()->set_total_env_frames(opt.fleet_frames);
      fleet.mutable_cluster()->set_curve(curve);
      coordinator::RunOptions ro;
      ro.config_name = cipher ? (curve ? "bench-curve" : "bench-plain") : "bench-run" + std::to_string(run + 1);
      ro.quiet = true;
      coordinator::RunResult r = coordinator::RunCoordinator(fleet, ro);
      if (r.exit_code != 0) {
        base::LogError("bench: fleet run failed (exit %d), see %s\n", r.exit_code, r.run_dir.c_str());
        return r.exit_code;
      }
      fps[run] = r.env_frames / r.wall_seconds;
      steady[run] = steady_rate(r.run_dir);
      const std::string label = cipher ? std::string("CURVE ") + (curve ? "on " : "off") : "run " + std::to_string(run + 1);
      std::printf("  fleet frames/s, %s, local transport %s (%d actors x %d envs, %d PS shards, 1 learner, "
                  "learning): %10.0f  (%lld frames in %.1f s, %lld learner steps = %.0f steps/s; %.1f%% of the parts' "
                  "limit)\n",
                  label.c_str(), fleet.cluster().local_transport().c_str(), fleet.actors().num_actors(),
                  fleet.actors().envs_per_actor(), fleet.ps().num_shards(), fps[run], r.env_frames, r.wall_seconds,
                  r.learner_steps, r.learner_steps / r.wall_seconds, limit > 0 ? 100.0 * fps[run] / limit : 0.0);
      std::printf("    past its start-up (from a fifth of its frames on): %.0f frames/s, %.1f%% of the parts' limit\n",
                  steady[run], limit > 0 ? 100.0 * steady[run] / limit : 0.0);
      std::printf("  fleet run directory: %s\n", r.run_dir.c_str());
    }
    if (cipher) {
      std::printf("  CURVE cost: %.1f%% of fleet frames/s (on/off = %.3f)\n", 100.0 * (1.0 - fps[0] / fps[1]),
                  fps[0] / fps[1]);
    } else {
      std::printf("  the two runs %.1f%% apart: the same fleet (no cipher runs over ipc://; --set "
                  "cluster.local_transport=tcp for CURVE's cost)\n",
                  100.0 * std::abs(fps[0] - fps[1]) / std::max(fps[0], fps[1]));
    }
    std::printf("RESULT fleet_frames_per_s=%.0f,%.0f fleet_share_of_limit=%.3f,%.3f fleet_steady_frames_per_s=%.0f,%.0f\n",
                fps[0], fps[1], limit > 0 ? fps[0] / limit : 0.0, limit > 0 ? fps[1] / limit : 0.0, steady[0],
                steady[1]);
  }
  return 0;
}

int RunNetworkBench(const BenchOptions& opt) {
  struct Case {
    std::string_view torso;  // a preset of net/network.h's registry
    std::vector<int> obs;
    int lstm;
  };
  const Case cases[] = {{net::kMlp, {4, 84, 84}, 0},         {net::kShallowCnn, {4, 84, 84}, 0},
                        {net::kDeepResNet, {4, 84, 84}, 0}, {net::kDeepResNet, {4, 84, 84}, 256},
                        {net::kSmallCnn, {4, 10, 10}, 0}};
  auto spec_of = [](const Case& c) {
    net::ModelSpec s;
    s.obs_shape = c.obs;
    s.uint8_obs = true;
    s.torso = c.torso;
    s.hidden_sizes = {64};  // the Atari MLP configs' flattening torso
    s.lstm_size = c.lstm;
    s.policy = net::CategoricalPolicy(6);
    return s;
  };
  std::string gemm;
  const double peak = MeasureGemmGflops(opt.seconds / 3, &gemm);
  std::printf("stampede bench --networks: CPU, one thread, uint8 observations, 6 actions; "
              "a 512^3 GEMM (net.gemm_backend %s) runs %.1f GFLOP/s here now (stampede bench --gemm: every backend)\n",
              gemm.c_str(), peak);
  std::printf("  CPU: %s; binary built for %s\n  memory: %s\n", base::CpuDescription().c_str(), base::BuildTarget().c_str(),
              base::HugePagesDescription().c_str());
  // Each convolution backend this build has (net.conv_backend), the default last.
  std::vector<net::ConvBackend> backends = {net::ConvBackend::kEigen};
  if (net::OneDnnBuilt()) {
    backends.push_back(net::ConvBackend::kOneDnnPerLayer);
    backends.push_back(net::ConvBackend::kOneDnn);
  }
  for (const net::ConvBackend backend : backends) {
    net::SetConvBackend(backend);
    std::printf("== convolutions on %s (net.conv_backend \"%s\")\n",
                backend == net::ConvBackend::kOneDnn ? "oneDNN, the image layers as one run in its blocked layouts"
                : backend == net::ConvBackend::kOneDnnPerLayer
                    ? "oneDNN, each convolution reordering from NCHW and back"
                    : "Eigen (GEMMs over unrolled windows)",
                net::ConvBackendName(backend));
    std::printf("  %-24s %8s %12s %6s %14s %10s %8s\n", "network", "obs", "MFLOP/row", "batch", "us/sample", "GFLOP/s", "of peak");
    for (const Case& c : cases) {
      const net::ModelSpec spec = spec_of(c);
      auto model = net::MakeCpuModel<float>(spec);
      std::vector<float> params(model->layout().total_size());
      net::InitParams(spec, 1, params);
      const double mflop = model->ForwardFlops() / 1e6;
      std::string name(c.torso);
      if (c.lstm) name += " + lstm " + std::to_string(c.lstm);
      std::string obs;
      for (size_t i = 0; i < c.obs.size(); ++i) obs += (i ? "x" : "") + std::to_string(c.obs[i]);
      for (int batch : {1, 8, 32}) {
        const int D = spec.obs_size();
        std::vector<uint8_t> x(size_t(batch) * D);
        envs::SplitMix64 rng(3);
        for (auto& v : x) v = uint8_t(rng());
        std::vector<float> state(size_t(batch) * model->state_size()), pol(size_t(batch) * 6), val(batch);
        model->Step(params.data(), x.data(), batch, nullptr, state.data(), state.data(), pol.data(), val.data());
        int64_t samples = 0;
        const auto start = Clock::now();
        double elapsed = 0;
        while ((elapsed = Since(start)) < opt.seconds / 3) {
          model->Step(params.data(), x.data(), batch, nullptr, state.data(), state.data(), pol.data(), val.data());
          samples += batch;
        }
        const double us = 1e6 * elapsed / double(samples);
        const double gflops = mflop * 1e6 / (us * 1e-6) / 1e9;
        std::printf("  %-24s %8s %12.2f %6d %14.1f %10.1f %7.0f%%\n", name.c_str(), obs.c_str(), mflop, batch, us, gflops,
                    100 * gflops / peak);
      }
    }
    // im2col + GEMM (the Eigen backend) against Eigen's Tensor convolutions (a 2-D
    // convolution per input/output channel pair, summed), for the deep ResNet's first layer.
    if (backend == net::ConvBackend::kEigen) {
      const net::ImageShape in{4, 84, 84};
      const int C = 16, n = 8;
      net::ParamLayout layout;
      auto conv = net::MakeConv<float>(&layout, "c", in, C, 3, 1, 1);
      std::vector<float> p(layout.total_size(), 0.01f), x(size_t(n) * in.size(), 0.5f), y(size_t(n) * conv->out_size());
      conv->Forward(p.data(), x.data(), n, y.data());  // untimed: "auto" times its products' backends
      int64_t done = 0;
      auto start = Clock::now();
      double elapsed = 0;
      do {
        conv->Forward(p.data(), x.data(), n, y.data());
        done += n;
      } while ((elapsed = Since(start)) < opt.seconds / 3);
      const double im2col_us = 1e6 * elapsed / double(done);
      Eigen::Tensor<float, 2> plane(in.h + 2, in.w + 2), kernel(3, 3), out(in.h, in.w);
      plane.setConstant(0.5f);
      kernel.setConstant(0.01f);
      const Eigen::array<ptrdiff_t, 2> dims{0, 1};
      done = 0;
      start = Clock::now();
      do {
        for (int co = 0; co < C; ++co) {
          out.setZero();
          for (int ci = 0; ci < in.c; ++ci) out += plane.convolve(kernel, dims);
        }
        ++done;
      } while ((elapsed = Since(start)) < opt.seconds / 3);
      const double tensor_us = 1e6 * elapsed / double(done);
      std::printf("  conv 4->16 3x3 pad 1 on 84x84 (deep ResNet's first): im2col + GEMM %.1f us/sample, "
                  "Eigen Tensor convolve %.1f us/sample (%.1fx)\n", im2col_us, tensor_us, tensor_us / im2col_us);
    }
    // By layer on the default backend only (the deep ResNet's step takes seconds on Eigen).
    if (backend == backends.back()) PrintLayerTables(opt.seconds, peak);
    // The CPU learner: V-trace, loss, forward + backward over [T+1, B], clipping, RMSProp.
    const int T = 20, B = 32;
    for (const Case& c : {cases[1], cases[2]}) {
      const net::ModelSpec spec = spec_of(c);
      auto model = net::MakeCpuModel<float>(spec);
      std::vector<float> params(model->layout().total_size()), grad(params.size());
      net::InitParams(spec, 1, params);
      learner::Batch batch;
      batch.Resize(T, B, wire::StepShape{spec.obs_shape, wire::DType::kUint8, 6, 0});
      envs::SplitMix64 rng(5);
      for (auto& v : batch.observations_u8) v = uint8_t(rng());
      for (auto& a : batch.actions) a = int32_t(rng() % 6);
      learner::LossOptions lo;
      learner::Optimizer rms(int64_t(params.size()), {});
      int steps = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        std::fill(grad.begin(), grad.end(), 0.f);
        learner::ComputeLossAndGrad(*model, params.data(), batch, lo, grad.data());
        learner::ClipGlobalNorm(grad, 40.0);
        rms.Step(params, grad, 1e-4, steps + 1);
        ++steps;
      } while ((elapsed = Since(start)) < opt.seconds);
      const double sps = steps / elapsed;
      const double gflops = sps * 3.0 * (T + 1) * B * model->ForwardFlops() / 1e9;
      std::printf("  CPU learner %-12s B=%d T=%d: %.2f steps/s = %.0f agent steps/s (%.0f Atari frames/s at 4 per step), "
                  "~%.1f GFLOP/s (%.0f%% of the GEMM peak)\n",
                  std::string(c.torso).c_str(), B, T, sps, sps * T * B, 4 * sps * T * B, gflops, 100 * gflops / peak);
    }
  }
  return 0;
}

}  // namespace stampede::tools
