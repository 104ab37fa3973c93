// Linked into the `stampede` binary as an object of its own, compiled for the x86-64
// baseline whatever -march the rest was built with (CMakeLists.txt), and run from the
// executable's .preinit_array: after the dynamic linker's relocations, before any shared
// library's initialisers (libcaf_core's, for one, call template code the executable
// exports, compiled for the build's -march) and before the program's own. A binary built
// for x86-64-v3 (AVX2, FMA, BMI2: the default) or for its build machine (-march=native,
// STAMPEDE_NATIVE) that is started on a CPU lacking one of those says which and exits 2,
// instead of dying of an illegal instruction. Plain system calls and string functions
// only: libc's stdio may not be set up yet.
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#ifndef STAMPEDE_BUILD_ARCH
#define STAMPEDE_BUILD_ARCH "unknown"
#endif
#ifndef STAMPEDE_BUILD_FEATURES
#define STAMPEDE_BUILD_FEATURES ""
#endif

namespace {

// 1: the CPU has `feature`; 0: it lacks it; -1: not a feature this check knows.
int Has(const char* feature) {
  // __builtin_cpu_supports takes string literals only.
  if (!strcmp(feature, "avx512f")) return __builtin_cpu_supports("avx512f") ? 1 : 0;
  if (!strcmp(feature, "avx512bw")) return __builtin_cpu_supports("avx512bw") ? 1 : 0;
  if (!strcmp(feature, "avx512dq")) return __builtin_cpu_supports("avx512dq") ? 1 : 0;
  if (!strcmp(feature, "avx512vl")) return __builtin_cpu_supports("avx512vl") ? 1 : 0;
  if (!strcmp(feature, "avx2")) return __builtin_cpu_supports("avx2") ? 1 : 0;
  if (!strcmp(feature, "fma")) return __builtin_cpu_supports("fma") ? 1 : 0;
  if (!strcmp(feature, "bmi2")) return __builtin_cpu_supports("bmi2") ? 1 : 0;
  if (!strcmp(feature, "avx")) return __builtin_cpu_supports("avx") ? 1 : 0;
  if (!strcmp(feature, "sse4.2")) return __builtin_cpu_supports("sse4.2") ? 1 : 0;
  return -1;
}

void Append(char* out, size_t size, const char* text) { strncat(out, text, size - strlen(out) - 1); }

void CheckCpu(int, char**, char**) {
  __builtin_cpu_init();
  char features[256] = "";
  Append(features, sizeof features, STAMPEDE_BUILD_FEATURES);
  char missing[256] = "";
  char* save = nullptr;
  for (char* f = strtok_r(features, " ", &save); f; f = strtok_r(nullptr, " ", &save)) {
    if (Has(f) == 0) {
      Append(missing, sizeof missing, " ");
      Append(missing, sizeof missing, f);
    }
  }
  if (missing[0] == '\0') return;
  // The CPU's name from /proc/cpuinfo's "model name" line.
  char model[128] = "this CPU";
  const int fd = open("/proc/cpuinfo", O_RDONLY);
  if (fd >= 0) {
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = '\0';
      if (const char* line = strstr(buf, "model name")) {
        if (const char* colon = strchr(line, ':')) {
          const char* b = colon + 1 + strspn(colon + 1, " \t");
          const size_t len = strcspn(b, "\n");
          if (len > 0 && len < sizeof model) {
            memcpy(model, b, len);
            model[len] = '\0';
          }
        }
      }
    }
  }
  char msg[1024] = "stampede: this binary was built for ";
  Append(msg, sizeof msg, STAMPEDE_BUILD_ARCH " (" STAMPEDE_BUILD_FEATURES "), but ");
  Append(msg, sizeof msg, model);
  Append(msg, sizeof msg, " lacks:");
  Append(msg, sizeof msg, missing);
  Append(msg, sizeof msg,
         ". Build it for this CPU: tools/build.sh -DSTAMPEDE_ARCH=x86-64-v2 (any x86-64 since 2009), or on this "
         "machine -DSTAMPEDE_NATIVE=ON\n");
  [[maybe_unused]] const ssize_t w = write(2, msg, strlen(msg));
  _exit(2);
}

}  // namespace

// The executable runs this before any initialiser, its libraries' included.
__attribute__((section(".preinit_array"), used)) static void (*const kCheckCpu)(int, char**, char**) = &CheckCpu;
