#include "wire/config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <google/protobuf/stubs/logging.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace stampede {
namespace pb = google::protobuf;

struct LoadedConfig::Locations {
  pb::TextFormat::ParseInfoTree tree;
};

LoadedConfig::LoadedConfig() = default;
LoadedConfig::~LoadedConfig() = default;
LoadedConfig::LoadedConfig(LoadedConfig&&) noexcept = default;
LoadedConfig& LoadedConfig::operator=(LoadedConfig&&) noexcept = default;

namespace {

// The dotted path of the field being parsed at (line, column) of a text-format
// document: the enclosing messages' names plus the last field name before that point.
// Protobuf's own parse errors do not name the field; this lets ours do so.
std::string FieldPathAt(const std::string& text, int line, int column) {
  std::vector<std::string> stack;
  std::string last, ident;
  int l = 0, c = 0;
  auto flush_ident = [&] {
    if (!ident.empty()) last = ident;
    ident.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (l > line || (l == line && c >= column)) break;
    const char ch = text[i];
    if (ch == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i, ++c;
    } else if (ch == '"' || ch == '\'') {
      flush_ident();
      for (++i, ++c; i < text.size() && text[i] != ch && text[i] != '\n'; ++i, ++c) {
        if (text[i] == '\\') ++i, ++c;
      }
    } else if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_' ||
               (!ident.empty() && std::isdigit(static_cast<unsigned char>(ch)))) {
      ident += ch;
    } else {
      flush_ident();
      if (ch == '{' || ch == '<') {
        stack.push_back(last);
        last.clear();
      } else if ((ch == '}' || ch == '>') && !stack.empty()) {
        stack.pop_back();
        last.clear();
      }
    }
    if (ch == '\n') {
      ++l;
      c = 0;
    } else {
      ++c;
    }
  }
  flush_ident();
  std::string path;
  for (const auto& s : stack) path += s + ".";
  return path + last;
}

class CollectErrors : public pb::io::ErrorCollector {
 public:
  CollectErrors(std::string name, const std::string& text) : name_(std::move(name)), doc_(text) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!text_.empty()) text_ += "\n";
    text_ += name_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": ";
    const std::string path = FieldPathAt(doc_, line, column);
    if (!path.empty()) text_ += path + ": ";
    text_ += message;
  }
  const std::string& text() const { return text_; }

 private:
  std::string name_;
  const std::string& doc_;
  std::string text_;
};

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string_view::npos) dot = path.size();
    parts.emplace_back(path.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

// Values of a numeric field at a dotted path (several for a repeated field; none if an
// enclosing message is absent, which means every default applies).
std::vector<double> NumbersAt(const pb::Message& root, std::string_view path) {
  const pb::Message* msg = &root;
  auto parts = SplitPath(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) return {};
    const pb::Reflection* r = msg->GetReflection();
    if (i + 1 < parts.size()) {
      msg = &r->GetMessage(*msg, f);
      continue;
    }
    auto get = [&](int idx) -> double {
      bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32:
          return rep ? r->GetRepeatedInt32(*msg, f, idx) : r->GetInt32(*msg, f);
        case pb::FieldDescriptor::CPPTYPE_INT64:
          return double(rep ? r->GetRepeatedInt64(*msg, f, idx) : r->GetInt64(*msg, f));
        case pb::FieldDescriptor::CPPTYPE_UINT64:
          return double(rep ? r->GetRepeatedUInt64(*msg, f, idx) : r->GetUInt64(*msg, f));
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
          return rep ? r->GetRepeatedDouble(*msg, f, idx) : r->GetDouble(*msg, f);
        case pb::FieldDescriptor::CPPTYPE_FLOAT:
          return rep ? r->GetRepeatedFloat(*msg, f, idx) : r->GetFloat(*msg, f);
        default:
          return 0;
      }
    };
    std::vector<double> out;
    if (f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(*msg, f); ++k) out.push_back(get(k));
    } else {
      out.push_back(get(0));
    }
    return out;
  }
  return {};
}

std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

