/* Uses librope through its C header only: rotate one vector (float32, then float64) and check its
 * norm is kept. */
#include <math.h>
#include <stdio.h>

#include "rope/rope.h"

/* max(m, |v|) without libm (the CMake consumer does not link it). */
static double max_abs(double m, double v) {
  v = v < 0 ? -v : v;
  return v > m ? v : m;
}

int main(void) {
  rope_config cfg;
  rope_config_init(&cfg, 8);
  rope_plan* plan = NULL;
  if (rope_plan_create(&cfg, &plan) != ROPE_OK) return 1;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rope_tensor t = {x, ROPE_DTYPE_F32, 1, 1, 1, 8, 8, 8};
  rope_positions pos = {0};
  pos.kind = ROPE_POSITIONS_OFFSET;
  pos.start = 123456;
  if (rope_apply(plan, ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, NULL, NULL) != ROPE_OK) return 2;
  /* The same vector in float64 storage: agrees with the float32 result, and rotating back restores it. */
  double xd[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rope_tensor td = {xd, ROPE_DTYPE_F64, 1, 1, 1, 8, 8, 8};
  if (rope_apply(plan, ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &td, NULL, NULL) != ROPE_OK) return 4;
  double norm_d = 0, vs_f32 = 0, back = 0;
  for (int i = 0; i < 8; ++i) {
    norm_d += xd[i] * xd[i];
    vs_f32 = max_abs(vs_f32, xd[i] - x[i]);
  }
  if (rope_apply(plan, ROPE_BACKWARD, ROPE_ROLE_QUERY, &pos, &td, NULL, NULL) != ROPE_OK) return 5;
  for (int i = 0; i < 8; ++i) back = max_abs(back, xd[i] - (i + 1));
  rope_plan_destroy(plan);
  double norm = 0;
  for (int i = 0; i < 8; ++i) norm += (double)x[i] * x[i];
  printf("librope %s: |R x|^2 = %.4f, f64 %.12f (expected 204)\n", rope_version(), norm, norm_d);
  if (max_abs(0, norm_d - 204.0) > 1e-12 || vs_f32 > 1e-5 || back > 1e-13) return 6;
  return fabs(norm - 204.0) < 1e-3 ? 0 : 3;
}
