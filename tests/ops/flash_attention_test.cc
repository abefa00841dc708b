// The fused softmax attention kernels (src/ops/flash_attention.cc) against attention_forward and
// attention_backward in fp64 (the reference the fp32 paths are held to), on every SIMD target: random
// shapes over several row blocks and key tiles, head dims that are and are not multiples of the
// vector width, key padding masks (interior, trailing, whole batch rows: uniform rows), causal masks
// with queries at an offset (a cache's prefill), prefix limits, cross-attention, keys strided by a
// cache's capacity; the output written over the queries; the same bits whatever the thread count;
// gradients added once; routing; and what they refuse. The same for the bf16-product kernels
// (flash_attention_bf16.cc, CPUs with AVX512-BF16), held to the per-block bf16 path's error against fp64.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/flash_attention.h"
#include "ops/linear.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

// One random case: inputs exactly fp32, a key mask and prefix limits as the shape asks.
struct FlashCase {
  ops::AttentionShape s;
  Vec q, k, v;
  std::vector<int64_t> key_mask, limits;
  bool masked = false;
};

FlashCase make_case(std::mt19937_64& rng, ops::AttentionShape s, bool masked, bool limits) {
  FlashCase c{s, {}, {}, {}, {}, {}, masked};
  const int64_t C = s.H * s.D, Tk = s.keys();
  c.q = random_f32_vec(rng, s.B * s.T * C, 1.5);
  c.k = random_f32_vec(rng, s.B * s.key_stride() * C, 1.5);
  c.v = random_f32_vec(rng, s.B * s.key_stride() * C);
  if (masked) {
    c.key_mask.assign(s.B * Tk, 1);
    for (int64_t& m : c.key_mask) m = rng() % 4 != 0;            // a quarter padded, anywhere
    for (int64_t j = Tk * 2 / 3; j < Tk; ++j) c.key_mask[j] = 0;  // batch 0: a trailing run too
    if (s.B > 1) {
      for (int64_t j = 0; j < Tk; ++j) c.key_mask[Tk + j] = 0;  // batch 1 sees no key: uniform rows
    }
  }
  if (limits) {
    c.limits.resize(s.B * s.T);
    for (int64_t& l : c.limits) l = static_cast<int64_t>(rng() % (Tk + 2));  // 0 (uniform) up to past Tk
  }
  c.s.row_limit = limits ? c.limits.data() : nullptr;
  c.s.saved = ops::AttentionSaved::none;
  return c;
}

// attention_forward in fp64, nothing kept (fp64 products whatever the case asks).
Vec reference(const FlashCase& c) {
  Vec out(c.q.size());
  ops::AttentionShape s = c.s;
  s.bf16_products = false;
  ops::attention_forward<double>(out.data(), nullptr, c.q.data(), c.k.data(), c.v.data(),
                                 c.masked ? c.key_mask.data() : nullptr, s);
  return out;
}

// The fused kernel that the case's shape names: flash_attention_forward, or with bf16_products
// flash_attention_forward_bf16.
std::vector<float> run(const FlashCase& c) {
  std::vector<float> out(c.q.size());
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
  const int64_t* mask = c.masked ? c.key_mask.data() : nullptr;
  if (c.s.bf16_products) {
    ops::flash_attention_forward_bf16(out.data(), q.data(), k.data(), v.data(), mask, c.s);
  } else {
    ops::flash_attention_forward(out.data(), q.data(), k.data(), v.data(), mask, c.s);
  }
  return out;
}

// The per-block path on the same case (attention_forward_blocks: fp32 sgemm, or oneDNN's bf16 matmuls).
std::vector<float> run_blocks(const FlashCase& c) {
  std::vector<float> out(c.q.size());
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
  ops::attention_forward_blocks(out.data(), q.data(), k.data(), v.data(), c.masked ? c.key_mask.data() : nullptr, c.s);
  return out;
}

// Whether the bf16-product kernel runs here (AVX512-BF16).
bool bf16_kernel_runs() {
  ops::AttentionShape s{1, 1, 1, 1, false};
  s.saved = ops::AttentionSaved::none;
  s.bf16_products = true;
  return ops::flash_attention_bf16_applies(s);
}

// The kernels the tests below hold to the same properties: bf16_products false (fp32), and true where
// the bf16 kernel runs.
std::vector<bool> kernels() {
  if (bf16_kernel_runs()) return {false, true};
  return {false};
}

std::string describe(const FlashCase& c) {
  const auto& s = c.s;
  return testing::PrintToString(std::vector<int64_t>{s.B, s.T, s.H, s.D, s.keys(), s.key_stride(), s.q_start}) +
         " (B T H D Tk stride start) causal " + std::to_string(s.causal) + " mask " + std::to_string(c.masked) +
         " prefix " + std::to_string(s.row_limit != nullptr) + " dropout " + std::to_string(s.dropout_p);
}

// Random case i of a sequence: batch 1–3, 1–max_T queries, 1–3 heads of D, causal but every third;
// every fourth a cache's prefill (queries after q_start cached keys, rows kv_stride apart, at least
// min_spare rows to spare), every fourth from the second cross-attention over 1–max_Tk keys (causal
// too: query t sees keys [0, t]); key padding and prefix limits on some; with `dropout`, attention
// dropout (p 0.1–0.5, batch rows offset in the global batch) on every third from the third.
FlashCase random_case(std::mt19937_64& rng, int i, int64_t D, int64_t max_T, int64_t max_Tk, int64_t min_spare,
                      bool bf16, bool dropout = false) {
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  ops::AttentionShape s{pick(1, 3), pick(1, max_T), pick(1, 3), D, i % 3 != 1};
  s.bf16_products = bf16;
  if (dropout && i % 3 == 2) s.dropout_p = 0.1 * static_cast<double>(pick(1, 5)), s.dropout_seed = rng(), s.dropout_row0 = pick(0, 9);
  switch (i % 4) {
    case 1:
      s.q_start = pick(0, 90);
      s.Tk = s.q_start + s.T;
      s.kv_stride = s.Tk + pick(min_spare, 20);
      break;
    case 3:
      s.Tk = pick(1, max_Tk);
      s.kv_stride = s.Tk + pick(0, 3);
      break;
    default: break;
  }
  return make_case(rng, s, i % 2 == 0 || i % 7 == 3, i % 5 == 4);
}

TEST(FlashAttention, MatchesTheFp64ForwardOnRandomShapesOnEverySimdTarget) {
  std::mt19937_64 rng(53);
  const int64_t dims[] = {1, 3, 8, 24, 64, 80, 128};
  for (int i = 0; i < 28; ++i) {
    const FlashCase c = random_case(rng, i, dims[i % 7], 150, 200, 0, false, true);
    SCOPED_TRACE(describe(c));
    const Vec ref = reference(c);
    for_each_simd_target([&] { expect_close_fp32(run(c), ref, 5e-6); });
  }
}

