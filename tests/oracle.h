// Test support: strided test tensors with poisoned padding, and the __float128 oracle
// (rope/oracle.h) applied to them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "rope/rope.h"
#include "rope/convert.h"
#include "rope/oracle.h"

namespace rope_test {

using quad = rope::oracle::quad;
using rope::oracle::pair_axes;
inline void quad_cos_sin(int64_t m, double theta, quad* c, quad* s) { rope::oracle::cos_sin(m, theta, c, s); }

// A [batch, tokens, heads, head_dim] tensor inside a larger buffer: a random dim order
// (bshd / sbhd / bhsd) and random padding between rows, with every unused element poisoned.
struct TestTensor {
  rope_dtype dtype;
  int64_t b, s, h, d;
  int64_t bs, ts, hs;            // strides in elements
  std::vector<uint8_t> buffer;   // whole allocation
  std::vector<uint8_t> used;     // 1 where the view has an element

  size_t es() const { return rope::dtype_size(dtype); }
  int64_t index(int64_t bi, int64_t si, int64_t hi, int64_t di) const { return bi * bs + si * ts + hi * hs + di; }
  rope_tensor view() { return rope_tensor{buffer.data(), dtype, b, s, h, bs, ts, hs}; }

  // Element i as a double (exact for every dtype).
  double get(int64_t i) const {
    uint16_t u;
    switch (dtype) {
      case ROPE_DTYPE_F64: {
        double f;
        std::memcpy(&f, &buffer[8 * i], 8);
        return f;
      }
      case ROPE_DTYPE_F32: {
        float f;
        std::memcpy(&f, &buffer[4 * i], 4);
        return f;
      }
      case ROPE_DTYPE_F16: std::memcpy(&u, &buffer[2 * i], 2); return rope::f16_to_f32(u);
      case ROPE_DTYPE_BF16: std::memcpy(&u, &buffer[2 * i], 2); return rope::bf16_to_f32(u);
    }
    return 0;
  }
  // Stores v rounded to the dtype.
  void set(int64_t i, double v) {
    uint16_t u;
    const float f = static_cast<float>(v);
    switch (dtype) {
      case ROPE_DTYPE_F64: std::memcpy(&buffer[8 * i], &v, 8); return;
      case ROPE_DTYPE_F32: std::memcpy(&buffer[4 * i], &f, 4); return;
      case ROPE_DTYPE_F16: u = rope::f32_to_f16(f); std::memcpy(&buffer[2 * i], &u, 2); return;
      case ROPE_DTYPE_BF16: u = rope::f32_to_bf16(f); std::memcpy(&buffer[2 * i], &u, 2); return;
    }
  }
  // Fills the view with N(0, 1) values (full fp64 mantissas for F64) and poisons everything else
  // (NaN bit patterns).
  void randomize(std::mt19937_64& rng) {
    std::normal_distribution<float> normal;
    std::normal_distribution<double> normal_d;
    std::fill(buffer.begin(), buffer.end(), uint8_t{0xff});
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t si = 0; si < s; ++si)
        for (int64_t hi = 0; hi < h; ++hi)
          for (int64_t di = 0; di < d; ++di) {
            set(index(bi, si, hi, di), dtype == ROPE_DTYPE_F64 ? normal_d(rng) : normal(rng));
          }
  }
  void poison() { std::fill(buffer.begin(), buffer.end(), uint8_t{0xff}); }
  // Bytes outside the view still hold the poison.
  bool padding_untouched() const {
    for (size_t e = 0; e < used.size(); ++e) {
      if (used[e]) continue;
      for (size_t k = 0; k < es(); ++k) if (buffer[e * es() + k] != 0xff) return false;
    }
    return true;
  }
};

