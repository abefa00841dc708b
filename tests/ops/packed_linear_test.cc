// The packed inference linear layer (src/ops/packed_linear.cc) against plain references on random
// shapes: f32 against the fp64 product (as linear_forward is), int8 against an fp64 emulation of the
// documented quantisation (same scales, zero point and rounding: the only difference left is fp32
// rounding of the epilogue), int8 against f32 within the error that quantisation allows, and bf16
// (where the CPU multiplies bf16 natively) against the fp64 product of the bf16-rounded operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/ops_testing.h"
#include "ops/packed_linear.h"
#include "rope/convert.h"

namespace {

using namespace ops_testing;
using ops::Epilogue;
using ops::PackedLinear;
using ops::Precision;

struct Case {
  int64_t N, IC, OC;
  bool bias;
  Epilogue epilogue;
};

double apply_epilogue(double x, Epilogue e) {
  if (e == Epilogue::gelu) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (e == Epilogue::relu) return std::max(x, 0.0);
  return x;
}

// epilogue(x·Wᵀ + b) in fp64.
Vec reference(const Vec& x, const Vec& w, const Vec* b, const Case& c) {
  Vec y(c.N * c.OC);
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t o = 0; o < c.OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < c.IC; ++i) s += x[n * c.IC + i] * w[o * c.IC + i];
      y[n * c.OC + o] = apply_epilogue(s, c.epilogue);
    }
  }
  return y;
}

// The int8 scheme of packed_linear.h, emulated in fp64 from fp32 inputs: weights per output channel
// q = round(w / s_w), s_w = max|w| / int8_weight_levels(); activations per tensor
// s_x = (max(x, 0) − min(x, 0)) / 255, z = round(−min / s_x), q = clamp(round(x · (1 / s_x) + z), 0, 255)
// with x · (1 / s_x) + z rounded to fp32 first, as oneDNN's reorder does it.
Vec int8_emulation(const std::vector<float>& x, const std::vector<float>& w, const Vec* b, const Case& c) {
  float lo = 0, hi = 0;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  const float sx = hi > lo ? (hi - lo) / 255.0f : 1.0f;
  const float zp = hi > lo ? std::clamp(std::nearbyint(-lo / sx), 0.0f, 255.0f) : 0.0f;
  Vec xd(x.size()), wd(w.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float scaled = x[i] * (1.0f / sx) + zp;
    const double q = std::clamp(std::nearbyint(scaled), 0.0f, 255.0f);
    xd[i] = (q - zp) * sx;
  }
  for (int64_t o = 0; o < c.OC; ++o) {
    float max_abs = 0;
    for (int64_t i = 0; i < c.IC; ++i) max_abs = std::max(max_abs, std::fabs(w[o * c.IC + i]));
    const float sw = max_abs > 0 ? max_abs / static_cast<float>(ops::int8_weight_levels()) : 1.0f;
    for (int64_t i = 0; i < c.IC; ++i) wd[o * c.IC + i] = std::nearbyint(w[o * c.IC + i] / sw) * double(sw);
  }
  return reference(xd, wd, b, c);
}

// max |a − b| relative to max |b|.
double relative_max_error(const std::vector<float>& a, const Vec& b) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / scale;
}

std::vector<Case> random_cases() {
  std::mt19937_64 rng(11);
  std::vector<Case> cases = {{1, 768, 768, true, Epilogue::none}, {128, 64, 256, true, Epilogue::gelu},
                             {7, 3, 2, false, Epilogue::relu}, {300, 129, 35, true, Epilogue::none}};
  for (int i = 0; i < 8; ++i) {
    cases.push_back({int64_t(1 + rng() % 70), int64_t(1 + rng() % 200), int64_t(1 + rng() % 150), rng() % 3 != 0,
                     static_cast<Epilogue>(rng() % 3)});
  }
  return cases;
}