// From 1,024 queries and keys the forward packs each pair's keys and values (FlashWork::kpack) as the
// blocks first need them: head dims that are and are not whole vectors, causal (a block packs only
// what it reads) and not, key padding, prefix limits, a cache's prefill and a cross-attention with
// keys strided by a capacity, dropout, on every SIMD target.
TEST(FlashAttention, MatchesTheFp64ForwardWithPackedKeysOnEverySimdTarget) {
  std::mt19937_64 rng(57);
  struct Case { int64_t B, T, H, D; bool causal; int64_t q_start, Tk, kv_stride; bool masked, limits; double p; };
  const Case cases[] = {{1, 1100, 1, 24, true, 0, 0, 0, true, false, 0.0},
                        {2, 1030, 1, 16, false, 0, 0, 0, true, true, 0.0},
                        {1, 1024, 2, 3, true, 40, 1064, 1070, false, false, 0.0},
                        {1, 1060, 1, 32, false, 0, 1200, 1203, false, false, 0.2}};
  for (const Case& k : cases) {
    ops::AttentionShape s{k.B, k.T, k.H, k.D, k.causal};
    s.q_start = k.q_start, s.Tk = k.Tk, s.kv_stride = k.kv_stride;
    if (k.p > 0) s.dropout_p = k.p, s.dropout_seed = rng(), s.dropout_row0 = 3;
    const FlashCase c = make_case(rng, s, k.masked, k.limits);
    SCOPED_TRACE(describe(c));
    const Vec ref = reference(c);
    for_each_simd_target([&] { expect_close_fp32(run(c), ref, 5e-6); });
  }
}

// Shapes of the models: RoFormer-base's heads over several row blocks and key tiles (a partial last
// one), causal and not, with trailing padding.
FlashCase model_case(std::mt19937_64& rng, bool causal, bool bf16) {
  ops::AttentionShape s{2, 300, 2, 64, causal};
  s.bf16_products = bf16;
  FlashCase c = make_case(rng, s, false, false);
  c.key_mask.assign(s.B * s.T, 1);
  for (int64_t j = 250; j < s.T; ++j) c.key_mask[s.T + j] = 0;
  c.masked = true;
  return c;
}

TEST(FlashAttention, MatchesTheFp64ForwardAtModelShapes) {
  std::mt19937_64 rng(54);
  for (bool causal : {false, true}) {
    const FlashCase c = model_case(rng, causal, false);
    SCOPED_TRACE(describe(c));
    const Vec ref = reference(c);
    for_each_simd_target([&] { expect_close_fp32(run(c), ref, 5e-6); });
  }
}

// The bf16-product kernel (flash_attention_bf16.cc): bf16 inference, where the CPU has AVX512-BF16.

// The bf16 kernel's NMSE against fp64 (`kernel`'s: flash_attention_forward_bf16, or another's of its
// products): at most twice the per-block bf16 path's on the same inputs, and 1e-4. Returns the two NMSEs.
std::pair<double, double> expect_as_close_as_the_blocks(const FlashCase& c,
                                                        std::vector<float> (*kernel)(const FlashCase&) = run) {
  SCOPED_TRACE(describe(c));
  const Vec ref = reference(c);
  const double fused = nmse(kernel(c), ref), blocks = nmse(run_blocks(c), ref);
  EXPECT_LE(fused, 2 * blocks) << "per-block bf16 path " << blocks;
  EXPECT_LE(fused, 1e-4);
  return {fused, blocks};
}

// Case i of the bf16 kernels' random sequences: head dims 7, 8, 30, 64, 80, 128 and 3 in turn (odd ones
// pad the pairs), every fifth from the third under 16 rows, up to max_T queries and keys otherwise;
// attention dropout on every third.
FlashCase bf16_random_case(std::mt19937_64& rng, int i, int64_t max_T) {
  constexpr int64_t dims[] = {7, 8, 30, 64, 80, 128, 3};
  return random_case(rng, i, dims[i % 7], i % 5 == 2 ? 15 : max_T, max_T, 1, true, true);
}

// Against attention_forward in fp64: no worse than twice the per-block bf16 path's NMSE on the same
// inputs (both round q, k and v the same way; the probabilities are rounded before the division by
// their sum here, after it there) and 1e-4 at most, over every mask: causal with queries after cached
// keys strided by a capacity, cross-attention, padding (batch 1 all padded: uniform rows), prefix
// limits; fewer than 16 rows (attention_forward routes those elsewhere, the kernel takes them); odd
// head dims (a zero dimension pads the pairs) and odd tiles (a zero probability pads the last pair).
TEST(FlashAttentionBf16, AsCloseToTheFp64ForwardAsThePerBlockBf16Path) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(60);
  double worst = 0, worst_ratio = 0;
  for (int i = 0; i < 35; ++i) {
    const auto [fused, blocks] = expect_as_close_as_the_blocks(bf16_random_case(rng, i, 300));
    worst = std::max(worst, fused), worst_ratio = std::max(worst_ratio, fused / blocks);
  }
  std::printf("worst NMSE %.3g, worst ratio to the per-block bf16 path %.3g\n", worst, worst_ratio);
}

// RoFormer-base's heads over several blocks and tiles, causal and not, trailing padding.
TEST(FlashAttentionBf16, AsCloseToTheFp64ForwardAtModelShapes) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(61);
  for (bool causal : {false, true}) expect_as_close_as_the_blocks(model_case(rng, causal, true));
}

// The bf16 kernel with its two products on AMX tiles (flash_attention_forward_bf16_with): here on tiles
// emulated in scalar code, which any CPU with AVX512-BF16 runs, to hold the tile kernel's layouts,
// padding and tiling to the same properties as the dot-product kernel; on AMX hardware the real tiles
// too.

// The bf16 kernel on `products` for the case; with `stats`, row statistics kept there too, and with
// `out16` the output in bf16.
std::vector<float> run_on(const FlashCase& c, ops::Bf16Products products, std::vector<float>* stats = nullptr,
                          std::vector<uint16_t>* out16 = nullptr) {
  std::vector<float> out(c.q.size());
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
  ops::AttentionShape s = c.s;
  if (stats) s.saved = ops::AttentionSaved::row_stats, stats->assign(ops::attention_saved_size(s), 0.0f);
  if (out16) out16->assign(c.q.size(), 0);
  ops::flash_attention_forward_bf16_with(products, out.data(), q.data(), k.data(), v.data(),
                                         c.masked ? c.key_mask.data() : nullptr, s, stats ? stats->data() : nullptr,
                                         out16 ? out16->data() : nullptr);
  return out;
}

