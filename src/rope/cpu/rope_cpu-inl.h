// SIMD kernels (Google Highway), compiled once per target by rope_cpu.cc's foreach_target.
//  - CosSinExact: cos/sin of m·θ in float64 lanes: exact two-product, Cody–Waite reduction by π/2
//    with a two-double π/2, fdlibm minimax polynomials, quadrant fix-up, rounded to fp32.
//  - ApplyRows: per row, per-pair cos/sin (table or on the fly) folded with scale and sign into
//    layout-shaped vectors C, S; then every head is y = x·C + swap(x)·S (interleaved) or the
//    half-split equivalent, in fp32 lanes, loading/storing f32, f16 or bf16.
// Include guard per target, as Highway requires.
#if defined(ROPE_CPU_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_CPU_INL_H_
#undef ROPE_CPU_INL_H_
#else
#define ROPE_CPU_INL_H_
#endif

#include <cstring>
#include <vector>

#include "../apply.h"
#include "../convert.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a·b = p + e exactly.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void TwoProd(D d, V a, V b, V& p, V& e) {
  p = hn::Mul(a, b);
#if HWY_NATIVE_FMA
  (void)d;
  e = hn::MulSub(a, b, p);
#else
  // Dekker/Veltkamp split: exact without FMA for |a·b| far from overflow.
  const V split = hn::Set(d, 134217729.0);  // 2^27 + 1
  const V ca = hn::Mul(a, split), cb = hn::Mul(b, split);
  const V ah = hn::Sub(ca, hn::Sub(ca, a)), al = hn::Sub(a, ah);
  const V bh = hn::Sub(cb, hn::Sub(cb, b)), bl = hn::Sub(b, bh);
  e = hn::Add(hn::Add(hn::Add(hn::Sub(hn::Mul(ah, bh), p), hn::Mul(ah, bl)), hn::Mul(al, bh)),
              hn::Mul(al, bl));
#endif
}

