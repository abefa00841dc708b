// The linear layer (src/ops/linear.cc): y = x·Wᵀ + b against a plain loop, gradients against central
// differences, fp32 against fp64, and the bias gradient summed in row order; the bf16
// mixed-precision products against fp64 on the operands rounded to bf16, their gradient census, and
// the backward through a kept activation slope.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <tuple>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/linear.h"
#include "ops/ops_testing.h"
#include "ops/packed_linear.h"
#include "rope/convert.h"

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

double rounded_to_bf16(double x) { return rope::bf16_to_f32(rope::f32_to_bf16(static_cast<float>(x))); }

// Arbitrary fp32 operands: the products equal fp64's on the operands rounded to nearest-even bf16, to
// fp32 accumulation (1e-11), and differ from the unrounded fp64 products by bf16 rounding (~1e-5): so
// every operand is rounded, and only once. Forward writes; both backward products accumulate.
TEST(Ops, LinearBf16ProductsAreFp64OnTheOperandsRoundedToBf16) {
  if (!ops::bf16_is_native()) {
    std::vector<float> y(1), x(1);
    std::vector<uint16_t> w(1);
    try {
      ops::linear_forward_bf16(y.data(), x.data(), w.data(), nullptr, 1, 1, 1);
      FAIL() << "bf16 products on a CPU without native bf16";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(ops::cpu_isa_name()), std::string::npos) << e.what();
    }
    return;
  }
  std::mt19937_64 rng(41);
  for (const auto& [N, IC, OC] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 33, 5}, {130, 200, 70},
                                 {300, 64, 700}}) {
    const auto x = to_f32(random_vec(rng, N * IC)), w = to_f32(random_vec(rng, OC * IC, 1 / std::sqrt(IC)));
    const auto b = to_f32(random_vec(rng, OC)), g = to_f32(random_vec(rng, N * OC));
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) w16[i] = rope::f32_to_bf16(w[i]);
    std::vector<float> y(N * OC), dx = to_f32(random_vec(rng, N * IC)), dw = to_f32(random_vec(rng, OC * IC));
    std::vector<float> db = to_f32(random_vec(rng, OC));
    const std::vector<float> dx0 = dx, dw0 = dw, db0 = db;
    ops::linear_forward_bf16(y.data(), x.data(), w16.data(), b.data(), N, IC, OC);
    ops::linear_backward_bf16(dx.data(), dw.data(), db.data(), g.data(), x.data(), w16.data(), N, IC, OC);
    for (const bool rounded : {true, false}) {
      auto r = [&](float v) { return rounded ? rounded_to_bf16(v) : double(v); };
      Vec ry(N * OC), rdx(dx0.begin(), dx0.end()), rdw(dw0.begin(), dw0.end()), rdb(db0.begin(), db0.end());
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < OC; ++o) {
          double s = b[o];
          for (int64_t i = 0; i < IC; ++i) s += r(x[n * IC + i]) * r(w[o * IC + i]);
          ry[n * OC + o] = s;
          for (int64_t i = 0; i < IC; ++i) {
            rdx[n * IC + i] += r(g[n * OC + o]) * r(w[o * IC + i]);
            rdw[o * IC + i] += r(g[n * OC + o]) * r(x[n * IC + i]);
          }
          rdb[o] += g[n * OC + o];  // the bias gradient stays fp32
        }
      }
      const std::string where = "N " + std::to_string(N) + " IC " + std::to_string(IC) + " OC " + std::to_string(OC);
      if (rounded) {
        EXPECT_LT(nmse(y, ry), 1e-11) << where;
        EXPECT_LT(nmse(dx, rdx), 1e-11) << where;
        EXPECT_LT(nmse(dw, rdw), 1e-11) << where;
        EXPECT_LT(nmse(db, rdb), 1e-11) << where;
      } else if (N * IC > 1) {
        EXPECT_GT(nmse(y, ry), 1e-8) << where;
      }
    }
  }
}

