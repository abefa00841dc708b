// The one finite-difference gradient checker of the test suite: central differences in float64
// against an analytic gradient, on chosen elements of a parameter or input vector.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace testing_util {

// The first, the last and `random` more elements of [0, n).
inline std::vector<int64_t> picks(int64_t n, int random, uint64_t seed) {
  std::vector<int64_t> out = {0, n - 1};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < random; ++i) out.push_back(static_cast<int64_t>(rng() % n));
  return out;
}

// Checks analytic[j] ≈ (loss(x_j + h) − loss(x_j − h)) / 2h for j in `which`, x modified in place and
// restored. Tolerance: abs + rel · |numeric|. Returns the number of elements checked.
inline int expect_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                           const std::vector<int64_t>& which, const std::function<double()>& loss, double abs = 1e-7,
                           double rel = 1e-5, double h = 1e-5) {
  int checked = 0;
  for (int64_t j : which) {
    const double saved = x[j];
    x[j] = saved + h;
    const double up = loss();
    x[j] = saved - h;
    const double down = loss();
    x[j] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[j], numeric, abs + rel * std::fabs(numeric)) << what << "[" << j << "]";
    ++checked;
  }
  return checked;
}

}  // namespace testing_util
