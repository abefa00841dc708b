// LayerNorm and RMSNorm (src/ops/norm.cc): gradients against central differences in float64, with and
// without the optional parameters; fp32 against fp64 on wide threaded rows; fp64 parameter gradients
// summed in row order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
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

}  // namespace
