#include "base/cpu.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
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

double IdleCores::Sample() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1;
  char line[512];
  unsigned long long first[10] = {};
  int cpus = 0, got = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "cpu ", 4) == 0) {
      got = std::sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &first[0], &first[1],
                        &first[2], &first[3], &first[4], &first[5], &first[6], &first[7], &first[8], &first[9]);
    } else if (std::strncmp(line, "cpu", 3) == 0 && line[3] >= '0' && line[3] <= '9') {
      ++cpus;
    }
  }
  std::fclose(f);
  if (got < 5 || cpus == 0) return -1;
  // user nice system idle iowait irq softirq steal; guest time is inside user's.
  unsigned long long total = 0;
  for (int i = 0; i < std::min(got, 8); ++i) total += first[i];
  const unsigned long long idle = first[3] + first[4];
  const unsigned long long d_total = total - total_, d_idle = idle - idle_;
  idle_ = idle;
  total_ = total;
  if (d_total == 0) return 0;
  return double(cpus) * double(d_idle) / double(d_total);
}

}  // namespace stampede::base
