// Sinusoidal position encoding (see position.h).
#include "position.h"

#include <stdexcept>
#include <vector>

#include "rope/rope.hpp"

namespace ops {

void sinusoidal_table(float* table, int64_t n_positions, int64_t C) {
  if (C <= 0 || C % 2 != 0) throw std::invalid_argument("sinusoidal positions need an even width");
  rope_config cfg = rope::default_config(static_cast<int32_t>(C));  // θ_i = 10000^(−2i/C)
  const rope::Plan plan(cfg);
  std::vector<float> c(C / 2), s(C / 2);
  for (int64_t m = 0; m < n_positions; ++m) {
    rope::check(rope_plan_cos_sin(plan.get(), m, c.data(), s.data()));
    for (int64_t i = 0; i < C / 2; ++i) {
      table[m * C + 2 * i] = s[i];
      table[m * C + 2 * i + 1] = c[i];
    }
  }
}

void add_positions(float* x, const float* table, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* pe = table + (r % T) * C;
    for (int64_t c = 0; c < C; ++c) x[r * C + c] += pe[c];
  }
}

}  // namespace ops