std::vector<float> run_emulated(const FlashCase& c) { return run_on(c, ops::Bf16Products::amx_emulated); }

// The emulated tiles against attention_forward in fp64, as the dot-product kernel is held: no worse than
// twice the per-block bf16 path's NMSE and 1e-4, on the same random cases (the same seed): head dims 3
// and 7 (a tile row of 16 pair words, mostly zeros; D padded to 16 zero rows), 8, 30, 64, 80 (three
// chunks of 16 pairs), 128; causal with queries after cached keys strided by a capacity,
// cross-attention, padding with uniform rows, prefix limits, dropout; under 16 rows; odd tiles.
TEST(FlashAttentionBf16Amx, EmulatedTilesAsCloseToTheFp64ForwardAsThePerBlockBf16Path) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(60);
  double worst = 0, worst_ratio = 0;
  for (int i = 0; i < 35; ++i) {
    const auto [fused, blocks] = expect_as_close_as_the_blocks(bf16_random_case(rng, i, 300), run_emulated);
    worst = std::max(worst, fused), worst_ratio = std::max(worst_ratio, fused / blocks);
  }
  std::printf("worst NMSE %.3g, worst ratio to the per-block bf16 path %.3g\n", worst, worst_ratio);
}

TEST(FlashAttentionBf16Amx, EmulatedTilesAsCloseToTheFp64ForwardAtModelShapes) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(61);
  for (bool causal : {false, true}) expect_as_close_as_the_blocks(model_case(rng, causal, true), run_emulated);
}

// Two of the bf16 kernel's products on the same case, with row statistics on every other case and the
// output in bf16 too (round_to_bf16's bits of the output): the second's outputs against the first's,
// their NMSE at most `most_nmse`, and the row statistics' largest differences (of the maxima relative
// to the largest maximum, of 1/Σexp relative to each) at most `most_stats`; 0 and 0: the same bits.
// Returns the NMSE and the largest statistics difference.
std::pair<double, double> expect_products_agree(const FlashCase& c, int i, ops::Bf16Products a, ops::Bf16Products b,
                                                double most_nmse, double most_stats) {
  SCOPED_TRACE(describe(c));
  std::vector<float> stats_a, stats_b;
  std::vector<uint16_t> out16;
  const bool stats = i % 2 == 0;
  const auto out_a = run_on(c, a, stats ? &stats_a : nullptr), out_b = run_on(c, b, stats ? &stats_b : nullptr, &out16);
  const double error = nmse(out_b, Vec(out_a.begin(), out_a.end()));
  EXPECT_LE(error, most_nmse);
  if (most_nmse == 0) {
    EXPECT_EQ(out_a, out_b);
  }
  std::vector<uint16_t> rounded(out_b.size());
  ops::round_to_bf16(rounded.data(), out_b.data(), static_cast<int64_t>(out_b.size()));
  EXPECT_EQ(out16, rounded);
  double top_m = 1, diff_m = 0, diff_inv = 0;
  for (size_t e = 0; e < stats_a.size(); e += 2) {
    top_m = std::max(top_m, std::abs(static_cast<double>(stats_a[e])));
    diff_m = std::max(diff_m, std::abs(static_cast<double>(stats_a[e]) - stats_b[e]));
    diff_inv = std::max(diff_inv, std::abs(static_cast<double>(stats_a[e + 1]) - stats_b[e + 1]) / stats_a[e + 1]);
  }
  EXPECT_LE(diff_m / top_m, most_stats) << "row maxima";
  EXPECT_LE(diff_inv, most_stats) << "row 1/Σexp";
  return {error, std::max(diff_m / top_m, diff_inv)};
}

// The cases the products are compared on: the random cases of the bf16 kernels (35), head dims either
// side of the tiles' rows of 32 dimensions and their 16-row output tiles (10), the model's shapes.
std::vector<FlashCase> products_cases() {
  std::mt19937_64 rng(67);
  std::vector<FlashCase> cases;
  const int64_t dims[] = {1, 16, 17, 31, 32, 33, 48, 65, 96, 127};
  for (int i = 0; i < 45; ++i) {
    cases.push_back(i < 35 ? bf16_random_case(rng, i, 300)
                           : random_case(rng, i, dims[i - 35], i % 5 == 2 ? 15 : 200, 200, 1, true, true));
  }
  for (bool causal : {false, true}) cases.push_back(model_case(rng, causal, true));
  return cases;
}

// expect_products_agree on every case of `cases` (the i-th keeping row statistics when i is even);
// returns the largest NMSE and statistics difference.
std::pair<double, double> expect_products_agree_on(const std::vector<FlashCase>& cases, ops::Bf16Products a,
                                                   ops::Bf16Products b, double most_nmse, double most_stats) {
  double worst = 0, worst_stats = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [e, st] = expect_products_agree(cases[i], static_cast<int>(i), a, b, most_nmse, most_stats);
    worst = std::max(worst, e), worst_stats = std::max(worst_stats, st);
  }
  return {worst, worst_stats};
}

// The tile kernel's layouts and padding to the last bit: with a pair's two products added in
// VDPBF16PS's order the emulated tiles give the dot products' bits (both add the same bf16 products
// in the same order of K, the padding's zeros changing no sum), row statistics and bf16 outputs too,
// whatever the thread count.
TEST(FlashAttentionBf16Amx, EmulatedTilesInTheDotProductsOrderGiveTheirBits) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  const std::vector<FlashCase> cases = products_cases();
  expect_products_agree_on(cases, ops::Bf16Products::dot, ops::Bf16Products::amx_emulated_in_dot_order, 0, 0);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = run_on(cases.back(), ops::Bf16Products::amx_emulated);
  omp_set_num_threads(2);
  const std::vector<float> two = run_on(cases.back(), ops::Bf16Products::amx_emulated);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);
}

// In TDPBF16PS's own order (a pair's even product first) the scores differ from the dot products' by
// fp32 roundings: row maxima and 1/Σexp up to 1.1e-6 apart (measured), but a score's last bit can
// round a probability to the next bf16 value (2^-8 relative), so outputs of rows that see few keys
// move by up to 6e-4 of the largest output; the NMSE between the two stays under 1e-8 (measured: 3.4e-12
// on these cases, 2e-9 on another draw with a dropout case at head dim 127; the kernels' own NMSE
// against fp64 reaches 1e-5).
TEST(FlashAttentionBf16Amx, EmulatedTilesAgreeWithTheDotProducts) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  const auto [worst, worst_stats] =
      expect_products_agree_on(products_cases(), ops::Bf16Products::dot, ops::Bf16Products::amx_emulated, 1e-8, 1e-5);
  std::printf("worst NMSE against the dot products %.3g, worst row statistic difference %.3g\n", worst, worst_stats);
}

