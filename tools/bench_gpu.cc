// `stampede bench --gpu`: the CUDA learner step on each network against the CPU's, on
// this machine's first GPU (a line saying why when there is none).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/log.h"
#include "envs/rng.h"
#include "learner/batch.h"
#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "net/network.h"
#include "tools/bench.h"
#include "wire/trajectory.h"

namespace stampede::tools {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int RunGpuBench(const BenchOptions& opt) {
  if (const base::StatusOr<int> devices = net::cuda::DeviceCount(); !devices.ok()) {
    base::LogInfo("stampede bench --gpu: %s\n", devices.status().message().c_str());
    return 3;
  }
  net::ModelSpec spec;
  spec.obs_shape = {4, 84, 84};
  spec.uint8_obs = true;
  spec.torso = net::kDeepResNet;
  spec.lstm_size = 256;
  spec.policy = net::CategoricalPolicy(6);
  const int T = 100, B = 32, A = 6;
  net::cuda::TrainerOptions to;
  to.unroll_length = T;
  to.batch_size = B;
  to.allow_tf32 = true;  // as PyTorch's cuDNN convolutions by default
  auto made = net::cuda::Trainer::Create(spec, 0, to);
  if (!made.ok()) {
    base::LogError("stampede bench --gpu: %s\n", made.status().message().c_str());
    return 3;
  }
  const std::unique_ptr<net::cuda::Trainer> gpu = std::move(made).value();
  const int64_t N = gpu->layout().total_size();
  std::vector<float> params(N), zeros(N, 0.f);
  net::InitParams(spec, 1, params);
  gpu->SetState(params, zeros, zeros);
  learner::Batch batch;
  batch.Resize(T, B, wire::StepShape{spec.obs_shape, wire::DType::kUint8, A, 2 * spec.lstm_size});
  envs::SplitMix64 rng(5);
  for (auto& v : batch.observations_u8) v = uint8_t(rng());
  for (auto& a : batch.actions) a = int32_t(rng() % A);
  for (auto& r : batch.rewards) r = float(rng() % 3) - 1.f;
  for (size_t i = 0; i < batch.terminated.size(); ++i) batch.terminated[i] = rng() % 200 == 0;
  const auto view = learner::BatchViewOf(batch);
  gpu->Stage(view);
  for (int i = 0; i < 3; ++i) {  // warm-up: cuDNN picks algorithms, buffers grow
    gpu->Step(1e-4, i + 1);
    gpu->Stage(view);
  }
  int steps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    gpu->Launch(1e-4, steps + 4);
    gpu->Stage(view);  // the next batch goes up while this step computes
    gpu->Wait();
    gpu->GetParams(params);  // the learner publishes every step
    ++steps;
  } while ((elapsed = Since(start)) < opt.seconds);
  const double sps = steps / elapsed;
  const double agent = sps * T * B;
  std::printf("stampede bench --gpu: deep ResNet + LSTM 256, 4x84x84 uint8, B=%d, T=%d, %lld params, TF32 convolutions\n",
              B, T, (long long)N);
  std::printf("  GPU learner: %.2f steps/s (%.1f ms/step) = %.0f agent steps/s = %.0f Atari frames/s (4 per step)\n",
              sps, 1e3 / sps, agent, 4 * agent);
  // What 2 CPU cores of actors can feed: batch-32 inference of the same network on one
  // core of this machine, times 2 cores, ignoring env stepping (a bound from above).
  auto cpu = net::MakeCpuModel<float>(spec);
  std::vector<uint8_t> x(size_t(32) * spec.obs_size());
  for (auto& v : x) v = uint8_t(rng());
  std::vector<float> state(size_t(32) * cpu->state_size()), pol(32 * A), val(32);
  int64_t samples = 0;
  const auto cstart = Clock::now();
  double celapsed = 0;
  do {
    cpu->Step(params.data(), x.data(), 32, nullptr, state.data(), state.data(), pol.data(), val.data());
    samples += 32;
  } while ((celapsed = Since(cstart)) < std::min(opt.seconds, 5.0));
  const double feed = 2.0 * samples / celapsed;
  std::printf("  2 CPU cores of actors (inference alone, batch 32, this machine): %.0f agent steps/s = %.0f frames/s\n",
              feed, 4 * feed);
  std::printf("  GPU learner / 2-core actor feed: %.0fx\n", agent / feed);
  std::printf("RESULT agent_steps_per_s=%.1f frames_per_s=%.1f\n", agent, 4 * agent);
  return 0;
}

}  // namespace stampede::tools
