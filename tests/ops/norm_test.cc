// LayerNorm and RMSNorm (src/ops/norm.cc): gradients against central differences in float64, with and
// without the optional parameters; fp32 against fp64 on wide threaded rows; fp64 parameter gradients
// summed in row order; the residual-fused forwards equal the residual add followed by the norm, bit
// for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ops/norm.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, LayerNormGradients) {
  std::mt19937_64 rng(1);
  const int64_t N = 3, C = 7;
  Vec x = random_vec(rng, N * C, 2.0, 0.5), w = random_vec(rng, C, 0.3, 1.0), b = random_vec(rng, C);
  const Vec g = random_vec(rng, N * C);
  Vec y(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(y, g);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ops::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
  // fp32 agrees with fp64.
  std::vector<float> yf(N * C), mf(N), rf(N);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b);
  ops::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
  loss();
  expect_close_fp32(yf, y);
}

TEST(Ops, RmsNormGradientsWithAndWithoutWeight) {
  std::mt19937_64 rng(2);
  const int64_t N = 4, C = 6;
  for (bool weighted : {true, false}) {
    Vec x = random_vec(rng, N * C), w = random_vec(rng, C, 0.3, 1.0);
    const Vec g = random_vec(rng, N * C);
    Vec y(N * C), rrms(N);
    const double* wp = weighted ? w.data() : nullptr;
    auto loss = [&] {
      ops::rmsnorm_forward(y.data(), rrms.data(), x.data(), weighted ? w.data() : nullptr, N, C, 1e-6);
      return dot(y, g);
    };
    loss();
    Vec dx(N * C, 0.0), dw(C, 0.0);
    ops::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), wp, rrms.data(), N, C);
    expect_gradient("dx", x, dx, loss);
    if (weighted) expect_gradient("dw", w, dw, loss);
  }
}

TEST(Ops, LayerNormWideRowsFp32AgreesAndFp64ParameterGradientsKeepTheirSums) {
  std::mt19937_64 rng(24);
  const int64_t N = 40, C = 1003;  // threaded rows and channel bands; C not a multiple of the partial sums
  const Vec x = random_f32_vec(rng, N * C, 2.0, 3.0), w = random_f32_vec(rng, C, 0.3, 1.0),
            b = random_f32_vec(rng, C), g = random_f32_vec(rng, N * C);
  Vec y(N * C), mean(N), rstd(N), dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  ops::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  // fp64 parameter gradients: channel by channel over rows in order, as a plain loop sums them.
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += g[n * C + c] * ((x[n * C + c] - mean[n]) * rstd[n]);
      sb += g[n * C + c];
    }
    ASSERT_EQ(dw[c], sw) << c;
    ASSERT_EQ(db[c], sb) << c;
  }
  std::vector<float> yf(N * C), mf(N), rf(N), dxf(N * C, 0.0f), dwf(C, 0.0f), dbf(C, 0.0f);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b), gf = to_f32(g);
  ops::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
  ops::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), gf.data(), xf.data(), wf.data(), mf.data(), rf.data(),
                          N, C);
  expect_close_fp32(yf, y);
  expect_close_fp32(dxf, dx);
  expect_close_fp32(dwf, dw, 1e-6);
  expect_close_fp32(dbf, db, 1e-6);
}

// residual_*norm_forward: the sum is written as the add would write it, and the outputs and statistics
// equal adding first and then normalising, exactly (same operations per element), in fp32 and fp64,
// on one thread and across the team (N·C ≥ 2^15), for LayerNorm with and without bias and RMSNorm
// with and without weight.
template <typename T>
void expect_fused_residual_norm_is_exact(int64_t N, int64_t C) {
  std::mt19937_64 rng(N * 1000 + C);
  auto cast = [](const Vec& v) { return std::vector<T>(v.begin(), v.end()); };
  const auto x = cast(random_vec(rng, N * C, 2.0, 0.3)), r = cast(random_vec(rng, N * C)),
             w = cast(random_vec(rng, C, 0.3, 1.0)), b = cast(random_vec(rng, C));
  std::vector<T> added = x;
  for (int64_t i = 0; i < N * C; ++i) added[i] += r[i];
  for (const T* bias : {b.data(), static_cast<const T*>(nullptr)}) {
    std::vector<T> y0(N * C), m0(N), s0(N), y1(N * C), m1(N), s1(N), sum = x;
    ops::layernorm_forward(y0.data(), m0.data(), s0.data(), added.data(), w.data(), bias, N, C, 1e-5);
    ops::residual_layernorm_forward(y1.data(), m1.data(), s1.data(), sum.data(), r.data(), w.data(), bias, N, C, 1e-5);
    EXPECT_EQ(sum, added);
    EXPECT_EQ(y1, y0);
    EXPECT_EQ(m1, m0);
    EXPECT_EQ(s1, s0);
  }
  for (const T* weight : {w.data(), static_cast<const T*>(nullptr)}) {
    std::vector<T> y0(N * C), r0(N), y1(N * C), r1(N), sum = x;
    ops::rmsnorm_forward(y0.data(), r0.data(), added.data(), weight, N, C, 1e-6);
    ops::residual_rmsnorm_forward(y1.data(), r1.data(), sum.data(), r.data(), weight, N, C, 1e-6);
    EXPECT_EQ(sum, added);
    EXPECT_EQ(y1, y0);
    EXPECT_EQ(r1, r0);
  }
}

TEST(Ops, ResidualFusedNormsEqualTheAddThenTheNorm) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{3, 7}, {1, 1}, {64, 768}, {5, 9000}}) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    expect_fused_residual_norm_is_exact<float>(N, C);
    expect_fused_residual_norm_is_exact<double>(N, C);
  }
}

}  // namespace