// Why the real tiles do not run here (empty: they do), for the tests that skip without them.
std::string why_no_real_tiles() {
  if (!ops::flash_attention_amx_available()) {
    return "no AMX-BF16 here (CPUID, or the OS refused the tile data state): the real tile path is untested on "
           "this machine";
  }
  if (!ops::flash_attention_amx_enabled()) {
    return "AMX-BF16 here, but ROFORMER_AMX_ATTENTION=1 is not set: run with it to validate the tiles";
  }
  return "";
}

// The real tiles, where the CPU and OS have AMX-BF16 and ROFORMER_AMX_ATTENTION=1 (the switch that
// routes inference to them, off until this test has passed on AMX hardware: so a machine's ordinary run
// does not depend on a path it never takes): as close to fp64 as the per-block bf16 path, and within
// the dot products' tolerances of the emulated tiles (the hardware may add a pair's two products in
// another order, or round once per pair).
TEST(FlashAttentionBf16Amx, RealTilesAgreeWithTheEmulatedOnes) {
  if (const std::string why = why_no_real_tiles(); !why.empty()) GTEST_SKIP() << why;
  std::mt19937_64 rng(60);
  for (int i = 0; i < 35; ++i) {
    const FlashCase c = bf16_random_case(rng, i, 300);
    expect_as_close_as_the_blocks(c, [](const FlashCase& x) { return run_on(x, ops::Bf16Products::amx); });
  }
  const auto [worst, worst_stats] =
      expect_products_agree_on(products_cases(), ops::Bf16Products::amx_emulated, ops::Bf16Products::amx, 1e-8, 1e-5);
  std::printf("worst NMSE against the emulated tiles %.3g (0: the same bits), worst row statistic difference %.3g\n",
              worst, worst_stats);
}

// flash_attention_amx_available reads CPUID's AMX bits itself: where Linux lists no amx_tile and amx_bf16
// flags (it lists them only for a CPU that has them and a kernel that saves the tile state), it must
// say no, or a tile instruction would fault. (With the flags it may still say no: a sandbox can refuse
// the tile data state.)
TEST(FlashAttentionBf16Amx, NoAmxWhereLinuxListsNone) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!cpuinfo) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  bool tile = false, bf16 = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) tile |= w == "amx_tile", bf16 |= w == "amx_bf16";
    break;
  }
  if (!(tile && bf16)) {
    EXPECT_FALSE(ops::flash_attention_amx_available());
  }
  std::printf("Linux's AMX flags: %s; flash_attention_amx_available: %d\n", tile && bf16 ? "yes" : "no",
              ops::flash_attention_amx_available());
}

// flash_attention_forward_bf16 takes the tiles only where AMX is available and ROFORMER_AMX_ATTENTION=1
// (then the same bits as Bf16Products::amx); otherwise it is the dot products' kernel, bit for bit. The real tiles are refused where AMX is not
// available, and every product refuses what the kernel refuses.
TEST(FlashAttentionBf16Amx, TheDotProductsStayTheDefault) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  const char* env = std::getenv("ROFORMER_AMX_ATTENTION");
  const bool asked = env && std::string(env) == "1";
  EXPECT_EQ(ops::flash_attention_amx_enabled(), asked && ops::flash_attention_amx_available());
  std::mt19937_64 rng(68);
  const FlashCase c = bf16_random_case(rng, 0, 100);
  EXPECT_EQ(run(c), run_on(c, ops::flash_attention_amx_enabled() ? ops::Bf16Products::amx : ops::Bf16Products::dot));
  std::vector<float> x(4);
  ops::AttentionShape s{1, 2, 1, 2, false};
  s.saved = ops::AttentionSaved::none, s.bf16_products = true;
  if (!ops::flash_attention_amx_available()) {
    EXPECT_THROW(ops::flash_attention_forward_bf16_with(ops::Bf16Products::amx, x.data(), x.data(), x.data(), x.data(),
                                                        nullptr, s),
                 std::invalid_argument);
  }
  ops::AttentionShape bad = s;
  bad.saved = ops::AttentionSaved::probabilities;
  for (auto p : {ops::Bf16Products::dot, ops::Bf16Products::amx, ops::Bf16Products::amx_emulated,
                 ops::Bf16Products::amx_emulated_in_dot_order}) {
    EXPECT_THROW(ops::flash_attention_forward_bf16_with(p, x.data(), x.data(), x.data(), x.data(), nullptr, bad),
                 std::invalid_argument);
  }
}

TEST(FlashAttention, RowsThatSeeNoKeyAttendUniformlyOverAllKeys) {
  std::mt19937_64 rng(55);
  for (bool bf16 : kernels()) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ops::AttentionShape s{1, 5, 2, 8, false};
    FlashCase c = make_case(rng, s, false, false);
    c.key_mask.assign(s.T, 0);
    c.masked = true;
    c.s.bf16_products = bf16;
    const std::vector<float> out = run(c);
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t x = 0; x < s.H * s.D; ++x) {
        double mean = 0;
        for (int64_t j = 0; j < s.T; ++j) mean += c.v[j * s.H * s.D + x] / s.T;
        EXPECT_NEAR(out[t * s.H * s.D + x], mean, 1e-6);  // the fp32 mean of the values, bf16 kernel too
      }
    }
  }
}

// Inference writes the context over the queries: each block reads its queries before it writes.
TEST(FlashAttention, OutputMayOverwriteTheQueries) {
  std::mt19937_64 rng(56);
  for (bool bf16 : kernels()) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
      ops::AttentionShape s{2, 150, 3, 24, causal};
      s.bf16_products = bf16;
      const FlashCase c = make_case(rng, s, true, false);
      const auto k = to_f32(c.k), v = to_f32(c.v);
      std::vector<float> over = to_f32(c.q);
      if (bf16) {
        ops::flash_attention_forward_bf16(over.data(), over.data(), k.data(), v.data(), c.key_mask.data(), c.s);
      } else {
        ops::flash_attention_forward(over.data(), over.data(), k.data(), v.data(), c.key_mask.data(), c.s);
      }
      EXPECT_EQ(over, run(c));
    }
  }
}

// Each block's arithmetic is its own (the bf16 kernel's threads round the keys and values of the heads
// they read themselves): 1 and 2 threads give the same bits.
TEST(FlashAttention, SameBitsWhateverTheThreadCount) {
  std::mt19937_64 rng(57);
  for (bool bf16 : kernels()) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ops::AttentionShape s{2, 200, 3, 64, true};
    s.bf16_products = bf16;
    const FlashCase c = make_case(rng, s, true, false);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = run(c);
    omp_set_num_threads(2);
    const std::vector<float> two = run(c);
    omp_set_num_threads(threads);
    EXPECT_EQ(one, two);
  }
}

