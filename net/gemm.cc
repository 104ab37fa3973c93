#include "net/gemm.h"

#include <dlfcn.h>
#include <time.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "base/log.h"
#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "net/onednn_conv.h"

#if STAMPEDE_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace stampede::net {

namespace {

using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using CMat = Eigen::Map<const RowMat, 0, Stride>;
using MMat = Eigen::Map<RowMat, 0, Stride>;

// One backend: C = op(A) op(B) + beta C (beta 0 or 1), row-major.
using GemmFn = void (*)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                        int64_t ldb, float beta, float* C, int64_t ldc);

void EigenGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  MMat c(C, M, N, Stride(ldc));
  // op(A) is M x K: A is stored M x K (lda) or, transposed, K x M.
  const CMat a(A, ta ? K : M, ta ? M : K, Stride(lda));
  const CMat b(B, tb ? N : K, tb ? K : N, Stride(ldb));
  auto run = [&](const auto& x, const auto& y) {
    if (beta == 0.f) {
      c.noalias() = x * y;
    } else {
      c.noalias() += x * y;
    }
  };
  if (!ta && !tb) run(a, b);
  if (!ta && tb) run(a, b.transpose());
  if (ta && !tb) run(a.transpose(), b);
  if (ta && tb) run(a.transpose(), b.transpose());
}

// CBLAS (cblas.h): row-major 101, no transpose 111, transpose 112.
using CblasSgemm = void (*)(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// The CBLAS libraries, loaded once (RTLD_LOCAL: each keeps its own symbols) and told to
// use one thread: every role owns its core, the roles are the parallelism.
struct Cblas {
  CblasSgemm openblas = nullptr, blis = nullptr;
  std::string why_openblas, why_blis;
};
const Cblas& Libraries() {
  static const Cblas libs = [] {
    Cblas c;
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    setenv("BLIS_NUM_THREADS", "1", 0);
    // The library's cblas_sgemm, or why there is none.
    auto load = [](const char* soname, const char* set_threads) -> base::StatusOr<CblasSgemm> {
      void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
      if (!lib) return base::Unavailable(std::string(soname) + " is not installed (" + dlerror() + ")");
      auto sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
      if (!sgemm) return base::Unavailable(std::string(soname) + " has no cblas_sgemm");
      if (auto threads = reinterpret_cast<void (*)(int)>(dlsym(lib, set_threads))) threads(1);
      return sgemm;
    };
    const auto openblas = load("libopenblas.so.0", "openblas_set_num_threads");
    const auto blis = load("libblis.so.4", "bli_thread_set_num_threads");
    c.openblas = openblas.ok() ? *openblas : nullptr;
    c.why_openblas = openblas.status().message();
    c.blis = blis.ok() ? *blis : nullptr;
    c.why_blis = blis.status().message();
    return c;
  }();
  return libs;
}

void CallCblas(CblasSgemm f, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  f(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(M), int(N), int(K), 1.f, A, int(lda), B, int(ldb),
    beta, C, int(ldc));
}
void OpenBlasGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) {
  CallCblas(Libraries().openblas, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void BlisGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  CallCblas(Libraries().blis, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

#if STAMPEDE_HAVE_ONEDNN
void OneDnnGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  UseOneDnnThreads();
  // dnnl_sgemm is row-major, as cblas_sgemm with CblasRowMajor.
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc) != dnnl_success) {
    throw std::runtime_error("oneDNN's sgemm failed");
  }
}
#endif

struct Entry {
  const char* name;
  GemmFn fn;  // null: not in this build
};
const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {"eigen", &EigenGemm},
      {"openblas", &OpenBlasGemm},
      {"blis", &BlisGemm},
#if STAMPEDE_HAVE_ONEDNN
      {"onednn", &OneDnnGemm},
#else
      {"onednn", nullptr},
#endif
  };
  return entries;
}

// Why backend `name` cannot run here ("" if it can).
std::string Unavailable(const std::string& name) {
  if (name == "openblas" && !Libraries().openblas) return "openblas: " + Libraries().why_openblas;
  if (name == "blis" && !Libraries().blis) return "blis: " + Libraries().why_blis;
  if (name == "onednn" && !OneDnnBuilt()) return "onednn: this build has no oneDNN";
  return {};
}