std::string LoadedConfig::Where(std::string_view path) const {
  if (overridden_.count(std::string(path))) return "--set " + std::string(path);
  if (!locations_) return source;
  const pb::TextFormat::ParseInfoTree* tree = &locations_->tree;
  const pb::Message* msg = &config;
  auto parts = SplitPath(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    // "tasks[2]" names an element of a repeated message.
    std::string name = parts[i];
    int element = 0;
    if (const size_t bracket = name.find('['); bracket != std::string::npos) {
      element = std::atoi(name.c_str() + bracket + 1);
      name.resize(bracket);
    }
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(name);
    if (f == nullptr || tree == nullptr) return source;
    int index = f->is_repeated() ? element : -1;
    if (i + 1 < parts.size()) {
      if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) return source;
      const pb::Reflection* r = msg->GetReflection();
      if (f->is_repeated() && (element < 0 || element >= r->FieldSize(*msg, f))) return source;
      tree = tree->GetTreeForNested(f, index);
      msg = f->is_repeated() ? &r->GetRepeatedMessage(*msg, f, element) : &r->GetMessage(*msg, f);
      continue;
    }
    pb::TextFormat::ParseLocation loc = tree->GetLocation(f, index);
    if (loc.line < 0) return source;
    return source + ":" + std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1);
  }
  return source;
}

bool ParseConfigText(const std::string& text, const std::string& name, config::Config* out,
                     std::string* error) {
  CollectErrors errors(name, text);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, out)) {
    *error = errors.text().empty() ? name + ": cannot parse config" : errors.text();
    return false;
  }
  return true;
}

bool ApplyOverride(const std::string& assignment, config::Config* cfg, std::string* error,
                   std::string* path_out) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    *error = "--set " + assignment + ": expected path=value (e.g. learner.batch_size=64)";
    return false;
  }
  std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  if (path_out) *path_out = path;
  pb::Message* msg = cfg;
  auto parts = SplitPath(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) {
      *error = "--set " + assignment + ": " + msg->GetDescriptor()->full_name() +
               " has no field named \"" + parts[i] + "\"";
      return false;
    }
    const pb::Reflection* r = msg->GetReflection();
    if (i + 1 < parts.size()) {
      if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE || f->is_repeated()) {
        *error = "--set " + assignment + ": \"" + parts[i] + "\" is not a message field";
        return false;
      }
      msg = r->MutableMessage(msg, f);
      continue;
    }
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      *error = "--set " + assignment + ": \"" + parts[i] +
               "\" is a message; set one of its fields (" + path + ".<field>=...)";
      return false;
    }
    std::vector<std::string> values;
    if (f->is_repeated()) {
      r->ClearField(msg, f);
      std::stringstream ss(value);
      std::string item;
      while (std::getline(ss, item, ',')) values.push_back(item);
    } else {
      values.push_back(value);
    }
    for (std::string v : values) {
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING &&
          (v.empty() || (v.front() != '"' && v.front() != '\''))) {
        v = "\"" + v + "\"";
      }
      pb::LogSilencer quiet;  // our message below says what was wrong
      if (!pb::TextFormat::ParseFieldValueFromString(v, f, msg)) {
        *error = "--set " + assignment + ": \"" + value + "\" is not a valid " +
                 f->cpp_type_name() + " for " + path;
        return false;
      }
    }
    return true;
  }
  return false;
}

bool LoadConfig(const std::string& path, const std::vector<std::string>& overrides,
                LoadedConfig* out, std::string* error) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    *error = path + ": not a config file (a directory)";
    return false;
  }
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    *error = path + ": not a config file (not a regular file)";
    return false;
  }
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open config file";
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  out->source = path;
  out->config.Clear();
  out->locations_ = std::make_unique<LoadedConfig::Locations>();
  const std::string text = buf.str();
  CollectErrors errors(path, text);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&out->locations_->tree);
  if (!parser.ParseFromString(text, &out->config)) {
    *error = errors.text().empty() ? path + ": cannot parse config" : errors.text();
    return false;
  }
  for (const auto& o : overrides) {
    std::string p;
    if (!ApplyOverride(o, &out->config, error, &p)) return false;
    out->overridden_.insert(p);
  }
  return ValidateConfig(*out, error);
}

