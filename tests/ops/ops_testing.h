// Shared by the op tests (tests/ops/*_test.cc): random vectors, fp32 copies, the finite-difference
// gradient check on a stride of elements (tests/grad_check.h), fp32-against-fp64 closeness and NMSE, and a
// loop over the SIMD targets the ops were built for.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "grad_check.h"
#include "hwy/targets.h"
#include "ops/vmath.h"

namespace ops_testing {

using Vec = std::vector<double>;

inline Vec random_vec(std::mt19937_64& rng, size_t n, double scale = 1.0, double shift = 0.0) {
  std::normal_distribution<double> normal;
  Vec v(n);
  for (double& x : v) x = shift + scale * normal(rng);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of `loss` with respect to every `stride`-th element of `param`, against
// `analytic` (tests/grad_check.h, its default step and tolerance).
inline void expect_gradient(const char* what, Vec& param, const Vec& analytic, const std::function<double()>& loss,
                            size_t stride = 1) {
  testing_util::expect_gradient(what, param, analytic, testing_util::every(param.size(), stride), loss);
}

// fp32 result vs the fp64 one, relative to the largest magnitude.
inline void expect_close_fp32(const std::vector<float>& f, const Vec& d, double tol = 2e-6) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    scale = std::max(scale, std::fabs(d[i]));
    err = std::max(err, std::fabs(f[i] - d[i]));
  }
  EXPECT_LE(err, tol * std::max(1.0, scale));
}

// Normalised mean squared error of an fp32 result against the fp64 one: Σ(x − ref)² / Σ ref² (Σ(x − ref)²
// when ref is all zeros).
inline double nmse(const std::vector<float>& x, const Vec& ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += (x[i] - ref[i]) * (x[i] - ref[i]), norm += ref[i] * ref[i];
  return norm > 0 ? err / norm : err;
}

inline std::vector<float> to_f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// Values that are exactly fp32, so fp32 and fp64 runs see the same inputs.
inline Vec random_f32_vec(std::mt19937_64& rng, size_t n, double scale = 1.0, double shift = 0.0) {
  Vec v = random_vec(rng, n, scale, shift);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// Runs body once per SIMD target that this CPU supports and the ops were built for (dispatch alone
// only ever exercises the best one), then restores the normal choice.
inline void for_each_simd_target(const std::function<void()>& body) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(ops::vmath_target(), hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace ops_testing
