// Exact rotary angles: m·θ formed without rounding and reduced modulo 2π in extended precision.
//
// m < 2^48 and θ is a double, so m·θ = hi + lo exactly (a double-double from one FMA). Reducing
// hi + lo by k·2π with 2π split into two doubles keeps the reduced angle within ~1e-16 of the
// exact value, so cos/sin rounded to fp32 are correctly rounded up to fp32's own rounding.
// This is the scalar path used by the reference backend; the SIMD path (cpu/rope_cpu-inl.h)
// reduces by π/2 instead and evaluates its own polynomials, and the tests hold both to __float128.
#pragma once

#include <cmath>
#include <cstdint>

namespace rope {

// 2π = kTwoPiHi + kTwoPiLo to ~2^-107 relative.
inline constexpr double kTwoPiHi = 6.283185307179586231995926937088;   // 0x1.921fb54442d18p+2
inline constexpr double kTwoPiLo = 2.4492935982947063697e-16;           // 0x1.1a62633145c07p-52

// m·θ − k·2π for the nearest integer k, in [-π, π] up to ~1e-16.
inline double reduce_angle_two_pi(int64_t m, double theta) {
  const double md = static_cast<double>(m);  // exact: |m| < 2^53
  const double hi = md * theta;
  const double lo = std::fma(md, theta, -hi);  // hi + lo == m·θ exactly
  const double k = std::nearbyint(hi / kTwoPiHi);
  // hi − k·2π_hi with a single rounding of a result below π: error under 2^-52.
  const double r = std::fma(-k, kTwoPiHi, hi);
  return r + (lo - k * kTwoPiLo);
}

// cos and sin of m·θ in double precision (reference path).
inline void exact_cos_sin(int64_t m, double theta, double* c, double* s) {
  const double r = reduce_angle_two_pi(m, theta);
  *c = std::cos(r);
  *s = std::sin(r);
}

}  // namespace rope