GemmFn Find(const std::string& name) {
  for (const Entry& e : Entries()) {
    if (name == e.name) return Unavailable(name).empty() ? e.fn : nullptr;
  }
  return nullptr;
}

int64_t RoundUpPow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// The process's state: the backend asked for, and under "auto" the choice per shape key.
struct State {
  base::Mutex mu;
  std::string backend GUARDED_BY(mu) = "auto";
  GemmFn fixed GUARDED_BY(mu) = nullptr;  // the named backend's
  std::map<GemmShape, GemmChoice> choices GUARDED_BY(mu);  // by key (M rounded up to a power of two)
  std::set<GemmShape> seen GUARDED_BY(mu);
  std::atomic<bool> record{false};  // whether Sgemm adds to `seen`
};
State& TheState() {
  static State* s = new State();
  return *s;
}

double Gflops(const GemmShape& s, double seconds) { return 2.0 * double(s.M) * double(s.N) * double(s.K) / seconds / 1e9; }

// Times every available backend on this product (the caller's operands) and picks the
// fastest.
GemmChoice Measure(const GemmShape& key, const GemmShape& s, const float* A, int64_t lda, const float* B,
                   int64_t ldb) {
  const std::vector<std::string> live = AvailableGemmBackends();
  std::vector<float> scratch(size_t(s.M) * size_t(s.N));
  const std::vector<double> gflops = TimeGemmBackends(live, s, A, lda, B, ldb, scratch.data(), 1e-3);
  GemmChoice c;
  c.shape = key;
  size_t winner = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    c.gflops.push_back({live[i], gflops[i]});
    if (gflops[i] > gflops[winner]) winner = i;
  }
  c.backend = live[winner];
  return c;
}

GemmShape KeyOf(GemmShape s) {
  s.M = RoundUpPow2(s.M);
  return s;
}

void Log(const GemmChoice& c, const GemmShape& measured) {
  std::string all;
  for (const auto& [name, g] : c.gflops) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.1f", all.empty() ? "" : ", ", name.c_str(), g);
    all += buf;
  }
  base::LogInfo("gemm: %s -> %s (GFLOP/s at %s: %s)\n", c.shape.Text().c_str(), c.backend.c_str(),
               measured.Text().c_str(), all.c_str());
}

}  // namespace

bool GemmShape::operator<(const GemmShape& o) const {
  return std::tie(trans_a, trans_b, M, N, K) < std::tie(o.trans_a, o.trans_b, o.M, o.N, o.K);
}

std::string GemmShape::Text() const {
  std::string t = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  if (trans_a || trans_b) t += std::string(" (") + (trans_a ? "A^T" : "") + (trans_a && trans_b ? " " : "") + (trans_b ? "B^T" : "") + ")";
  return t;
}

const std::vector<std::string>& GemmBackendNames() {
  static const std::vector<std::string> names = {"eigen", "openblas", "blis", "onednn"};
  return names;
}

std::vector<std::string> AvailableGemmBackends(std::vector<std::string>* unavailable) {
  std::vector<std::string> out;
  for (const Entry& e : Entries()) {
    const std::string why = Unavailable(e.name);
    if (e.fn && why.empty()) {
      out.push_back(e.name);
    } else if (unavailable) {
      unavailable->push_back(why.empty() ? std::string(e.name) + ": not in this build" : why);
    }
  }
  return out;
}

base::Status SetGemmBackend(const std::string& name) {
  State& st = TheState();
  if (name == "auto" || name.empty()) {
    base::MutexLock lock(st.mu);
    st.backend = "auto";
    st.fixed = nullptr;
    return base::OkStatus();
  }
  const auto& names = GemmBackendNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return base::InvalidArgument("net.gemm_backend \"" + name +
                                 "\" is not known, expected \"auto\", \"eigen\", \"openblas\", \"blis\" or \"onednn\"");
  }
  GemmFn fn = Find(name);
  if (!fn) {
    return base::InvalidArgument("net.gemm_backend \"" + name + "\" is not available here: " + Unavailable(name));
  }
  base::MutexLock lock(st.mu);
  st.backend = name;
  st.fixed = fn;
  return base::OkStatus();
}

std::string GemmBackend() {
  State& st = TheState();
  base::MutexLock lock(st.mu);
  return st.backend;
}

