#include "config/config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <google/protobuf/stubs/logging.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/atari.h"
#include "config/config_detail.h"

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

}  // namespace

namespace config_detail {

namespace {
// Value `idx` of numeric field `f` of `msg` (idx ignored for a singular field).
double NumberAt(const pb::Message& msg, const pb::FieldDescriptor* f, int idx) {
  const pb::Reflection* r = msg.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(msg, f, idx) : r->GetInt32(msg, f);
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return double(rep ? r->GetRepeatedInt64(msg, f, idx) : r->GetInt64(msg, f));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(msg, f, idx) : r->GetUInt32(msg, f);
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return double(rep ? r->GetRepeatedUInt64(msg, f, idx) : r->GetUInt64(msg, f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(msg, f, idx) : r->GetDouble(msg, f);
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(msg, f, idx) : r->GetFloat(msg, f);
    default:
      return 0;
  }
}

bool IsInteger(const pb::FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// Messages nest a few levels; this bounds a schema that ever referred to itself.
constexpr int kMaxDepth = 16;

std::optional<OutOfRange> Walk(const pb::Message& m, const std::string& prefix, int depth) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix + f->name();
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      // A oneof's other members are not there: their defaults are no one's values.
      if (depth >= kMaxDepth || (f->containing_oneof() != nullptr && !r->HasField(m, f))) continue;
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          if (auto bad = Walk(r->GetRepeatedMessage(m, f, k), path + "[" + std::to_string(k) + "].", depth + 1)) {
            return bad;
          }
        }
      } else if (auto bad = Walk(r->GetMessage(m, f), path + ".", depth + 1)) {
        return bad;
      }
      continue;
    }
    const pb::FieldOptions& o = f->options();
    if (const pb::EnumDescriptor* names = ChoicesOf(*f)) {
      const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
      for (int k = 0; k < n; ++k) {
        const std::string v = f->is_repeated() ? r->GetRepeatedString(m, f, k) : r->GetString(m, f);
        if (v != f->default_value_string() && names->FindValueByName(v) == nullptr) {
          return OutOfRange{path, "\"" + v + "\" is not known, expected " + DeclaredRange(*f)};
        }
      }
      continue;
    }
    if (!o.HasExtension(config::min) && !o.HasExtension(config::max)) continue;
    const double lo = o.HasExtension(config::min) ? o.GetExtension(config::min) : -HUGE_VAL;
    const double hi = o.HasExtension(config::max) ? o.GetExtension(config::max) : HUGE_VAL;
    const bool lo_open = o.GetExtension(config::min_open), hi_open = o.GetExtension(config::max_open);
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int k = 0; k < n; ++k) {
      const double v = NumberAt(m, f, k);
      const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
      if (!ok) {
        return OutOfRange{path, FormatNumber(v) + " is out of range, expected " +
                                    (IsInteger(*f) ? "an integer" : "a number") + " in " + DeclaredRange(*f)};
      }
    }
  }
  return std::nullopt;
}
}  // namespace

const pb::EnumDescriptor* ChoicesOf(const pb::FieldDescriptor& f) {
  if (f.cpp_type() != pb::FieldDescriptor::CPPTYPE_STRING || !f.options().HasExtension(config::choices)) return nullptr;
  return config::Config::descriptor()->file()->pool()->FindEnumTypeByName(
      "stampede.config." + f.options().GetExtension(config::choices) + ".Name");
}

std::string DeclaredRange(const pb::FieldDescriptor& f) {
  if (const pb::EnumDescriptor* names = ChoicesOf(f)) {
    // The default is always allowed: listed first where it is not one of the names ("").
    std::vector<std::string> all;
    if (names->FindValueByName(f.default_value_string()) == nullptr) all.push_back(f.default_value_string());
    for (int i = 0; i < names->value_count(); ++i) all.push_back(names->value(i)->name());
    std::string s;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i > 0) s += i + 1 == all.size() ? " or " : ", ";
      s += "\"" + all[i] + "\"";
    }
    return s;
  }
  const pb::FieldOptions& o = f.options();
  if (!o.HasExtension(config::min) && !o.HasExtension(config::max)) return {};
  const std::string lo = o.HasExtension(config::min) ? FormatNumber(o.GetExtension(config::min)) : "-inf";
  const std::string hi = o.HasExtension(config::max) ? FormatNumber(o.GetExtension(config::max)) : "inf";
  return std::string(o.GetExtension(config::min_open) ? "(" : "[") + lo + ", " + hi +
         (o.GetExtension(config::max_open) ? ")" : "]");
}

