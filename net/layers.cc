#include "net/layers.h"

#include "net/gemm.h"
#include "net/fast_math.h"
#include "net/kernel_math.h"
#include "net/onednn_conv.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

namespace stampede::net {

namespace {
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using CMap = Eigen::Map<const Mat<S>>;
template <class S>
using MMap = Eigen::Map<Mat<S>>;
template <class S>
using CRow = Eigen::Map<const Eigen::Matrix<S, 1, Eigen::Dynamic>>;
template <class S>
using MRow = Eigen::Map<Eigen::Matrix<S, 1, Eigen::Dynamic>>;

// C[M x N] = op(A) op(B) (+= where `acc`), row-major with leading dimensions: float on the
// machine's fastest GEMM (net/gemm.h, net.gemm_backend), double (the gradient checks) on
// Eigen.
template <class S>
void MatMul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const S* A, int64_t lda, const S* B, int64_t ldb,
            bool acc, S* C, int64_t ldc) {
  if constexpr (std::is_same_v<S, float>) {
    Sgemm(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
  } else {
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<Mat<S>, 0, Stride> c(C, M, N, Stride(ldc));
    const Eigen::Map<const Mat<S>, 0, Stride> a(A, ta ? K : M, ta ? M : K, Stride(lda));
    const Eigen::Map<const Mat<S>, 0, Stride> b(B, tb ? N : K, tb ? K : N, Stride(ldb));
    auto run = [&](const auto& x, const auto& y) {
      if (acc) {
        c.noalias() += x * y;
      } else {
        c.noalias() = x * y;
      }
    };
    if (!ta && !tb) run(a, b);
    if (!ta && tb) run(a, b.transpose());
    if (ta && !tb) run(a.transpose(), b);
    if (ta && tb) run(a.transpose(), b.transpose());
  }
}

// ---- dense -------------------------------------------------------------------------

template <class S>
class Dense : public Layer<S> {
 public:
  Dense(ParamLayout* layout, const std::string& name, int in, int out) : in_(in), out_(out) {
    w_ = layout->Add(name + "/w", {in, out});
    b_ = layout->Add(name + "/b", {out});
  }
  int in_size() const override { return in_; }
  int out_size() const override { return out_; }
  double flops() const override { return 2.0 * in_ * out_; }
  void Forward(const S* p, const S* in, int n, S* out) override {
    MatMul<S>(false, false, n, out_, in_, in, in_, p + w_, out_, false, out, out_);
    MMap<S>(out, n, out_).rowwise() += CRow<S>(p + b_, out_);
  }
  void Backward(const S* p, const S* in, const S*, const S* dout, int n, S* din,
                S* grad) override {
    CMap<S> dy(dout, n, out_);
    MatMul<S>(true, false, in_, out_, n, in, in_, dout, out_, true, grad + w_, out_);
    MRow<S>(grad + b_, out_) += dy.colwise().sum();
    if (din) MatMul<S>(false, true, n, in_, out_, dout, out_, p + w_, out_, false, din, in_);
  }

 private:
  int in_, out_;
  int64_t w_, b_;
};

// ---- activations -------------------------------------------------------------------

template <class S>
class Relu : public Layer<S> {
 public:
  explicit Relu(int size) : size_(size) {}
  int in_size() const override { return size_; }
  int out_size() const override { return size_; }
  void Forward(const S*, const S* in, int n, S* out) override {
    const int64_t m = int64_t(n) * size_;
    for (int64_t i = 0; i < m; ++i) out[i] = in[i] > S(0) ? in[i] : S(0);
  }
  void Backward(const S*, const S*, const S* out, const S* dout, int n, S* din, S*) override {
    if (!din) return;
    const int64_t m = int64_t(n) * size_;
    for (int64_t i = 0; i < m; ++i) din[i] = out[i] > S(0) ? dout[i] : S(0);
  }

 private:
  int size_;
};

template <class S>
class Tanh : public Layer<S> {
 public:
  explicit Tanh(int size) : size_(size) {}
  int in_size() const override { return size_; }
  int out_size() const override { return size_; }
  void Forward(const S*, const S* in, int n, S* out) override {
    const int64_t m = int64_t(n) * size_;
    for (int64_t i = 0; i < m; ++i) out[i] = std::tanh(in[i]);
  }
  void Backward(const S*, const S*, const S* out, const S* dout, int n, S* din, S*) override {
    if (!din) return;
    const int64_t m = int64_t(n) * size_;
    for (int64_t i = 0; i < m; ++i) din[i] = dout[i] * (S(1) - out[i] * out[i]);
  }

 private:
  int size_;
};

// Output columns [lo, hi) whose k-wide window (stride s, padding p) lies wholly inside an
// image row of width w: ox s - p >= 0 and ox s - p + k <= w. Convolution and max pooling
// take those columns' windows without bounds checks.
struct Columns {
  int lo, hi;
};
Columns InsideColumns(int w, int out_w, int k, int s, int p) {
  const int lo = std::min(out_w, (p + s - 1) / s);
  return {lo, std::max(lo, std::min(out_w, w + p - k >= 0 ? (w + p - k) / s + 1 : 0))};
}

// ---- convolution (im2col or im2row + GEMM, a chunk of samples at a time) ------------
//
// Two layouts of the unrolled windows, the same products:
//  - im2col, for stride 1: col_ [C_in k k, m P], each row a tap's shifted copy of the
//    image, so a row is one contiguous copy per output row;
//  - im2row, for strides above 1 (the shallow CNN's 8x8/4 and 4x4/2): col_ [m P, C_in k k],
//    each row one output pixel's window, so every (channel, window row) is k contiguous
//    input values instead of a strided gather (the strided im2col spent more time than its
//    GEMM: `stampede bench --networks`, the by-layer table).
// Either way the GEMM's destination is [C, m P] with the m P side long, and the column
// index of a tap is (c k + ky) k + kx, the weights' own order.

template <class S>
class Conv : public Layer<S> {
 public:
  Conv(ParamLayout* layout, const std::string& name, ImageShape in, int out_channels, int k,
       int stride, int pad)
      : in_(in), out_(ConvShape(in, out_channels, k, stride, pad)), k_(k), s_(stride), p_(pad),
        rows_(stride > 1) {
    w_ = layout->Add(name + "/w", {out_channels, in.c, k, k});
    b_ = layout->Add(name + "/b", {out_channels});
    if constexpr (std::is_same_v<S, float>) {
      if (GetConvBackend() != ConvBackend::kEigen) {
        // Where oneDNN has no real kernel for this shape the Eigen path runs it.
        auto conv = OneDnnConv::Create({in.c, in.h, in.w, out_.c, out_.h, out_.w, k, stride, pad});
        if (conv.ok()) onednn_ = std::move(conv).value();
      }
    }
    const int64_t pix = int64_t(out_.h) * out_.w;
    // Samples per GEMM: keep the unrolled windows near 256k values (cache-sized).
    chunk_ = int(std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, pix * in.c * k * k)));
  }
  int in_size() const override { return in_.size(); }
  int out_size() const override { return out_.size(); }
  double flops() const override { return 2.0 * in_.c * k_ * k_ * out_.size(); }

