#include "learner/backend.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "net/cuda/trainer.h"
#include "net/from_config.h"
#include "net/onednn_conv.h"
#include "config/config.h"
#include "config/tasks.h"

namespace stampede::learner {

LossOptions LossOptionsFrom(const config::Config& cfg) {
  const auto& lc = cfg.learner();
  LossOptions lo;
  lo.discount = lc.discount();
  lo.vtrace.clip_rho_threshold = lc.clip_rho_threshold();
  lo.vtrace.clip_c_threshold = lc.clip_c_threshold();
  lo.vtrace.clip_pg_rho_threshold = lc.clip_pg_rho_threshold();
  lo.vtrace.lambda = lc.lambda();
  lo.baseline_cost = lc.baseline_cost();
  lo.entropy_cost = lc.entropy_cost();
  lo.bootstrap_on_truncation = lc.bootstrap_on_truncation();
  lo.reward_clip = lc.reward_clip();
  lo.reward_scale = lc.reward_scale();
  lo.popart = PopArtOn(cfg);
  lo.normalize_advantages = lc.normalize_advantages();
  lo.ppo_clip = lc.ppo_clip();
  if (lc.replay().fraction() > 0) {
    lo.entropy_online_only = lc.replay().entropy_online_only();
    lo.trust_region_kl = lc.replay().trust_region_kl();
  }
  // Masks only where some task has fewer actions than the shared head.
  const auto limits = config::TaskActionLimits(cfg);
  const int head = cfg.env().resolved_spec().num_actions();
  if (cfg.env().resolved_spec().action_kind() == config::DISCRETE &&
      std::any_of(limits.begin(), limits.end(), [&](int a) { return a < head; })) {
    lo.action_limits = limits;
  }
  return lo;
}

namespace {

// The CPU model: the step runs on the calling thread, in WaitGradient.
class CpuBackend : public Backend {
 public:
  CpuBackend(net::Model<float>& net, const LossOptions& lo) : net_(net), lo_(lo) {}
  std::string name() const override { return "cpu"; }
  void Load(const Batch& batch) override { batch_ = &batch; }
  bool overlaps() const override { return false; }
  void LaunchGradient(std::span<const float> params) override { params_ = params; }
  LossStats WaitGradient(std::span<float> grad, Targets<float>* targets) override {
    if (!batch_ || params_.empty()) throw std::logic_error("CPU backend: WaitGradient before Load and LaunchGradient");
    std::fill(grad.begin(), grad.end(), 0.f);
    return ComputeLossAndGrad(net_, params_.data(), *batch_, lo_, grad.data(), targets);
  }
  bool has_targets() const override { return true; }
  // The step runs on the calling thread, so the count is that thread's.
  void SetComputeThreads(int threads) override { net::SetOneDnnThreads(threads); }
  // The host optimizer (the relay updater's) applies the CPU model's steps.
  bool fuses_update() const override { return false; }
  void SetState(std::span<const float>, std::span<const float>, std::span<const float>) override {}
  void GetState(std::span<float>, std::span<float>, std::span<float>) override {}
  void LaunchUpdate(double, int64_t) override { throw std::logic_error("CPU backend: no fused update"); }
  LossStats WaitUpdate(std::span<float>, double*) override { throw std::logic_error("CPU backend: no fused update"); }

 private:
  net::Model<float>& net_;
  const LossOptions lo_;
  const Batch* batch_ = nullptr;
  std::span<const float> params_;
};

LossStats FromDevice(const net::cuda::StepStats& gs) {
  LossStats st;
  st.total = gs.total;
  st.m = gs.m;
  return st;
}

// The CUDA trainer: the batch goes up from pinned memory (staged while the previous step
// computes), and only statistics and the gradient or the parameters come back.
class CudaBackend : public Backend {
 public:
  CudaBackend(std::unique_ptr<net::cuda::Trainer> t, std::string name) : t_(std::move(t)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void Load(const Batch& batch) override { t_->Stage(BatchViewOf(batch)); }
  bool overlaps() const override { return true; }
  void LaunchGradient(std::span<const float> params) override { t_->LaunchGradient(params); }
  LossStats WaitGradient(std::span<float> grad, Targets<float>*) override { return FromDevice(t_->WaitGradient(grad)); }
  bool has_targets() const override { return false; }
  bool fuses_update() const override { return true; }
  void SetState(std::span<const float> p, std::span<const float> ms, std::span<const float> mom) override {
    t_->SetState(p, ms, mom);
  }
  void GetState(std::span<float> p, std::span<float> ms, std::span<float> mom) override { t_->GetState(p, ms, mom); }
  void LaunchUpdate(double lr, int64_t step) override { t_->Launch(lr, step); }
  LossStats WaitUpdate(std::span<float> params, double* grad_norm) override {
    const net::cuda::StepStats gs = t_->Wait();
    t_->GetParams(params);
    *grad_norm = gs.m[base::StepMetric::kGradNorm];
    return FromDevice(gs);
  }

 private:
  std::unique_ptr<net::cuda::Trainer> t_;
  const std::string name_;
};

net::cuda::TrainerOptions TrainerOptions(const config::Config& cfg, const LossOptions& lo) {
  const auto& lc = cfg.learner();
  net::cuda::TrainerOptions o;
  o.unroll_length = cfg.actors().unroll_length();
  o.batch_size = lc.batch_size();
  o.discount = lo.discount;
  o.clips = net::VTraceClips{lo.vtrace.clip_rho_threshold, lo.vtrace.clip_c_threshold,
                             lo.vtrace.clip_pg_rho_threshold, lo.vtrace.lambda};
  o.baseline_cost = lo.baseline_cost;
  o.entropy_cost = lo.entropy_cost;
  o.bootstrap_on_truncation = lo.bootstrap_on_truncation;
  o.reward_clip = lo.reward_clip;
  o.reward_scale = lo.reward_scale;
  o.normalize_advantages = lo.normalize_advantages;
  o.max_grad_norm = lc.max_grad_norm();
  o.optimizer = net::OptimizerHyperFromConfig(lc.optimizer());
  o.allow_tf32 = true;
  o.action_limits = lo.action_limits;
  o.popart = lo.popart;
  o.popart_beta = lc.popart_beta();
  return o;
}

}  // namespace

base::StatusOr<std::unique_ptr<Backend>> MakeBackend(const config::Config& cfg, net::Model<float>& net,
                                                     int learner_index) {
  const LossOptions lo = LossOptionsFrom(cfg);
  const std::string device = cfg.learner().device();
  if (device == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(net, lo));
  const base::StatusOr<int> index = net::cuda::LearnerDevice(device, learner_index);
  if (!index.ok()) return base::DeviceError(index.status().message());
  auto t = net::cuda::Trainer::Create(net.spec(), *index, TrainerOptions(cfg, lo));
  if (!t.ok()) return base::DeviceError(t.status().message());
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(std::move(t).value(), "cuda:" + std::to_string(*index)));
}

}  // namespace stampede::learner
