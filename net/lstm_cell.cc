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

void LstmRowBackwardFloat(const float* __restrict gates, int H, const float* __restrict c_prev,
                          const float* __restrict tanh_c, const float* __restrict dout,
                          const float* __restrict dh_rec, float* __restrict dc_rec, float* __restrict dz) {
  const float* __restrict gi = gates;
  const float* __restrict gf = gates + H;
  const float* __restrict gg = gates + 2 * H;
  const float* __restrict go = gates + 3 * H;
  float* __restrict di = dz;
  float* __restrict df = dz + H;
  float* __restrict dg = dz + 2 * H;
  float* __restrict d_o = dz + 3 * H;
  for (int j = 0; j < H; ++j) {
    const float i = gi[j], f = gf[j], g = gg[j], o = go[j], t = tanh_c[j];
    const float dh = dout[j] + dh_rec[j];
    const float dc = dh * o * (1.f - t * t) + dc_rec[j];
    di[j] = dc * g * i * (1.f - i);
    df[j] = dc * c_prev[j] * f * (1.f - f);
    dg[j] = dc * i * (1.f - g * g);
    d_o[j] = dh * t * o * (1.f - o);
    dc_rec[j] = dc * f;
  }
}

}  // namespace stampede::net
