// The scalar reference backend: the readable specification of what librope computes.
// For every row (b, t), head h and rotary pair i with partner indices (a, b) in the head:
//   m = position of the pair's axis, (c, s) = (cos m·θ_i, sin m·θ_i) rounded to fp32,
//   c, s *= scale_i (attention factor, xPos), s = −s for the backward pass,
//   y[a] = x[a]·c − x[b]·s,   y[b] = x[b]·c + x[a]·s    (fp32 arithmetic, stored in the dtype).
// fp64 tensors (ROPE_DTYPE_F64) follow the same formula with everything in double: c, s unrounded
// (on the fly even for TABLE plans, whose table is fp32), scale_i unrounded, fp64 arithmetic.
// Elements outside the rotary part are copied unchanged.
#include <cstring>
#include <vector>

#include "angle.h"
#include "apply.h"
#include "convert.h"

namespace rope {
namespace {

float load(const uint8_t* p, rope_dtype dtype, int64_t i) {
  switch (dtype) {
    case ROPE_DTYPE_F32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case ROPE_DTYPE_F16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return f16_to_f32(v);
    }
    case ROPE_DTYPE_BF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return bf16_to_f32(v);
    }
    case ROPE_DTYPE_F64:  // fp64 heads are rotated in double by reference_apply, never loaded here
      break;
  }
  return 0.0f;
}

void store(uint8_t* p, rope_dtype dtype, int64_t i, float v) {
  switch (dtype) {
    case ROPE_DTYPE_F32:
      std::memcpy(p + 4 * i, &v, 4);
      break;
    case ROPE_DTYPE_F16: {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case ROPE_DTYPE_BF16: {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case ROPE_DTYPE_F64:  // see load()
      break;
  }
}

}  // namespace

void reference_apply(const ApplyJob& job, int64_t unit_begin, int64_t unit_end) {
  const rope_plan& plan = *job.plan;
  const rope_config& cfg = plan.cfg;
  const int32_t n_pairs = plan.n_pairs;
  bool need_f32 = false, need_f64 = false;  // fp64 tensors use the double cos/sin, the others fp32
  for (int j = 0; j < job.n_tensors; ++j) (job.tensors[j].dtype == ROPE_DTYPE_F64 ? need_f64 : need_f32) = true;
  std::vector<int64_t> axis_pos(cfg.n_axes), pair_pos(n_pairs);
  std::vector<float> cos_m(n_pairs), sin_m(n_pairs), scale(n_pairs), x(cfg.head_dim);
  std::vector<double> cos_d(need_f64 ? n_pairs : 0), sin_d(cos_d.size()), scale_d(cos_d.size()),
      x_d(need_f64 ? cfg.head_dim : 0);

  for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
    const int64_t row = unit / job.head_parts, part = unit % job.head_parts;
    const int64_t b = row / job.n_tokens, t = row % job.n_tokens;
    row_positions(job, b, t, axis_pos.data());
    for (int32_t i = 0; i < n_pairs; ++i) {
      const int64_t m = axis_pos[plan.pair_axis[i]];
      pair_pos[i] = m;
      double c = 0, s = 0;
      if (need_f64 || cfg.mode != ROPE_MODE_TABLE) exact_cos_sin(m, plan.theta[i], &c, &s);
      if (need_f64) {
        cos_d[i] = c;
        sin_d[i] = s;
      }
      if (!need_f32) continue;
      if (cfg.mode == ROPE_MODE_TABLE) {
        cos_m[i] = plan.table_cos[m * n_pairs + i];
        sin_m[i] = plan.table_sin[m * n_pairs + i];
      } else {
        cos_m[i] = static_cast<float>(c);
        sin_m[i] = static_cast<float>(s);
      }
    }
    for (int j = 0; j < job.n_tensors; ++j) {
      const TensorJob& tj = job.tensors[j];
      const bool f64 = tj.dtype == ROPE_DTYPE_F64;
      if (f64) {
        pair_scales_f64(plan, tj.is_key, pair_pos.data(), scale_d.data());
      } else {
        pair_scales(plan, tj.is_key, pair_pos.data(), scale.data());
      }
      const int64_t h_end = part_begin(tj.n_heads, part + 1, job.head_parts);
      for (int64_t h = part_begin(tj.n_heads, part, job.head_parts); h < h_end; ++h) {
        const size_t es = dtype_size(tj.dtype);
        const uint8_t* in =
            tj.in + es * (b * tj.in_batch_stride + t * tj.in_token_stride + h * tj.in_head_stride);
        uint8_t* out =
            tj.out + es * (b * tj.out_batch_stride + t * tj.out_token_stride + h * tj.out_head_stride);
        if (!tj.in_place) std::memcpy(out, in, es * cfg.head_dim);  // pass-through dims
        if (f64) {
          // fp64 storage: the same formula with double cos/sin, scale and arithmetic.
          std::memcpy(x_d.data(), in, sizeof(double) * cfg.head_dim);
          const double* y = x_d.data();
          for (int32_t i = 0; i < n_pairs; ++i) {
            const int32_t a = cfg.rot_offset + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 2 * i : i);
            const int32_t p = a + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 1 : n_pairs);
            const double c = cos_d[i] * scale_d[i];
            const double s = (job.backward ? -sin_d[i] : sin_d[i]) * scale_d[i];
            const double ya = y[a] * c - y[p] * s, yp = y[p] * c + y[a] * s;
            std::memcpy(out + sizeof(double) * a, &ya, sizeof ya);
            std::memcpy(out + sizeof(double) * p, &yp, sizeof yp);
          }
          continue;
        }
        for (int32_t d = 0; d < cfg.head_dim; ++d) x[d] = load(in, tj.dtype, d);
        for (int32_t i = 0; i < n_pairs; ++i) {
          const int32_t a = cfg.rot_offset + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 2 * i : i);
          const int32_t p = a + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 1 : n_pairs);
          const float c = cos_m[i] * scale[i];
          const float s = (job.backward ? -sin_m[i] : sin_m[i]) * scale[i];
          store(out, tj.dtype, a, x[a] * c - x[p] * s);
          store(out, tj.dtype, p, x[p] * c + x[a] * s);
        }
      }
    }
  }
}

}  // namespace rope
