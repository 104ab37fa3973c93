// `stampede bench --gemm`: single-precision GEMM GFLOP/s on one thread, per backend that
// this machine has: Eigen (what net/ computes with), and OpenBLAS and BLIS where their
// shared libraries are installed (loaded at run time, so the build does not depend on
// them). Shapes: a square 512^3 (the peak) and the shallow CNN learner's own products.
#include "tools/bench.h"

#include <dlfcn.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace stampede::tools {
namespace {

using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C[M x N] = A[M x K] * B[K x N], all row-major and contiguous.
using Gemm = std::function<void(int M, int N, int K, const float* A, const float* B, float* C)>;

struct Backend {
  std::string name;
  Gemm gemm;
};

// CBLAS's enum values (cblas.h): row-major 101, no transpose 111.
using CblasSgemm = void (*)(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A,
                            int lda, const float* B, int ldb, float beta, float* C, int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111;

// A CBLAS from a shared library, told to use one thread; nullopt-like (empty gemm) and the
// reason where the library or its symbols are missing.
Backend LoadCblas(const std::string& name, const char* soname, const char* set_threads, std::string* why) {
  void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = name + ": " + dlerror();
    return {name, nullptr};
  }
  auto sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
  if (!sgemm) {
    *why = name + ": " + soname + " has no cblas_sgemm";
    return {name, nullptr};
  }
  if (auto threads = reinterpret_cast<void (*)(int)>(dlsym(lib, set_threads))) threads(1);
  return {name, [sgemm](int M, int N, int K, const float* A, const float* B, float* C) {
            sgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, M, N, K, 1.f, A, K, B, N, 0.f, C, N);
          }};
}

struct Shape {
  const char* what;
  int M, N, K;
};

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

double MeasureEigenGemmGflops(double seconds) {
  const int n = 512;
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm the caches and the allocator
  int64_t reps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    c.noalias() = a * b;
    ++reps;
  } while ((elapsed = Seconds(t0)) < seconds);
  return 2.0 * n * n * double(n) * double(reps) / elapsed / 1e9;
}

int RunGemmBench(const BenchOptions& opt) {
  // One thread everywhere: the learner and every actor own one core each.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("BLIS_NUM_THREADS", "1", 1);
  Eigen::setNbThreads(1);
  std::vector<Backend> backends;
  backends.push_back({"eigen", [](int M, int N, int K, const float* A, const float* B, float* C) {
                        Eigen::Map<RowMat>(C, M, N).noalias() =
                            Eigen::Map<const RowMat>(A, M, K) * Eigen::Map<const RowMat>(B, K, N);
                      }});
  std::vector<std::string> missing;
  for (const auto& [name, soname, threads] :
       {std::tuple{"openblas", "libopenblas.so.0", "openblas_set_num_threads"},
        std::tuple{"blis", "libblis.so.4", "bli_thread_set_num_threads"}}) {
    std::string why;
    Backend b = LoadCblas(name, soname, threads, &why);
    if (b.gemm) backends.push_back(std::move(b));
    else missing.push_back(why);
  }
  // The shallow CNN learner's products at B = 16, T = 20 (336 rows): each convolution's
  // forward GEMM per chunk of samples as net/layers.cc forms it, and the FC layer.
  const Shape shapes[] = {{"square 512^3", 512, 512, 512},
                          {"conv1 fwd (16x256 . 256x800)", 16, 800, 256},
                          {"conv2 fwd (32x256 . 256x972)", 32, 972, 256},
                          {"fc fwd (336x2592 . 2592x256)", 336, 256, 2592},
                          {"fc dW (2592x336 . 336x256)", 2592, 256, 336}};
  std::printf("stampede bench --gemm: float32 GEMM on one thread, GFLOP/s (max |difference| from Eigen's result)\n");
  for (const std::string& m : missing) std::printf("  not measured: %s\n", m.c_str());
  std::printf("  %-32s", "shape");
  for (const Backend& b : backends) std::printf(" %20s", b.name.c_str());
  std::printf("\n");
  for (const Shape& s : shapes) {
    RowMat A = RowMat::Random(s.M, s.K), B = RowMat::Random(s.K, s.N), ref(s.M, s.N), C(s.M, s.N);
    backends[0].gemm(s.M, s.N, s.K, A.data(), B.data(), ref.data());
    std::printf("  %-32s", s.what);
    for (const Backend& b : backends) {
      b.gemm(s.M, s.N, s.K, A.data(), B.data(), C.data());
      const double diff = (C - ref).cwiseAbs().maxCoeff();
      int64_t reps = 0;
      const auto t0 = Clock::now();
      double elapsed = 0;
      do {
        b.gemm(s.M, s.N, s.K, A.data(), B.data(), C.data());
        ++reps;
      } while ((elapsed = Seconds(t0)) < opt.seconds / double(std::size(shapes)));
      const double gflops = 2.0 * s.M * double(s.N) * s.K * double(reps) / elapsed / 1e9;
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.1f (%.0e)", gflops, diff);
      std::printf(" %20s", cell);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace stampede::tools
