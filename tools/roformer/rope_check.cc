// `roformer rope check`: how exact librope is, measured against a __float128 oracle.
//  1. max |cos − exact|, |sin − exact| per method and position band up to 2^31 − 1, next to the
//     fp32-angle formula most frameworks use and a plain-double angle without extended reduction;
//  2. ‖out − exact‖ / ‖exact‖ of rotated tensors per cos/sin mode, dtype and layout.
// Exits 1 if librope misses its bounds (2e-7 for cos/sin; 1e-6 for fp32 outputs).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_util.h"
#include "commands.h"
#include "rope/angle.h"
#include "rope/convert.h"
#include "rope/oracle.h"
#include "rope/plan.h"
#include "rope/rope.hpp"

namespace roformer {
namespace {

using rope::oracle::quad;

constexpr int kHeadDim = 128;
constexpr int kPairs = kHeadDim / 2;
constexpr int64_t kTableRows = int64_t{1} << 17;

struct Band {
  int lo_log2, hi_log2;  // positions [2^lo, 2^hi), lo = 0 meaning from 0
};
constexpr Band kBands[] = {{0, 12}, {12, 17}, {17, 24}, {24, 31}};

std::string band_name(const Band& b) {
  return b.lo_log2 == 0 ? fmt::format("[0, 2^{})", b.hi_log2) : fmt::format("[2^{}, 2^{})", b.lo_log2, b.hi_log2);
}

std::vector<int64_t> sample_band(const Band& b, int n, std::mt19937_64& rng) {
  const int64_t lo = b.lo_log2 == 0 ? 0 : int64_t{1} << b.lo_log2, hi = (int64_t{1} << b.hi_log2) - 1;
  std::vector<int64_t> pos = {lo, hi};
  std::uniform_int_distribution<int64_t> u(lo, hi);
  for (int i = 0; i < n; ++i) pos.push_back(u(rng));
  return pos;
}

// Max abs error of eval(m, c[], s[]) over positions × pairs.
template <typename Eval>
double cos_sin_error(const std::vector<int64_t>& positions, const std::vector<double>& theta, Eval eval) {
  std::vector<float> c(kPairs), s(kPairs);
  double worst = 0;
  for (int64_t m : positions) {
    eval(m, c.data(), s.data());
    for (int i = 0; i < kPairs; ++i) {
      quad ec, es;
      rope::oracle::cos_sin(m, theta[i], &ec, &es);
      worst = std::max({worst, static_cast<double>(fabsq(ec - c[i])), static_cast<double>(fabsq(es - s[i]))});
    }
  }
  return worst;
}

float to_storage_and_back(float v, rope_dtype dtype) {
  switch (dtype) {
    case ROPE_DTYPE_F16: return rope::f16_to_f32(rope::f32_to_f16(v));
    case ROPE_DTYPE_BF16: return rope::bf16_to_f32(rope::f32_to_bf16(v));
    default: return v;
  }
}

// Relative error of one rotated [1, tokens, heads, 128] tensor at the given positions.
double output_error(const rope::Plan& plan, const rope_config& cfg, rope_dtype dtype, rope_backend backend,
                    const std::vector<int64_t>& ids, std::mt19937_64& rng) {
  const int64_t tokens = static_cast<int64_t>(ids.size()), heads = 4;
  std::normal_distribution<float> normal;
  std::vector<float> x(tokens * heads * kHeadDim);
  for (float& v : x) v = to_storage_and_back(normal(rng), dtype);  // exactly representable inputs
  const size_t es = dtype == ROPE_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> buf(x.size() * es);
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == ROPE_DTYPE_F32) {
      std::memcpy(&buf[4 * i], &x[i], 4);
    } else {
      const uint16_t h = dtype == ROPE_DTYPE_F16 ? rope::f32_to_f16(x[i]) : rope::f32_to_bf16(x[i]);
      std::memcpy(&buf[2 * i], &h, 2);
    }
  }
  rope_positions pos{};
  pos.kind = ROPE_POSITIONS_IDS;
  pos.ids = ids.data();
  const rope_exec exec{1, backend, nullptr};
  plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, rope::bshd(buf.data(), dtype, 1, tokens, heads, kHeadDim), nullptr, &exec);

  const std::vector<double> theta = plan.inv_freq();
  std::vector<double> expected(kHeadDim);
  std::vector<int64_t> pair_pos(kPairs);
  double num = 0, den = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::fill(pair_pos.begin(), pair_pos.end(), ids[t]);
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = (t * heads + h) * kHeadDim;
      rope::oracle::rotate_head(cfg, theta.data(), 1.0, pair_pos.data(), false, false, &x[base], expected.data());
      for (int d = 0; d < kHeadDim; ++d) {
        float got;
        if (dtype == ROPE_DTYPE_F32) {
          std::memcpy(&got, &buf[4 * (base + d)], 4);
        } else {
          uint16_t u;
          std::memcpy(&u, &buf[2 * (base + d)], 2);
          got = dtype == ROPE_DTYPE_F16 ? rope::f16_to_f32(u) : rope::bf16_to_f32(u);
        }
        num += (got - expected[d]) * (got - expected[d]);
        den += expected[d] * expected[d];
      }
    }
  }
  return std::sqrt(num / den);
}


}  // namespace