  void Forward(const S* p, const S* in, int n, S* out) override {
    if constexpr (std::is_same_v<S, float>) {
      if (onednn_) return onednn_->Forward(p + w_, p + b_, in, n, out);
    }
    const int K = in_.c * k_ * k_, P = out_.h * out_.w, C = out_.c;
    CRow<S> b(p + b_, C);
    for (int s0 = 0; s0 < n; s0 += chunk_) {
      const int m = std::min(chunk_, n - s0);
      const int64_t mP = int64_t(m) * P;
      Unroll(in + int64_t(s0) * in_.size(), m);
      MMap<S> y(Grow(&y_, int64_t(C) * mP), C, mP);
      // W [C, K] times the columns: [mP, K] (rows_) or [K, mP].
      MatMul<S>(false, rows_, C, mP, K, p + w_, K, col_.data(), rows_ ? K : mP, false, y.data(), mP);
      for (int i = 0; i < m; ++i) {
        S* o = out + int64_t(s0 + i) * out_.size();
        for (int c = 0; c < C; ++c) {
          const S* src = y.data() + int64_t(c) * mP + int64_t(i) * P;
          for (int q = 0; q < P; ++q) o[int64_t(c) * P + q] = src[q] + b[c];
        }
      }
    }
  }

  void Backward(const S* p, const S* in, const S*, const S* dout, int n, S* din,
                S* grad) override {
    if constexpr (std::is_same_v<S, float>) {
      if (onednn_) return onednn_->Backward(p + w_, in, dout, n, din, grad + w_, grad + b_);
    }
    const int K = in_.c * k_ * k_, P = out_.h * out_.w, C = out_.c;
    MRow<S> db(grad + b_, C);
    for (int s0 = 0; s0 < n; s0 += chunk_) {
      const int m = std::min(chunk_, n - s0);
      const int64_t mP = int64_t(m) * P;
      MMap<S> y(Grow(&y_, int64_t(C) * mP), C, mP);
      for (int i = 0; i < m; ++i) {
        const S* g = dout + int64_t(s0 + i) * out_.size();
        for (int c = 0; c < C; ++c) {
          std::memcpy(y.data() + int64_t(c) * mP + int64_t(i) * P, g + int64_t(c) * P, sizeof(S) * P);
        }
      }
      db += y.rowwise().sum().transpose();
      Unroll(in + int64_t(s0) * in_.size(), m);
      S* dcol = din ? Grow(&dcol_, int64_t(K) * mP) : nullptr;
      if (rows_) {
        MatMul<S>(false, false, C, K, mP, y.data(), mP, col_.data(), K, true, grad + w_, K);
        if (din) MatMul<S>(true, false, mP, K, C, y.data(), mP, p + w_, K, false, dcol, K);
      } else {
        MatMul<S>(false, true, C, K, mP, y.data(), mP, col_.data(), mP, true, grad + w_, K);
        if (din) MatMul<S>(true, false, K, mP, C, p + w_, K, y.data(), mP, false, dcol, mP);
      }
      if (din) Roll(m, din + int64_t(s0) * in_.size());
    }
  }