void SgemmOn(const std::string& backend, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  GemmFn fn = Find(backend);
  if (!fn) throw std::invalid_argument("gemm backend \"" + backend + "\" is not available: " + Unavailable(backend));
  fn(ta, tb, M, N, K, A, lda, B, ldb, accumulate ? 1.f : 0.f, C, ldc);
}

void Sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
           bool accumulate, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const float beta = accumulate ? 1.f : 0.f;
  if (K <= 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    }
    return;
  }
  State& st = TheState();
  const GemmShape shape{ta, tb, M, N, K};
  GemmFn fn = nullptr;
  {
    base::MutexLock lock(st.mu);
    if (st.record.load(std::memory_order_relaxed)) st.seen.insert(shape);
    if (st.fixed) {
      fn = st.fixed;
    } else {
      const GemmShape key = KeyOf(shape);
      auto it = st.choices.find(key);
      if (it == st.choices.end()) {
        GemmChoice c = Measure(key, shape, A, lda, B, ldb);
        Log(c, shape);
        it = st.choices.emplace(key, std::move(c)).first;
      }
      fn = Find(it->second.backend);
    }
  }
  fn(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

std::vector<double> TimeGemmBackends(const std::vector<std::string>& backends, const GemmShape& s, const float* A,
                                     int64_t lda, const float* B, int64_t ldb, float* C, double slice_s) {
  std::vector<GemmFn> fns;
  for (const std::string& b : backends) {
    GemmFn fn = Find(b);
    if (!fn) throw std::invalid_argument("gemm backend \"" + b + "\" is not available: " + Unavailable(b));
    fns.push_back(fn);
  }
  for (GemmFn fn : fns) fn(s.trans_a, s.trans_b, s.M, s.N, s.K, A, lda, B, ldb, 0.f, C, s.N);  // warm
  // Every backend runs on the calling thread alone (OpenBLAS and BLIS are set to one
  // thread, oneDNN's sgemm runs OneDnnThreads()): then the thread's CPU time, which a
  // preemption does not count, times it. A role picks at first use, while its neighbours
  // share the cores: by the clock, a Pong learner beside two actors read oneDNN's sgemm at
  // 66 GFLOP/s against OpenBLAS's 92 on a product where oneDNN's is the faster alone (110).
  const bool cpu_time = OneDnnThreads() == 1;
  auto now = [cpu_time] {
    if (cpu_time) {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    }
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  };
  std::vector<double> best(fns.size(), 1e30);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < fns.size(); ++i) {
      int reps = 0;
      const double t0 = now();
      double elapsed = 0;
      do {
        fns[i](s.trans_a, s.trans_b, s.M, s.N, s.K, A, lda, B, ldb, 0.f, C, s.N);
        ++reps;
      } while ((elapsed = now() - t0) < slice_s);
      best[i] = std::min(best[i], elapsed / reps);
    }
  }
  std::vector<double> gflops;
  for (double t : best) gflops.push_back(Gflops(s, t));
  return gflops;
}

void RecordGemmShapes(bool on) { TheState().record.store(on); }

std::vector<GemmShape> GemmShapesSeen() {
  State& st = TheState();
  base::MutexLock lock(st.mu);
  return {st.seen.begin(), st.seen.end()};
}

std::vector<GemmChoice> GemmChoices() {
  State& st = TheState();
  base::MutexLock lock(st.mu);
  std::vector<GemmChoice> out;
  for (const auto& [key, c] : st.choices) out.push_back(c);
  return out;
}

GemmChoice ChooseGemm(const GemmShape& shape) {
  // Operands of the shape's size (their values do not matter to the timing).
  const int64_t a_rows = shape.trans_a ? shape.K : shape.M, a_cols = shape.trans_a ? shape.M : shape.K;
  const int64_t b_rows = shape.trans_b ? shape.N : shape.K, b_cols = shape.trans_b ? shape.K : shape.N;
  std::vector<float> A(size_t(a_rows * a_cols), 0.5f), B(size_t(b_rows * b_cols), 0.25f);
  State& st = TheState();
  base::MutexLock lock(st.mu);
  const GemmShape key = KeyOf(shape);
  auto it = st.choices.find(key);
  if (it == st.choices.end()) it = st.choices.emplace(key, Measure(key, shape, A.data(), a_cols, B.data(), b_cols)).first;
  return it->second;
}

}  // namespace stampede::net
