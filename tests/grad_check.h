// The one finite-difference gradient checker of the test suite: central differences in float64
// against an analytic gradient, on chosen elements of a parameter or input vector.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace testing_util {

// Step and tolerance of a check. The defaults (op tests): step 1e-6 · max(1, |x|), tolerance
// 1e-6 · max(1, |numeric|).
struct GradCheck {
  double h = 1e-6;
  bool relative_step = true;     // step h · max(1, |x|), else h
  double abs = 1e-6, rel = 1e-6;
  bool additive = false;         // tolerance abs + rel·|numeric|, else max(abs, rel·|numeric|)
};
// Whole models and blocks: a fixed step 1e-5, tolerance 1e-7 + 1e-5·|numeric|.
inline constexpr GradCheck kModelCheck{1e-5, false, 1e-7, 1e-5, true};

// The first, the last and `random` more elements of [0, n).
inline std::vector<int64_t> picks(int64_t n, int random, uint64_t seed) {
  std::vector<int64_t> out = {0, n - 1};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < random; ++i) out.push_back(static_cast<int64_t>(rng() % n));
  return out;
}

// Every `stride`-th element of [0, n).
inline std::vector<int64_t> every(int64_t n, int64_t stride = 1) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; i += stride) out.push_back(i);
  return out;
}

// Checks analytic[j] ≈ (loss(x_j + h) − loss(x_j − h)) / 2h for j in `which`, x modified in place and
// restored. Returns the number of elements checked.
inline int expect_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                           const std::vector<int64_t>& which, const std::function<double()>& loss,
                           const GradCheck& o = {}) {
  EXPECT_EQ(x.size(), analytic.size()) << what;
  if (x.size() != analytic.size()) return 0;
  int checked = 0;
  for (int64_t j : which) {
    const double saved = x[j], h = o.relative_step ? o.h * std::max(1.0, std::fabs(saved)) : o.h;
    x[j] = saved + h;
    const double up = loss();
    x[j] = saved - h;
    const double down = loss();
    x[j] = saved;
    const double numeric = (up - down) / (2 * h);
    const double tol = o.additive ? o.abs + o.rel * std::fabs(numeric) : std::max(o.abs, o.rel * std::fabs(numeric));
    EXPECT_NEAR(analytic[j], numeric, tol) << what << "[" << j << "]";
    ++checked;
  }
  return checked;
}

}  // namespace testing_util
