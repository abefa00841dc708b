// Layout conversion of q/k projection rows, and the Hugging Face RoFormer sinusoidal table.
//
// Interleaved pair i is rows (2i, 2i+1) of the rotary part; half-split pair i is rows (i, i+n).
// Moving row 2i to i and row 2i+1 to i+n makes R_half(m)·(P·W) = P·R_interleaved(m)·W for the
// permutation P, and P is orthogonal, so q·k scores are unchanged (Meta → HF Llama conversion).
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "error.h"
#include "rope/rope.h"

using rope::fail;

extern "C" rope_status rope_permute_rows(const void* in, void* out, size_t row_bytes, int64_t n_heads,
                                         int32_t head_dim, int32_t rot_dim, int32_t rot_offset,
                                         rope_layout from, rope_layout to) {
  rope::clear_error();
  if (in == nullptr || out == nullptr) return fail(ROPE_ERR_NULL_POINTER, "in or out is NULL");
  if (row_bytes == 0 || row_bytes > (size_t{1} << 40) || n_heads <= 0 || n_heads > (int64_t{1} << 32) ||
      head_dim <= 0) {
    return fail(ROPE_ERR_BAD_SHAPE, "row_bytes, n_heads and head_dim must be > 0 (and sane)");
  }
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_offset < 0 || rot_dim > head_dim - rot_offset) {
    return fail(ROPE_ERR_BAD_SHAPE, "rot_dim %d (even, > 0) at offset %d must fit head_dim %d", rot_dim,
                rot_offset, head_dim);
  }
  for (rope_layout l : {from, to}) {
    if (l != ROPE_LAYOUT_INTERLEAVED && l != ROPE_LAYOUT_HALF) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown layout %d", static_cast<int>(l));
    }
  }
  const size_t head_bytes = row_bytes * static_cast<size_t>(head_dim);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  const size_t total = head_bytes * static_cast<size_t>(n_heads);
  if (src != dst && src < dst + total && dst < src + total) {
    return fail(ROPE_ERR_OVERLAP, "in and out overlap without being the same buffer");
  }
  std::vector<unsigned char> head;
  try {
    head.resize(head_bytes);
  } catch (const std::bad_alloc&) {
    return fail(ROPE_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", head_bytes);
  }
  const int32_t n = rot_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    std::memcpy(head.data(), src + h * head_bytes, head_bytes);  // allows in == out
    unsigned char* o = dst + h * head_bytes;
    std::memcpy(o, head.data(), head_bytes);
    if (from == to) continue;
    for (int32_t i = 0; i < n; ++i) {
      // Interleaved index of each row of pair i, and its half-split index.
      const int32_t inter[2] = {rot_offset + 2 * i, rot_offset + 2 * i + 1};
      const int32_t half[2] = {rot_offset + i, rot_offset + n + i};
      for (int r = 0; r < 2; ++r) {
        const int32_t s = from == ROPE_LAYOUT_INTERLEAVED ? inter[r] : half[r];
        const int32_t d = from == ROPE_LAYOUT_INTERLEAVED ? half[r] : inter[r];
        std::memcpy(o + static_cast<size_t>(d) * row_bytes, head.data() + static_cast<size_t>(s) * row_bytes,
                    row_bytes);
      }
    }
  }
  return ROPE_OK;
}

extern "C" rope_status rope_hf_roformer_table(int64_t n_positions, int32_t dim, float* out) {
  rope::clear_error();
  if (out == nullptr) return fail(ROPE_ERR_NULL_POINTER, "out is NULL");
  if (n_positions <= 0 || n_positions > (int64_t{1} << 31) || dim <= 0 || dim % 2 != 0 || dim > (1 << 16)) {
    return fail(ROPE_ERR_BAD_SHAPE, "need 0 < n_positions <= 2^31 and an even dim in [2, 65536]");
  }
  // As transformers' RoFormerSinusoidalPositionalEmbedding._init_weight: numpy float64
  // pos / 10000^(2(j//2)/dim), sin of the even columns then cos of the odd ones, cast to fp32.
  const int32_t half = dim / 2;
  std::vector<double> denom(half);
  for (int32_t i = 0; i < half; ++i) denom[i] = std::pow(10000.0, 2.0 * i / dim);
  for (int64_t p = 0; p < n_positions; ++p) {
    float* row = out + p * dim;
    for (int32_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) / denom[i];
      row[i] = static_cast<float>(std::sin(angle));
      row[half + i] = static_cast<float>(std::cos(angle));
    }
  }
  return ROPE_OK;
}