TEST(PackedLinear, F32MatchesTheFp64ProductOnRandomShapes) {
  std::mt19937_64 rng(3);
  for (const Case& c : random_cases()) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " IC " << c.IC << " OC " << c.OC << " bias " << c.bias
                                    << " epilogue " << int(c.epilogue));
    const Vec x = random_f32_vec(rng, c.N * c.IC), w = random_f32_vec(rng, c.OC * c.IC, 0.1),
              b = random_f32_vec(rng, c.OC);
    const PackedLinear layer(to_f32(w).data(), c.bias ? to_f32(b).data() : nullptr, c.OC, c.IC, Precision::f32,
                             c.epilogue);
    std::vector<float> y(c.N * c.OC, NAN);
    layer.forward(y.data(), to_f32(x).data(), c.N);
    EXPECT_LE(relative_max_error(y, reference(x, w, c.bias ? &b : nullptr, c)), 2e-6);
  }
}

TEST(PackedLinear, Int8IsTheDocumentedQuantisationAndCloseToF32) {
  std::mt19937_64 rng(5);
  for (const Case& c : random_cases()) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " IC " << c.IC << " OC " << c.OC << " bias " << c.bias
                                    << " epilogue " << int(c.epilogue));
    // Inputs shifted off zero, so the zero point is not trivially 0 or 128.
    const auto x = to_f32(random_f32_vec(rng, c.N * c.IC, 1.0, 0.3));
    const auto w = to_f32(random_f32_vec(rng, c.OC * c.IC, 0.1));
    const Vec b = random_f32_vec(rng, c.OC);
    const PackedLinear layer(w.data(), c.bias ? to_f32(b).data() : nullptr, c.OC, c.IC, Precision::int8, c.epilogue);
    std::vector<float> y(c.N * c.OC, NAN);
    layer.forward(y.data(), x.data(), c.N);
    // Same integers, so only fp32 rounding of the scaling and epilogue differs.
    EXPECT_LE(relative_max_error(y, int8_emulation(x, w, c.bias ? &b : nullptr, c)), 1e-5);
    // And against fp32: 8-bit steps over K products, relative to the largest output.
    const Vec exact = reference(Vec(x.begin(), x.end()), Vec(w.begin(), w.end()), c.bias ? &b : nullptr, c);
    EXPECT_LE(relative_max_error(y, exact), 0.05);
  }
}

// The operands as bf16 rounds them (nearest even), back in fp64.
Vec rounded_to_bf16(const std::vector<float>& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = rope::bf16_to_f32(rope::f32_to_bf16(v[i]));
  return r;
}

// The precisions this CPU can run: bf16 only with native bf16 dot products.
std::vector<Precision> precisions() {
  std::vector<Precision> p = {Precision::f32, Precision::int8};
  if (ops::bf16_is_native()) p.push_back(Precision::bf16);
  return p;
}

TEST(PackedLinear, Bf16IsTheFp32ProductOfRoundedOperands) {
  if (!ops::bf16_is_native()) {
    // The other half of the contract: a clear refusal, not an emulation slower than fp32.
    const std::vector<float> w(4, 1.0f);
    EXPECT_THROW(PackedLinear(w.data(), nullptr, 2, 2, Precision::bf16), std::invalid_argument);
    GTEST_SKIP() << "no native bf16 on this CPU (" << ops::cpu_isa_name() << "); the refusal was checked";
  }
  std::mt19937_64 rng(13);
  for (const Case& c : random_cases()) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " IC " << c.IC << " OC " << c.OC << " bias " << c.bias
                                    << " epilogue " << int(c.epilogue));
    const auto x = to_f32(random_f32_vec(rng, c.N * c.IC)), w = to_f32(random_f32_vec(rng, c.OC * c.IC, 0.1));
    const Vec b = random_f32_vec(rng, c.OC);
    const PackedLinear layer(w.data(), c.bias ? to_f32(b).data() : nullptr, c.OC, c.IC, Precision::bf16, c.epilogue);
    std::vector<float> y(c.N * c.OC, NAN);
    layer.forward(y.data(), x.data(), c.N);
    // bf16 products are exact in fp32; what is left is fp32 accumulation and the epilogue.
    EXPECT_LE(relative_max_error(y, reference(rounded_to_bf16(x), rounded_to_bf16(w), c.bias ? &b : nullptr, c)), 1e-5);
    // And against the unrounded product: 8-bit mantissas, relative to the largest output.
    EXPECT_LE(relative_max_error(y, reference(Vec(x.begin(), x.end()), Vec(w.begin(), w.end()), c.bias ? &b : nullptr, c)),
              0.02);
  }
}