// attention_forward runs inference of 16 query rows or more through the fused kernel of its products
// (the same bits), fewer through the per-block path (attention_forward_blocks).
TEST(FlashAttention, AttentionForwardRoutesInferenceFrom16Rows) {
  std::mt19937_64 rng(58);
  for (bool bf16 : kernels()) {
    for (int64_t T : {15, 16, 100}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16 products, T " : "fp32, T ") << T);
      ops::AttentionShape s{2, T, 2, 32, true};
      s.bf16_products = bf16;
      const FlashCase c = make_case(rng, s, true, false);
      const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
      std::vector<float> routed(q.size());
      ops::attention_forward(routed.data(), static_cast<float*>(nullptr), q.data(), k.data(), v.data(),
                             c.key_mask.data(), c.s);
      if (T >= 16) {
        EXPECT_EQ(routed, run(c));
        EXPECT_NE(routed, run_blocks(c));  // another order of sums (and of roundings) somewhere
      } else {
        EXPECT_EQ(routed, run_blocks(c));
      }
    }
  }
}

// attention_forward's out16, the output in bf16 for the product that reads it next: round_to_bf16's
// bits of its fp32 output on every route (the fused kernels, from 16 rows, and the per-block path),
// written over the queries or not, with row statistics kept, in random shapes with odd head dims.
TEST(FlashAttention, Bf16OutputIsTheRoundedOutputOnEveryRoute) {
  std::mt19937_64 rng(61);
  for (bool bf16 : kernels()) {
    for (int i = 0; i < 12; ++i) {
      const int64_t D = i % 3 == 0 ? 33 : 64;
      FlashCase c = random_case(rng, i, D, 90, 140, 0, bf16);
      if (i % 4 == 2) c.s.saved = ops::AttentionSaved::row_stats;
      SCOPED_TRACE((bf16 ? "bf16 products " : "fp32 ") + describe(c));
      auto q = to_f32(c.q);
      const auto k = to_f32(c.k), v = to_f32(c.v);
      std::vector<float> out(q.size()), stats(c.s.saved == ops::AttentionSaved::row_stats ? ops::attention_saved_size(c.s) : 0);
      std::vector<uint16_t> out16(q.size(), 0xffff), rounded(q.size());
      const bool over_q = i % 2 == 1;  // inference writes the context over the queries
      float* o = over_q ? q.data() : out.data();
      ops::attention_forward(o, stats.empty() ? nullptr : stats.data(), q.data(), k.data(), v.data(),
                             c.masked ? c.key_mask.data() : nullptr, c.s, out16.data());
      ops::round_to_bf16(rounded.data(), o, static_cast<int64_t>(q.size()));
      EXPECT_EQ(out16, rounded);
    }
  }
  ops::AttentionShape s{1, 1, 1, 2, false};
  s.saved = ops::AttentionSaved::none;
  std::vector<double> x(2, 1.0), y(2);
  std::vector<uint16_t> y16(2);
  EXPECT_THROW(ops::attention_forward<double>(y.data(), nullptr, x.data(), x.data(), x.data(), nullptr, s, y16.data()),
               std::invalid_argument);
}

// Each kernel takes inference and training from row statistics, attention dropout too, with its own
// products only; the bf16 one only where the CPU has AVX512-BF16.
TEST(FlashAttention, TakesItsOwnProductsOnly) {
  std::vector<float> x(4);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ops::AttentionShape s{1, 2, 1, 2, false};
    s.saved = ops::AttentionSaved::none;
    s.bf16_products = bf16;
    auto applies = [&](const ops::AttentionShape& a) {
      return bf16 ? ops::flash_attention_bf16_applies(a) : ops::flash_attention_applies(a);
    };
    auto forward = [&](const ops::AttentionShape& a) {
      if (bf16) return ops::flash_attention_forward_bf16(x.data(), x.data(), x.data(), x.data(), nullptr, a);
      ops::flash_attention_forward(x.data(), x.data(), x.data(), x.data(), nullptr, a);
    };
    EXPECT_EQ(applies(s), !bf16 || bf16_kernel_runs());
    ops::AttentionShape training = s;  // row statistics: training without dropout
    training.saved = ops::AttentionSaved::row_stats;
    EXPECT_EQ(applies(training), !bf16 || bf16_kernel_runs());
    ops::AttentionShape dropout = s;  // attention dropout: taken
    dropout.dropout_p = 0.1;
    EXPECT_EQ(applies(dropout), !bf16 || bf16_kernel_runs());
    for (int i = 0; i < 2; ++i) {
      ops::AttentionShape bad = s;
      if (i == 0) bad.saved = ops::AttentionSaved::probabilities;
      if (i == 1) bad.bf16_products = !bf16;
      EXPECT_FALSE(applies(bad));
      EXPECT_THROW(forward(bad), std::invalid_argument);
    }
  }
}

// The fused backwards (flash_attention_backward; flash_attention_backward_bf16 where the CPU has
// AVX512-BF16) and the forwards that keep row statistics for them.

struct Grads {
  std::vector<float> dq, dk, dv;
};

// A random output gradient for the case (exactly fp32).
Vec random_dout(std::mt19937_64& rng, const FlashCase& c) { return random_f32_vec(rng, c.q.size()); }

// The fp64 gradients: attention_forward<double> keeping the probabilities, then its backward.
std::array<Vec, 3> reference_grads(const FlashCase& c, const Vec& g) {
  ops::AttentionShape s = c.s;
  s.bf16_products = false, s.saved = ops::AttentionSaved::probabilities;
  Vec out(c.q.size()), att(ops::attention_saved_size(s)), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  const int64_t* mask = c.masked ? c.key_mask.data() : nullptr;
  ops::attention_forward<double>(out.data(), att.data(), c.q.data(), c.k.data(), c.v.data(), mask, s);
  ops::attention_backward<double>(dq.data(), dk.data(), dv.data(), g.data(), att.data(), c.q.data(), c.k.data(),
                                  c.v.data(), mask, s);
  return {dq, dk, dv};
}

// The per-block path's gradients (probabilities kept: sgemm, or oneDNN's bf16 matmuls with the same
// roundings as with row statistics).
Grads blocks_grads(const FlashCase& c, const Vec& g) {
  ops::AttentionShape s = c.s;
  s.saved = ops::AttentionSaved::probabilities;
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v), gf = to_f32(g);
  std::vector<float> out(q.size()), att(ops::attention_saved_size(s));
  Grads r{std::vector<float>(q.size()), std::vector<float>(k.size()), std::vector<float>(v.size())};
  const int64_t* mask = c.masked ? c.key_mask.data() : nullptr;
  ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), mask, s);
  ops::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), gf.data(), att.data(), q.data(), k.data(), v.data(),
                          mask, s);
  return r;
}

