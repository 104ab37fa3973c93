#include "net/fast_math.h"

namespace stampede::net {

namespace {
// c = f c_prev + i g, tanh(c), h = o tanh(c) over a row (restrict parameters: the runs
// of `gates` do not overlap the outputs).
void CellOutputs(const float* __restrict i, const float* __restrict f, const float* __restrict g,
                 const float* __restrict o, const float* __restrict c_prev, float* __restrict c,
                 float* __restrict tanh_c, float* __restrict h, int H) {
  for (int j = 0; j < H; ++j) {
    const float cj = f[j] * c_prev[j] + i[j] * g[j];
    const float t = TanhF(cj);
    c[j] = cj;
    tanh_c[j] = t;
    h[j] = o[j] * t;
  }
}
}  // namespace

void LstmRowForwardFloat(float* gates, int H, const float* c_prev, float* c, float* tanh_c, float* h) {
  // The gates one activation at a time over contiguous runs: i and f, then g, then o.
  for (int j = 0; j < 2 * H; ++j) gates[j] = SigmoidF(gates[j]);
  for (int j = 2 * H; j < 3 * H; ++j) gates[j] = TanhF(gates[j]);
  for (int j = 3 * H; j < 4 * H; ++j) gates[j] = SigmoidF(gates[j]);
  CellOutputs(gates, gates + H, gates + 2 * H, gates + 3 * H, c_prev, c, tanh_c, h, H);
}

}  // namespace stampede::net