 private:
  // Buffers only grow: no allocation (and no fresh zeroed pages) per call.
  static S* Grow(std::vector<S>* v, int64_t n) {
    if (int64_t(v->size()) < n) v->resize(size_t(n));
    return v->data();
  }
  // Output columns [ox0, ox1) whose window tap kx lands inside the image.
  void Valid(int kx, int* ox0, int* ox1) const {
    // 0 <= ox s - p + kx < w  <=>  ceil((p - kx) / s) <= ox <= floor((w - 1 + p - kx) / s)
    const int lo = p_ - kx, hi = in_.w - 1 + p_ - kx;
    *ox0 = lo <= 0 ? 0 : std::min(out_.w, (lo + s_ - 1) / s_);
    *ox1 = hi < 0 ? *ox0 : std::max(*ox0, std::min(out_.w, hi / s_ + 1));
  }
  // col_ from m samples, in this layer's layout; zeros where a window is in the padding.
  void Unroll(const S* in, int m) {
    if (rows_) Im2Row(in, m);
    else Im2Col(in, m);
  }
  // din (m samples) = the sum of dcol_'s window values at each input pixel.
  void Roll(int m, S* din) {
    std::fill(din, din + int64_t(m) * in_.size(), S(0));
    if (rows_) Row2Im(m, din);
    else Col2Im(m, din);
  }
  // Visits every (sample, output pixel, channel, window row) whose window row lies in the
  // image, with the offset of the window row's first tap in the [m P, K] matrix and the
  // offset of the input value under tap kx = 0: full(dst, src) where the whole row is
  // inside the image, part(dst, src, kx0, kx1) with the valid taps [kx0, kx1) elsewhere.
  template <class Full, class Part>
  void ForEachWindowRow(int m, Full&& full, Part&& part) const {
    const int K = in_.c * k_ * k_, P = out_.h * out_.w;
    // Output columns whose window is inside the image along x: [ox_lo, ox_hi).
    const auto [ox_lo, ox_hi] = InsideColumns(in_.w, out_.w, k_, s_, p_);
    auto partial = [&](int64_t dst, int64_t src, int ox) {
      const int x0 = ox * s_ - p_;
      part(dst + int64_t(ox) * K, src + x0, std::max(0, -x0), std::min(k_, in_.w - x0));
    };
    for (int i = 0; i < m; ++i) {
      for (int oy = 0; oy < out_.h; ++oy) {
        for (int c = 0; c < in_.c; ++c) {
          for (int ky = 0; ky < k_; ++ky) {
            const int y = oy * s_ - p_ + ky;
            if (y < 0 || y >= in_.h) continue;
            const int64_t dst = (int64_t(i) * P + int64_t(oy) * out_.w) * K + (c * k_ + ky) * k_;
            const int64_t src = int64_t(i) * in_.size() + (int64_t(c) * in_.h + y) * in_.w;
            for (int ox = 0; ox < ox_lo; ++ox) partial(dst, src, ox);
            int64_t d = dst + int64_t(ox_lo) * K, x = src + int64_t(ox_lo) * s_ - p_;
            for (int ox = ox_lo; ox < ox_hi; ++ox, d += K, x += s_) full(d, x);
            for (int ox = ox_hi; ox < out_.w; ++ox) partial(dst, src, ox);
          }
        }
      }
    }
  }
  // The window width as a constant for the common kernels (8 and 4: the shallow CNN), so
  // that a whole window row is a few vector moves.
  void Im2Row(const S* in, int m) {
    if (k_ == 8) Im2RowK<8>(in, m);
    else if (k_ == 4) Im2RowK<4>(in, m);
    else Im2RowK<0>(in, m);
  }
  void Row2Im(int m, S* din) const {
    if (k_ == 8) Row2ImK<8>(m, din);
    else if (k_ == 4) Row2ImK<4>(m, din);
    else Row2ImK<0>(m, din);
  }
  template <int KW>
  void Im2RowK(const S* in, int m) {
    const int64_t size = int64_t(m) * out_.h * out_.w * in_.c * k_ * k_;
    S* col = Grow(&col_, size);
    if (p_ > 0) std::fill(col, col + size, S(0));
    const int k = k_;
    ForEachWindowRow(
        m,
        [&](int64_t dst, int64_t src) {
          if constexpr (KW > 0) std::memcpy(col + dst, in + src, sizeof(S) * KW);
          else std::memcpy(col + dst, in + src, sizeof(S) * size_t(k));
        },
        [&](int64_t dst, int64_t src, int kx0, int kx1) {
          for (int kx = kx0; kx < kx1; ++kx) col[dst + kx] = in[src + kx];
        });
  }
  template <int KW>
  void Row2ImK(int m, S* din) const {
    const S* dcol = dcol_.data();
    const int k = KW > 0 ? KW : k_;
    ForEachWindowRow(
        m,
        [&](int64_t dst, int64_t src) {
          for (int kx = 0; kx < k; ++kx) din[src + kx] += dcol[dst + kx];
        },
        [&](int64_t dst, int64_t src, int kx0, int kx1) {
          for (int kx = kx0; kx < kx1; ++kx) din[src + kx] += dcol[dst + kx];
        });
  }
  // col_ [C_in k k, m P]: column i * P + q holds the input window of output pixel q of
  // sample i (zeros where the window is in the padding).
  void Im2Col(const S* in, int m) {
    const int K = in_.c * k_ * k_, P = out_.h * out_.w;
    S* col = Grow(&col_, int64_t(K) * m * P);
    for (int c = 0; c < in_.c; ++c) {
      for (int ky = 0; ky < k_; ++ky) {
        for (int kx = 0; kx < k_; ++kx) {
          int ox0, ox1;
          Valid(kx, &ox0, &ox1);
          S* row = col + int64_t((c * k_ + ky) * k_ + kx) * m * P;
          for (int i = 0; i < m; ++i) {
            const S* img = in + int64_t(i) * in_.size() + int64_t(c) * in_.h * in_.w;
            S* dst = row + int64_t(i) * P;
            for (int oy = 0; oy < out_.h; ++oy) {
              S* d = dst + oy * out_.w;
              const int y = oy * s_ - p_ + ky;
              if (y < 0 || y >= in_.h) {
                std::fill(d, d + out_.w, S(0));
                continue;
              }
              std::fill(d, d + ox0, S(0));
              std::fill(d + ox1, d + out_.w, S(0));
              const S* src = img + int64_t(y) * in_.w - p_ + kx;
              if (s_ == 1) {
                if (ox1 > ox0) std::memcpy(d + ox0, src + ox0, sizeof(S) * (ox1 - ox0));
              } else {
                for (int ox = ox0; ox < ox1; ++ox) d[ox] = src[ox * s_];
              }
            }
          }
        }
      }
    }
  }
  void Col2Im(int m, S* din) const {
    const int P = out_.h * out_.w;
    for (int c = 0; c < in_.c; ++c) {
      for (int ky = 0; ky < k_; ++ky) {
        for (int kx = 0; kx < k_; ++kx) {
          int ox0, ox1;
          Valid(kx, &ox0, &ox1);
          const S* row = dcol_.data() + int64_t((c * k_ + ky) * k_ + kx) * m * P;
          for (int i = 0; i < m; ++i) {
            S* img = din + int64_t(i) * in_.size() + int64_t(c) * in_.h * in_.w;
            const S* src = row + int64_t(i) * P;
            for (int oy = 0; oy < out_.h; ++oy) {
              const int y = oy * s_ - p_ + ky;
              if (y < 0 || y >= in_.h) continue;
              S* dst = img + int64_t(y) * in_.w - p_ + kx;
              const S* g = src + oy * out_.w;
              for (int ox = ox0; ox < ox1; ++ox) dst[ox * s_] += g[ox];
            }
          }
        }
      }
    }
  }