// The fused kernels' gradients (of the case's products), added to `start` (the same value in every
// element of dq, dk, dv); bf16 with the backward's products on `products` where given (the forward on
// the dot products then, so that every products' backward reads the same output and statistics).
Grads fused_grads(const FlashCase& c, const Vec& g, float start = 0, const ops::Bf16Products* products = nullptr) {
  ops::AttentionShape s = c.s;
  s.saved = ops::AttentionSaved::row_stats;
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v), gf = to_f32(g);
  std::vector<float> out(q.size()), stats(ops::attention_saved_size(s));
  Grads r{std::vector<float>(q.size(), start), std::vector<float>(k.size(), start), std::vector<float>(v.size(), start)};
  const int64_t* mask = c.masked ? c.key_mask.data() : nullptr;
  if (s.bf16_products && products) {
    ops::flash_attention_forward_bf16_with(ops::Bf16Products::dot, out.data(), q.data(), k.data(), v.data(), mask, s,
                                           stats.data());
    ops::flash_attention_backward_bf16_with(*products, r.dq.data(), r.dk.data(), r.dv.data(), gf.data(), out.data(),
                                            stats.data(), q.data(), k.data(), v.data(), mask, s);
  } else if (s.bf16_products) {
    ops::flash_attention_forward_bf16(out.data(), q.data(), k.data(), v.data(), mask, s, stats.data());
    ops::flash_attention_backward_bf16(r.dq.data(), r.dk.data(), r.dv.data(), gf.data(), out.data(), stats.data(),
                                       q.data(), k.data(), v.data(), mask, s);
  } else {
    ops::flash_attention_forward(out.data(), q.data(), k.data(), v.data(), mask, s, stats.data());
    ops::flash_attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), gf.data(), out.data(), stats.data(), q.data(),
                                  k.data(), v.data(), mask, s);
  }
  return r;
}

// Each gradient's NMSE against fp64 at most `times` the per-block path's on the same inputs plus
// `slack`, and `most` (bf16: twice, and 3e-4, the per-block path's own reach 1e-4 at head dims of 3 and
// 7); bf16 products on `products` where given, as fused_grads). Returns the worst NMSE and the worst
// ratio to the per-block path's.
std::pair<double, double> expect_grads_as_close_as_the_blocks(std::mt19937_64& rng, const FlashCase& c, double most,
                                                              double times = 2, double slack = 0,
                                                              const ops::Bf16Products* products = nullptr) {
  SCOPED_TRACE(describe(c));
  const Vec g = random_dout(rng, c);
  const auto ref = reference_grads(c, g);
  const Grads fused = fused_grads(c, g, 0, products), blocks = blocks_grads(c, g);
  const std::vector<float>* f[] = {&fused.dq, &fused.dk, &fused.dv};
  const std::vector<float>* b[] = {&blocks.dq, &blocks.dk, &blocks.dv};
  const char* names[] = {"dq", "dk", "dv"};
  double worst = 0, ratio = 0;
  for (int i = 0; i < 3; ++i) {
    const double nf = nmse(*f[i], ref[i]), nb = nmse(*b[i], ref[i]);
    EXPECT_LE(nf, times * nb + slack) << names[i] << ": per-block path " << nb;
    EXPECT_LE(nf, most) << names[i];
    worst = std::max(worst, nf), ratio = std::max(ratio, nb > 0 ? nf / nb : 0.0);
  }
  return {worst, ratio};
}

// The fp32 kernels on every SIMD target against attention_backward in fp64: no worse than 4× the
// per-block fp32 path's NMSE (sgemm per block of 64 rows) plus 2e-12 (140 fp32 ε²), and 1e-11 at most.
// Both are at fp32's rounding (the per-block path up to 1e-12 here, the fused one 3e-12, at head dim 1
// where a gradient is a small difference of large terms); the fused one's
// Δ = rowsum(dO ⊙ out), FlashAttention-2's, carries the output's rounding into every dS of its row,
// where the per-block path's Δ = Σ p·dP cancels dP's (exactly in a row that sees one key). Over the
// forward's masks (causal with queries after cached keys strided by a capacity, cross-attention,
// padding with whole batch rows padded: uniform rows, prefix limits) and attention dropout, fewer than
// 16 rows (attention_backward routes those elsewhere, the kernel takes them) and head dims that are
// and are not multiples of the vector width.
TEST(FlashAttention, BackwardAsCloseToTheFp64GradientsAsThePerBlockPathOnEverySimdTarget) {
  std::mt19937_64 rng(65);
  const int64_t dims[] = {1, 3, 8, 24, 64, 80, 128};
  double worst = 0, worst_ratio = 0;
  for (int i = 0; i < 28; ++i) {
    const FlashCase c = random_case(rng, i, dims[i % 7], i % 5 == 2 ? 15 : 150, 200, 1, false, true);
    for_each_simd_target([&] {
      std::mt19937_64 same = rng;  // the same output gradient on every target
      const auto [w, r] = expect_grads_as_close_as_the_blocks(same, c, 1e-11, 4, 2e-12);
      worst = std::max(worst, w), worst_ratio = std::max(worst_ratio, r);
    });
    rng.discard(1 << 16);
  }
  std::printf("worst gradient NMSE %.3g, worst ratio to the per-block fp32 path %.3g\n", worst, worst_ratio);
}

TEST(FlashAttention, BackwardAsCloseToTheFp64GradientsAtModelShapes) {
  std::mt19937_64 rng(66);
  for (bool causal : {false, true}) expect_grads_as_close_as_the_blocks(rng, model_case(rng, causal, false), 1e-11, 4, 2e-12);
}

// Against attention_backward in fp64: no worse than twice the per-block bf16 path's NMSE, and 3e-4,
// over the forward's masks (causal with queries after cached keys strided by a capacity,
// cross-attention, padding with whole batch rows padded: uniform rows, prefix limits), fewer than 16
// rows, odd head dims and odd tiles.
TEST(FlashAttentionBf16, BackwardAsCloseToTheFp64GradientsAsThePerBlockBf16Path) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(62);
  double worst = 0, worst_ratio = 0;
  for (int i = 0; i < 35; ++i) {
    const auto [w, r] = expect_grads_as_close_as_the_blocks(rng, bf16_random_case(rng, i, 200), 3e-4);
    worst = std::max(worst, w), worst_ratio = std::max(worst_ratio, r);
  }
  std::printf("worst gradient NMSE %.3g, worst ratio to the per-block bf16 path %.3g\n", worst, worst_ratio);
}

TEST(FlashAttentionBf16, BackwardAsCloseToTheFp64GradientsAtModelShapes) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(63);
  for (bool causal : {false, true}) expect_grads_as_close_as_the_blocks(rng, model_case(rng, causal, true), 3e-4);
}

