#include "base/huge_pages.h"

#include <gnu/libc-version.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace stampede::base {

namespace {
constexpr const char* kTunable = "glibc.malloc.hugetlb";

// The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled ("always",
// "madvise", "never"), or "" where the kernel has no THP.
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  std::getline(in, text);
  const size_t open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return text.substr(open + 1, close - open - 1);
}

// glibc.malloc.hugetlb arrived in glibc 2.35; older ones ignore it.
bool GlibcHasTunable() {
  int major = 0, minor = 0;
  if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 35);
}

std::string TunableValue() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  if (t == nullptr) return "";
  const std::string s(t);
  const size_t at = s.find(std::string(kTunable) + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + std::string(kTunable).size() + 1;
  return s.substr(start, s.find(':', start) - start);
}

bool Disabled() {
  const char* v = std::getenv("STAMPEDE_HUGE_PAGES");
  return v != nullptr && std::string(v) == "0";
}
}  // namespace

void ReexecWithHugePages(char** argv) {
  if (Disabled() || ThpMode() != "madvise" || !GlibcHasTunable()) return;
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t != nullptr && std::string(t).find(kTunable) != std::string::npos) {
    return;  // set already: by an earlier exec of this one, a parent, or the user
  }
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::string before = old != nullptr ? old : "";
  const std::string tunables = (before.empty() ? "" : before + ":") + kTunable + "=1";
  if (::setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // The exec failed (no /proc, the binary replaced on disk): run on as we are, with the
  // environment as it was (HugePagesDescription then says malloc does not ask).
  if (old != nullptr) {
    ::setenv("GLIBC_TUNABLES", before.c_str(), 1);
  } else {
    ::unsetenv("GLIBC_TUNABLES");
  }
}

std::string HugePagesDescription() {
  const std::string mode = ThpMode();
  if (mode.empty()) return "no transparent huge pages in this kernel";
  std::string out = "THP " + mode;
  if (mode == "always") return out + " (every large block)";
  if (mode == "never") return out + " (off)";
  const std::string value = TunableValue();
  if (value == "1" || value == "2") return out + ", malloc asks (" + kTunable + "=" + value + ")";
  if (Disabled()) return out + ", malloc does not ask (STAMPEDE_HUGE_PAGES=0)";
  if (!GlibcHasTunable()) return out + ", malloc cannot ask (glibc " + gnu_get_libc_version() + " before 2.35)";
  return out + ", malloc does not ask (" + kTunable + (value.empty() ? " unset" : "=" + value) + ")";
}

}  // namespace stampede::base