std::optional<OutOfRange> FirstOutOfRange(const pb::Message& m, const std::string& prefix) {
  return Walk(m, prefix, 0);
}

std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace config_detail


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

base::Status ParseConfigText(const std::string& text, const std::string& name, config::Config* out) {
  CollectErrors errors(name, text);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, out)) {
    return base::InvalidArgument(errors.text().empty() ? name + ": cannot parse config" : errors.text());
  }
  return base::OkStatus();
}

base::Status ApplyOverride(const std::string& assignment, config::Config* cfg, std::string* path_out) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return base::InvalidArgument("--set " + assignment + ": expected path=value (e.g. learner.batch_size=64)");
  }
  std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  if (path_out) *path_out = path;
  pb::Message* msg = cfg;
  auto parts = SplitPath(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) {
      return base::InvalidArgument("--set " + assignment + ": " + msg->GetDescriptor()->full_name() +
               " has no field named \"" + parts[i] + "\"");
    }
    const pb::Reflection* r = msg->GetReflection();
    if (i + 1 < parts.size()) {
      if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE || f->is_repeated()) {
        return base::InvalidArgument("--set " + assignment + ": \"" + parts[i] + "\" is not a message field");
      }
      msg = r->MutableMessage(msg, f);
      continue;
    }
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      return base::InvalidArgument("--set " + assignment + ": \"" + parts[i] +
               "\" is a message; set one of its fields (" + path + ".<field>=...)");
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
        return base::InvalidArgument("--set " + assignment + ": \"" + value + "\" is not a valid " +
                 f->cpp_type_name() + " for " + path);
      }
    }
    return base::OkStatus();
  }
  return base::InvalidArgument("--set " + assignment + ": no field path");
}

base::StatusOr<double> NumberAt(const config::Config& cfg, const std::string& path) {
  const pb::Message* msg = &cfg;
  const auto parts = SplitPath(path);
  if (parts.empty()) return base::InvalidArgument("\"" + path + "\": no field path");
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) {
      return base::InvalidArgument(path + ": " + msg->GetDescriptor()->full_name() + " has no field named \"" + parts[i] +
                                   "\"");
    }
    if (f->is_repeated()) return base::InvalidArgument(path + ": \"" + parts[i] + "\" is a repeated field");
    const pb::Reflection* r = msg->GetReflection();
    if (i + 1 < parts.size()) {
      if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        return base::InvalidArgument(path + ": \"" + parts[i] + "\" is not a message field");
      }
      msg = &r->GetMessage(*msg, f);
      continue;
    }
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: return r->GetDouble(*msg, f);
      case pb::FieldDescriptor::CPPTYPE_FLOAT: return double(r->GetFloat(*msg, f));
      case pb::FieldDescriptor::CPPTYPE_INT32: return double(r->GetInt32(*msg, f));
      case pb::FieldDescriptor::CPPTYPE_INT64: return double(r->GetInt64(*msg, f));
      case pb::FieldDescriptor::CPPTYPE_UINT32: return double(r->GetUInt32(*msg, f));
      case pb::FieldDescriptor::CPPTYPE_UINT64: return double(r->GetUInt64(*msg, f));
      default: return base::InvalidArgument(path + ": a " + std::string(f->cpp_type_name()) + " field, not a number");
    }
  }
  return base::InvalidArgument(path + ": no field path");
}

base::Status LoadConfig(const std::string& path, const std::vector<std::string>& overrides, LoadedConfig* out) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return base::InvalidArgument(path + ": not a config file (a directory)");
  }
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return base::InvalidArgument(path + ": not a config file (not a regular file)");
  }
  std::ifstream in(path);
  if (!in) {
    return base::InvalidArgument(path + ": cannot open config file");
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
    return base::InvalidArgument(errors.text().empty() ? path + ": cannot parse config" : errors.text());
  }
  for (const auto& o : overrides) {
    std::string p;
    RETURN_IF_ERROR(ApplyOverride(o, &out->config, &p));
    out->overridden_.insert(p);
  }
  // Presets after the overrides, so that --set can change what a preset is given.
  RETURN_IF_ERROR(atari::ApplyPresets(&out->config).Within(path));
  return ValidateConfig(*out);
}

