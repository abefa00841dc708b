// LayerNorm and RMSNorm (src/ops/norm.cc): gradients against central differences in float64, with and
// without the optional parameters; fp32 against fp64 on wide threaded rows; fp64 parameter gradients
// summed in row order; the residual-fused forwards equal the residual add followed by the norm, bit
// for bit; the bf16 copy a forward writes beside its output (out16) is round_to_bf16 of that output,
// bit for bit, and leaves the output as it is.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ops/linear.h"
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

// out16: on random shapes (one thread and across the team), with and without the optional parameters,
// on every SIMD target built, and on rows whose outputs bf16 rounds specially: NaN (a NaN input),
// subnormal (weights of 1e-39), and past bf16's largest finite value (weights of 3.3e38, where
// rounding reaches infinity). out16 equals round_to_bf16(out), out equals the forward's without out16.
TEST(Ops, NormForwardsWriteTheirBf16CopyAsRoundToBf16Does) {
  std::mt19937_64 rng(16);
  std::uniform_int_distribution<int64_t> rows(1, 70), cols(1, 1100);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 7}, {64, 768}};
  for (int i = 0; i < 6; ++i) shapes.push_back({rows(rng), cols(rng)});
  auto check = [](const char* what, const std::vector<float>& y, const std::vector<float>& y_plain,
                  const std::vector<uint16_t>& y16) {
    SCOPED_TRACE(what);
    std::vector<uint16_t> want(y.size());
    ops::round_to_bf16(want.data(), y.data(), static_cast<int64_t>(y.size()));
    EXPECT_EQ(y16, want);
    ASSERT_EQ(y.size(), y_plain.size());
    for (size_t i = 0; i < y.size(); ++i) {  // the same bits (NaN included)
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(y_plain[i])) << i;
    }
  };
  ops_testing::for_each_simd_target([&] {
    for (auto [N, C] : shapes) {
      for (const double weight_scale : {1.0, 1e-39, 3.3e38}) {
        SCOPED_TRACE(testing::Message() << "N " << N << " C " << C << " weight scale " << weight_scale);
        auto x = to_f32(random_vec(rng, N * C, 2.0, 0.3));
        if (N > 1) x[C] = std::numeric_limits<float>::quiet_NaN();  // row 1: NaN throughout
        const auto r = to_f32(random_vec(rng, N * C)), b = to_f32(random_vec(rng, C));
        std::vector<float> w = to_f32(random_vec(rng, C, 0.3, 1.0));
        for (float& v : w) v = static_cast<float>(v * weight_scale);
        for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
          std::vector<float> y(N * C), y0(N * C), m(N), s(N);
          std::vector<uint16_t> y16(N * C);
          ops::layernorm_forward(y0.data(), m.data(), s.data(), x.data(), w.data(), bias, N, C, 1e-5);
          ops::layernorm_forward(y.data(), m.data(), s.data(), x.data(), w.data(), bias, N, C, 1e-5, y16.data());
          check("layernorm", y, y0, y16);
          std::vector<float> sum0 = x, sum = x;
          ops::residual_layernorm_forward(y0.data(), m.data(), s.data(), sum0.data(), r.data(), w.data(), bias, N, C,
                                          1e-5);
          ops::residual_layernorm_forward(y.data(), m.data(), s.data(), sum.data(), r.data(), w.data(), bias, N, C,
                                          1e-5, y16.data());
          check("residual layernorm", y, y0, y16);
        }
        for (const float* weight : {static_cast<const float*>(w.data()), static_cast<const float*>(nullptr)}) {
          std::vector<float> y(N * C), y0(N * C), rr(N);
          std::vector<uint16_t> y16(N * C);
          ops::rmsnorm_forward(y0.data(), rr.data(), x.data(), weight, N, C, 1e-6);
          ops::rmsnorm_forward(y.data(), rr.data(), x.data(), weight, N, C, 1e-6, y16.data());
          check("rmsnorm", y, y0, y16);
          std::vector<float> sum0 = x, sum = x;
          ops::residual_rmsnorm_forward(y0.data(), rr.data(), sum0.data(), r.data(), weight, N, C, 1e-6);
          ops::residual_rmsnorm_forward(y.data(), rr.data(), sum.data(), r.data(), weight, N, C, 1e-6, y16.data());
          check("residual rmsnorm", y, y0, y16);
        }
      }
    }
  });
  // fp64 norms have no bf16 copy.
  Vec y(3), m(1), s(1);
  const Vec x = {1, 2, 3}, w = {1, 1, 1};
  std::vector<uint16_t> y16(3);
  EXPECT_THROW(ops::layernorm_forward(y.data(), m.data(), s.data(), x.data(), w.data(), w.data(), 1, 3, 1e-5,
                                      y16.data()),
               std::invalid_argument);
  EXPECT_THROW(ops::rmsnorm_forward(y.data(), s.data(), x.data(), w.data(), 1, 3, 1e-6, y16.data()),
               std::invalid_argument);
}

}  // namespace
