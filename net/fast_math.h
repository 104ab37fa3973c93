// Float exp, sigmoid and tanh as plain arithmetic: no libm call and no branch, so a loop
// of them vectorises (the CPU LSTM cell's five functions a unit, which GCC otherwise
// calls one value at a time, in double). Cephes' expf and tanhf polynomials; the tests
// (tests/net_test.cc) hold them within a few float ulps of the double functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace stampede::net {

// e^x, x clamped to [-87, 88] (e^-87 is float's smallest normal range; e^88 its largest).
inline float ExpF(float x) {
  x = x < -87.f ? -87.f : x;
  x = x > 88.f ? 88.f : x;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding and taking it away rounds
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // x - n ln2, ln2 in two parts so the product is exact.
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

inline float SigmoidF(float x) { return 1.f / (1.f + ExpF(-x)); }

inline float TanhF(float x) {
  const float a = std::fabs(x);
  // Near 0 an odd polynomial keeps the relative precision 1 - 2 / (e^2a + 1) would lose.
  const float z = x * x;
  const float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) * z * x + x;
  const float big = std::copysign(1.f - 2.f / (ExpF(2.f * a) + 1.f), x);
  return a < 0.625f ? small : big;
}

// One row of H LSTM cells in float, as net/kernel_math.h's LstmCellForward computes each:
// `gates` [i, f, g, o] pre-activations in, activations out; c, tanh(c) and h written.
// Built in its own file (lstm_cell.cc) with -fno-trapping-math, without which GCC will
// not turn these functions' selects into vector blends.
void LstmRowForwardFloat(float* gates, int H, const float* c_prev, float* c, float* tanh_c, float* h);
// Its backward over a row, as LstmCellBackward computes each cell: dh = dout + dh_rec,
// dc_rec (dLoss/dc through the next step) in and dLoss/dc_prev out, dz the gates'
// pre-activation gradients [4H]. The arrays must not overlap: then the loop vectorises
// (the generic loop over LstmCellBackward could not prove that and stayed scalar).
void LstmRowBackwardFloat(const float* gates, int H, const float* c_prev, const float* tanh_c, const float* dout,
                          const float* dh_rec, float* dc_rec, float* dz);

}  // namespace stampede::net