  ImageShape in_, out_;
  int k_, s_, p_;
  bool rows_;  // im2row (strides above 1) rather than im2col
  std::unique_ptr<OneDnnConv> onednn_;  // float, ConvBackend::kOneDnn: the whole convolution
  int chunk_;
  int64_t w_, b_;
  std::vector<S> col_, dcol_, y_;
};

// ---- max-pooling -------------------------------------------------------------------

template <class S>
class MaxPool : public Layer<S> {
 public:
  MaxPool(ImageShape in, int k, int stride, int pad)
      : in_(in), out_(ConvShape(in, in.c, k, stride, pad)), k_(k), s_(stride), p_(pad) {}
  int in_size() const override { return in_.size(); }
  int out_size() const override { return out_.size(); }
  void Forward(const S*, const S* in, int n, S* out) override {
    // Each output's winner is kept for the backward pass of the same input, which then
    // only scatters (finding the windows' maxima again cost it 3-4 times the forward).
    if (int64_t(n) * in_.size() > int64_t(UINT32_MAX)) {  // too large to index in 32 bits: found again
      argmax_in_ = nullptr;
      Run(in, n, [&](int64_t o, int64_t, S v) { out[o] = v; });
      return;
    }
    argmax_.resize(size_t(n) * out_.size());
    Run(in, n, [&](int64_t o, int64_t src, S v) {
      out[o] = v;
      argmax_[size_t(o)] = uint32_t(src);
    });
    argmax_in_ = in;
  }
  void Backward(const S*, const S* in, const S*, const S* dout, int n, S* din, S*) override {
    if (!din) return;
    std::fill(din, din + int64_t(n) * in_.size(), S(0));
    const int64_t m = int64_t(n) * out_.size();
    if (in == argmax_in_ && int64_t(argmax_.size()) == m) {
      for (int64_t o = 0; o < m; ++o) din[argmax_[size_t(o)]] += dout[o];
      return;
    }
    Run(in, n, [&](int64_t o, int64_t src, S) { din[src] += dout[o]; });
  }

