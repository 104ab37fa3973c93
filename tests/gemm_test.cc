// net/gemm.h: every installed GEMM gives the direct product to float rounding, in every
// transpose form, with leading dimensions wider than the matrices and with accumulation;
// "auto" keeps one of them per shape; names are checked.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "net/gemm.h"

using namespace stampede;

namespace {
// op(A)[i, k] of a row-major A with leading dimension lda.
double At(const std::vector<float>& a, bool trans, int64_t lda, int64_t i, int64_t k) {
  return trans ? a[size_t(k * lda + i)] : a[size_t(i * lda + k)];
}
}  // namespace

TEST_CASE("gemm: every installed backend gives the direct product in every transpose form", "[gemm]") {
  std::vector<std::string> missing;
  const auto backends = net::AvailableGemmBackends(&missing);
  for (const auto& m : missing) WARN("not tested: " << m);
  REQUIRE(backends.front() == "eigen");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t M = 37, N = 29, K = 53, pad = 5;
  for (const std::string& backend : backends) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const bool acc : {false, true}) {
          INFO(backend << " A^T " << ta << " B^T " << tb << " accumulate " << acc);
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          std::vector<float> a(size_t((ta ? K : M) * lda)), b(size_t((tb ? N : K) * ldb)), c(size_t(M * ldc));
          for (auto& v : a) v = u(rng);
          for (auto& v : b) v = u(rng);
          for (auto& v : c) v = u(rng);
          const std::vector<float> c0 = c;
          net::SgemmOn(backend, ta, tb, M, N, K, a.data(), lda, b.data(), ldb, acc, c.data(), ldc);
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double want = acc ? c0[size_t(i * ldc + j)] : 0.0;
              for (int64_t k = 0; k < K; ++k) want += At(a, ta, lda, i, k) * At(b, tb, ldb, k, j);
              // Float rounding of a 53-term sum of products of magnitude <= 1.
              CHECK(c[size_t(i * ldc + j)] == Approx(want).margin(2e-5 * K));
            }
            // The padding past N is never written.
            for (int64_t j = N; j < ldc; ++j) CHECK(c[size_t(i * ldc + j)] == c0[size_t(i * ldc + j)]);
          }
        }
      }
    }
  }
}

TEST_CASE("gemm: auto keeps one installed backend per shape and computes the same product", "[gemm]") {
  REQUIRE(net::SetGemmBackend("auto").ok());
  const int64_t M = 20, N = 24, K = 16;
  std::vector<float> a(size_t(M * K), 0.5f), b(size_t(K * N), 0.25f), c(size_t(M * N), 0.f);
  net::Sgemm(false, false, M, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  for (float v : c) CHECK(v == Approx(0.5 * 0.25 * K));
  const auto backends = net::AvailableGemmBackends();
  bool found = false;
  for (const auto& choice : net::GemmChoices()) {
    if (choice.shape.M == 32 && choice.shape.N == N && choice.shape.K == K) {  // M rounded up to a power of two
      found = true;
      CHECK(std::find(backends.begin(), backends.end(), choice.backend) != backends.end());
      CHECK(choice.gflops.size() == backends.size());
      for (const auto& [name, g] : choice.gflops) CHECK(g > 0);
    }
  }
  CHECK(found);
  // A shape seen before is not measured again: a second call with 17..32 rows keeps it.
  const size_t choices = net::GemmChoices().size();
  net::Sgemm(false, false, 17, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  CHECK(net::GemmChoices().size() == choices);
}

TEST_CASE("gemm: an unknown or uninstalled backend is refused by name", "[gemm]") {
  CHECK_THAT(net::SetGemmBackend("mkl").message(), Catch::Contains("\"mkl\" is not known"));
  std::vector<std::string> missing;
  net::AvailableGemmBackends(&missing);
  for (const std::string& name : {"openblas", "blis", "onednn"}) {
    const auto avail = net::AvailableGemmBackends();
    if (std::find(avail.begin(), avail.end(), name) != avail.end()) continue;
    CHECK_THAT(net::SetGemmBackend(name).message(), Catch::Contains("not available here"));
  }
  CHECK(net::SetGemmBackend("eigen").ok());
  CHECK(net::GemmBackend() == "eigen");
  CHECK(net::SetGemmBackend("auto").ok());
}

TEST_CASE("gemm: shapes are recorded only while asked", "[gemm]") {
  const int64_t M = 7, N = 9, K = 5;
  // Room for the largest product below (M + 2 rows).
  std::vector<float> a(size_t((M + 2) * K), 1.f), b(size_t(K * N), 1.f), c(size_t((M + 2) * N), 0.f);
  auto has = [&](int64_t m) {
    for (const auto& s : net::GemmShapesSeen()) {
      if (s.M == m && s.N == N && s.K == K) return true;
    }
    return false;
  };
  net::Sgemm(false, false, M, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  CHECK_FALSE(has(M));
  net::RecordGemmShapes(true);
  net::Sgemm(false, false, M + 1, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  net::RecordGemmShapes(false);
  net::Sgemm(false, false, M + 2, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  CHECK(has(M + 1));
  CHECK_FALSE(has(M));
  CHECK_FALSE(has(M + 2));
  for (float v : c) CHECK(v == float(K));
}
