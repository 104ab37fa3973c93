// libFuzzer target: the config parser, --set overrides, the presets and the checks. Input: config
// text, then optionally a line "--" and one override ("a.b=value") per line.
#include <cstdint>
#include <sstream>
#include <string>

#include "config/atari.h"
#include "config/config.h"

using namespace stampede;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n--\n");
  const std::string text = input.substr(0, split);
  LoadedConfig loaded;
  if (const base::Status st = ParseConfigText(text, "fuzz.textproto", &loaded.config); !st.ok()) {
    if (st.message().empty()) __builtin_trap();
    return 0;
  }
  if (split != std::string::npos) {
    std::istringstream lines(input.substr(split + 4));
    std::string line;
    while (std::getline(lines, line)) {
      if (const base::Status st = ApplyOverride(line, &loaded.config); !st.ok()) {
        if (st.message().empty()) __builtin_trap();
        return 0;
      }
    }
  }
  // Presets as LoadConfig applies them: an error names what is wrong, and a second pass
  // changes nothing.
  if (const base::Status s = atari::ApplyPresets(&loaded.config); !s.ok()) {
    if (s.message().empty()) __builtin_trap();
    return 0;
  }
  const std::string once = ConfigToText(loaded.config);
  if (!atari::ApplyPresets(&loaded.config).ok() || ConfigToText(loaded.config) != once) __builtin_trap();
  if (const base::Status st = ValidateConfig(loaded); !st.ok() && st.message().empty()) __builtin_trap();
  (void)ConfigToText(loaded.config);
  (void)ResolvedConfigText(loaded.config);
  return 0;
}
