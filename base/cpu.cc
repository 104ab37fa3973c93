#include "base/cpu.h"

#include <cctype>
#include <fstream>
#include <sstream>

#ifndef STAMPEDE_BUILD_ARCH
#define STAMPEDE_BUILD_ARCH "unknown"
#endif
#ifndef STAMPEDE_BUILD_FEATURES
#define STAMPEDE_BUILD_FEATURES ""
#endif

namespace stampede::base {

namespace {
std::string CpuInfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? std::string() : line.substr(b);
  }
  return {};
}
}  // namespace

std::vector<std::string> CpuFeatures() {
  std::vector<std::string> out;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out.push_back("avx512f");
  if (__builtin_cpu_supports("avx2")) out.push_back("avx2");
  if (__builtin_cpu_supports("fma")) out.push_back("fma");
  return out;
}

std::string CpuDescription() {
  std::string name = CpuInfoField("model name");
  if (name.empty()) name = "unknown CPU";
  const std::string family = CpuInfoField("cpu family"), model = CpuInfoField("model\t");
  if (!family.empty()) name += " (family " + family + (model.empty() ? "" : " model " + model) + ")";
  std::string isa;
  for (const std::string& f : CpuFeatures()) {
    std::string upper;
    for (char c : f) upper += char(std::toupper(static_cast<unsigned char>(c)));
    isa += (isa.empty() ? "" : " ") + upper;
  }
  return name + ", " + (isa.empty() ? "no AVX2" : isa);
}

std::string BuildTarget() {
  const std::string features = STAMPEDE_BUILD_FEATURES;
  return std::string(STAMPEDE_BUILD_ARCH) + (features.empty() ? "" : " (" + features + ")");
}

}  // namespace stampede::base
