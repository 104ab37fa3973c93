#include "net/from_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "net/gemm.h"
#include "net/layers.h"
#include "config/config.h"
#include "config/config.pb.h"
#include "config/tasks.h"
#include "wire/unrolls.h"

namespace stampede::net {

ModelSpec ModelSpecFromConfig(const config::Config& cfg, const wire::StepShape& shape) {
  ModelSpec spec;
  spec.obs_shape = shape.obs_shape;
  spec.uint8_obs = shape.obs_dtype == wire::DType::kUint8;
  spec.torso = cfg.net().torso();
  for (int i = 0; i < cfg.net().layers_size(); ++i) {
    const config::LayerConfig& lc = cfg.net().layers(i);
    LayerSpec l;
    switch (lc.kind_case()) {
      case config::LayerConfig::kConv:
        l.kind = LayerSpec::Kind::kConv;
        l.channels = lc.conv().channels(), l.kernel = lc.conv().kernel();
        l.stride = lc.conv().stride(), l.pad = lc.conv().padding();
        break;
      case config::LayerConfig::kMaxPool:
        l.kind = LayerSpec::Kind::kMaxPool;
        l.kernel = lc.max_pool().kernel(), l.stride = lc.max_pool().stride(), l.pad = lc.max_pool().padding();
        break;
      case config::LayerConfig::kResidual:
        l.kind = LayerSpec::Kind::kResidual;
        break;
      case config::LayerConfig::kDense:
        l.kind = LayerSpec::Kind::kDense;
        l.units = lc.dense().units();
        break;
      case config::LayerConfig::kRelu:
        l.kind = LayerSpec::Kind::kRelu;
        break;
      case config::LayerConfig::kTanh:
        l.kind = LayerSpec::Kind::kTanh;
        break;
      case config::LayerConfig::KIND_NOT_SET:
        break;  // refused by the config check
    }
    spec.layers.push_back(l);
  }
  spec.hidden_sizes = HiddenSizes(cfg);
  spec.activation = ChoiceOf<config::Activation>(cfg.net().activation()) == config::Activation::tanh
                        ? Activation::kTanh
                        : Activation::kRelu;
  spec.fc_size = cfg.net().fc_size();
  spec.lstm_size = cfg.net().lstm_size();
  spec.popart = PopArtOn(cfg);
  spec.center_frames = cfg.net().center_frames();
  spec.init = cfg.net().init();
  spec.policy_init_scale = PolicyInitScale(cfg);
  spec.num_values = spec.popart ? config::NumTasks(cfg) : 1;
  switch (shape.action_kind) {
    case wire::ActionKind::kDiscrete:
      spec.policy = CategoricalPolicy(shape.num_actions);
      break;
    case wire::ActionKind::kMultiDiscrete:
      spec.policy.kind = PolicyKind::kMultiDiscrete;
      spec.policy.num_components = int(shape.action_nvec.size());
      for (size_t k = 0; k < shape.action_nvec.size() && k < size_t(kMaxActionComponents); ++k) {
        spec.policy.nvec[k] = shape.action_nvec[k];
      }
      break;
    case wire::ActionKind::kBox:
      spec.policy.kind = PolicyKind::kGaussian;
      spec.policy.num_components = int(shape.action_low.size());
      break;
  }
  return spec;
}

base::StatusOr<std::unique_ptr<Model<float>>> MakeModelFromConfig(const config::Config& cfg,
                                                                  const wire::StepShape& shape) {
  const std::string& backend = cfg.net().conv_backend();
  if (backend == "eigen") {
    SetConvBackend(ConvBackend::kEigen);
  } else if (backend == "onednn" || backend == "onednn_per_layer" || backend == "auto") {
    const ConvBackend want = backend == "onednn_per_layer" ? ConvBackend::kOneDnnPerLayer : ConvBackend::kOneDnn;
    if (!SetConvBackend(want)) {
      if (backend != "auto") {
        return base::InvalidArgument("net.conv_backend: \"" + backend +
                                     "\", but this build has no oneDNN (apt-get install libdnnl-dev, then "
                                     "reconfigure), or set \"auto\" or \"eigen\"");
      }
      SetConvBackend(ConvBackend::kEigen);
    }
  } else {
    return base::InvalidArgument("net.conv_backend: \"" + backend +
                                 "\" is not known, expected \"auto\", \"onednn\", \"onednn_per_layer\" or \"eigen\"");
  }
  // The process's GEMM (net/gemm.h): a backend asked for by name must be installed here.
  RETURN_IF_ERROR(SetGemmBackend(cfg.net().gemm_backend()));
  try {
    return MakeCpuModel<float>(ModelSpecFromConfig(cfg, shape));
  } catch (const std::invalid_argument& e) {
    return base::InvalidArgument(e.what());
  }
}

OptimizerHyper OptimizerHyperFromConfig(const config::OptimizerConfig& oc) {
  OptimizerHyper h;
  if (ChoiceOf<config::OptimizerKind>(oc.kind()) == config::OptimizerKind::adam) {
    h.kind = OptimizerKind::kAdam;
    h.decay = float(oc.beta2());
    h.momentum = float(oc.beta1());
    h.epsilon = float(OptimizerEpsilon(oc));
    return h;
  }
  h.kind = ChoiceOf<config::OptimizerKind>(oc.kind()) == config::OptimizerKind::rmsprop_torch
               ? OptimizerKind::kRmsPropTorch
               : OptimizerKind::kRmsProp;
  h.decay = float(oc.decay());
  h.momentum = float(oc.momentum());
  h.epsilon = float(oc.epsilon());
  return h;
}

double ScheduledLearningRate(const config::OptimizerConfig& oc, int64_t total_env_frames, double frames) {
  const double lr0 = oc.learning_rate();
  if (oc.warmup_frames() > 0 && frames < double(oc.warmup_frames())) {
    return lr0 * frames / double(oc.warmup_frames());
  }
  const bool constant = ChoiceOf<config::Schedule>(oc.schedule()) == config::Schedule::constant ||
                        (oc.has_linear_decay() && !oc.linear_decay());
  if (constant) return lr0;
  const double horizon = double(oc.schedule_frames() > 0 ? oc.schedule_frames() : total_env_frames);
  if (!(horizon > 0)) return lr0;
  const double done = std::clamp(frames / horizon, 0.0, 1.0);
  if (ChoiceOf<config::Schedule>(oc.schedule()) == config::Schedule::cosine)
    return lr0 * 0.5 * (1.0 + std::cos(std::numbers::pi * done));
  return lr0 * (1.0 - done);
}

}  // namespace stampede::net
