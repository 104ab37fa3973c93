#include "envs/env.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include "base/log.h"
#include "base/mutex.h"

namespace stampede::envs {

int DTypeSize(DType dtype) { return dtype == DType::kUint8 ? 1 : 4; }

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kUint8: return "uint8";
  }
  return "unknown";
}

const char* ActionKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kDiscrete: return "discrete";
    case ActionKind::kMultiDiscrete: return "multi-discrete";
    case ActionKind::kBox: return "box";
  }
  return "unknown";
}

int EnvSpec::obs_size() const {
  int n = 1;
  for (int d : obs_shape) n *= d;
  return n;
}

int64_t EnvSpec::obs_bytes() const { return int64_t(obs_size()) * DTypeSize(obs_dtype); }

std::string EnvSpec::Check() const {
  if (obs_shape.empty() || obs_shape.size() > 3) {
    return "observation rank " + std::to_string(obs_shape.size()) + ", expected 1 to 3";
  }
  int64_t n = 1;
  for (int d : obs_shape) {
    if (d <= 0) return "observation dimension " + std::to_string(d) + " is not positive";
    n *= d;
    if (n > (int64_t(1) << 28)) return "observation of more than 2^28 elements";
  }
  if (obs_dtype != DType::kFloat32 && obs_dtype != DType::kUint8) {
    return "observation dtype " + std::to_string(int(obs_dtype)) + ", expected float32 or uint8";
  }
  switch (action_kind) {
    case ActionKind::kDiscrete:
      if (num_actions <= 0) return "discrete action space with " + std::to_string(num_actions) + " actions";
      break;
    case ActionKind::kMultiDiscrete:
      if (action_nvec.empty()) return "multi-discrete action space with no components";
      for (int k : action_nvec) {
        if (k <= 0) return "multi-discrete component with " + std::to_string(k) + " actions";
      }
      break;
    case ActionKind::kBox:
      if (action_low.empty() || action_low.size() != action_high.size()) {
        return "box action space needs as many lower as upper bounds (got " +
               std::to_string(action_low.size()) + " and " + std::to_string(action_high.size()) + ")";
      }
      for (size_t i = 0; i < action_low.size(); ++i) {
        if (!(action_low[i] <= action_high[i])) return "box action bound " + std::to_string(i) + ": low > high";
      }
      break;
    default:
      return "unknown action kind " + std::to_string(int(action_kind));
  }
  if (max_episode_steps < 0) return "negative max_episode_steps";
  if (frames_per_step <= 0) return "frames_per_step " + std::to_string(frames_per_step) + " is not positive";
  return "";
}

int64_t EnvOptions::GetInt(const std::string& key, int64_t fallback) const {
  auto it = kwargs.find(key);
  if (it == kwargs.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno != 0) {
    throw std::invalid_argument("kwarg \"" + key + "\": \"" + it->second + "\" is not an integer");
  }
  return v;
}

double EnvOptions::GetDouble(const std::string& key, double fallback) const {
  auto it = kwargs.find(key);
  if (it == kwargs.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !std::isfinite(v)) {
    throw std::invalid_argument("kwarg \"" + key + "\": \"" + it->second + "\" is not a finite number");
  }
  return v;
}

std::string EnvOptions::GetString(const std::string& key, const std::string& fallback) const {
  auto it = kwargs.find(key);
  return it == kwargs.end() ? fallback : it->second;
}