// The bf16 backward with its five products on AMX tiles (flash_attention_backward_bf16_with), held as
// the forward's tiles are: on tiles emulated in scalar code everywhere, on the real ones where AMX is
// enabled.

// The emulated tiles against attention_backward in fp64, as the dot products are held: no worse than
// twice the per-block bf16 path's NMSE and 3e-4, on the same random cases (the same seed): head dims
// 3 and 7 (a tile row of 16 pair words, mostly zeros), 8, 30, 64, 80, 128; every mask, dropout, fewer
// than 16 rows, odd tiles.
TEST(FlashAttentionBf16Amx, BackwardEmulatedTilesAsCloseToTheFp64GradientsAsThePerBlockBf16Path) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  const ops::Bf16Products tiles = ops::Bf16Products::amx_emulated;
  std::mt19937_64 rng(62);
  double worst = 0, worst_ratio = 0;
  for (int i = 0; i < 35; ++i) {
    const auto [w, r] = expect_grads_as_close_as_the_blocks(rng, bf16_random_case(rng, i, 200), 3e-4, 2, 0, &tiles);
    worst = std::max(worst, w), worst_ratio = std::max(worst_ratio, r);
  }
  for (bool causal : {false, true}) {
    expect_grads_as_close_as_the_blocks(rng, model_case(rng, causal, true), 3e-4, 2, 0, &tiles);
  }
  std::printf("worst gradient NMSE %.3g, worst ratio to the per-block bf16 path %.3g\n", worst, worst_ratio);
}

// Two products' gradients on every case of products_cases() (a random output gradient each, the
// forward on the dot products): b's dq, dk and dv against a's, each NMSE at most most_nmse (0: the
// same bits). Returns the worst NMSE.
double expect_backward_products_agree(ops::Bf16Products a, ops::Bf16Products b, double most_nmse) {
  std::mt19937_64 rng(69);
  double worst = 0;
  for (const FlashCase& c : products_cases()) {
    SCOPED_TRACE(describe(c));
    const Vec g = random_dout(rng, c);
    const Grads ga = fused_grads(c, g, 0, &a), gb = fused_grads(c, g, 0, &b);
    const std::vector<float>* x[] = {&ga.dq, &ga.dk, &ga.dv};
    const std::vector<float>* y[] = {&gb.dq, &gb.dk, &gb.dv};
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      const double e = nmse(*y[i], Vec(x[i]->begin(), x[i]->end()));
      EXPECT_LE(e, most_nmse) << names[i];
      if (most_nmse == 0) {
        EXPECT_EQ(*x[i], *y[i]) << names[i];
      }
      worst = std::max(worst, e);
    }
  }
  return worst;
}

// The tile backward's layouts and padding (the row pairs widened to whole chunks, the zeroed keys and
// pairs past a tile's end) to the last bit: in VDPBF16PS's pair order the emulated tiles give the
// dot products' gradients bit for bit, whatever the thread count.
TEST(FlashAttentionBf16Amx, BackwardEmulatedTilesInTheDotProductsOrderGiveTheirBits) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  expect_backward_products_agree(ops::Bf16Products::dot, ops::Bf16Products::amx_emulated_in_dot_order, 0);
  std::mt19937_64 rng(70);
  const FlashCase c = model_case(rng, true, true);
  const Vec g = random_dout(rng, c);
  const ops::Bf16Products tiles = ops::Bf16Products::amx_emulated;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Grads one = fused_grads(c, g, 0, &tiles);
  omp_set_num_threads(2);
  const Grads two = fused_grads(c, g, 0, &tiles);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.dq, two.dq);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
}

// In TDPBF16PS's own order the sums differ from the dot products' by fp32 roundings, which a bf16
// rounding of P or dS can turn into 2^-8 of a term: the gradients' NMSE between the two stays under
// 1e-8 (measured: 8.2e-10 on these cases).
TEST(FlashAttentionBf16Amx, BackwardEmulatedTilesAgreeWithTheDotProducts) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  const double worst = expect_backward_products_agree(ops::Bf16Products::dot, ops::Bf16Products::amx_emulated, 1e-8);
  std::printf("worst gradient NMSE against the dot products %.3g\n", worst);
}

// The real tiles' backward, where the CPU and OS have AMX-BF16 and ROFORMER_AMX_ATTENTION=1: as close
// to fp64 as the per-block bf16 path, and within the dot products' tolerance of the emulated tiles.
TEST(FlashAttentionBf16Amx, BackwardRealTilesAgreeWithTheEmulatedOnes) {
  if (const std::string why = why_no_real_tiles(); !why.empty()) GTEST_SKIP() << why;
  const ops::Bf16Products tiles = ops::Bf16Products::amx;
  std::mt19937_64 rng(62);
  for (int i = 0; i < 35; ++i) expect_grads_as_close_as_the_blocks(rng, bf16_random_case(rng, i, 200), 3e-4, 2, 0, &tiles);
  const double worst = expect_backward_products_agree(ops::Bf16Products::amx_emulated, ops::Bf16Products::amx, 1e-8);
  std::printf("worst gradient NMSE against the emulated tiles %.3g (0: the same bits)\n", worst);
}

