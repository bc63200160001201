/* Calls a kernel exported ahead of time (tests/python/test_export.py exports
   relu(x @ w + b) * s as lin.so + lin.h) through its C header alone: cc main.c lin.so -lm */
#include <math.h>
#include <stdio.h>
#include "lin.h"

int main(void) {
  enum { M = 70, K = 40, N = 50 };
  static float x[M][K], w[K][N], b[1][N], out[M][N];
  for (int i = 0; i < M; ++i) for (int k = 0; k < K; ++k) x[i][k] = (float)((i * 7 + k * 3) % 11) / 11.0f;
  for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) w[k][j] = (float)((k * 5 + j) % 13) / 13.0f - 0.5f;
  for (int j = 0; j < N; ++j) b[0][j] = 0.1f * j;
  void* data[] = {x, w, b, out};
  const int64_t sx[] = {K, 1}, sw[] = {N, 1}, sb[] = {N, 1}, so[] = {N, 1};
  const int64_t* strides[] = {sx, sw, sb, so};
  const int64_t iscal[] = {2};
  const double fscal[] = {2.0};
  if (pypto_lin_run(data, strides, iscal, fscal, 2) != 0) { printf("error: %s\n", pypto_lin_error()); return 1; }
  double worst = 0;
  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
    double acc = b[0][j];
    for (int k = 0; k < K; ++k) acc += (double)x[i][k] * w[k][j];
    double want = (acc > 0 ? acc : 0) * 2.0;
    worst = fmax(worst, fabs(want - out[i][j]));
  }
  printf("max abs error %g\n", worst);
  return worst < 1e-3 ? 0 : 1;
}