// order: 0 = bshd, 1 = sbhd, 2 = bhsd. pad: extra elements after each head / token / batch block.
inline TestTensor make_tensor(rope_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d, int order,
                              std::mt19937_64& rng, bool padded) {
  TestTensor t{dtype, b, s, h, d, 0, 0, 0, {}, {}};
  std::uniform_int_distribution<int64_t> pad(0, padded ? 5 : 0);
  const int64_t hp = d + pad(rng);  // head pitch
  if (order == 0) {         // b, s, h
    t.hs = hp; t.ts = h * t.hs + pad(rng); t.bs = s * t.ts + pad(rng);
  } else if (order == 1) {  // s, b, h
    t.hs = hp; t.bs = h * t.hs + pad(rng); t.ts = b * t.bs + pad(rng);
  } else {                  // b, h, s
    t.ts = hp; t.hs = s * t.ts + pad(rng); t.bs = h * t.hs + pad(rng);
  }
  const int64_t n = (b - 1) * t.bs + (s - 1) * t.ts + (h - 1) * t.hs + d + pad(rng);
  t.buffer.assign(n * t.es(), 0xff);
  t.used.assign(n, 0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t di = 0; di < d; ++di) t.used[t.index(bi, si, hi, di)] = 1;
  return t;
}

// Position of (axis, b, t) under `p`, computed independently of librope.
inline int64_t oracle_position(const rope_positions& p, int64_t n_batch, int64_t n_tokens,
                               int axis, int64_t b, int64_t t) {
  switch (p.kind) {
    case ROPE_POSITIONS_OFFSET: return p.start + (p.starts ? p.starts[b] : 0) + t;
    case ROPE_POSITIONS_IDS: return p.ids[(axis * n_batch + b) * n_tokens + t];
    case ROPE_POSITIONS_VARLEN: {
      int64_t s = 0;
      while (p.cu_seqlens[s + 1] <= t) ++s;
      return (p.seq_starts ? p.seq_starts[s] : 0) + t - p.cu_seqlens[s];
    }
  }
  return -1;
}

// Expected output of rotating `in` (quad precision), as doubles in view order [b][s][h][d].
inline std::vector<double> oracle_apply(const rope_config& cfg, const std::vector<double>& theta,
                                        double attention_factor, const rope_positions& pos,
                                        bool backward, bool is_key, const TestTensor& in) {
  const int n_pairs = cfg.rot_dim / 2;
  const std::vector<int> axis = pair_axes(cfg);
  std::vector<double> out(in.b * in.s * in.h * in.d);
  std::vector<int64_t> pair_pos(n_pairs);
  std::vector<double> x(in.d);  // exact for every dtype
  for (int64_t bi = 0; bi < in.b; ++bi) {
    for (int64_t si = 0; si < in.s; ++si) {
      for (int i = 0; i < n_pairs; ++i) pair_pos[i] = oracle_position(pos, in.b, in.s, axis[i], bi, si);
      for (int64_t hi = 0; hi < in.h; ++hi) {
        for (int64_t di = 0; di < in.d; ++di) x[di] = in.get(in.index(bi, si, hi, di));
        rope::oracle::rotate_head(cfg, theta.data(), attention_factor, pair_pos.data(), backward, is_key,
                                  x.data(), &out[((bi * in.s + si) * in.h + hi) * in.d]);
      }
    }
  }
  return out;
}

// ‖actual − expected‖ / ‖expected‖ over the whole view; NaN if any element is not finite.
inline double relative_error(const TestTensor& actual, const std::vector<double>& expected) {
  double num = 0, den = 0;
  for (int64_t bi = 0; bi < actual.b; ++bi)
    for (int64_t si = 0; si < actual.s; ++si)
      for (int64_t hi = 0; hi < actual.h; ++hi)
        for (int64_t di = 0; di < actual.d; ++di) {
          const double a = actual.get(actual.index(bi, si, hi, di));
          const double e = expected[((bi * actual.s + si) * actual.h + hi) * actual.d + di];
          if (!std::isfinite(a)) return NAN;
          num += (a - e) * (a - e);
          den += e * e;
        }
  return std::sqrt(num / den);
}

}  // namespace rope_test