// cos/sin of pos[i]·theta[i], i < n (arrays padded to a multiple of the lane count), to fp32.
HWY_INLINE void CosSinExact(const double* pos, const double* theta, int64_t n, float* c_out,
                            float* s_out) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  using VD = hn::Vec<decltype(dd)>;
  const VD two_over_pi = hn::Set(dd, 0.63661977236758134308);
  const VD pio2_hi = hn::Set(dd, 1.5707963267948966192);   // 0x1.921fb54442d18p+0
  const VD pio2_lo = hn::Set(dd, 6.123233995736766036e-17);  // π/2 − pio2_hi
  // fdlibm __kernel_sin / __kernel_cos coefficients, |r| <= π/4.
  const VD s1 = hn::Set(dd, -1.66666666666666324348e-01), s2 = hn::Set(dd, 8.33333333332248946124e-03),
           s3 = hn::Set(dd, -1.98412698298579493134e-04), s4 = hn::Set(dd, 2.75573137070700676789e-06),
           s5 = hn::Set(dd, -2.50507602534068634195e-08), s6 = hn::Set(dd, 1.58969099521155010221e-10);
  const VD c1 = hn::Set(dd, 4.16666666666666019037e-02), c2 = hn::Set(dd, -1.38888888888741095749e-03),
           c3 = hn::Set(dd, 2.48015872894767294178e-05), c4 = hn::Set(dd, -2.75573143513906633035e-07),
           c5 = hn::Set(dd, 2.08757232129817482790e-09), c6 = hn::Set(dd, -1.13596475577881948265e-11);
  const VD one = hn::Set(dd, 1.0), half = hn::Set(dd, 0.5), quarter = hn::Set(dd, 0.25),
           four = hn::Set(dd, 4.0), two = hn::Set(dd, 2.0);
  const size_t lanes = hn::Lanes(dd);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(lanes)) {
    VD hi, lo;
    TwoProd(dd, hn::LoadU(dd, pos + i), hn::LoadU(dd, theta + i), hi, lo);
    const VD k = hn::Round(hn::Mul(hi, two_over_pi));
    VD p, e;
    TwoProd(dd, k, pio2_hi, p, e);
    // r = (hi + lo) − k·π/2; hi − p is exact (Sterbenz), the rest are tiny corrections.
    const VD r = hn::Add(hn::Sub(hn::Sub(hi, p), e), hn::NegMulAdd(k, pio2_lo, lo));
    const VD z = hn::Mul(r, r);
    VD ps = hn::MulAdd(z, s6, s5);
    ps = hn::MulAdd(z, ps, s4);
    ps = hn::MulAdd(z, ps, s3);
    ps = hn::MulAdd(z, ps, s2);
    ps = hn::MulAdd(z, ps, s1);
    const VD sin_r = hn::MulAdd(hn::Mul(r, z), ps, r);
    VD pc = hn::MulAdd(z, c6, c5);
    pc = hn::MulAdd(z, pc, c4);
    pc = hn::MulAdd(z, pc, c3);
    pc = hn::MulAdd(z, pc, c2);
    pc = hn::MulAdd(z, pc, c1);
    const VD cos_r = hn::MulAdd(hn::Mul(z, z), pc, hn::NegMulAdd(half, z, one));
    // Quadrant q = k mod 4: (sin, cos) = (s, c), (c, −s), (−s, −c), (−c, s).
    const VD q = hn::Sub(k, hn::Mul(four, hn::Floor(hn::Mul(k, quarter))));
    const auto odd = hn::Or(hn::Eq(q, one), hn::Eq(q, hn::Set(dd, 3.0)));
    const auto sin_neg = hn::Ge(q, two);
    const auto cos_neg = hn::Or(hn::Eq(q, one), hn::Eq(q, two));
    VD sin_a = hn::IfThenElse(odd, cos_r, sin_r);
    VD cos_a = hn::IfThenElse(odd, sin_r, cos_r);
    sin_a = hn::IfThenElse(sin_neg, hn::Neg(sin_a), sin_a);
    cos_a = hn::IfThenElse(cos_neg, hn::Neg(cos_a), cos_a);
    hn::StoreU(hn::DemoteTo(df, cos_a), df, c_out + i);
    hn::StoreU(hn::DemoteTo(df, sin_a), df, s_out + i);
  }
}

// ---- fp32 lanes from/to each storage type.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const float* p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const hwy::bfloat16_t* p) {
  const hn::Rebind<hwy::bfloat16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}
template <class DF>
HWY_INLINE void StoreF(DF df, hn::Vec<DF> v, float* p) {
  hn::StoreU(v, df, p);
}
template <class DF>
HWY_INLINE void StoreF(DF /*df*/, hn::Vec<DF> v, hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, p);
}
template <class DF>
HWY_INLINE void StoreF(DF /*df*/, hn::Vec<DF> v, hwy::bfloat16_t* p) {
  // Round to nearest even (Highway 1.0's DemoteTo truncates); NaN stays a quiet NaN.
  const hn::Rebind<uint32_t, DF> du;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  const auto out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, out)), du16, reinterpret_cast<uint16_t*>(p));
}

HWY_INLINE float ScalarLoad(const float* p) { return *p; }
HWY_INLINE float ScalarLoad(const hwy::float16_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return f16_to_f32(b);
}
HWY_INLINE float ScalarLoad(const hwy::bfloat16_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return bf16_to_f32(b);
}
HWY_INLINE void ScalarStore(float v, float* p) { *p = v; }
HWY_INLINE void ScalarStore(float v, hwy::float16_t* p) {
  const uint16_t b = f32_to_f16(v);
  std::memcpy(p, &b, 2);
}
HWY_INLINE void ScalarStore(float v, hwy::bfloat16_t* p) {
  const uint16_t b = f32_to_bf16(v);
  std::memcpy(p, &b, 2);
}

