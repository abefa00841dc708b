// GELU (exact erf) and ReLU (src/ops/activation.cc): gradients against central differences, known
// values, and the fp32 SIMD path against fp64 on every SIMD target, specials included; bf16
// training's output and slope, the fp32 path's values rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/activation.h"
#include "ops/vmath.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, ActivationGradientsAndValues) {
  std::mt19937_64 rng(3);
  const int64_t n = 40;
  Vec x = random_vec(rng, n, 2.0);
  for (double& v : x) {
    if (std::fabs(v) < 1e-3) v = 0.5;  // keep ReLU's kink away from the finite differences
  }
  const Vec g = random_vec(rng, n);
  Vec y(n);
  auto gelu_loss = [&] {
    ops::gelu_forward(y.data(), x.data(), n);
    return dot(y, g);
  };
  Vec dx(n, 0.0);
  ops::gelu_backward(dx.data(), x.data(), g.data(), n);
  expect_gradient("gelu dx", x, dx, gelu_loss);
  auto relu_loss = [&] {
    ops::relu_forward(y.data(), x.data(), n);
    return dot(y, g);
  };
  Vec dr(n, 0.0);
  ops::relu_backward(dr.data(), x.data(), g.data(), n);
  expect_gradient("relu dx", x, dr, relu_loss);
  // Exact erf GELU, not the tanh approximation: gelu(1) = Φ(1), gelu(−1) = −Φ(−1).
  const double in[3] = {1.0, -1.0, 3.0};
  double out[3];
  ops::gelu_forward(out, in, 3);
  EXPECT_NEAR(out[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(out[1], -0.15865525393145707, 1e-15);
  EXPECT_NEAR(out[2], 2.99595030590511, 1e-13);
}

TEST(Ops, GeluFp32FastPathAgreesWithFp64) {
  for_each_simd_target([] {
    std::mt19937_64 rng(21);
    Vec x = random_f32_vec(rng, 40003, 3.0);  // several chunks, and a partial vector at the end
    const double edges[] = {0,   -0.0, 1e-30, -1e-30, 0.6187, -0.6187, 1.2374, -1.2374, 5.6,
                            -5.6, 5.7, -5.7,  8,      -8,     12,      -12,    30,      -30};
    for (size_t i = 0; i < std::size(edges); ++i) x[i] = edges[i];
    const size_t n = x.size();
    std::vector<float> yf(n);
    Vec yd(n);
    const auto xf = to_f32(x);
    ops::gelu_forward(yf.data(), xf.data(), static_cast<int64_t>(n));
    ops::gelu_forward(yd.data(), x.data(), static_cast<int64_t>(n));
    double err = 0;
    for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(yf[i] - yd[i]) / std::max(1.0, std::fabs(yd[i])));
    EXPECT_LE(err, 1.5e-7);
    // Backward accumulates: start from a nonzero gradient.
    const Vec g0 = random_f32_vec(rng, n), dy = random_f32_vec(rng, n);
    auto gf = to_f32(g0);
    Vec gd = g0;
    const auto dyf = to_f32(dy);
    ops::gelu_backward(gf.data(), xf.data(), dyf.data(), static_cast<int64_t>(n));
    ops::gelu_backward(gd.data(), x.data(), dy.data(), static_cast<int64_t>(n));
    err = 0;
    for (size_t i = 0; i < n; ++i) {
      err = std::max(err, std::fabs(gf[i] - gd[i]) / (1.0 + std::fabs(g0[i]) + std::fabs(dy[i])));
    }
    EXPECT_LE(err, 3e-7);
    const float inf = std::numeric_limits<float>::infinity();
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), inf};
    float out[2];
    ops::gelu_forward(out, special, 2);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], inf);
  });
}

// Grad::overwrite writes what accumulating into zeros gives, bit for bit, whatever the buffer held
// (NaN here), on every SIMD target, fp32 and fp64, GELU and ReLU.
template <typename T>
void expect_overwrite_is_accumulate_into_zero() {
  std::mt19937_64 rng(31);
  const int64_t n = 40003;  // several chunks, and a partial vector at the end
  std::vector<T> x(n), dy(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<T>(std::uniform_real_distribution<double>(-6, 6)(rng));
    dy[i] = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(rng));
  }
  for (auto backward : {ops::gelu_backward<T>, ops::relu_backward<T>}) {
    std::vector<T> added(n, T(0)), written(n, std::numeric_limits<T>::quiet_NaN());
    backward(added.data(), x.data(), dy.data(), n, ops::Grad::accumulate);
    backward(written.data(), x.data(), dy.data(), n, ops::Grad::overwrite);
    EXPECT_EQ(written, added);
  }
}

TEST(Ops, ActivationBackwardOverwritesAsItAccumulatesIntoZero) {
  for_each_simd_target([] { expect_overwrite_is_accumulate_into_zero<float>(); });
  expect_overwrite_is_accumulate_into_zero<double>();
}

// bf16 training keeps act(x) and act'(x) in bf16: bit for bit the fp32 forward's values and the fp32
// backward's factor (its gradient for dout = 1), rounded as the products round their operands, on
// every SIMD target, over several chunks and a partial vector, NaN and ±inf included. ReLU's slope is
// exactly 1 or 0.
TEST(Ops, ActivationForwardBf16IsTheFp32ValueAndSlopeRounded) {
  for_each_simd_target([] {
    std::mt19937_64 rng(37);
    const int64_t n = 40003;
    std::vector<float> x(n), ones(n, 1.0f);
    for (float& v : x) v = static_cast<float>(std::uniform_real_distribution<double>(-7, 7)(rng));
    const float inf = std::numeric_limits<float>::infinity();
    x[0] = 0.0f, x[1] = -0.0f, x[2] = inf, x[3] = -inf, x[4] = std::numeric_limits<float>::quiet_NaN(), x[5] = 1e-30f;
    auto rounded = [n](const std::vector<float>& v) {
      std::vector<uint16_t> r(n);
      ops::bf16_from_f32(r.data(), v.data(), n);
      return r;
    };
    std::vector<float> y(n), slope(n);
    std::vector<uint16_t> y16(n), slope16(n);
    ops::gelu_forward(y.data(), x.data(), n);
    ops::gelu_backward(slope.data(), x.data(), ones.data(), n, ops::Grad::overwrite);
    ops::gelu_forward_bf16(y16.data(), slope16.data(), x.data(), n);
    EXPECT_EQ(y16, rounded(y));
    EXPECT_EQ(slope16, rounded(slope));
    ops::relu_forward(y.data(), x.data(), n);
    ops::relu_forward_bf16(y16.data(), slope16.data(), x.data(), n);
    EXPECT_EQ(y16, rounded(y));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(slope16[i], x[i] > 0.0f ? 0x3f80 : 0) << "relu slope at " << x[i];  // bf16 1.0 and +0
    }
  });
}

}  // namespace