 private:
  // Calls f(output index, input index of the window's first maximum, the maximum), the
  // first in the window's row-major order where several tie. Each plane is first dealt
  // into its s column phases (phase r holds columns r, r+s, ...), so that a window offset
  // (dy, kx) is, across the windows of an output row that lie wholly inside it, one run of
  // consecutive values: the compares and selects over that run vectorise and do not
  // branch. A window cut by the padding is scanned on its own.
  template <class F>
  void Run(const S* in, int n, F&& f) const {
    const int H = in_.h, W = in_.w, OW = out_.w;
    const auto [lo, hi] = InsideColumns(W, OW, k_, s_, p_);
    const int WQ = (W + s_ - 1) / s_;  // columns per phase (W when s is 1)
    std::vector<S> phases(s_ > 1 ? size_t(s_) * H * WQ : 0), v(static_cast<size_t>(OW)), v2(v.size());
    // Column ox*s + kx - p of a row is phase r's column ox + q: r and q per kx.
    std::vector<int> phase(static_cast<size_t>(k_)), shift(phase.size());
    for (int kx = 0; kx < k_; ++kx) {
      const int d = kx - p_;
      phase[size_t(kx)] = ((d % s_) + s_) % s_, shift[size_t(kx)] = (d - phase[size_t(kx)]) / s_;
    }
    // The winner: dy * W + kx from the window's corner while the offsets are scanned; then
    // y * W + x in the plane.
    std::vector<int> code(static_cast<size_t>(OW)), code2(code.size());
    for (int64_t i = 0; i < int64_t(n) * in_.c; ++i) {
      const int64_t ibase = i * H * W, obase = i * out_.h * OW;
      const S* plane = in + ibase;
      // Stride 1 has one phase, the plane itself.
      const S* ph = plane;
      if (hi > lo && s_ > 1) {
        S* to = phases.data();
        const size_t stride = size_t(H) * WQ;
        for (int y = 0; y < H; ++y) {
          const S* from = plane + int64_t(y) * W;
          S* row = to + size_t(y) * WQ;
          if (s_ == 2) {  // the common case, in a loop that vectorises
            S* odd = row + stride;
            for (int q = 0; q < W / 2; ++q) row[q] = from[2 * q], odd[q] = from[2 * q + 1];
            if (W % 2) row[W / 2] = from[W - 1];
            continue;
          }
          for (int x = 0, q = 0; x < W; x += s_, ++q) {
            for (int r = 0; r < s_ && x + r < W; ++r) row[r * stride + q] = from[x + r];
          }
        }
        ph = to;
      }
      for (int oy = 0; oy < out_.h; ++oy) {
        const int y0 = std::max(0, oy * s_ - p_), y1 = std::min(H, oy * s_ - p_ + k_);
        // The running maxima and winners move between two buffers at each offset: written
        // back in place, the compiler turns the selects into masked stores, which then
        // stall the next offset's loads.
        S *vm = v.data(), *vn = v2.data();
        int *cm = code.data(), *cn = code2.data();
        for (int dy = 0; dy < y1 - y0; ++dy) {
          for (int kx = 0; kx < k_; ++kx) {
            const S* c = ph + (size_t(phase[size_t(kx)]) * H + y0 + dy) * WQ + shift[size_t(kx)];
            const int at = dy * W + kx;
            if (at == 0) {
              for (int ox = lo; ox < hi; ++ox) vm[ox] = c[ox], cm[ox] = 0;
              continue;
            }
            for (int ox = lo; ox < hi; ++ox) {
              const bool g = c[ox] > vm[ox];
              vn[ox] = g ? c[ox] : vm[ox];
              cn[ox] = g ? at : cm[ox];
            }
            std::swap(vm, vn), std::swap(cm, cn);
          }
        }
        for (int ox = lo; ox < hi; ++ox) cm[ox] += y0 * W + ox * s_ - p_;
        // The windows cut by the padding, scanned on their own.
        const auto edge = [&](int ox) {
          const int x0 = std::max(0, ox * s_ - p_), x1 = std::min(W, ox * s_ - p_ + k_);
          int b = y0 * W + x0;
          S m = plane[b];
          for (int y = y0; y < y1; ++y) {
            for (int x = x0; x < x1; ++x) {
              const S c = plane[y * W + x];
              if (c > m) m = c, b = y * W + x;
            }
          }
          vm[ox] = m, cm[ox] = b;
        };
        for (int ox = 0; ox < lo; ++ox) edge(ox);
        for (int ox = hi; ox < OW; ++ox) edge(ox);
        const int64_t ob = obase + int64_t(oy) * OW;
        for (int ox = 0; ox < OW; ++ox) f(ob + ox, ibase + cm[ox], vm[ox]);
      }
    }
  }
  std::vector<uint32_t> argmax_;  // the last Forward's winners (input indices), per output
  const S* argmax_in_ = nullptr;  // and the input they are in
  ImageShape in_, out_;
  int k_, s_, p_;
};