// flash_attention_backward_bf16 takes the tiles where, and only where, the forward does (then
// Bf16Products::amx's bits, otherwise the dot products'); the real tiles are refused where AMX is not
// available, and every product refuses what the backward refuses.
TEST(FlashAttentionBf16Amx, BackwardTakesTheTilesWhereTheForwardDoes) {
  if (!bf16_kernel_runs()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937_64 rng(71);
  FlashCase c = bf16_random_case(rng, 0, 100);
  c.s.saved = ops::AttentionSaved::row_stats;
  const ops::AttentionShape& s = c.s;
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v), g = to_f32(random_dout(rng, c));
  const int64_t* mask = c.masked ? c.key_mask.data() : nullptr;
  std::vector<float> out(q.size()), stats(ops::attention_saved_size(s));
  ops::flash_attention_forward_bf16(out.data(), q.data(), k.data(), v.data(), mask, s, stats.data());
  const auto taken = ops::flash_attention_amx_enabled() ? ops::Bf16Products::amx : ops::Bf16Products::dot;
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dq2(q.size()), dk2(k.size()), dv2(v.size());
  ops::flash_attention_backward_bf16(dq.data(), dk.data(), dv.data(), g.data(), out.data(), stats.data(), q.data(),
                                     k.data(), v.data(), mask, s);
  ops::flash_attention_backward_bf16_with(taken, dq2.data(), dk2.data(), dv2.data(), g.data(), out.data(),
                                          stats.data(), q.data(), k.data(), v.data(), mask, s);
  EXPECT_EQ(dq, dq2);
  EXPECT_EQ(dk, dk2);
  EXPECT_EQ(dv, dv2);
  std::vector<float> x(4);
  ops::AttentionShape one{1, 2, 1, 2, false};
  one.saved = ops::AttentionSaved::row_stats, one.bf16_products = true;
  if (!ops::flash_attention_amx_available()) {
    EXPECT_THROW(ops::flash_attention_backward_bf16_with(ops::Bf16Products::amx, x.data(), x.data(), x.data(), x.data(),
                                                         x.data(), x.data(), x.data(), x.data(), x.data(), nullptr, one),
                 std::invalid_argument);
  }
  ops::AttentionShape inference = one;
  inference.saved = ops::AttentionSaved::none;
  for (auto p : {ops::Bf16Products::dot, ops::Bf16Products::amx, ops::Bf16Products::amx_emulated,
                 ops::Bf16Products::amx_emulated_in_dot_order}) {
    EXPECT_THROW(ops::flash_attention_backward_bf16_with(p, x.data(), x.data(), x.data(), x.data(), x.data(), x.data(),
                                                         x.data(), x.data(), x.data(), nullptr, inference),
                 std::invalid_argument);
    EXPECT_THROW(ops::flash_attention_backward_bf16_with(p, x.data(), x.data(), x.data(), x.data(), nullptr, x.data(),
                                                         x.data(), x.data(), x.data(), nullptr, one),
                 std::invalid_argument);
  }
}

// The gradients are added to dq, dk and dv (each element once, so bit for bit start + the gradient);
// the same bits whatever the thread count; attention_forward and attention_backward (given the
// forward's output) route row statistics from 16 rows on to these kernels, with attention dropout too.
TEST(FlashAttention, BackwardAccumulatesIsDeterministicAndIsRouted) {
  std::mt19937_64 rng(64);
  for (bool bf16 : kernels()) {
    for (double dropout : {0.0, 0.3}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16 products" : "fp32") << ", dropout " << dropout);
      ops::AttentionShape shape{2, 150, 2, 64, true, dropout, 9};  // causal, over 16 rows (routed)
      shape.bf16_products = bf16;
      const FlashCase c = make_case(rng, shape, true, false);  // padded, batch 1 all: uniform rows
      SCOPED_TRACE(describe(c));
      const Vec g = random_dout(rng, c);
      const Grads zero = fused_grads(c, g), plus = fused_grads(c, g, 0.75f);
      for (size_t i = 0; i < zero.dq.size(); ++i) ASSERT_EQ(plus.dq[i], 0.75f + zero.dq[i]) << "dq " << i;
      for (size_t i = 0; i < zero.dk.size(); ++i) ASSERT_EQ(plus.dk[i], 0.75f + zero.dk[i]) << "dk " << i;
      for (size_t i = 0; i < zero.dv.size(); ++i) ASSERT_EQ(plus.dv[i], 0.75f + zero.dv[i]) << "dv " << i;
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      const Grads one = fused_grads(c, g);
      omp_set_num_threads(3);
      const Grads three = fused_grads(c, g);
      omp_set_num_threads(threads);
      for (const Grads* r : {&one, &three}) {
        EXPECT_EQ(r->dq, zero.dq);
        EXPECT_EQ(r->dk, zero.dk);
        EXPECT_EQ(r->dv, zero.dv);
      }

      ops::AttentionShape s = c.s;
      s.saved = ops::AttentionSaved::row_stats;
      const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v), gf = to_f32(g);
      std::vector<float> out(q.size()), stats(ops::attention_saved_size(s)), dq(q.size()), dk(k.size()), dv(v.size());
      ops::attention_forward(out.data(), stats.data(), q.data(), k.data(), v.data(), c.key_mask.data(), s);
      ops::attention_backward(dq.data(), dk.data(), dv.data(), gf.data(), stats.data(), q.data(), k.data(), v.data(),
                              c.key_mask.data(), s, out.data());
      EXPECT_EQ(dq, zero.dq);
      EXPECT_EQ(dk, zero.dk);
      EXPECT_EQ(dv, zero.dv);
      // Without the forward's output the backward takes the per-block path: close, not the same bits.
      std::vector<float> dq2(q.size()), dk2(k.size()), dv2(v.size());
      ops::attention_backward(dq2.data(), dk2.data(), dv2.data(), gf.data(), stats.data(), q.data(), k.data(), v.data(),
                              c.key_mask.data(), s);
      EXPECT_NE(dq2, dq);
      EXPECT_LE(nmse(dq2, Vec(dq.begin(), dq.end())), bf16 ? 1e-4 : 1e-10);
    }
  }
}

// What the backwards refuse: inference shapes, kept probabilities, the other products, no output or
// statistics; and the forwards write statistics where, and only where, the shape keeps them.
TEST(FlashAttention, BackwardRefusesWhatIsNotItsTraining) {
  std::vector<float> x(4);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ops::AttentionShape s{1, 2, 1, 2, false};
    s.bf16_products = bf16;
    auto backward = [&](const ops::AttentionShape& a, const float* out, const float* stats) {
      if (bf16) {
        return ops::flash_attention_backward_bf16(x.data(), x.data(), x.data(), x.data(), out, stats, x.data(),
                                                  x.data(), x.data(), nullptr, a);
      }
      ops::flash_attention_backward(x.data(), x.data(), x.data(), x.data(), out, stats, x.data(), x.data(), x.data(),
                                    nullptr, a);
    };
    auto forward = [&](const ops::AttentionShape& a, float* stats) {
      if (bf16) return ops::flash_attention_forward_bf16(x.data(), x.data(), x.data(), x.data(), nullptr, a, stats);
      ops::flash_attention_forward(x.data(), x.data(), x.data(), x.data(), nullptr, a, stats);
    };
    for (int i = 0; i < 5; ++i) {
      ops::AttentionShape bad = s;
      bad.saved = ops::AttentionSaved::row_stats;
      if (i == 0) bad.saved = ops::AttentionSaved::none;
      if (i == 1) bad.saved = ops::AttentionSaved::probabilities;
      if (i == 4) bad.bf16_products = !bf16;
      EXPECT_THROW(backward(bad, i == 2 ? nullptr : x.data(), i == 3 ? nullptr : x.data()), std::invalid_argument) << i;
    }
    if (bf16 && !bf16_kernel_runs()) continue;
    ops::AttentionShape training = s;
    training.saved = ops::AttentionSaved::row_stats;
    EXPECT_THROW(forward(training, nullptr), std::invalid_argument);
    s.saved = ops::AttentionSaved::none;
    EXPECT_THROW(forward(s, x.data()), std::invalid_argument);
  }
}

}  // namespace