int rope_check(const RopeCheckOptions& options) {
  std::mt19937_64 rng(20210420);
  bool pass = true;
  nlohmann::json report;
  report["cpu_target"] = rope_cpu_target();

  rope_config cfg;
  rope::check(rope_config_preset(&cfg, ROPE_PRESET_ROFORMER, kHeadDim));
  const rope::Plan fly(cfg);
  rope_config table_cfg = cfg;
  table_cfg.mode = ROPE_MODE_TABLE;
  table_cfg.table_positions = kTableRows;
  const rope::Plan table(table_cfg);
  const std::vector<double> theta = fly.inv_freq();

  if (!options.json) {
    fmt::print("librope accuracy check (SIMD target {}, head_dim {}, base {:g})\n\n", rope_cpu_target(), kHeadDim, cfg.base);
    fmt::print("cos/sin: max |error| vs exact (__float128), {} sampled positions per band\n", options.samples + 2);
    fmt::print("{:<34}", "method");
    for (const Band& b : kBands) fmt::print("{:>16}", band_name(b));
    fmt::print("\n");
  }
  struct Method {
    const char* name;
    bool ours;
    std::function<void(int64_t, float*, float*)> eval;
    int64_t limit;
  };
  const std::vector<Method> methods = {
      {"librope on the fly (SIMD)", true,
       [&](int64_t m, float* c, float* s) { rope::check(rope_plan_cos_sin(fly.get(), m, c, s)); }, INT64_MAX},
      {"librope table (2^17 rows)", true,
       [&](int64_t m, float* c, float* s) {
         // The rows the kernels read in TABLE mode.
         std::copy_n(&table.get()->table_cos[m * kPairs], kPairs, c);
         std::copy_n(&table.get()->table_sin[m * kPairs], kPairs, s);
       },
       kTableRows},
      {"librope reference (scalar)", true,
       [&](int64_t m, float* c, float* s) {
         for (int i = 0; i < kPairs; ++i) {
           double dc, ds;
           rope::exact_cos_sin(m, theta[i], &dc, &ds);
           c[i] = static_cast<float>(dc);
           s[i] = static_cast<float>(ds);
         }
       },
       INT64_MAX},
      {"fp32 angle m*theta (frameworks)", false,
       [&](int64_t m, float* c, float* s) {
         for (int i = 0; i < kPairs; ++i) {
           const float a = static_cast<float>(m) * static_cast<float>(theta[i]);
           c[i] = std::cos(a);
           s[i] = std::sin(a);
         }
       },
       INT64_MAX},
      {"fp64 angle, libm reduction", false,
       [&](int64_t m, float* c, float* s) {
         for (int i = 0; i < kPairs; ++i) {
           const double a = static_cast<double>(m) * theta[i];
           c[i] = static_cast<float>(std::cos(a));
           s[i] = static_cast<float>(std::sin(a));
         }
       },
       INT64_MAX},
  };
  std::vector<std::vector<int64_t>> band_positions;
  for (const Band& b : kBands) band_positions.push_back(sample_band(b, options.samples, rng));
  for (const Method& method : methods) {
    if (!options.json) fmt::print("{:<34}", method.name);
    for (size_t bi = 0; bi < std::size(kBands); ++bi) {
      if ((int64_t{1} << kBands[bi].hi_log2) > method.limit) {
        if (!options.json) fmt::print("{:>16}", "-");
        continue;
      }
      const double err = cos_sin_error(band_positions[bi], theta, method.eval);
      const bool ok = !method.ours || err <= 2e-7;
      pass = pass && ok;
      report["cos_sin"].push_back({{"method", method.name}, {"band", band_name(kBands[bi])}, {"max_abs_error", err}});
      if (!options.json) fmt::print("{:>15.2e}{}", err, ok ? " " : "!");
    }
    if (!options.json) fmt::print("\n");
  }

  if (!options.json) {
    fmt::print("\nrotated outputs: ||out - exact|| / ||exact||, 64 tokens x 4 heads x {}, forward\n", kHeadDim);
    fmt::print("(16-bit results are bounded by their own rounding: bf16 2^-9, f16 2^-12 per element)\n");
    fmt::print("{:<12}{:<8}{:<14}{:<12}{:>14}{:>14}\n", "mode", "dtype", "layout", "positions", "SIMD", "reference");
  }
  for (rope_cos_sin_mode mode : {ROPE_MODE_ON_THE_FLY, ROPE_MODE_TABLE}) {
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
      for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
        rope_config c = mode == ROPE_MODE_TABLE ? table_cfg : cfg;
        c.layout = layout;
        const rope::Plan plan(c);
        const int64_t limit = mode == ROPE_MODE_TABLE ? kTableRows : int64_t{1} << 31;
        std::uniform_int_distribution<int64_t> u(0, limit - 1);
        std::vector<int64_t> ids(64);
        for (auto& m : ids) m = u(rng);
        ids[0] = limit - 1;
        const double simd = output_error(plan, c, dtype, ROPE_BACKEND_AUTO, ids, rng);
        const double ref = output_error(plan, c, dtype, ROPE_BACKEND_REFERENCE, ids, rng);
        const double bound = dtype == ROPE_DTYPE_F32 ? 1e-6 : dtype == ROPE_DTYPE_F16 ? 1e-3 : 5e-3;
        const bool ok = simd <= bound && ref <= bound;
        pass = pass && ok;
        const char* mode_name = mode == ROPE_MODE_TABLE ? "table" : "on_the_fly";
        const char* layout_name = layout == ROPE_LAYOUT_HALF ? "half" : "interleaved";
        const std::string range = mode == ROPE_MODE_TABLE ? "< 2^17" : "< 2^31";
        report["outputs"].push_back({{"mode", mode_name}, {"dtype", dtype_name(dtype)}, {"layout", layout_name},
                                     {"positions", range}, {"simd", simd}, {"reference", ref}, {"bound", bound}});
        if (!options.json) {
          fmt::print("{:<12}{:<8}{:<14}{:<12}{:>14.2e}{:>14.2e}{}\n", mode_name, dtype_name(dtype), layout_name,
                     range, simd, ref, ok ? "" : "  FAIL");
        }
      }
    }
  }
  report["pass"] = pass;
  if (options.json) {
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print("\n{}\n", pass ? "PASS: cos/sin within 2e-7 and fp32 outputs within 1e-6 of exact at every sampled position"
                               : "FAIL: see the marked entries");
  }
  return pass ? 0 : 1;
}

}  // namespace roformer