// Interleaved pairs over rot elements: y = x·C + Reverse2(x)·S with C = (c0, c0, c1, c1, ...)
// and S = (−s0, s0, −s1, s1, ...).
template <typename T>
HWY_INLINE void RotateInterleaved(const T* in, T* out, int32_t rot,
                                  const float* HWY_RESTRICT cc, const float* HWY_RESTRICT ss) {
  const hn::ScalableTag<float> df;
  const int32_t lanes = static_cast<int32_t>(hn::Lanes(df));
  int32_t j = 0;
  // A pair must sit inside one vector: single-lane targets take the scalar loop.
  for (; lanes >= 2 && j + lanes <= rot; j += lanes) {
    const auto x = LoadF(df, in + j);
    const auto y = hn::MulAdd(x, hn::LoadU(df, cc + j), hn::Mul(hn::Reverse2(df, x), hn::LoadU(df, ss + j)));
    StoreF(df, y, out + j);
  }
  for (; j < rot; j += 2) {
    const float x0 = ScalarLoad(in + j), x1 = ScalarLoad(in + j + 1);
    ScalarStore(x0 * cc[j] + x1 * ss[j], out + j);
    ScalarStore(x1 * cc[j + 1] + x0 * ss[j + 1], out + j + 1);
  }
}

// Half split: pairs (j, j + half): y_lo = x_lo·c − x_hi·s, y_hi = x_hi·c + x_lo·s.
template <typename T>
HWY_INLINE void RotateHalf(const T* in, T* out, int32_t half, const float* HWY_RESTRICT cc,
                           const float* HWY_RESTRICT ss) {
  const hn::ScalableTag<float> df;
  const int32_t lanes = static_cast<int32_t>(hn::Lanes(df));
  int32_t j = 0;
  for (; j + lanes <= half; j += lanes) {
    const auto lo = LoadF(df, in + j), hi = LoadF(df, in + half + j);
    const auto c = hn::LoadU(df, cc + j), s = hn::LoadU(df, ss + j);
    StoreF(df, hn::MulSub(lo, c, hn::Mul(hi, s)), out + j);
    StoreF(df, hn::MulAdd(hi, c, hn::Mul(lo, s)), out + half + j);
  }
  for (; j < half; ++j) {
    const float lo = ScalarLoad(in + j), hi = ScalarLoad(in + half + j);
    ScalarStore(lo * cc[j] - hi * ss[j], out + j);
    ScalarStore(hi * cc[j] + lo * ss[j], out + half + j);
  }
}

// Per-thread scratch, sized once per call.
struct RowScratch {
  std::vector<int64_t> axis_pos, pair_pos;
  std::vector<double> pos_d;
  std::vector<float> cos_m, sin_m, scale, cc, ss;
  explicit RowScratch(const rope_plan& plan) {
    const size_t padded = static_cast<size_t>(plan.n_pairs) + kPairPadding;
    axis_pos.resize(plan.cfg.n_axes);
    pair_pos.resize(plan.n_pairs);
    pos_d.assign(padded, 0.0);
    cos_m.resize(padded);
    sin_m.resize(padded);
    scale.resize(padded);
    cc.resize(2 * padded);
    ss.resize(2 * padded);
  }
};

template <typename T>
HWY_INLINE void RotateTensorRow(const rope_plan& plan, const TensorJob& tj, int64_t b, int64_t t,
                                const float* cc, const float* ss) {
  const rope_config& cfg = plan.cfg;
  const size_t es = sizeof(T);
  const uint8_t* in_row = tj.in + es * (b * tj.in_batch_stride + t * tj.in_token_stride);
  uint8_t* out_row = tj.out + es * (b * tj.out_batch_stride + t * tj.out_token_stride);
  const int32_t tail = cfg.head_dim - cfg.rot_offset - cfg.rot_dim;
  for (int64_t h = 0; h < tj.n_heads; ++h) {
    const T* in = reinterpret_cast<const T*>(in_row + es * h * tj.in_head_stride);
    T* out = reinterpret_cast<T*>(out_row + es * h * tj.out_head_stride);
    if (!tj.in_place) {
      std::memcpy(out, in, es * cfg.rot_offset);
      std::memcpy(out + cfg.rot_offset + cfg.rot_dim, in + cfg.rot_offset + cfg.rot_dim, es * tail);
    }
    if (cfg.layout == ROPE_LAYOUT_INTERLEAVED) {
      RotateInterleaved(in + cfg.rot_offset, out + cfg.rot_offset, cfg.rot_dim, cc, ss);
    } else {
      RotateHalf(in + cfg.rot_offset, out + cfg.rot_offset, plan.n_pairs, cc, ss);
    }
  }
}