// ---- residual block ----------------------------------------------------------------

template <class S>
class Residual : public Layer<S> {
 public:
  Residual(ParamLayout* layout, const std::string& name, ImageShape in)
      : size_(in.size()), relu_(in.size()),
        conv0_(layout, name + "/conv0", in, in.c, 3, 1, 1),
        conv1_(layout, name + "/conv1", in, in.c, 3, 1, 1) {}
  int in_size() const override { return size_; }
  int out_size() const override { return size_; }
  double flops() const override { return conv0_.flops() + conv1_.flops(); }
  void Forward(const S* p, const S* in, int n, S* out) override {
    const size_t m = size_t(n) * size_;
    a0_.resize(m), h0_.resize(m), a1_.resize(m), h1_.resize(m);
    relu_.Forward(p, in, n, a0_.data());
    conv0_.Forward(p, a0_.data(), n, h0_.data());
    relu_.Forward(p, h0_.data(), n, a1_.data());
    conv1_.Forward(p, a1_.data(), n, h1_.data());
    for (size_t i = 0; i < m; ++i) out[i] = in[i] + h1_[i];
  }
  void Backward(const S* p, const S* in, const S*, const S* dout, int n, S* din,
                S* grad) override {
    const size_t m = size_t(n) * size_;
    d0_.resize(m), d1_.resize(m);
    conv1_.Backward(p, a1_.data(), h1_.data(), dout, n, d0_.data(), grad);   // d a1
    relu_.Backward(p, h0_.data(), a1_.data(), d0_.data(), n, d1_.data(), grad);  // d h0
    conv0_.Backward(p, a0_.data(), h0_.data(), d1_.data(), n, d0_.data(), grad);  // d a0
    if (!din) return;
    relu_.Backward(p, in, a0_.data(), d0_.data(), n, d1_.data(), grad);  // d in (branch)
    for (size_t i = 0; i < m; ++i) din[i] = dout[i] + d1_[i];
  }

 private:
  int size_;
  Relu<S> relu_;
  Conv<S> conv0_, conv1_;
  std::vector<S> a0_, h0_, a1_, h1_, d0_, d1_;
};

}  // namespace

template <class S>
std::unique_ptr<Layer<S>> MakeDense(ParamLayout* layout, const std::string& name, int in, int out) {
  return std::make_unique<Dense<S>>(layout, name, in, out);
}
template <class S>
std::unique_ptr<Layer<S>> MakeRelu(int size) {
  return std::make_unique<Relu<S>>(size);
}
template <class S>
std::unique_ptr<Layer<S>> MakeTanh(int size) {
  return std::make_unique<Tanh<S>>(size);
}
template <class S>
std::unique_ptr<Layer<S>> MakeConv(ParamLayout* layout, const std::string& name, ImageShape in,
                                   int out_channels, int k, int stride, int pad) {
  return std::make_unique<Conv<S>>(layout, name, in, out_channels, k, stride, pad);
}
template <class S>
std::unique_ptr<Layer<S>> MakeMaxPool(ImageShape in, int k, int stride, int pad) {
  return std::make_unique<MaxPool<S>>(in, k, stride, pad);
}
template <class S>
std::unique_ptr<Layer<S>> MakeResidual(ParamLayout* layout, const std::string& name, ImageShape in) {
  return std::make_unique<Residual<S>>(layout, name, in);
}

