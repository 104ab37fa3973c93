// Private to wire/config*.cc: reading numeric fields by dotted path for the range checks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace google::protobuf {
class Message;
}

namespace stampede::config_detail {

// Values of a numeric field at a dotted path (several for a repeated field; none if an
// enclosing message is absent, which means every default applies).
std::vector<double> NumbersAt(const google::protobuf::Message& root, std::string_view path);
// A number as a config would write it ("0.5", "1e+06").
std::string FormatNumber(double v);

}  // namespace stampede::config_detail