// bits with a value below bf16's smallest normal, 2^-126, set to signed zero: the one place the
// bf16 output may differ from round_to_bf16's (bf16 products read such values as zero).
uint16_t flushed(uint16_t bits) { return (bits & 0x7f80) == 0 ? bits & 0x8000 : bits; }

// The operands a producer hands over in bf16 (packed_linear.h's bf16 overloads): the same bits as
// rounding the fp32 input or output in a pass of its own.
TEST(PackedLinear, Bf16OperandsGiveTheBitsOfRoundingPasses) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 on this CPU (" << ops::cpu_isa_name() << ")";
  std::mt19937_64 rng(17);
  for (const Case& c : random_cases()) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " IC " << c.IC << " OC " << c.OC << " bias " << c.bias
                                    << " epilogue " << int(c.epilogue));
    auto x = to_f32(random_f32_vec(rng, c.N * c.IC));
    x[0] = 1e-39f;  // a subnormal input: read as zero either way
    const auto w = to_f32(random_f32_vec(rng, c.OC * c.IC, 0.1)), b = to_f32(random_f32_vec(rng, c.OC));
    const PackedLinear layer(w.data(), c.bias ? b.data() : nullptr, c.OC, c.IC, Precision::bf16, c.epilogue);
    std::vector<uint16_t> x16(x.size());
    ops::round_to_bf16(x16.data(), x.data(), c.N * c.IC);
    std::vector<float> y(c.N * c.OC, NAN), y_from16(c.N * c.OC, NAN);
    layer.forward(y.data(), x.data(), c.N);
    layer.forward(y_from16.data(), x16.data(), c.N);
    EXPECT_EQ(y_from16, y);
    std::vector<uint16_t> rounded(y.size()), out16(y.size(), 0xffff), out16_from16(y.size(), 0xffff);
    ops::round_to_bf16(rounded.data(), y.data(), c.N * c.OC);
    layer.forward(out16.data(), x.data(), c.N);
    layer.forward(out16_from16.data(), x16.data(), c.N);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(flushed(out16[i]), flushed(rounded[i])) << "output " << i << " = " << y[i];
      ASSERT_EQ(out16_from16[i], out16[i]) << "output " << i;
    }
  }
}

TEST(PackedLinear, Bf16OperandsOnAnotherPrecisionAreALogicError) {
  const std::vector<float> w(4, 1.0f);
  std::vector<uint16_t> x16(2, 0x3f80), y16(2);
  std::vector<float> y(2);
  for (Precision p : {Precision::f32, Precision::int8}) {
    const PackedLinear layer(w.data(), nullptr, 2, 2, p);
    EXPECT_THROW(layer.forward(y.data(), x16.data(), 1), std::logic_error) << ops::precision_name(p);
    EXPECT_THROW(layer.forward(y16.data(), y.data(), 1), std::logic_error) << ops::precision_name(p);
  }
}

TEST(PackedLinear, AllZeroInputAndWeightsAreExact) {
  const int64_t N = 4, IC = 16, OC = 8;
  const std::vector<float> x(N * IC, 0.0f), w(OC * IC, 0.0f), b = {1, -2, 3, -4, 5, -6, 7, -8};
  for (Precision p : precisions()) {
    const PackedLinear layer(w.data(), b.data(), OC, IC, p);
    std::vector<float> y(N * OC);
    layer.forward(y.data(), x.data(), N);
    for (int64_t i = 0; i < N * OC; ++i) EXPECT_EQ(y[i], b[i % OC]) << ops::precision_name(p);
  }
}