// ---- LSTM --------------------------------------------------------------------------

namespace {
// One row's cells (net/kernel_math.h's, as the CUDA kernels run them): the gates'
// pre-activations become their activations; c, tanh(c) and h are written.
template <class S>
void LstmRowForward(S* gates, int H, const S* c_prev, S* c, S* tanh_c, S* h) {
  for (int j = 0; j < H; ++j) LstmCellForward(gates, H, j, c_prev[j], &c[j], &tanh_c[j], &h[j]);
}
// Float: the same cell, vectorised (net/fast_math.h).
template <>
void LstmRowForward<float>(float* gates, int H, const float* c_prev, float* c, float* tanh_c, float* h) {
  LstmRowForwardFloat(gates, H, c_prev, c, tanh_c, h);
}
template <class S>
void LstmRowBackward(const S* gates, int H, const S* c_prev, const S* tanh_c, const S* dout, const S* dh_rec, S* dc_rec,
                     S* dz) {
  for (int j = 0; j < H; ++j) {
    S dc_prev;
    LstmCellBackward(gates, H, j, c_prev[j], tanh_c[j], dout[j] + dh_rec[j], dc_rec[j], dz, &dc_prev);
    dc_rec[j] = dc_prev;
  }
}
template <>
void LstmRowBackward<float>(const float* gates, int H, const float* c_prev, const float* tanh_c, const float* dout,
                            const float* dh_rec, float* dc_rec, float* dz) {
  LstmRowBackwardFloat(gates, H, c_prev, tanh_c, dout, dh_rec, dc_rec, dz);
}
}  // namespace

template <class S>
struct Lstm<S>::Scratch {
  int T1 = 0, B = 0;
  const S* x = nullptr;           // the Forward's input (the caller keeps it alive)
  std::vector<uint8_t> first;     // [T1, B]
  Mat<S> h_prev, c_prev;          // [T1 * B, H]: state entering each step (after resets)
  Mat<S> gates;                   // [T1 * B, 4H]: i, f, g, o after their nonlinearities
  Mat<S> c, tanh_c;               // [T1 * B, H]
  Mat<S> z, dz, dh, dc, dh_rec, dc_rec, wh_t;
};

template <class S>
Lstm<S>::Lstm(ParamLayout* layout, const std::string& name, int in, int hidden)
    : in_(in), h_(hidden), s_(std::make_unique<Scratch>()) {
  wx_ = layout->Add(name + "/wx", {in, 4 * hidden});
  wh_ = layout->Add(name + "/wh", {hidden, 4 * hidden});
  b_ = layout->Add(name + "/b", {4 * hidden});
}
template <class S>
Lstm<S>::~Lstm() = default;

template <class S>
void Lstm<S>::Forward(const S* p, const S* x, int T1, int B, const uint8_t* first,
                      const S* initial_state, S* out, S* final_state) {
  Scratch& s = *s_;
  const int H = h_;
  s.T1 = T1, s.B = B, s.x = x;
  s.first.assign(first, first + size_t(T1) * B);
  s.h_prev.resize(int64_t(T1) * B, H);
  s.c_prev.resize(int64_t(T1) * B, H);
  s.gates.resize(int64_t(T1) * B, 4 * H);
  s.c.resize(int64_t(T1) * B, H);
  s.tanh_c.resize(int64_t(T1) * B, H);
  CRow<S> bias(p + b_, 4 * H);
  // Input contributions for every step at once.
  s.z.resize(int64_t(T1) * B, 4 * H);
  MatMul<S>(false, false, int64_t(T1) * B, 4 * H, in_, x, in_, p + wx_, 4 * H, false, s.z.data(), 4 * H);
  s.z.rowwise() += bias;
  for (int t = 0; t < T1; ++t) {
    auto hp = s.h_prev.middleRows(int64_t(t) * B, B);
    auto cp = s.c_prev.middleRows(int64_t(t) * B, B);
    for (int b = 0; b < B; ++b) {
      const bool reset = first[size_t(t) * B + b];
      if (reset) {
        hp.row(b).setZero();
        cp.row(b).setZero();
      } else if (t == 0) {
        if (initial_state) {
          hp.row(b) = CRow<S>(initial_state + int64_t(b) * 2 * H, H);
          cp.row(b) = CRow<S>(initial_state + int64_t(b) * 2 * H + H, H);
        } else {
          hp.row(b).setZero();
          cp.row(b).setZero();
        }
      } else {
        hp.row(b) = Eigen::Map<const Eigen::Matrix<S, 1, Eigen::Dynamic>>(out + (int64_t(t - 1) * B + b) * H, H);
        cp.row(b) = s.c.row(int64_t(t - 1) * B + b);
      }
    }
    auto g = s.gates.middleRows(int64_t(t) * B, B);
    g = s.z.middleRows(int64_t(t) * B, B);
    MatMul<S>(false, false, B, 4 * H, H, s.h_prev.data() + int64_t(t) * B * H, H, p + wh_, 4 * H, true,
              s.gates.data() + int64_t(t) * B * 4 * H, 4 * H);
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t(t) * B + b;
      LstmRowForward(s.gates.row(r).data(), H, s.c_prev.row(r).data(), s.c.row(r).data(), s.tanh_c.row(r).data(),
                     out + r * H);
    }
  }
  if (final_state) {
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t(T1 - 1) * B + b;
      std::memcpy(final_state + int64_t(b) * 2 * H, out + r * H, sizeof(S) * H);
      for (int j = 0; j < H; ++j) final_state[int64_t(b) * 2 * H + H + j] = s.c(r, j);
    }
  }
}

