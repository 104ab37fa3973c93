// Writes the config reference (docs/config.md) from the schema alone: every field of
// config/config.proto reachable from `Config`, with its type, default, declared range and
// doc comment. The comments come from the descriptor set protoc writes with source info
// (build/config/config.desc); defaults and ranges from the compiled schema, so the page and
// the checker read the same declarations.
//
//   stampede_config_reference [--strict] build/config/config.desc > docs/config.md
//
// --strict: exit 1, naming them, when a field has no doc comment (a message-typed field
// may take its message's). The test `config_reference_fresh` runs it so, and fails when
// docs/config.md differs from its output.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "config/config.pb.h"
#include "config/config_detail.h"

namespace pb = google::protobuf;

namespace {

// A comment as one line of Markdown: lines joined, table bars escaped.
std::string OneLine(const std::string& comment) {
  std::string out;
  bool space = false;
  for (char c : comment) {
    if (c == '\n' || c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string TypeName(const pb::FieldDescriptor& f) {
  if (f.is_map()) {
    return "map<" + std::string(f.message_type()->map_key()->type_name()) + ", " +
           std::string(f.message_type()->map_value()->type_name()) + ">";
  }
  std::string t;
  switch (f.type()) {
    case pb::FieldDescriptor::TYPE_MESSAGE: {
      std::string anchor = f.message_type()->name();  // as MkDocs makes a heading's id
      for (char& c : anchor) c = char(std::tolower(static_cast<unsigned char>(c)));
      t = "[" + f.message_type()->name() + "](#" + anchor + ")";
      break;
    }
    case pb::FieldDescriptor::TYPE_ENUM: t = f.enum_type()->name(); break;
    default: t = f.type_name();
  }
  return f.is_repeated() ? "repeated " + t : t;
}

std::string Default(const pb::FieldDescriptor& f) {
  if (f.is_repeated() || f.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) return "";
  switch (f.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING: return "`\"" + f.default_value_string() + "\"`";
    case pb::FieldDescriptor::CPPTYPE_BOOL: return f.default_value_bool() ? "`true`" : "`false`";
    case pb::FieldDescriptor::CPPTYPE_ENUM: return "`" + f.default_value_enum()->name() + "`";
    case pb::FieldDescriptor::CPPTYPE_INT32: return "`" + std::to_string(f.default_value_int32()) + "`";
    case pb::FieldDescriptor::CPPTYPE_INT64: return "`" + std::to_string(f.default_value_int64()) + "`";
    case pb::FieldDescriptor::CPPTYPE_UINT32: return "`" + std::to_string(f.default_value_uint32()) + "`";
    case pb::FieldDescriptor::CPPTYPE_UINT64: return "`" + std::to_string(f.default_value_uint64()) + "`";
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return "`" + stampede::config_detail::FormatNumber(f.default_value_double()) + "`";
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return "`" + stampede::config_detail::FormatNumber(f.default_value_float()) + "`";
    default: return "";
  }
}

// The doc comment of a message, field or enum (leading, else trailing), as one line.
template <class Described>
std::string Comment(const Described& d) {
  pb::SourceLocation loc;
  if (!d.GetSourceLocation(&loc)) return "";
  return OneLine(loc.leading_comments.empty() ? loc.trailing_comments : loc.leading_comments);
}

}  // namespace

int main(int argc, char** argv) {
  const bool strict = argc == 3 && std::string(argv[1]) == "--strict";
  if (argc != 2 && !strict) {
    stampede::base::LogError("usage: %s [--strict] CONFIG_DESC (the descriptor set protoc wrote with --include_source_info)\n",
                 argv[0]);
    return 2;
  }
  const char* desc_path = argv[argc - 1];
  std::ifstream in(desc_path, std::ios::binary);
  pb::FileDescriptorSet set;
  if (!in || !set.ParseFromIstream(&in)) {
    stampede::base::LogError("%s: not a readable descriptor set\n", desc_path);
    return 2;
  }
  pb::DescriptorPool pool;
  for (const auto& file : set.file()) {
    if (pool.BuildFile(file) == nullptr) {
      stampede::base::LogError("%s: %s does not build\n", desc_path, file.name().c_str());
      return 2;
    }
  }
  const pb::Descriptor* root = pool.FindMessageTypeByName("stampede.config.Config");
  if (root == nullptr) {
    stampede::base::LogInfo("%s: no stampede.config.Config\n", desc_path);
    return 2;
  }
  // The compiled schema's twin of each field: its options (ranges) are typed there.
  const pb::DescriptorPool* compiled = stampede::config::Config::descriptor()->file()->pool();

  std::ostringstream out;
  out << "# Config reference\n\n"
      << "Generated from `config/config.proto` by `tools/config_reference.cc` (`ninja config_reference`); "
         "do not edit by hand. A config is a `Config` in protobuf text format; every field can be set on the "
         "command line with `--set path=value`. A range is checked before any process starts "
         "(`[a, b]` closed, `(a, b]` open at a). `stampede config CONFIG` prints a config with every "
         "default and preset filled in.\n";
  // Messages in the order a reader meets them from Config, each once.
  std::vector<const pb::Descriptor*> order{root};
  std::set<const pb::Descriptor*> seen{root};
  std::vector<const pb::EnumDescriptor*> enums;
  std::set<const pb::EnumDescriptor*> seen_enums;
  for (size_t i = 0; i < order.size(); ++i) {
    for (int k = 0; k < order[i]->field_count(); ++k) {
      const pb::FieldDescriptor* f = order[i]->field(k);
      if (f->message_type() && !f->is_map() && seen.insert(f->message_type()).second) order.push_back(f->message_type());
      if (f->enum_type() && seen_enums.insert(f->enum_type()).second) enums.push_back(f->enum_type());
    }
  }
  std::vector<std::string> undocumented;
  for (const pb::Descriptor* d : order) {
    out << "\n## " << d->name() << "\n\n";
    if (const std::string c = Comment(*d); !c.empty()) out << c << "\n\n";
    out << "| field | type | default | range | what it does |\n| --- | --- | --- | --- | --- |\n";
    const pb::Descriptor* twin = compiled->FindMessageTypeByName(d->full_name());
    for (int k = 0; k < d->field_count(); ++k) {
      const pb::FieldDescriptor* f = d->field(k);
      const pb::FieldDescriptor* tf = twin ? twin->FindFieldByName(f->name()) : nullptr;
      const std::string range = tf ? stampede::config_detail::DeclaredRange(*tf) : "";
      std::string doc = Comment(*f);
      if (doc.empty() && f->message_type() != nullptr && !f->is_map()) doc = Comment(*f->message_type());
      if (doc.empty()) undocumented.push_back(f->full_name());
      out << "| `" << f->name() << "` | " << TypeName(*f) << " | " << Default(*f) << " | " << range << " | " << doc
          << " |\n";
    }
  }
  for (const pb::EnumDescriptor* e : enums) {
    out << "\n## " << e->name() << "\n\n";
    if (const std::string c = Comment(*e); !c.empty()) out << c << "\n\n";
    for (int k = 0; k < e->value_count(); ++k) out << "- `" << e->value(k)->name() << "`\n";
  }
  std::fputs(out.str().c_str(), stdout);
  if (strict && !undocumented.empty()) {
    stampede::base::LogInfo("%zu fields of config/config.proto have no doc comment:\n", undocumented.size());
    for (const auto& name : undocumented) stampede::base::LogInfo("  %s\n", name.c_str());
    return 1;
  }
  return 0;
}
