// The __float128 oracle for RoPE, shared by the tests and `roformer rope check`.
//
// It recomputes everything independently of the kernels except θ_i and the attention factor,
// which it takes from the plan (their own tests check those against quad pow and Hugging Face).
// m·θ_i is exact in quad precision (48 + 53 bits < 113) and sinq/cosq are correct to ~1e-34.
// Needs libquadmath (GCC's runtime); not part of librope itself.
#pragma once

#if __has_include(<quadmath.h>)
#include <quadmath.h>
#else
// clang does not see GCC's private include folder, where quadmath.h lives; the functions used here
// are declared as libquadmath exports them.
extern "C" {
__float128 sinq(__float128);
__float128 cosq(__float128);
__float128 expq(__float128);
__float128 logq(__float128);
__float128 powq(__float128, __float128);
__float128 fabsq(__float128);
}
#endif

#include <cstdint>
#include <vector>

#include "rope/rope.h"

namespace rope::oracle {

using quad = __float128;

inline void cos_sin(int64_t m, double theta, quad* c, quad* s) {
  const quad angle = static_cast<quad>(m) * static_cast<quad>(theta);
  *c = cosq(angle);
  *s = sinq(angle);
}

// Axis of each rotary pair, from the config alone.
inline std::vector<int> pair_axes(const rope_config& cfg) {
  const int n_pairs = cfg.rot_dim / 2;
  std::vector<int> axis(n_pairs, 0);
  if (cfg.n_axes == 1) return axis;
  for (int i = 0; i < n_pairs; ++i) {
    if (cfg.axes_mode == ROPE_AXES_INTERLEAVED) {
      axis[i] = i % cfg.n_axes;
    } else {
      int a = 0, end = cfg.sections[0];
      while (i >= end) end += cfg.sections[++a];
      axis[i] = a;
    }
  }
  return axis;
}

// Rotates one head x (head_dim float or double values) whose pair i sits at position pair_pos[i];
// writes head_dim doubles to out (pass-through dims copied).
template <typename X>
inline void rotate_head(const rope_config& cfg, const double* theta, double attention_factor,
                        const int64_t* pair_pos, bool backward, bool is_key, const X* x, double* out) {
  const int n_pairs = cfg.rot_dim / 2;
  for (int d = 0; d < cfg.head_dim; ++d) out[d] = x[d];
  for (int i = 0; i < n_pairs; ++i) {
    quad c, s;
    cos_sin(pair_pos[i], theta[i], &c, &s);
    quad scale = attention_factor;
    if (cfg.xpos.enabled) {
      const quad zeta = (quad(2) * i / cfg.rot_dim + cfg.xpos.gamma) / (1 + quad(cfg.xpos.gamma));
      scale *= expq((is_key ? -1 : 1) * quad(pair_pos[i]) / quad(cfg.xpos.scale_base) * logq(zeta));
    }
    c *= scale;
    s *= backward ? -scale : scale;
    const bool inter = cfg.layout == ROPE_LAYOUT_INTERLEAVED;
    const int a = cfg.rot_offset + (inter ? 2 * i : i);
    const int p = a + (inter ? 1 : n_pairs);
    const quad xa = x[a], xp = x[p];
    out[a] = static_cast<double>(xa * c - xp * s);
    out[p] = static_cast<double>(xp * c + xa * s);
  }
}

}  // namespace rope::oracle
