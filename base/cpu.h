// The processor this process runs on and the instruction set this binary was built for:
// what `stampede bench` and the speed tables of docs/benchmarks.md name, and the check that a binary
// built for x86-64-v3 (AVX2, FMA; the default) or for its build machine (-march=native)
// refuses, before anything else runs, a CPU that lacks what it needs (cpu_check.cc).
#pragma once

#include <string>
#include <vector>

namespace stampede::base {

// "AMD EPYC (family 25 model 1), AVX2 FMA" from /proc/cpuinfo and the CPU's own flags.
std::string CpuDescription();
// The vector extensions this CPU has, of those that matter here: "avx512f", "avx2", "fma".
std::vector<std::string> CpuFeatures();
// What the binary was built for: its -march and the features that implies, e.g.
// "x86-64-v3 (avx2 fma bmi2)".
std::string BuildTarget();

// The machine's idle cores between calls, from /proc/stat's idle and iowait time: each
// call gives the mean number of cores idle since the previous one (the first: since
// boot), or -1 where /proc/stat cannot be read.
class IdleCores {
 public:
  double Sample();

 private:
  unsigned long long idle_ = 0, total_ = 0;
};

}  // namespace stampede::base