namespace {
struct Range {
  const char* path;
  double lo;
  double hi;
  bool lo_open;
  bool integer;
};
// Every numeric field with a limit. Values outside stop the program before start-up.
constexpr Range kRanges[] = {
    {"env.max_episode_steps", 0, 1e9, false, true},
    {"net.hidden_sizes", 1, 65536, false, true},
    {"net.fc_size", 1, 65536, false, true},
    {"net.lstm_size", 0, 65536, false, true},
    {"actors.num_actors", 1, 1024, false, true},
    {"actors.envs_per_actor", 1, 4096, false, true},
    {"actors.unroll_length", 1, 10000, false, true},
    {"actors.first_params_timeout_s", 0, 1e6, true, false},
    {"actors.max_policy_lag", 0, 1e9, false, true},
    {"actors.max_params_age_s", 0, 1e9, false, false},
    {"learner.max_policy_lag", 0, 1e9, false, true},
    {"learner.batch_size", 1, 65536, false, true},
    {"learner.reward_clip", 0, 1e9, false, false},
    {"learner.reward_scale", 0, 1e9, true, false},
    {"learner.discount", 0, 1, false, false},
    {"learner.lambda", 0, 1, false, false},
    {"learner.clip_rho_threshold", -1e9, 1e9, false, false},
    {"learner.clip_c_threshold", -1e9, 1e9, false, false},
    {"learner.clip_pg_rho_threshold", -1e9, 1e9, false, false},
    {"learner.baseline_cost", 0, 1e6, false, false},
    {"learner.entropy_cost", 0, 1e6, false, false},
    {"learner.max_grad_norm", -1e30, 1e30, false, false},
    {"learner.publish_every", 1, 1e6, false, true},
    {"learner.queue_capacity", 1, 1e7, false, true},
    {"learner.optimizer.learning_rate", 0, 10, true, false},
    {"learner.optimizer.decay", 0, 1, false, false},
    {"learner.optimizer.momentum", 0, 1, false, false},
    {"learner.optimizer.epsilon", 0, 1e6, true, false},
    {"learner.status_interval_s", 0, 60, true, false},
    {"learner.checkpoint_interval_s", 0, 1e9, false, false},
    {"ps.num_shards", 1, 64, false, true},
    {"ps.versions_kept", 1, 1024, false, true},
    {"stop.total_env_frames", 1, 1e15, false, true},
    {"stop.max_learner_steps", 0, 1e15, false, true},
    {"stop.target_return", -1e30, 1e30, false, false},
    {"cluster.max_message_bytes", 1024, 1e12, false, true},
    {"coordinator.progress_interval_s", 0, 5, true, false},
    {"coordinator.heartbeat_timeout_s", 0, 1e6, true, false},
    {"coordinator.max_actor_restarts", 0, 1e9, false, true},
    {"coordinator.shutdown_grace_s", 0, 3600, true, false},
    {"coordinator.stall_timeout_s", 0, 1e6, false, false},
    {"coordinator.max_status_bytes", 4096, 1 << 30, false, true},
    {"wire.max_abs_observation", 0, 3e38, true, false},
    {"wire.max_abs_reward", 0, 3e38, true, false},
    {"learner.popart_beta", 0, 1, true, false},
    {"ps.partition_bytes", 0, 1e15, false, true},
    {"suite.obs_shape", 1, 65536, false, true},
    {"suite.task_lines_every", 0, 1e6, false, true},
    {"learner.num_learners", 1, 64, false, true},
    {"learner.checkpoints_kept", 1, 1000, false, true},
    {"learner.replicas_to_aggregate", 0, 64, false, true},
    {"learner.max_gradient_staleness", 0, 1e6, false, true},
    {"coordinator.max_restarts", 0, 1e6, false, true},
    {"coordinator.restart_backoff_s", 0, 3600, false, false},
    {"learner.replay.fraction", 0, 1, false, false},
    {"learner.replay.capacity", 1, 1e8, false, true},
    {"learner.replay.priority_exponent", 0, 10, false, false},
    {"learner.replay.samples_per_insert", 0, 1e6, false, false},
    {"learner.replay.error_buffer", 0, 1e12, false, false},
    {"learner.replay.min_size", 1, 1e8, false, true},
    {"learner.replay.max_times_sampled", 0, 1e9, false, true},
    {"learner.replay.max_bytes", 0, 1e13, false, true},
    {"learner.replay.importance_exponent", 0, 1, false, false},
    {"learner.replay.trust_region_kl", 0, 1e6, false, false},
};
}  // namespace

