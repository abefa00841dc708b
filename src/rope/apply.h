// One validated rotation request, shared by the scalar reference and the SIMD backends.
// A "row" is one (batch, token) pair: row = b·n_tokens + t. Work is split into units: a unit is a
// row, or a 1/head_parts slice of a row's heads when there are fewer rows than threads (decode).
// Backends process a range of units, so threads never share outputs.
#pragma once

#include <cstdint>

#include "plan.h"
#include "rope/rope.h"

namespace rope {

struct TensorJob {
  const uint8_t* in;
  uint8_t* out;  // == in when rotating in place
  rope_dtype dtype;
  int64_t n_heads;
  int64_t in_batch_stride, in_token_stride, in_head_stride;  // elements
  int64_t out_batch_stride, out_token_stride, out_head_stride;
  bool in_place;
  bool is_key;  // xPos: k is scaled by ζ^(-m) instead of ζ^(m)
  bool from_dram;   // the call is too big for cache: its rows stream from DRAM (SIMD backend's vector width)
  bool stream_out;  // out of place and from DRAM: non-temporal stores where aligned
};

struct ApplyJob {
  const rope_plan* plan;
  bool backward;
  const rope_positions* positions;
  int64_t n_batch, n_tokens;
  TensorJob tensors[2];
  int n_tensors;
  int64_t head_parts;  // units per row
};

// Element i of a position array (starts, ids, cu_seqlens, seq_starts), stored as int64 or int32.
inline int64_t index_at(const rope_positions& p, const int64_t* array, int64_t i) {
  return p.index_type == ROPE_INDEX_I32 ? reinterpret_cast<const int32_t*>(array)[i] : array[i];
}

// Heads [begin, end) of a tensor with n heads in slice `part` of `parts`.
inline int64_t part_begin(int64_t n, int64_t part, int64_t parts) { return n * part / parts; }

// Position of row (b, t) on each axis: pos[0..n_axes).
void row_positions(const ApplyJob& job, int64_t b, int64_t t, int64_t* pos);

// Per-pair factor multiplying cos and sin: attention factor × xPos ζ_i^(±m/scale_base).
// `pair_pos` holds the position of each pair. Writes n_pairs values.
void pair_scales(const rope_plan& plan, bool is_key, const int64_t* pair_pos, float* scale);
// The same factors unrounded, for fp64 tensors.
void pair_scales_f64(const rope_plan& plan, bool is_key, const int64_t* pair_pos, double* scale);

// Scalar reference backend (reference.cc): the readable specification. Units [begin, end).
void reference_apply(const ApplyJob& job, int64_t unit_begin, int64_t unit_end);

}  // namespace rope