bool PopArtOn(const config::Config& cfg) {
  const config::LearnerConfig& lc = cfg.learner();
  // Unset: on where PopArt runs (the CPU learner in relay mode), so a config that names
  // only an env learns whatever its reward scale (docs/learning-benchmarks.md, "Library defaults").
  return lc.has_popart()
             ? lc.popart()
             : ChoiceOf<config::UpdateMode>(lc.update_mode()) == config::UpdateMode::relay && lc.device() == "cpu";
}

std::string BindEndpoint(const config::Config& cfg, const std::string& endpoint) {
  if (!cfg.cluster().bind_any()) return endpoint;
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon < 6) return endpoint;
  return "tcp://0.0.0.0" + endpoint.substr(colon);
}

std::string LearnerEndpoint(const config::Config& cfg, int learner) {
  if (learner >= 0 && learner < cfg.cluster().learners_size()) return cfg.cluster().learners(learner);
  return learner == 0 ? cfg.cluster().learner() : std::string();
}

std::string InferenceEndpoint(const config::Config& cfg, int learner) {
  if (learner >= 0 && learner < cfg.cluster().inference_size()) return cfg.cluster().inference(learner);
  return std::string();
}

int LearnerOfActor(const config::Config& cfg, int actor) {
  return actor % std::max(1, cfg.learner().num_learners());
}

double PolicyInitScale(const config::Config& cfg) {
  const config::NetConfig& n = cfg.net();
  return n.has_policy_init_scale() ? n.policy_init_scale()
                                   : (ChoiceOf<config::Init>(n.init()) == config::Init::torch ? 1.0 : 0.01);
}

double OptimizerEpsilon(const config::OptimizerConfig& oc) {
  return ChoiceOf<config::OptimizerKind>(oc.kind()) == config::OptimizerKind::adam && !oc.has_epsilon() ? 1e-8
                                                                                                        : oc.epsilon();
}

bool ShardsOwnOptimizer(const config::Config& cfg) {
  return UpdateModeOf(cfg) == config::UpdateMode::sync || UpdateModeOf(cfg) == config::UpdateMode::async;
}

std::string ConfigToText(const config::Config& cfg) {
  std::string out;
  pb::TextFormat::Printer printer;
  printer.PrintToString(cfg, &out);
  return out;
}

namespace {
// Every unset scalar field of `m` set to its default, into its set submessages and each
// element of its repeated ones; a member of a oneof stays as it is (setting it would pick
// the member). Absent submessages are made only where their presence means nothing.
void FillDefaults(pb::Message* m) {
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->containing_oneof() != nullptr) continue;
    if (f->is_repeated()) {
      if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) continue;
      for (int k = 0; k < r->FieldSize(*m, f); ++k) FillDefaults(r->MutableRepeatedMessage(m, f, k));
      continue;
    }
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      // env.atari and env.resolved_spec mean something by being there.
      const bool made_freely = f->message_type() != config::AtariConfig::descriptor() &&
                               f->message_type() != config::EnvSpec::descriptor();
      if (r->HasField(*m, f) || made_freely) FillDefaults(r->MutableMessage(m, f));
      continue;
    }
    if (r->HasField(*m, f)) continue;
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32: r->SetInt32(m, f, f->default_value_int32()); break;
      case pb::FieldDescriptor::CPPTYPE_INT64: r->SetInt64(m, f, f->default_value_int64()); break;
      case pb::FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(m, f, f->default_value_uint32()); break;
      case pb::FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(m, f, f->default_value_uint64()); break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(m, f, f->default_value_double()); break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(m, f, f->default_value_float()); break;
      case pb::FieldDescriptor::CPPTYPE_BOOL: r->SetBool(m, f, f->default_value_bool()); break;
      case pb::FieldDescriptor::CPPTYPE_ENUM: r->SetEnum(m, f, f->default_value_enum()); break;
      case pb::FieldDescriptor::CPPTYPE_STRING: r->SetString(m, f, f->default_value_string()); break;
      case pb::FieldDescriptor::CPPTYPE_MESSAGE: break;
    }
  }
}
}  // namespace

