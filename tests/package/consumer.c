/* Uses librope through its C header only: rotate one vector and check its norm is kept. */
#include <math.h>
#include <stdio.h>

#include "rope/rope.h"

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
  rope_plan_destroy(plan);
  double norm = 0;
  for (int i = 0; i < 8; ++i) norm += (double)x[i] * x[i];
  printf("librope %s: |R x|^2 = %.4f (expected 204)\n", rope_version(), norm);
  return fabs(norm - 204.0) < 1e-3 ? 0 : 3;
}
