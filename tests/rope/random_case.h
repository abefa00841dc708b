// Random librope calls for the tests: a configuration (head and rotary dims, layout, base, scaling,
// position axes, xPos, table), tensor sizes for q and k (GQA), and positions of every kind with the
// arrays they point to. apply_test.cc checks them on the CPU, cuda_test.cc on the GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "rope/rope.h"

namespace rope_test {

struct RandomCase {
  rope_config cfg;
  std::vector<double> long_f, short_f;
  rope_dtype dtype;
  int64_t b, s, hq, hk;
  rope_positions pos{};
  std::vector<int64_t> ids, starts, cu, seq_starts;
  int64_t max_pos;  // exclusive bound for positions
};

template <typename T>
T pick(std::mt19937_64& rng, std::initializer_list<T> xs) {
  std::uniform_int_distribution<size_t> u(0, xs.size() - 1);
  return *(xs.begin() + u(rng));
}

inline int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Draws c.pos of `kind` (0 offsets, 1 ids, 2 packed sequences, which need c.b == 1) for c's sizes and
// c.max_pos, with the arrays it points to; packed sequences are up to max_len tokens long.
inline void random_positions(RandomCase& c, std::mt19937_64& rng, int kind, int64_t max_len = 6) {
  c.pos = rope_positions{};
  c.ids.clear(), c.starts.clear(), c.cu.clear(), c.seq_starts.clear();
  if (kind == 0) {
    c.pos.kind = ROPE_POSITIONS_OFFSET;
    c.pos.start = uniform(rng, 0, (c.max_pos - 1) / 2 - c.s);
    if (uniform(rng, 0, 1)) {
      for (int64_t i = 0; i < c.b; ++i) c.starts.push_back(uniform(rng, 0, (c.max_pos - 1) / 2 - c.s));
      c.pos.starts = c.starts.data();
    }
  } else if (kind == 1) {
    c.pos.kind = ROPE_POSITIONS_IDS;
    for (int64_t i = 0; i < c.cfg.n_axes * c.b * c.s; ++i) c.ids.push_back(uniform(rng, 0, c.max_pos - 1));
    c.pos.ids = c.ids.data();
  } else {
    c.pos.kind = ROPE_POSITIONS_VARLEN;
    c.cu.push_back(0);
    while (c.cu.back() < c.s) c.cu.push_back(std::min(c.s, c.cu.back() + uniform(rng, 0, max_len)));
    c.pos.cu_seqlens = c.cu.data();
    c.pos.n_seqs = static_cast<int64_t>(c.cu.size()) - 1;
    if (uniform(rng, 0, 1)) {
      for (int64_t i = 0; i < c.pos.n_seqs; ++i) c.seq_starts.push_back(uniform(rng, 0, c.max_pos - 1 - c.s));
      c.pos.seq_starts = c.seq_starts.data();
    }
  }
}

// max_position: the exclusive bound of on-the-fly positions (table plans use 3000, xPos 4000).
inline RandomCase random_case(std::mt19937_64& rng, int64_t max_position = int64_t{1} << 31) {
  RandomCase c;
  const bool typical = uniform(rng, 0, 1) == 0;
  // 192 and 256: rows of 3 and 4 steps for the AVX512-BF16 half kernel, and more than one tile interleaved.
  const int32_t head_dim = typical ? pick(rng, {64, 128, 96, 192, 256}) : static_cast<int32_t>(uniform(rng, 2, 150));
  rope_config_init(&c.cfg, head_dim);
  rope_config& cfg = c.cfg;
  if (!typical) {
    cfg.rot_offset = static_cast<int32_t>(uniform(rng, 0, (head_dim - 2) / 2));
    cfg.rot_dim = 2 * static_cast<int32_t>(uniform(rng, 1, (head_dim - cfg.rot_offset) / 2));
  }
  cfg.layout = pick(rng, {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF});
  cfg.base = pick(rng, {10000.0, 500000.0, 1e6, 123.5});
  const int32_t n_pairs = cfg.rot_dim / 2;
  c.dtype = pick(rng, {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16});
  c.b = uniform(rng, 1, 3);
  c.s = uniform(rng, 1, 17);
  c.hq = uniform(rng, 1, 4);
  c.hk = pick(rng, {int64_t{1}, c.hq, uniform(rng, 1, 4)});

  // Scaling (each path's θ is checked elsewhere; here the attention factor reaches the output).
  switch (uniform(rng, 0, 5)) {
    case 0: cfg.scaling.type = ROPE_SCALING_LINEAR; cfg.scaling.factor = 4; break;
    case 1:
      cfg.scaling.type = ROPE_SCALING_YARN;
      cfg.scaling.factor = 8;
      cfg.scaling.original_max_positions = 4096;
      break;
    case 2:
      if (n_pairs >= 1) {
        cfg.scaling.type = ROPE_SCALING_LONGROPE;
        cfg.scaling.factor = 16;
        cfg.scaling.original_max_positions = 4096;
        for (int i = 0; i < n_pairs; ++i) {
          c.short_f.push_back(1.0 + 0.01 * i);
          c.long_f.push_back(1.0 + 0.3 * i);
        }
        cfg.scaling.short_factor = c.short_f.data();
        cfg.scaling.long_factor = c.long_f.data();
      }
      break;
    default: break;
  }
  const int axes_kind = uniform(rng, 0, 6);
  if (axes_kind == 0 && n_pairs >= 3) {  // M-RoPE sections
    cfg.n_axes = 3;
    cfg.axes_mode = ROPE_AXES_SECTIONS;
    cfg.sections[0] = static_cast<int32_t>(uniform(rng, 0, n_pairs / 2));
    cfg.sections[1] = static_cast<int32_t>(uniform(rng, 0, n_pairs - cfg.sections[0]));
    cfg.sections[2] = n_pairs - cfg.sections[0] - cfg.sections[1];
  } else if (axes_kind == 1 && n_pairs >= 4 && cfg.scaling.type != ROPE_SCALING_LONGROPE) {  // 2-D axial
    cfg.n_axes = 2;
    cfg.axes_mode = ROPE_AXES_AXIAL;
    cfg.sections[0] = n_pairs / 2;
    cfg.sections[1] = n_pairs - n_pairs / 2;
  } else if (axes_kind == 2 && n_pairs >= 2) {
    cfg.n_axes = static_cast<int32_t>(uniform(rng, 2, 3));
    cfg.axes_mode = ROPE_AXES_INTERLEAVED;
  }
  const bool xpos = uniform(rng, 0, 7) == 0;
  if (xpos) cfg.xpos.enabled = 1;
  const bool table = uniform(rng, 0, 2) == 0;
  c.max_pos = xpos ? 4000 : table ? 3000 : max_position;
  if (table) {
    cfg.mode = ROPE_MODE_TABLE;
    cfg.table_positions = c.max_pos;
  }

  // Positions.
  const int kind = static_cast<int>(uniform(rng, 0, 2));
  random_positions(c, rng, kind == 2 && c.b != 1 ? 0 : kind);
  return c;
}

}  // namespace rope_test