void EnvOptions::RefuseUnknown(const std::string& env, const std::vector<std::string>& known) const {
  std::string unknown;
  for (const auto& [k, v] : kwargs) {
    bool ok = false;
    for (const auto& n : known) ok = ok || n == k;
    if (!ok) unknown += (unknown.empty() ? "\"" : ", \"") + k + "\"";
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  throw std::invalid_argument(env + ": unknown kwarg " + unknown + " (known: " +
                              (list.empty() ? "none" : list) + ")");
}

Env::Env(std::shared_ptr<const EnvSpec> spec) : spec_(std::move(spec)) {}
Env::~Env() = default;

void Env::CheckBuffer(std::span<std::byte> obs) const {
  if (int64_t(obs.size()) != spec_->obs_bytes()) {
    throw std::invalid_argument(spec_->name + ": observation buffer of " +
                                std::to_string(obs.size()) + " bytes, expected " +
                                std::to_string(spec_->obs_bytes()));
  }
}

void Env::Reset(uint64_t seed, std::span<std::byte> obs) {
  CheckBuffer(obs);
  DoReset(seed, obs.data());
  episode_return_ = 0;
  episode_length_ = 0;
  needs_reset_ = false;
}

StepResult Env::DoStepBox(const float*, void*) {
  throw std::logic_error(spec_->name + ": StepBox on an env without a box action space");
}

StepResult Env::Step(int action, std::span<std::byte> obs) {
  if (spec_->action_kind != ActionKind::kDiscrete) {
    throw std::logic_error(spec_->name + ": Step(int) on a " + ActionKindName(spec_->action_kind) +
                           " action space");
  }
  if (action < 0 || action >= spec_->num_actions) {
    throw std::out_of_range(spec_->name + ": action " + std::to_string(action) +
                            " is outside [0, " + std::to_string(spec_->num_actions) + ")");
  }
  if (needs_reset_) throw std::logic_error(spec_->name + ": Step called before Reset");
  CheckBuffer(obs);
  return Book(DoStep(action, obs.data()));
}

StepResult Env::StepBox(std::span<const float> action, std::span<std::byte> obs) {
  if (spec_->action_kind != ActionKind::kBox) {
    throw std::logic_error(spec_->name + ": StepBox on a " + ActionKindName(spec_->action_kind) +
                           " action space");
  }
  if (action.size() != spec_->action_low.size()) {
    throw std::out_of_range(spec_->name + ": box action of " + std::to_string(action.size()) +
                            " values, expected " + std::to_string(spec_->action_low.size()));
  }
  for (size_t i = 0; i < action.size(); ++i) {
    if (!(action[i] >= spec_->action_low[i] && action[i] <= spec_->action_high[i])) {
      throw std::out_of_range(spec_->name + ": action component " + std::to_string(i) + " = " +
                              std::to_string(action[i]) + " is outside [" +
                              std::to_string(spec_->action_low[i]) + ", " +
                              std::to_string(spec_->action_high[i]) + "]");
    }
  }
  if (needs_reset_) throw std::logic_error(spec_->name + ": Step called before Reset");
  CheckBuffer(obs);
  return Book(DoStepBox(action.data(), obs.data()));
}

StepResult Env::Book(StepResult r) {
  episode_return_ += r.reward;
  ++episode_length_;
  if (!r.terminated && spec_->max_episode_steps > 0 &&
      episode_length_ >= spec_->max_episode_steps) {
    r.truncated = true;
  }
  if (r.terminated || r.truncated) needs_reset_ = true;
  return r;
}

namespace {
struct Registry {
  base::Mutex mu;
  std::map<std::string, EnvFactory> envs GUARDED_BY(mu);
};
Registry& R() {
  static Registry registry;
  return registry;
}
}  // namespace

bool RegisterEnv(const std::string& name, EnvFactory factory) {
  Registry& r = R();
  base::MutexLock lock(r.mu);
  if (!r.envs.emplace(name, std::move(factory)).second) {
    base::LogInfo("stampede: environment \"%s\" registered twice\n", name.c_str());
    std::abort();
  }
  return true;
}

base::StatusOr<std::unique_ptr<Env>> MakeEnv(const std::string& name, const EnvOptions& options) {
  EnvFactory factory;
  {
    Registry& r = R();
    base::MutexLock lock(r.mu);
    auto it = r.envs.find(name);
    if (it != r.envs.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : RegisteredEnvs()) known += (known.empty() ? "" : ", ") + n;
    return base::InvalidArgument("unknown environment \"" + name + "\" (registered: " + known + ")");
  }
  try {
    return factory(options);
  } catch (const std::exception& e) {
    return base::InvalidArgument(e.what());
  }
}

std::vector<std::string> RegisteredEnvs() {
  Registry& r = R();
  base::MutexLock lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, f] : r.envs) names.push_back(n);
  return names;
}

}  // namespace stampede::envs