std::string ResolvedConfigText(const config::Config& cfg) {
  config::Config c = cfg;
  // The fields whose meaning when unset is not their default, as the run takes them.
  c.mutable_learner()->set_popart(PopArtOn(cfg));
  c.mutable_net()->set_policy_init_scale(PolicyInitScale(cfg));
  c.mutable_learner()->mutable_optimizer()->set_epsilon(OptimizerEpsilon(cfg.learner().optimizer()));
  FillDefaults(&c);
  // A gymnasium env has no use for the built-in env's name (CartPole-v1 by default).
  auto unnamed = [](const config::EnvConfig& given, config::EnvConfig* env) {
    if (!given.gym_id().empty() && !given.has_name()) env->clear_name();
  };
  unnamed(cfg.env(), c.mutable_env());
  for (int t = 0; t < c.tasks_size(); ++t) unnamed(cfg.tasks(t).env(), c.mutable_tasks(t)->mutable_env());
  // A suite's env holds only the joint spec that `stampede run` resolves.
  if (c.tasks_size() > 0 && !cfg.has_env()) c.clear_env();
  // A task without a reference score is not normalised: left out, as in the config.
  for (int t = 0; t < c.tasks_size(); ++t) {
    if (!cfg.tasks(t).has_reference_score()) c.mutable_tasks(t)->clear_reference_score();
  }
  return ConfigToText(c);
}

base::Status ResolvedStepShape(const config::Config& cfg, wire::StepShape* out) {
  if (!cfg.env().has_resolved_spec()) {
    return base::InvalidArgument("the config has no env.resolved_spec: start roles from the RUN_DIR/config.textproto "
             "that `stampede run` writes, or add the spec that `stampede spec CONFIG` prints");
  }
  const config::EnvSpec& s = cfg.env().resolved_spec();
  if (s.obs_shape_size() < 1 || s.obs_shape_size() > 3) {
    return base::InvalidArgument("env.resolved_spec: observation rank " + std::to_string(s.obs_shape_size()) +
             ", expected rank 1 to 3");
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
        return base::InvalidArgument("env.resolved_spec: " + std::to_string(s.num_actions()) +
                 " discrete actions, expected at least one");
      }
      break;
    case wire::ActionKind::kMultiDiscrete: {
      out->num_actions = 0;
      for (int k : out->action_nvec) {
        if (k <= 0) {
          return base::InvalidArgument("env.resolved_spec: a multi-discrete component with " + std::to_string(k) + " actions");
        }
        out->num_actions += k;
      }
      if (out->action_nvec.empty() || out->action_nvec.size() > kMaxComponents) {
        return base::InvalidArgument("env.resolved_spec: " + std::to_string(out->action_nvec.size()) +
                 " multi-discrete components, expected 1 to " + std::to_string(kMaxComponents));
      }
      break;
    }
    case wire::ActionKind::kBox:
      if (out->action_low.empty() || out->action_low.size() > kMaxComponents ||
          out->action_low.size() != out->action_high.size()) {
        return base::InvalidArgument("env.resolved_spec: a box action space of " + std::to_string(out->action_low.size()) +
                 " dimensions (" + std::to_string(out->action_high.size()) +
                 " upper bounds), expected 1 to " + std::to_string(kMaxComponents) + " with both bounds");
      }
      out->num_actions = 2 * int(out->action_low.size());
      break;
    default:
      return base::InvalidArgument("env.resolved_spec: unknown action kind " + std::to_string(int(s.action_kind())));
  }
  out->obs_shape.assign(s.obs_shape().begin(), s.obs_shape().end());
  for (int d : out->obs_shape) {
    if (d <= 0) {
      return base::InvalidArgument("env.resolved_spec: observation dimension " + std::to_string(d) + " is not positive");
    }
  }
  out->obs_dtype = s.obs_dtype() == config::UINT8 ? wire::DType::kUint8 : wire::DType::kFloat32;
  out->core_state_size = 2 * cfg.net().lstm_size();
  return base::OkStatus();
}

std::vector<int> HiddenSizes(const config::Config& cfg) {
  if (cfg.net().hidden_sizes_size() == 0) return {64, 64};
  return {cfg.net().hidden_sizes().begin(), cfg.net().hidden_sizes().end()};
}

}  // namespace stampede