// A model that keeps an activation only in bf16 gets, from the overloads taking it, the bits that the
// fp32 activation gives (forward and both backward products).
TEST(Ops, LinearBf16OnARoundedInputIsTheFp32InputsResult) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  std::mt19937_64 rng(43);
  const int64_t N = 37, IC = 70, OC = 19;
  const auto x = to_f32(random_vec(rng, N * IC)), w = to_f32(random_vec(rng, OC * IC)), g = to_f32(random_vec(rng, N * OC));
  std::vector<uint16_t> w16(w.size()), x16(x.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = rope::f32_to_bf16(w[i]);
  for (size_t i = 0; i < x.size(); ++i) x16[i] = rope::f32_to_bf16(x[i]);
  std::vector<float> y(N * OC), y16(N * OC), dx(N * IC, 0.0f), dx16(N * IC, 0.0f), dw(OC * IC, 0.0f), dw16(OC * IC, 0.0f);
  ops::linear_forward_bf16(y.data(), x.data(), w16.data(), nullptr, N, IC, OC);
  ops::linear_forward_bf16(y16.data(), x16.data(), w16.data(), nullptr, N, IC, OC);
  ops::linear_backward_bf16(dx.data(), dw.data(), nullptr, g.data(), x.data(), w16.data(), N, IC, OC);
  ops::linear_backward_bf16(dx16.data(), dw16.data(), nullptr, g.data(), x16.data(), w16.data(), N, IC, OC);
  EXPECT_EQ(y, y16);
  EXPECT_EQ(dx, dx16);
  EXPECT_EQ(dw, dw16);
}

// linear_backward_bf16_with_slope is linear_backward_bf16 on dout = d ⊙ slope formed in fp32, bit for
// bit: the products, the bias gradient (or none) and the census of the formed gradient.
TEST(Ops, LinearBf16WithSlopeIsTheBackwardOfTheFormedGradient) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  std::mt19937_64 rng(59);
  for (const auto& [N, IC, OC] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {37, 70, 19}, {300, 64, 700}}) {
    const auto x = to_f32(random_vec(rng, N * IC)), w = to_f32(random_vec(rng, OC * IC));
    const auto d = to_f32(random_vec(rng, N * OC)), slope = to_f32(random_vec(rng, N * OC, 2.0));
    std::vector<uint16_t> w16(w.size()), x16(x.size()), slope16(slope.size());
    ops::round_to_bf16(w16.data(), w.data(), OC * IC);
    ops::round_to_bf16(x16.data(), x.data(), N * IC);
    ops::round_to_bf16(slope16.data(), slope.data(), N * OC);
    slope16[0] = 0;  // a ReLU's zero slope
    std::vector<float> dout(N * OC);
    for (int64_t i = 0; i < N * OC; ++i) {
      dout[i] = d[i] * rope::bf16_to_f32(slope16[i]);  // fp32 product
    }
    for (const bool bias : {true, false}) {
      std::vector<float> dx(N * IC, 0.5f), dw(OC * IC, 0.25f), db(OC, 1.0f);
      std::vector<float> dx_s = dx, dw_s = dw, db_s = db;
      ops::set_bf16_gradient_census(true);
      const ops::GradientUnderflow c0 = ops::bf16_gradient_underflow();
      ops::linear_backward_bf16(dx.data(), dw.data(), bias ? db.data() : nullptr, dout.data(), x16.data(), w16.data(),
                                N, IC, OC);
      const ops::GradientUnderflow c1 = ops::bf16_gradient_underflow();
      ops::linear_backward_bf16_with_slope(dx_s.data(), dw_s.data(), bias ? db_s.data() : nullptr, d.data(),
                                           slope16.data(), x16.data(), w16.data(), N, IC, OC);
      const ops::GradientUnderflow c2 = ops::bf16_gradient_underflow();
      ops::set_bf16_gradient_census(false);
      const std::string where = "N " + std::to_string(N) + " IC " + std::to_string(IC) + " OC " + std::to_string(OC);
      EXPECT_EQ(dx_s, dx) << where;
      EXPECT_EQ(dw_s, dw) << where;
      EXPECT_EQ(db_s, db) << where;
      EXPECT_EQ(c2.values - c1.values, c1.values - c0.values) << where;
      EXPECT_EQ(c2.nonzero - c1.nonzero, c1.nonzero - c0.nonzero) << where;
    }
  }
}

