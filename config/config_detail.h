// Private to config/config*.cc and config/atari.cc: the range check that every numeric
// field's declaration in config.proto drives, and numbers as a config writes them.
#pragma once

#include <optional>
#include <string>

namespace google::protobuf {
class EnumDescriptor;
class FieldDescriptor;
class Message;
}

namespace stampede::config_detail {

// A number as a config would write it ("0.5", "1e+06").
std::string FormatNumber(double v);

// A field outside the range config.proto declares for it ((min), (max), (min_open),
// (max_open)): its dotted path ("learner.batch_size", "tasks.env.max_episode_steps") and
// what was wrong ("0 is out of range, expected an integer in [1, 65536]").
struct OutOfRange {
  std::string path;
  std::string what;
};
// The first field of `m`, or of any message inside it (set or not: an unset one's defaults
// are checked too), outside its declared range; `prefix` ("" or "env.") begins the paths.
std::optional<OutOfRange> FirstOutOfRange(const google::protobuf::Message& m, const std::string& prefix);
// The declared range of field `f` as the reference prints it ("[1, 65536]"), or its
// declared names ("\"relay\", \"sync\" or \"async\""); "" if none.
std::string DeclaredRange(const google::protobuf::FieldDescriptor& f);
// The enum whose value names a string field with (choices) takes; null for other fields.
const google::protobuf::EnumDescriptor* ChoicesOf(const google::protobuf::FieldDescriptor& f);

}  // namespace stampede::config_detail