HWY_INLINE void ApplyRowsImpl(const ApplyJob& job, int64_t row_begin, int64_t row_end) {
  const rope_plan& plan = *job.plan;
  const rope_config& cfg = plan.cfg;
  const int32_t n_pairs = plan.n_pairs;
  const bool interleaved = cfg.layout == ROPE_LAYOUT_INTERLEAVED;
  const bool scaled = plan.attention_factor != 1.0 || cfg.xpos.enabled;
  RowScratch sc(plan);

  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t b = row / job.n_tokens, t = row % job.n_tokens;
    row_positions(job, b, t, sc.axis_pos.data());
    // cos/sin per pair, unscaled.
    const float* cos_m = sc.cos_m.data();
    const float* sin_m = sc.sin_m.data();
    if (cfg.mode == ROPE_MODE_TABLE && cfg.n_axes == 1) {
      cos_m = &plan.table_cos[sc.axis_pos[0] * n_pairs];
      sin_m = &plan.table_sin[sc.axis_pos[0] * n_pairs];
    } else if (cfg.mode == ROPE_MODE_TABLE) {
      for (int32_t i = 0; i < n_pairs; ++i) {
        const int64_t m = sc.axis_pos[plan.pair_axis[i]];
        sc.cos_m[i] = plan.table_cos[m * n_pairs + i];
        sc.sin_m[i] = plan.table_sin[m * n_pairs + i];
      }
    } else {
      for (int32_t i = 0; i < n_pairs; ++i) sc.pos_d[i] = static_cast<double>(sc.axis_pos[plan.pair_axis[i]]);
      CosSinExact(sc.pos_d.data(), plan.theta.data(), n_pairs, sc.cos_m.data(), sc.sin_m.data());
    }
    if (scaled) {
      for (int32_t i = 0; i < n_pairs; ++i) sc.pair_pos[i] = sc.axis_pos[plan.pair_axis[i]];
    }
    for (int j = 0; j < job.n_tensors; ++j) {
      const TensorJob& tj = job.tensors[j];
      // C and S in the layout's shape, with scale and direction folded in. q and k share them
      // unless xPos treats them differently.
      if (j == 0 || cfg.xpos.enabled) {
        if (scaled) pair_scales(plan, tj.is_key, sc.pair_pos.data(), sc.scale.data());
        float* cc = sc.cc.data();
        float* ss = sc.ss.data();
        for (int32_t i = 0; i < n_pairs; ++i) {
          const float c = scaled ? cos_m[i] * sc.scale[i] : cos_m[i];
          float s = scaled ? sin_m[i] * sc.scale[i] : sin_m[i];
          if (job.backward) s = -s;
          if (interleaved) {
            cc[2 * i] = cc[2 * i + 1] = c;
            ss[2 * i] = -s;
            ss[2 * i + 1] = s;
          } else {
            cc[i] = c;
            ss[i] = s;
          }
        }
      }
      switch (tj.dtype) {
        case ROPE_DTYPE_F32:
          RotateTensorRow<float>(plan, tj, b, t, sc.cc.data(), sc.ss.data());
          break;
        case ROPE_DTYPE_F16:
          RotateTensorRow<hwy::float16_t>(plan, tj, b, t, sc.cc.data(), sc.ss.data());
          break;
        case ROPE_DTYPE_BF16:
          RotateTensorRow<hwy::bfloat16_t>(plan, tj, b, t, sc.cc.data(), sc.ss.data());
          break;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // ROPE_CPU_INL_H_