// The census, while it is on, counts the output gradients as they are rounded: nonzero, below bf16's
// normal range (2^-126) and below fp16's smallest subnormal (2^-24), NaN as nonzero; off, it counts
// nothing and the gradients are the same bits.
TEST(Ops, LinearBf16GradientUnderflowCensus) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  const int64_t N = 40, IC = 3, OC = 1;
  std::vector<float> dout(N * OC, 0.0f), x(N * IC, 1.0f), dx(N * IC, 0.0f), dw(OC * IC, 0.0f);
  const std::vector<uint16_t> w16(OC * IC, rope::f32_to_bf16(1.0f));
  dout[0] = 1.0f;
  dout[1] = -0x1p-30f;   // fp16 underflow only
  dout[2] = 0x1p-127f;   // subnormal in fp32: lost in bf16 too
  dout[3] = -0x1p-149f;  // the smallest fp32 subnormal
  dout[4] = 0x1p-24f;    // fp16's smallest subnormal: held
  dout[5] = -0.0f;
  dout[6] = NAN;
  for (int64_t i = 7; i < 30; ++i) dout[i] = 0x1p-100f;  // 23 more fp16 underflows
  std::vector<float> dx_off = dx, dw_off = dw;
  ops::set_bf16_gradient_census(false);
  const ops::GradientUnderflow off = ops::bf16_gradient_underflow();
  ops::linear_backward_bf16(dx_off.data(), dw_off.data(), nullptr, dout.data(), x.data(), w16.data(), N, IC, OC);
  EXPECT_EQ(ops::bf16_gradient_underflow().values, off.values);
  ops::set_bf16_gradient_census(true);
  const ops::GradientUnderflow before = ops::bf16_gradient_underflow();
  ops::linear_backward_bf16(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w16.data(), N, IC, OC);
  const ops::GradientUnderflow after = ops::bf16_gradient_underflow();
  ops::set_bf16_gradient_census(false);
  EXPECT_EQ(after.values - before.values, N * OC);
  EXPECT_EQ(after.nonzero - before.nonzero, 29);
  EXPECT_EQ(after.below_bf16 - before.below_bf16, 2);
  EXPECT_EQ(after.below_fp16 - before.below_fp16, 26);
  // the same bits (the NaN gradient included)
  EXPECT_EQ(std::memcmp(dx_off.data(), dx.data(), dx.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dw_off.data(), dw.data(), dw.size() * sizeof(float)), 0);
}

// Grad::overwrite writes dinp as accumulating into zeros would, bit for bit, whatever it held (NaN
// here), in fp32, fp64 and bf16; the weight and bias gradients still accumulate.
template <typename T, class Backward>
void expect_overwrite_is_accumulate_into_zero(int64_t N, int64_t IC, int64_t OC, const Backward& backward) {
  std::mt19937_64 rng(47);
  std::vector<T> dout(N * OC), dw0(OC * IC), db0(OC);
  for (auto* v : {&dout, &dw0, &db0}) {
    for (T& e : *v) e = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(rng));
  }
  std::vector<T> dx_added(N * IC, T(0)), dx_written(N * IC, std::numeric_limits<T>::quiet_NaN());
  std::vector<T> dw_added = dw0, dw_written = dw0, db_added = db0, db_written = db0;
  backward(dx_added.data(), dw_added.data(), db_added.data(), dout.data(), ops::Grad::accumulate);
  backward(dx_written.data(), dw_written.data(), db_written.data(), dout.data(), ops::Grad::overwrite);
  EXPECT_EQ(dx_written, dx_added);
  EXPECT_EQ(dw_written, dw_added);
  EXPECT_EQ(db_written, db_added);
  EXPECT_NE(dw_written, dw0);
}

TEST(Ops, LinearBackwardOverwritesAsItAccumulatesIntoZero) {
  std::mt19937_64 rng(53);
  const int64_t N = 67, IC = 45, OC = 38;
  const Vec x = random_vec(rng, N * IC), w = random_vec(rng, OC * IC);
  expect_overwrite_is_accumulate_into_zero<double>(N, IC, OC, [&](double* dx, double* dw, double* db, const double* g,
                                                                  ops::Grad mode) {
    ops::linear_backward(dx, dw, db, g, x.data(), w.data(), N, IC, OC, mode);
  });
  const auto xf = to_f32(x), wf = to_f32(w);
  expect_overwrite_is_accumulate_into_zero<float>(N, IC, OC, [&](float* dx, float* dw, float* db, const float* g,
                                                                 ops::Grad mode) {
    ops::linear_backward(dx, dw, db, g, xf.data(), wf.data(), N, IC, OC, mode);
  });
}

TEST(Ops, LinearBf16BackwardOverwritesAsItAccumulatesIntoZero) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  std::mt19937_64 rng(53);
  const int64_t N = 67, IC = 45, OC = 38;
  const Vec x = random_vec(rng, N * IC), w = random_vec(rng, OC * IC);
  const auto xf = to_f32(x), wf = to_f32(w);
  std::vector<uint16_t> w16(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w16[i] = rope::f32_to_bf16(wf[i]);
  expect_overwrite_is_accumulate_into_zero<float>(N, IC, OC, [&](float* dx, float* dw, float* db, const float* g,
                                                                 ops::Grad mode) {
    ops::linear_backward_bf16(dx, dw, db, g, xf.data(), w16.data(), N, IC, OC, mode);
  });
}

}  // namespace