TEST(PackedLinear, ConcurrentCallsOfDifferentBatchSizesAgreeWithSerialOnes) {
  std::mt19937_64 rng(8);
  const int64_t IC = 96, OC = 80;
  const auto w = to_f32(random_f32_vec(rng, OC * IC, 0.1)), b = to_f32(random_f32_vec(rng, OC));
  for (Precision p : precisions()) {
    const PackedLinear layer(w.data(), b.data(), OC, IC, p, Epilogue::gelu);
    std::vector<std::vector<float>> inputs, serial, parallel;
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t N = 1 + 17 * t;
      inputs.push_back(to_f32(random_f32_vec(rng, N * IC)));
      serial.emplace_back(N * OC);
      parallel.emplace_back(N * OC);
      layer.forward(serial.back().data(), inputs.back().data(), N);
    }
    std::vector<std::thread> threads;
    for (int64_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] { layer.forward(parallel[t].data(), inputs[t].data(), 1 + 17 * t); });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(parallel, serial) << ops::precision_name(p);
  }
}

// Layers of one shape share their primitives (kept per thread, per batch size): each call must still
// read its own layer's weights, bias and int8 scales, however the calls interleave and after the
// least recently used primitives were dropped.
TEST(PackedLinear, LayersOfOneShapeShareTheirPrimitivesButNotTheirWeights) {
  std::mt19937_64 rng(21);
  const int64_t IC = 48, OC = 40;
  for (Precision p : precisions()) {
    SCOPED_TRACE(ops::precision_name(p));
    std::vector<PackedLinear> layers;
    for (double spread : {0.1, 30.0}) {  // scales two orders of magnitude apart
      const auto w = to_f32(random_f32_vec(rng, OC * IC, spread)), b = to_f32(random_f32_vec(rng, OC, spread));
      layers.emplace_back(w.data(), b.data(), OC, IC, p, Epilogue::relu);
    }
    const std::vector<int64_t> sizes = {5, 33, 5, 1, 33};
    std::vector<std::vector<float>> inputs, alone(2 * sizes.size());
    for (int64_t N : sizes) inputs.push_back(to_f32(random_f32_vec(rng, N * IC)));
    for (size_t l = 0; l < 2; ++l) {  // each layer on a thread of its own: primitives made for it alone
      std::thread([&, l] {
        for (size_t i = 0; i < sizes.size(); ++i) {
          alone[2 * i + l].resize(sizes[i] * OC);
          layers[l].forward(alone[2 * i + l].data(), inputs[i].data(), sizes[i]);
        }
      }).join();
    }
    for (int round = 0; round < 2; ++round) {  // interleaved on this thread; then after 300 other sizes
      for (size_t i = 0; i < sizes.size(); ++i) {
        for (size_t l = 0; l < 2; ++l) {
          std::vector<float> y(sizes[i] * OC, NAN);
          layers[l].forward(y.data(), inputs[i].data(), sizes[i]);
          EXPECT_EQ(y, alone[2 * i + l]) << "round " << round << " N " << sizes[i] << " layer " << l;
        }
      }
      std::vector<float> x(300 * IC, 0.5f), y(300 * OC);
      const bool evict = round == 0 && p == Precision::f32;  // making 300 primitives takes seconds: once
      for (int64_t N = 1; evict && N <= 300; ++N) layers[N % 2].forward(y.data(), x.data(), N);
    }
  }
}

TEST(PackedLinear, BadInputsAreRejected) {
  const std::vector<float> w(4, 1.0f), x = {1.0f, NAN};
  EXPECT_THROW(PackedLinear(w.data(), nullptr, 0, 4, Precision::f32), std::invalid_argument);
  const std::vector<float> bad_w = {1.0f, INFINITY};
  EXPECT_THROW(PackedLinear(bad_w.data(), nullptr, 1, 2, Precision::int8), std::domain_error);
  const PackedLinear layer(w.data(), nullptr, 2, 2, Precision::int8);
  std::vector<float> y(2);
  EXPECT_THROW(layer.forward(y.data(), x.data(), 1), std::domain_error);
  EXPECT_THROW(ops::parse_precision("int4"), std::invalid_argument);
  EXPECT_EQ(ops::parse_precision("int8"), Precision::int8);
  EXPECT_EQ(ops::parse_precision("bf16"), Precision::bf16);
}

}  // namespace
