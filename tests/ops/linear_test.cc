// The linear layer (src/ops/linear.cc): y = x·Wᵀ + b against a plain loop, gradients against central
// differences, fp32 against fp64, and the bias gradient summed in row order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/linear.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, LinearGradientsMatchAndFp32Agrees) {
  std::mt19937_64 rng(4);
  const int64_t N = 5, IC = 6, OC = 4;
  Vec x = random_vec(rng, N * IC), w = random_vec(rng, OC * IC), b = random_vec(rng, OC);
  const Vec g = random_vec(rng, N * OC);
  Vec y(N * OC);
  auto loss = [&] {
    ops::linear_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(y, g);
  };
  loss();
  // y = x·Wᵀ + b against a plain loop.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < IC; ++i) s += x[n * IC + i] * w[o * IC + i];
      EXPECT_NEAR(y[n * OC + o], s, 1e-12);
    }
  }
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  ops::linear_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, IC, OC);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
  std::vector<float> yf(N * OC);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b);
  ops::linear_forward(yf.data(), xf.data(), wf.data(), bf.data(), N, IC, OC);
  expect_close_fp32(yf, y);
}

TEST(Ops, LinearBiasGradientIsTheColumnSumInRowOrder) {
  std::mt19937_64 rng(23);
  const int64_t N = 300, IC = 3, OC = 130;  // large enough for the threaded column bands
  const auto dout = to_f32(random_vec(rng, N * OC)), x = to_f32(random_vec(rng, N * IC)),
             w = to_f32(random_vec(rng, OC * IC));
  std::vector<float> dw(OC * IC, 0.0f), db = to_f32(random_vec(rng, OC)), expected = db;
  ops::linear_backward<float>(nullptr, dw.data(), db.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  for (int64_t o = 0; o < OC; ++o) {
    float sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
    expected[o] += sum;
  }
  EXPECT_EQ(db, expected);
}

}  // namespace
