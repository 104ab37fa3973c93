#include "config/tasks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "config/config.h"

namespace stampede::config {

int NumTasks(const config::Config& cfg) { return std::max(1, cfg.tasks_size()); }

std::string TaskName(const config::Config& cfg, int task) {
  if (cfg.tasks_size() > 0) return cfg.tasks(task).name();
  return cfg.env().gym_id().empty() ? cfg.env().name() : cfg.env().gym_id();
}

std::vector<int> AssignActors(const config::Config& cfg) {
  const int n = cfg.actors().num_actors();
  if (cfg.tasks_size() == 0) return std::vector<int>(n, 0);
  std::vector<int> count(cfg.tasks_size(), 0);
  int left = n;
  double weight = 0;
  for (int t = 0; t < cfg.tasks_size(); ++t) {
    if (cfg.tasks(t).actors() > 0) {
      count[t] = cfg.tasks(t).actors();
      left -= count[t];
    } else {
      count[t] = 1;  // at least one each
      --left;
      weight += cfg.tasks(t).weight();
    }
  }
  if (weight > 0 && left > 0) {
    // The rest by weight: whole shares first, then the largest remainders.
    const int extra = left;
    std::vector<std::pair<double, int>> remainders;
    for (int t = 0; t < cfg.tasks_size(); ++t) {
      if (cfg.tasks(t).actors() > 0) continue;
      const double share = extra * cfg.tasks(t).weight() / weight;
      const int whole = int(std::floor(share));
      count[t] += whole;
      left -= whole;
      remainders.push_back({-(share - whole), t});
    }
    std::sort(remainders.begin(), remainders.end());
    for (size_t i = 0; left > 0 && !remainders.empty(); ++i, --left) ++count[remainders[i % remainders.size()].second];
  }
  std::vector<int> out;
  for (int t = 0; t < cfg.tasks_size(); ++t) out.insert(out.end(), size_t(std::max(0, count[t])), t);
  out.resize(size_t(n), cfg.tasks_size() - 1);  // only if the config was not validated
  return out;
}

int TaskOfActor(const config::Config& cfg, int actor_index) {
  if (cfg.tasks_size() == 0) return 0;
  const auto tasks = AssignActors(cfg);
  if (actor_index < 0 || actor_index >= int(tasks.size())) return actor_index % cfg.tasks_size();
  return tasks[size_t(actor_index)];
}

config::Config TaskEnvConfig(const config::Config& cfg, int task) {
  config::Config out = cfg;
  if (cfg.tasks_size() > 0) *out.mutable_env() = cfg.tasks(task).env();
  return out;
}

namespace {
const char* DTypeText(config::DType d) { return d == config::UINT8 ? "uint8" : "float32"; }
std::string ShapeText(const google::protobuf::RepeatedField<int32_t>& s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

base::Status JoinTaskSpecs(const config::Config& cfg, config::EnvSpec* joint) {
  if (cfg.tasks_size() == 0) {
    *joint = cfg.env().resolved_spec();
    return base::OkStatus();
  }
  const auto& first = cfg.tasks(0).env().resolved_spec();
  const config::ObsRule::Name rule = ChoiceOf<config::ObsRule>(cfg.suite().obs_rule());
  config::EnvSpec j;
  std::string names;
  bool flatten = false;  // "pad" across ranks: every observation flattened
  int64_t largest = 0;
  for (int t = 0; t < cfg.tasks_size(); ++t) {
    const auto& task = cfg.tasks(t);
    const auto& s = task.env().resolved_spec();
    auto fail = [&](const std::string& what) {
      return base::InvalidArgument("task \"" + task.name() + "\" cannot join the suite: " + what);
    };
    names += (t ? "," : "") + task.name();
    if (s.obs_dtype() != first.obs_dtype()) {
      return fail(std::string("its observations are ") + DTypeText(s.obs_dtype()) + ", task \"" +
                  cfg.tasks(0).name() + "\"'s are " + DTypeText(first.obs_dtype()));
    }
    if (s.obs_shape_size() != first.obs_shape_size() && rule == config::ObsRule::pad) {
      flatten = true;  // vectors of the largest size
    } else if (s.obs_shape_size() != first.obs_shape_size()) {
      return fail("its observations " + ShapeText(s.obs_shape()) + " have another rank than task \"" +
                  cfg.tasks(0).name() + "\"'s " + ShapeText(first.obs_shape()) +
                  " (suite.obs_rule pads or resizes within one rank)");
    }
    if (rule == config::ObsRule::resize && s.obs_shape_size() < 2) {
      return fail("suite.obs_rule \"resize\" needs image observations ([H, W] or [C, H, W]), got " +
                  ShapeText(s.obs_shape()));
    }
    if (cfg.tasks_size() > 1 && s.action_kind() != config::DISCRETE) {
      return fail("a suite's tasks share one discrete action space, but this task's actions are not discrete");
    }
    if (s.frames_per_step() != first.frames_per_step()) {
      return fail("its frames_per_step is " + std::to_string(s.frames_per_step()) + ", task \"" +
                  cfg.tasks(0).name() + "\"'s is " + std::to_string(first.frames_per_step()));
    }
    int64_t size = 1;
    for (int d : s.obs_shape()) size *= d;
    largest = std::max(largest, size);
    if (t == 0) {
      j = s;
      continue;
    }
    for (int d = 0; d < s.obs_shape_size() && d < j.obs_shape_size(); ++d) {
      j.set_obs_shape(d, std::max(j.obs_shape(d), s.obs_shape(d)));
    }
    if (s.action_kind() == config::DISCRETE) j.set_num_actions(std::max(j.num_actions(), s.num_actions()));
    j.set_max_episode_steps(std::max(j.max_episode_steps(), s.max_episode_steps()));
  }
  if (flatten) {
    j.clear_obs_shape();
    j.add_obs_shape(int(largest));
  }
  if (rule == config::ObsRule::resize && cfg.suite().obs_shape_size() > 0) {
    if (cfg.suite().obs_shape_size() != j.obs_shape_size()) {
      return base::InvalidArgument("suite.obs_shape " + ShapeText(cfg.suite().obs_shape()) +
                                   " has another rank than the tasks' observations " + ShapeText(j.obs_shape()));
    }
    for (int d = 0; d < j.obs_shape_size(); ++d) {
      // Channels are padded, never resized: at least the most any task has.
      const bool channel = j.obs_shape_size() == 3 && d == 0;
      j.set_obs_shape(d, channel ? std::max(j.obs_shape(d), cfg.suite().obs_shape(d)) : cfg.suite().obs_shape(d));
    }
  }
  j.set_name("suite(" + names + ")");
  *joint = j;
  return base::OkStatus();
}

std::vector<int> TaskActionLimits(const config::Config& cfg) {
  std::vector<int> out;
  for (int t = 0; t < NumTasks(cfg); ++t) {
    const auto& s = cfg.tasks_size() > 0 ? cfg.tasks(t).env().resolved_spec() : cfg.env().resolved_spec();
    out.push_back(s.action_kind() == config::DISCRETE ? s.num_actions() : std::numeric_limits<int>::max());
  }
  return out;
}

double NormalisedScore(const config::TaskConfig& task, double score) {
  if (!task.has_reference_score() || task.reference_score() == task.random_score()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return (score - task.random_score()) / (task.reference_score() - task.random_score());
}

std::pair<double, double> MeanAndMedian(std::vector<double> v) {
  if (v.empty()) return {std::nan(""), std::nan("")};
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const size_t n = v.size();
  return {sum / double(n), n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])};
}

ObsAdapter::ObsAdapter(std::vector<int> from, std::vector<int> to, bool uint8, const std::string& rule)
    : elem_(uint8 ? 1 : 4) {
  long nf = 1, nt = 1;
  if (from.size() != to.size()) {
    // "pad" across ranks: the task's observation as a flat vector.
    long n = 1;
    for (int d : from) n *= d;
    from = {int(n)};
  }
  for (int d : from) nf *= d;
  for (int d : to) nt *= d;
  from_bytes_ = size_t(nf) * elem_;
  to_bytes_ = size_t(nt) * elem_;
  identity_ = from == to;
  if (identity_) return;
  source_.assign(size_t(nt), -1);
  const size_t rank = to.size();
  std::vector<int> idx(rank, 0);
  for (long o = 0; o < nt; ++o) {
    // idx: the joint element's index; find the task element it takes.
    long src = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      int i = idx[d];
      const bool spatial = rule == "resize" && !(rank == 3 && d == 0);
      if (spatial) {
        i = int((long(i) * from[d]) / to[d]);  // nearest neighbour (floor)
      } else if (i >= from[d]) {
        inside = false;  // padding
        break;
      }
      src = src * from[d] + i;
    }
    if (inside) source_[size_t(o)] = src;
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < to[d]) break;
      idx[d] = 0;
    }
  }
}

void ObsAdapter::Apply(const void* in, int n, void* out) const {
  if (identity_) {
    std::memcpy(out, in, from_bytes_ * size_t(n));
    return;
  }
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (int r = 0; r < n; ++r) {
    const unsigned char* s = src + size_t(r) * from_bytes_;
    unsigned char* o = dst + size_t(r) * to_bytes_;
    for (size_t k = 0; k < source_.size(); ++k) {
      if (source_[k] < 0) {
        std::memset(o + k * elem_, 0, elem_);
      } else {
        std::memcpy(o + k * elem_, s + size_t(source_[k]) * elem_, elem_);
      }
    }
  }
}

}  // namespace stampede::config