namespace {
// The tasks of a multi-task config (wire/tasks.h assigns actors to them).
bool ValidateTasks(const LoadedConfig& loaded, std::string* error) {
  const auto& c = loaded.config;
  const std::string rule = c.suite().obs_rule();
  if (rule != "pad" && rule != "resize") {
    *error = loaded.Where("suite.obs_rule") + ": suite.obs_rule: \"" + rule +
             "\" is not known, expected \"pad\" or \"resize\"";
    return false;
  }
  if (c.tasks().empty()) return true;
  config::EnvConfig env = c.env();
  env.clear_resolved_spec();
  if (env.ByteSizeLong() > 0) {
    *error = loaded.Where("env") + ": env and tasks are both set: a multi-task config gives each task's env "
             "inside tasks { ... } (env alone is the one-task shorthand)";
    return false;
  }
  std::set<std::string> names;
  int64_t fixed = 0, by_weight = 0;
  for (int i = 0; i < c.tasks_size(); ++i) {
    const auto& t = c.tasks(i);
    const std::string at = "tasks[" + std::to_string(i) + "]";
    auto fail = [&](const std::string& field, const std::string& what) {
      *error = loaded.Where(at + "." + field) + ": " + at + "." + field + " (task \"" + t.name() + "\"): " + what;
      return false;
    };
    if (t.name().empty() || t.name().find_first_not_of(
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos) {
      return fail("name", "expected a non-empty name of letters, digits, '_', '.' or '-'");
    }
    if (!names.insert(t.name()).second) return fail("name", "another task has this name");
    if (!t.has_env()) return fail("env", "the task has no env");
    if (!t.env().plugin().empty() && !t.env().gym_id().empty()) {
      return fail("env", "both plugin and gym_id are set, expected one");
    }
    if (t.actors() < 0 || t.actors() > 1024) return fail("actors", std::to_string(t.actors()) + " is out of range, expected [0, 1024]");
    if (!(std::isfinite(t.weight()) && t.weight() > 0)) return fail("weight", FormatNumber(t.weight()) + " is not a positive number");
    if (!std::isfinite(t.random_score()) || !std::isfinite(t.reference_score()) || !std::isfinite(t.target_return())) {
      return fail("reference_score", "random_score, reference_score and target_return must be finite");
    }
    if (t.has_reference_score() && t.reference_score() == t.random_score()) {
      return fail("reference_score", "equals random_score, so scores cannot be normalised");
    }
    if (t.actors() > 0) {
      fixed += t.actors();
    } else {
      ++by_weight;
    }
  }
  const int64_t actors = c.actors().num_actors();
  if (fixed + by_weight > actors) {
    *error = loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             " actors cannot run the " + std::to_string(c.tasks_size()) + " tasks (" + std::to_string(fixed) +
             " named in tasks.actors, and at least one each for the " + std::to_string(by_weight) +
             " tasks shared by weight)";
    return false;
  }
  if (by_weight == 0 && fixed != actors) {
    *error = loaded.Where("actors.num_actors") + ": actors.num_actors: " + std::to_string(actors) +
             ", but the tasks' actors add up to " + std::to_string(fixed) + " (set them equal, or leave a task's actors at 0)";
    return false;
  }
  return true;
}
}  // namespace

bool ValidateConfig(const LoadedConfig& loaded, std::string* error) {
  for (const Range& range : kRanges) {
    for (double v : NumbersAt(loaded.config, range.path)) {
      bool ok = std::isfinite(v) && (range.lo_open ? v > range.lo : v >= range.lo) && v <= range.hi;
      if (ok) continue;
      *error = loaded.Where(range.path) + ": " + range.path + ": " + FormatNumber(v) +
               " is out of range, expected " + (range.integer ? "an integer" : "a number") +
               " in " + (range.lo_open ? "(" : "[") + FormatNumber(range.lo) + ", " +
               FormatNumber(range.hi) + "]";
      return false;
    }
  }
  const auto& c = loaded.config;
  const std::string act = c.net().activation();
  if (act != "relu" && act != "tanh") {
    *error = loaded.Where("net.activation") + ": net.activation: \"" + act +
             "\" is not known, expected \"relu\" or \"tanh\"";
    return false;
  }
  if (c.net().hidden_sizes_size() > 64) {
    *error = loaded.Where("net.hidden_sizes") + ": net.hidden_sizes: " +
             std::to_string(c.net().hidden_sizes_size()) + " layers, expected at most 64";
    return false;
  }
  const std::string torso = c.net().torso();
  if (torso != "mlp" && torso != "shallow_cnn" && torso != "deep_resnet" && torso != "small_cnn") {
    *error = loaded.Where("net.torso") + ": net.torso: \"" + torso +
             "\" is not known, expected \"mlp\", \"shallow_cnn\", \"deep_resnet\" or \"small_cnn\"";
    return false;
  }
  const std::string device = c.learner().device();
  if (device != "cpu" && !(device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
                           device.find_first_not_of("0123456789", 5) == std::string::npos)) {
    *error = loaded.Where("learner.device") + ": learner.device: \"" + device +
             "\" is not known, expected \"cpu\" or \"cuda:N\" (N a GPU index)";
    return false;
  }
  if (!c.env().plugin().empty() && !c.env().gym_id().empty()) {
    *error = loaded.Where("env.gym_id") + ": env: both plugin and gym_id are set, expected one "
             "(a plug-in library, a gymnasium id, or neither for a built-in env)";
    return false;
  }
  const std::string vec = c.env().gym_vectorization();
  if (vec != "" && vec != "sync") {
    *error = loaded.Where("env.gym_vectorization") + ": env.gym_vectorization: \"" + vec +
             "\" is not known, expected \"\" (the env's own vector env) or \"sync\"";
    return false;
  }
  if (c.learner().queue_capacity() < c.learner().batch_size()) {
    *error = loaded.Where("learner.queue_capacity") + ": learner.queue_capacity: " +
             std::to_string(c.learner().queue_capacity()) +
             " unrolls cannot hold one batch, expected at least learner.batch_size (" +
             std::to_string(c.learner().batch_size()) + ")";
    return false;
  }
  if (!ValidateTasks(loaded, error)) return false;
  const std::string placement = c.ps().placement();
  if (placement != "greedy" && placement != "round_robin" && placement != "contiguous") {
    *error = loaded.Where("ps.placement") + ": ps.placement: \"" + placement +
             "\" is not known, expected \"greedy\", \"round_robin\" or \"contiguous\"";
    return false;
  }
  {
    const auto& lc = c.learner();
    const std::string mode = lc.update_mode();
    if (mode != "relay" && mode != "sync" && mode != "async") {
      *error = loaded.Where("learner.update_mode") + ": learner.update_mode: \"" + mode +
               "\" is not known, expected \"relay\", \"sync\" or \"async\"";
      return false;
    }
    if (mode == "relay" && lc.num_learners() > 1) {
      *error = loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners need learner.update_mode \"sync\" or \"async\" (in \"relay\" one learner owns the optimizer)";
      return false;
    }
    if (lc.replicas_to_aggregate() > lc.num_learners()) {
      *error = loaded.Where("learner.replicas_to_aggregate") + ": learner.replicas_to_aggregate: " +
               std::to_string(lc.replicas_to_aggregate()) + " is more than learner.num_learners (" +
               std::to_string(lc.num_learners()) + ")";
      return false;
    }
    if (mode != "relay" && (lc.device() != "cpu" || lc.popart())) {
      *error = loaded.Where("learner.update_mode") + ": learner.update_mode \"" + mode +
               "\" runs on the CPU learner without PopArt (learner.device \"cpu\", learner.popart false)";
      return false;
    }
    const auto& rc = lc.replay();
    if (rc.fraction() >= 1) {
      *error = loaded.Where("learner.replay.fraction") + ": learner.replay.fraction: " + FormatNumber(rc.fraction()) +
               " leaves no fresh unrolls in a batch, expected less than 1 (LASER: 0.875 at most)";
      return false;
    }
    const std::string sel = rc.selector();
    if (sel != "uniform" && sel != "fifo" && sel != "prioritized") {
      *error = loaded.Where("learner.replay.selector") + ": learner.replay.selector: \"" + sel +
               "\" is not known, expected \"uniform\", \"fifo\" or \"prioritized\"";
      return false;
    }
    if (rc.fraction() > 0 && lc.device() != "cpu" &&
        (sel == "prioritized" || rc.importance_exponent() > 0 || rc.trust_region_kl() > 0 ||
         rc.entropy_online_only())) {
      *error = loaded.Where("learner.replay") + ": learner.replay: priorities, importance weights, the trust region "
               "and entropy_online_only need the CPU learner's per-unroll loss; on learner.device \"" + lc.device() +
               "\" use selector \"uniform\" or \"fifo\" with entropy_online_only false";
      return false;
    }
    if (lc.num_learners() > c.actors().num_actors()) {
      *error = loaded.Where("learner.num_learners") + ": learner.num_learners: " + std::to_string(lc.num_learners()) +
               " learners, but only " + std::to_string(c.actors().num_actors()) +
               " actors to feed them (actor a sends to learner a % num_learners)";
      return false;
    }
    if (c.cluster().learners_size() != 0 && c.cluster().learners_size() != lc.num_learners()) {
      *error = loaded.Where("cluster.learners") + ": cluster.learners: " + std::to_string(c.cluster().learners_size()) +
               " endpoints given, expected one per learner (learner.num_learners = " +
               std::to_string(lc.num_learners()) + ")";
      return false;
    }
  }
  if (c.cluster().ps_size() != 0 && c.cluster().ps_size() != c.ps().num_shards()) {
    *error = loaded.Where("cluster.ps") + ": cluster.ps: " + std::to_string(c.cluster().ps_size()) +
             " endpoints given, expected one per shard (ps.num_shards = " +
             std::to_string(c.ps().num_shards()) + ")";
    return false;
  }
  return true;
}

std::string LearnerEndpoint(const config::Config& cfg, int learner) {
  if (learner >= 0 && learner < cfg.cluster().learners_size()) return cfg.cluster().learners(learner);
  return learner == 0 ? cfg.cluster().learner() : std::string();
}

int LearnerOfActor(const config::Config& cfg, int actor) {
  return actor % std::max(1, cfg.learner().num_learners());
}

bool ShardsOwnOptimizer(const config::Config& cfg) { return cfg.learner().update_mode() != "relay"; }

std::string ConfigToText(const config::Config& cfg) {
  std::string out;
  pb::TextFormat::Printer printer;
  printer.PrintToString(cfg, &out);
  return out;
}

bool ResolvedStepShape(const config::Config& cfg, wire::StepShape* out, std::string* error) {
  if (!cfg.env().has_resolved_spec()) {
    *error = "the config has no env.resolved_spec: start roles from the RUN_DIR/config.textproto "
             "that `stampede run` writes, or add the spec that `stampede spec CONFIG` prints";
    return false;
  }
  const config::EnvSpec& s = cfg.env().resolved_spec();
  if (s.obs_shape_size() < 1 || s.obs_shape_size() > 3) {
    *error = "env.resolved_spec: observation rank " + std::to_string(s.obs_shape_size()) +
             ", expected rank 1 to 3";
    return false;
  }
  out->action_kind = wire::ActionKind(int(s.action_kind()));
  out->action_nvec.assign(s.action_nvec().begin(), s.action_nvec().end());
  out->action_low.assign(s.action_low().begin(), s.action_low().end());
  out->action_high.assign(s.action_high().begin(), s.action_high().end());
  constexpr int kMaxComponents = 64;  // net/distribution.h kMaxActionComponents
  switch (out->action_kind) {
    case wire::ActionKind::kDiscrete:
      out->action_nvec.clear();
      out->num_actions = s.num_actions();
      if (s.num_actions() <= 0) {
        *error = "env.resolved_spec: " + std::to_string(s.num_actions()) +
                 " discrete actions, expected at least one";
        return false;
      }
      break;
    case wire::ActionKind::kMultiDiscrete: {
      out->num_actions = 0;
      for (int k : out->action_nvec) {
        if (k <= 0) {
          *error = "env.resolved_spec: a multi-discrete component with " + std::to_string(k) + " actions";
          return false;
        }
        out->num_actions += k;
      }
      if (out->action_nvec.empty() || out->action_nvec.size() > kMaxComponents) {
        *error = "env.resolved_spec: " + std::to_string(out->action_nvec.size()) +
                 " multi-discrete components, expected 1 to " + std::to_string(kMaxComponents);
        return false;
      }
      break;
    }
    case wire::ActionKind::kBox:
      if (out->action_low.empty() || out->action_low.size() > kMaxComponents ||
          out->action_low.size() != out->action_high.size()) {
        *error = "env.resolved_spec: a box action space of " + std::to_string(out->action_low.size()) +
                 " dimensions (" + std::to_string(out->action_high.size()) +
                 " upper bounds), expected 1 to " + std::to_string(kMaxComponents) + " with both bounds";
        return false;
      }
      out->num_actions = 2 * int(out->action_low.size());
      break;
    default:
      *error = "env.resolved_spec: unknown action kind " + std::to_string(int(s.action_kind()));
      return false;
  }
  out->obs_shape.assign(s.obs_shape().begin(), s.obs_shape().end());
  for (int d : out->obs_shape) {
    if (d <= 0) {
      *error = "env.resolved_spec: observation dimension " + std::to_string(d) + " is not positive";
      return false;
    }
  }
  out->obs_dtype = s.obs_dtype() == config::UINT8 ? wire::DType::kUint8 : wire::DType::kFloat32;
  out->core_state_size = 2 * cfg.net().lstm_size();
  return true;
}

std::vector<int> HiddenSizes(const config::Config& cfg) {
  if (cfg.net().hidden_sizes_size() == 0) return {64, 64};
  return {cfg.net().hidden_sizes().begin(), cfg.net().hidden_sizes().end()};
}

}  // namespace stampede