template <class S>
void Lstm<S>::Backward(const S* p, const S* dout, S* dx, S* grad) {
  Scratch& s = *s_;
  const int H = h_, T1 = s.T1, B = s.B;
  s.dz.resize(int64_t(T1) * B, 4 * H);
  // Wh^T [4H, H], made once: the per-step product dz_t Wh^T of 16 rows ran at half the
  // rate with Wh transposed inside the GEMM (every backend here).
  s.wh_t = CMap<S>(p + wh_, H, 4 * H).transpose();
  s.dh_rec = Mat<S>::Zero(B, H);  // dLoss/dh_t through step t+1
  s.dc_rec = Mat<S>::Zero(B, H);
  for (int t = T1 - 1; t >= 0; --t) {
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t(t) * B + b;
      // dc_rec's row becomes dLoss/dc_{t-1}.
      LstmRowBackward(s.gates.row(r).data(), H, s.c_prev.row(r).data(), s.tanh_c.row(r).data(), dout + r * H,
                      s.dh_rec.row(b).data(), s.dc_rec.row(b).data(), s.dz.row(r).data());
    }
    MatMul<S>(false, false, B, H, 4 * H, s.dz.data() + int64_t(t) * B * 4 * H, 4 * H, s.wh_t.data(), H, false,
              s.dh_rec.data(), H);
    // A reset cut the state: nothing flows into the previous step.
    for (int b = 0; b < B; ++b) {
      if (s.first[size_t(t) * B + b]) {
        s.dh_rec.row(b).setZero();
        s.dc_rec.row(b).setZero();
      }
    }
  }
  MatMul<S>(true, false, in_, 4 * H, int64_t(T1) * B, s.x, in_, s.dz.data(), 4 * H, true, grad + wx_, 4 * H);
  MatMul<S>(true, false, H, 4 * H, int64_t(T1) * B, s.h_prev.data(), H, s.dz.data(), 4 * H, true, grad + wh_, 4 * H);
  MRow<S>(grad + b_, 4 * H) += s.dz.colwise().sum();
  if (dx) MatMul<S>(false, true, int64_t(T1) * B, in_, 4 * H, s.dz.data(), 4 * H, p + wx_, 4 * H, false, dx, in_);
}

#define STAMPEDE_LAYERS(S)                                                                      \
  template std::unique_ptr<Layer<S>> MakeDense<S>(ParamLayout*, const std::string&, int, int); \
  template std::unique_ptr<Layer<S>> MakeRelu<S>(int);                                          \
  template std::unique_ptr<Layer<S>> MakeTanh<S>(int);                                          \
  template std::unique_ptr<Layer<S>> MakeConv<S>(ParamLayout*, const std::string&, ImageShape, \
                                                 int, int, int, int);                           \
  template std::unique_ptr<Layer<S>> MakeMaxPool<S>(ImageShape, int, int, int);                 \
  template std::unique_ptr<Layer<S>> MakeResidual<S>(ParamLayout*, const std::string&,         \
                                                     ImageShape);                               \
  template class Lstm<S>;
STAMPEDE_LAYERS(float)
STAMPEDE_LAYERS(double)
#undef STAMPEDE_LAYERS

}  // namespace stampede::net
