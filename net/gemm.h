// The float32 matrix products of the CPU network (dense layers, the convolutions' im2col
// products, the LSTM), on whichever installed GEMM is fastest on this machine
// (net.gemm_backend): Eigen (compiled in), OpenBLAS and BLIS (their CBLAS, loaded at run
// time where installed) and oneDNN's sgemm (where the build has oneDNN). Each library
// dispatches its own kernels per CPU at run time, so a portable binary still gets this
// CPU's best. "auto" times every available backend on a product's shape the first time
// that shape comes (its row count rounded up to a power of two, so a server's varying
// batches share choices), keeps the fastest for the process, and says each choice on
// stderr; a named backend is used for every product. No Eigen or BLAS header leaves
// gemm.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace stampede::net {

// The backends' names, in the order "auto" tries them: "eigen", "openblas", "blis",
// "onednn".
const std::vector<std::string>& GemmBackendNames();
// Those this process can use ("eigen" always), and for the others why not.
std::vector<std::string> AvailableGemmBackends(std::vector<std::string>* unavailable = nullptr);
// The process's choice: "auto" or one of GemmBackendNames(). An error if the name is
// unknown or the backend is not available here; the choice then stays as it was.
[[nodiscard]] base::Status SetGemmBackend(const std::string& name);
std::string GemmBackend();

// C[M x N] = op(A) op(B), or C += op(A) op(B) where `accumulate`; row-major with leading
// dimensions lda, ldb, ldc; op(X) is X or its transpose. Thread-safe.
void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
           int64_t ldb, bool accumulate, float* C, int64_t ldc);
// The same on one named backend (the bench and the tests; nothing is chosen or kept).
void SgemmOn(const std::string& backend, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
             int64_t lda, const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);

// A product's shape as "auto" keys it.
struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  bool operator<(const GemmShape& o) const;
  std::string Text() const;  // "336x256x2592 (A^T)"
};
// What "auto" chose for a shape, and every backend's GFLOP/s when it measured.
struct GemmChoice {
  GemmShape shape;
  std::string backend;
  std::vector<std::pair<std::string, double>> gflops;
};
// GFLOP/s of each named backend on `s` with the caller's operands (C is scratch of M x N,
// leading dimension N): one warm-up product each, then five rounds that take the backends
// in turn for `slice_s` each (so a neighbour's load falls on all of them alike and each
// sees the caches the others leave), each backend's best round kept, timed by the calling
// thread's CPU time where every backend runs on that thread alone (OneDnnThreads() 1), by
// the clock otherwise. "auto" measures with this (1 ms slices), and so does `stampede
// bench --gemm`.
std::vector<double> TimeGemmBackends(const std::vector<std::string>& backends, const GemmShape& s, const float* A,
                                     int64_t lda, const float* B, int64_t ldb, float* C, double slice_s);
// While on (off by default: it costs a lock and a set insert per product), every shape
// Sgemm multiplies is recorded, whatever the backend; GemmShapesSeen() lists them (the
// bench uses this to find a network's products). Also the choices "auto" made so far.
void RecordGemmShapes(bool on);
std::vector<GemmShape> GemmShapesSeen();
std::vector<GemmChoice> GemmChoices();
// The choice for `shape` under "auto", measuring now if it has none yet.
GemmChoice ChooseGemm(const GemmShape& shape);

}  // namespace stampede::net
