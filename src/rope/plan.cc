// rope_plan lifetime: config defaults and presets, validation, and derivation of θ, the pair→axis
// map, the attention factor, xPos factors and the optional cos/sin table.
#include "plan.h"

#include <cmath>
#include <cstring>
#include <new>

#include "abi.h"
#include "cpu/rope_cpu.h"
#include "cuda/rope_cuda.h"
#include "error.h"
#include "freqs.h"

namespace rope {
namespace {

constexpr int32_t kMaxHeadDim = 1 << 16;
constexpr int64_t kMaxTablePositions = int64_t{1} << 31;

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

bool uses_factor(rope_scaling_type t) { return t != ROPE_SCALING_NONE; }
bool uses_context(rope_scaling_type t) {
  return t == ROPE_SCALING_DYNAMIC_NTK || t == ROPE_SCALING_YARN || t == ROPE_SCALING_LLAMA3 ||
         t == ROPE_SCALING_LONGROPE;
}

rope_status validate_factor_array(const double* f, int32_t n, const char* name) {
  if (f == nullptr) return fail(ROPE_ERR_NULL_POINTER, "%s is NULL", name);
  for (int32_t i = 0; i < n; ++i) {
    if (!finite_positive(f[i])) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "%s[%d] = %g must be finite and > 0", name, i, f[i]);
    }
  }
  return ROPE_OK;
}

rope_status validate_scaling(const rope_scaling& sc, int32_t n_pairs) {
  if (sc.type < ROPE_SCALING_NONE || sc.type > ROPE_SCALING_LONGROPE) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown scaling type %d", static_cast<int>(sc.type));
  }
  if (uses_factor(sc.type) && !finite_positive(sc.factor)) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "scaling factor %g must be finite and > 0", sc.factor);
  }
  if (uses_context(sc.type) && sc.original_max_positions <= 0) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "original_max_positions %lld must be > 0",
                static_cast<long long>(sc.original_max_positions));
  }
  if (!std::isfinite(sc.attention_factor) || sc.attention_factor < 0) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "attention_factor %g must be finite and >= 0",
                sc.attention_factor);
  }
  if (sc.type == ROPE_SCALING_YARN) {
    if (!finite_positive(sc.beta_fast) || !finite_positive(sc.beta_slow)) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "YaRN beta_fast %g and beta_slow %g must be > 0",
                  sc.beta_fast, sc.beta_slow);
    }
    if (!std::isfinite(sc.extrapolation_factor) || sc.extrapolation_factor < 0) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "YaRN extrapolation_factor %g must be finite and >= 0",
                  sc.extrapolation_factor);
    }
    if (!std::isfinite(sc.mscale) || sc.mscale < 0 || !std::isfinite(sc.mscale_all_dim) ||
        sc.mscale_all_dim < 0) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "YaRN mscale %g / mscale_all_dim %g must be >= 0",
                  sc.mscale, sc.mscale_all_dim);
    }
  }
  if (sc.type == ROPE_SCALING_LLAMA3) {
    if (!finite_positive(sc.low_freq_factor) || !finite_positive(sc.high_freq_factor) ||
        sc.high_freq_factor <= sc.low_freq_factor) {
      return fail(ROPE_ERR_INVALID_ARGUMENT,
                  "Llama 3 needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
                  sc.low_freq_factor, sc.high_freq_factor);
    }
  }
  if (sc.type == ROPE_SCALING_LONGROPE) {
    ROPE_TRY(validate_factor_array(sc.short_factor, n_pairs, "LongRoPE short_factor"));
    ROPE_TRY(validate_factor_array(sc.long_factor, n_pairs, "LongRoPE long_factor"));
  }
  return ROPE_OK;
}

}  // namespace

rope_status validate_config(const rope_config& cfg) {
  if (cfg.head_dim <= 0 || cfg.head_dim > kMaxHeadDim) {
    return fail(ROPE_ERR_BAD_SHAPE, "head_dim %d must be in [1, %d]", cfg.head_dim, kMaxHeadDim);
  }
  if (cfg.rot_dim <= 0 || cfg.rot_dim % 2 != 0) {
    if (cfg.rot_dim == cfg.head_dim && cfg.rot_offset == 0) {  // the default rot_dim: the caller set head_dim
      return fail(ROPE_ERR_BAD_SHAPE, "head_dim %d is odd: the rotary dimensions pair up, so rot_dim (by default "
                  "head_dim) must be even; set rot_dim to an even value below it to rotate part of each head",
                  cfg.head_dim);
    }
    return fail(ROPE_ERR_BAD_SHAPE, "rot_dim %d must be even and > 0", cfg.rot_dim);
  }
  if (cfg.rot_offset < 0 || cfg.rot_dim > cfg.head_dim - cfg.rot_offset) {
    return fail(ROPE_ERR_BAD_SHAPE, "rot_offset %d + rot_dim %d exceeds head_dim %d", cfg.rot_offset,
                cfg.rot_dim, cfg.head_dim);
  }
  if (cfg.layout != ROPE_LAYOUT_INTERLEAVED && cfg.layout != ROPE_LAYOUT_HALF) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown layout %d", static_cast<int>(cfg.layout));
  }
  if (!finite_positive(cfg.base) || cfg.base == 1.0) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "base %g must be finite, > 0 and != 1", cfg.base);
  }
  const int32_t n_pairs = cfg.rot_dim / 2;
  if (cfg.scaling.type == ROPE_SCALING_NTK || cfg.scaling.type == ROPE_SCALING_DYNAMIC_NTK) {
    if (cfg.rot_dim <= 2) return fail(ROPE_ERR_BAD_SHAPE, "NTK scaling needs rot_dim > 2");
  }
  ROPE_TRY(validate_scaling(cfg.scaling, n_pairs));
  if (cfg.freq_factors != nullptr) ROPE_TRY(validate_factor_array(cfg.freq_factors, n_pairs, "freq_factors"));
  if (cfg.xpos.enabled != 0 && cfg.xpos.enabled != 1) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "xpos.enabled must be 0 or 1");
  }
  if (cfg.xpos.enabled) {
    if (!finite_positive(cfg.xpos.gamma) || !finite_positive(cfg.xpos.scale_base)) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "xPos gamma %g and scale_base %g must be > 0",
                  cfg.xpos.gamma, cfg.xpos.scale_base);
    }
  }
  if (cfg.n_axes < 1 || cfg.n_axes > 4) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "n_axes %d must be in [1, 4]", cfg.n_axes);
  }
  if (cfg.axes_mode < ROPE_AXES_SECTIONS || cfg.axes_mode > ROPE_AXES_AXIAL) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown axes_mode %d", static_cast<int>(cfg.axes_mode));
  }
  if (cfg.n_axes > 1 && cfg.axes_mode != ROPE_AXES_INTERLEAVED) {
    int64_t sum = 0;
    for (int a = 0; a < cfg.n_axes; ++a) {
      if (cfg.sections[a] < 0 || (cfg.axes_mode == ROPE_AXES_AXIAL && cfg.sections[a] < 2)) {
        return fail(ROPE_ERR_INVALID_ARGUMENT, "sections[%d] = %d is too small", a, cfg.sections[a]);
      }
      sum += cfg.sections[a];
    }
    if (sum != n_pairs) {
      return fail(ROPE_ERR_BAD_SHAPE, "sections sum to %lld but rot_dim/2 = %d",
                  static_cast<long long>(sum), n_pairs);
    }
    if (cfg.axes_mode == ROPE_AXES_AXIAL && cfg.scaling.type == ROPE_SCALING_LONGROPE) {
      return fail(ROPE_ERR_UNSUPPORTED, "LongRoPE factors are per rotary pair; not with AXIAL axes");
    }
  }
  if (cfg.mode != ROPE_MODE_ON_THE_FLY && cfg.mode != ROPE_MODE_TABLE) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown cos/sin mode %d", static_cast<int>(cfg.mode));
  }
  if (cfg.mode == ROPE_MODE_TABLE &&
      (cfg.table_positions <= 0 || cfg.table_positions > kMaxTablePositions)) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "table_positions %lld must be in [1, 2^31]",
                static_cast<long long>(cfg.table_positions));
  }
  return ROPE_OK;
}

namespace {

// θ and attention factor for the whole rotary part: one ladder, or one per AXIAL section.
rope_status derive_theta(rope_plan* plan) {
  const rope_config& cfg = plan->cfg;
  const int32_t n_pairs = plan->n_pairs;
  plan->theta.assign(static_cast<size_t>(n_pairs) + kPairPadding, 0.0);
  plan->pair_axis.assign(n_pairs, 0);
  const double* short_f = plan->short_factor.empty() ? nullptr : plan->short_factor.data();
  const double* long_f = plan->long_factor.empty() ? nullptr : plan->long_factor.data();

  if (cfg.n_axes > 1 && cfg.axes_mode == ROPE_AXES_AXIAL) {
    int32_t first = 0;
    for (int a = 0; a < cfg.n_axes; ++a) {
      const int32_t len = cfg.sections[a];
      const ScaledFreqs f =
          scaled_freqs(cfg.base, 2 * len, cfg.scaling, plan->seq_len, nullptr, nullptr);
      for (int32_t j = 0; j < len; ++j) {
        plan->theta[first + j] = f.theta[j];
        plan->pair_axis[first + j] = static_cast<uint8_t>(a);
      }
      plan->attention_factor = f.attention_factor;
      first += len;
    }
  } else {
    const ScaledFreqs f =
        scaled_freqs(cfg.base, cfg.rot_dim, cfg.scaling, plan->seq_len, short_f, long_f);
    std::copy(f.theta.begin(), f.theta.end(), plan->theta.begin());
    plan->attention_factor = f.attention_factor;
    for (int32_t i = 0; i < n_pairs; ++i) {
      if (cfg.n_axes == 1) break;
      if (cfg.axes_mode == ROPE_AXES_INTERLEAVED) {
        plan->pair_axis[i] = static_cast<uint8_t>(i % cfg.n_axes);
      } else {
        int32_t a = 0, end = cfg.sections[0];
        while (i >= end) end += cfg.sections[++a];
        plan->pair_axis[i] = static_cast<uint8_t>(a);
      }
    }
  }
  for (int32_t i = 0; i < n_pairs; ++i) {
    if (!plan->freq_factors.empty()) plan->theta[i] /= plan->freq_factors[i];
    if (!finite_positive(plan->theta[i])) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "scaled frequency theta[%d] = %g is not finite and > 0",
                  i, plan->theta[i]);
    }
  }
  if (!std::isfinite(plan->attention_factor) || plan->attention_factor <= 0) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "attention factor %g is not finite and > 0",
                plan->attention_factor);
  }
  return ROPE_OK;
}

}  // namespace

rope_status plan_derive(rope_plan* plan) {
  ++plan->generation;
  ROPE_TRY(derive_theta(plan));
  const rope_config& cfg = plan->cfg;
  plan->xpos_log_zeta.clear();
  if (cfg.xpos.enabled) {
    plan->xpos_log_zeta.resize(plan->n_pairs);
    for (int32_t i = 0; i < plan->n_pairs; ++i) {
      const double zeta = (2.0 * i / cfg.rot_dim + cfg.xpos.gamma) / (1.0 + cfg.xpos.gamma);
      plan->xpos_log_zeta[i] = std::log(zeta) / cfg.xpos.scale_base;
    }
  }
  if (cfg.mode == ROPE_MODE_TABLE) {
    const int64_t rows = cfg.table_positions;
    const size_t padded = static_cast<size_t>(plan->n_pairs) + kPairPadding;
    try {
      plan->table_cos.assign(static_cast<size_t>(rows) * plan->n_pairs, 0.0f);
      plan->table_sin.assign(static_cast<size_t>(rows) * plan->n_pairs, 0.0f);
      std::vector<double> pos(padded);
      std::vector<float> c(padded), s(padded);
      for (int64_t m = 0; m < rows; ++m) {
        std::fill(pos.begin(), pos.end(), static_cast<double>(m));
        simd_cos_sin(pos.data(), plan->theta.data(), plan->n_pairs, c.data(), s.data());
        std::memcpy(&plan->table_cos[m * plan->n_pairs], c.data(), plan->n_pairs * sizeof(float));
        std::memcpy(&plan->table_sin[m * plan->n_pairs], s.data(), plan->n_pairs * sizeof(float));
      }
    } catch (const std::bad_alloc&) {
      return fail(ROPE_ERR_OUT_OF_MEMORY, "cannot allocate a cos/sin table of %lld x %d",
                  static_cast<long long>(rows), plan->n_pairs);
    }
  }
  return ROPE_OK;
}

}  // namespace rope

using rope::fail;

namespace rope {
namespace {

void config_defaults(rope_config* cfg, int32_t head_dim) {
  *cfg = rope_config{};
  cfg->head_dim = head_dim;
  cfg->rot_dim = head_dim;
  cfg->layout = ROPE_LAYOUT_INTERLEAVED;
  cfg->base = 10000.0;
  cfg->scaling.type = ROPE_SCALING_NONE;
  cfg->scaling.factor = 1.0;
  cfg->scaling.beta_fast = 32.0;
  cfg->scaling.beta_slow = 1.0;
  cfg->scaling.extrapolation_factor = 1.0;
  cfg->scaling.truncate = 1;
  cfg->scaling.low_freq_factor = 1.0;
  cfg->scaling.high_freq_factor = 4.0;
  cfg->xpos.gamma = 0.4;
  cfg->xpos.scale_base = 512.0;
  cfg->n_axes = 1;
  cfg->mode = ROPE_MODE_ON_THE_FLY;
}

rope_status config_preset(rope_config* cfg, rope_preset preset, int32_t head_dim) {
  config_defaults(cfg, head_dim);
  switch (preset) {
    case ROPE_PRESET_ROFORMER:
      break;
    case ROPE_PRESET_GPTJ:
      cfg->rot_dim = 64;
      break;
    case ROPE_PRESET_NEOX:
      cfg->layout = ROPE_LAYOUT_HALF;
      cfg->rot_dim = head_dim / 4;
      break;
    case ROPE_PRESET_LLAMA:
      cfg->layout = ROPE_LAYOUT_HALF;
      break;
    case ROPE_PRESET_LLAMA3:
      cfg->layout = ROPE_LAYOUT_HALF;
      cfg->base = 500000.0;
      cfg->scaling.type = ROPE_SCALING_LLAMA3;
      cfg->scaling.factor = 8.0;
      cfg->scaling.original_max_positions = 8192;
      break;
    case ROPE_PRESET_QWEN2:
      cfg->layout = ROPE_LAYOUT_HALF;
      cfg->base = 1e6;
      break;
    case ROPE_PRESET_QWEN2_VL:
      cfg->layout = ROPE_LAYOUT_HALF;
      cfg->base = 1e6;
      cfg->n_axes = 3;
      cfg->axes_mode = ROPE_AXES_SECTIONS;
      // Qwen2-VL's mrope_section [16, 24, 24] for head_dim 128, scaled for other sizes.
      cfg->sections[0] = head_dim / 8;
      cfg->sections[1] = (head_dim / 2 - head_dim / 8) / 2;
      cfg->sections[2] = head_dim / 2 - cfg->sections[0] - cfg->sections[1];
      break;
    default:
      return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown preset %d", static_cast<int>(preset));
  }
  return validate_config(*cfg);
}

}  // namespace
}  // namespace rope

// The config entry points write and read config_bytes(abi) bytes of the caller's struct (every
// generation so far has one config layout; a later one that grows it gets the copy-in/out here).
extern "C" void rope_config_init_abi(rope_config* cfg, int32_t head_dim, int32_t abi) {
  if (cfg == nullptr || rope::check_abi(abi) != ROPE_OK) return;
  rope_config full;
  rope::config_defaults(&full, head_dim);
  std::memcpy(cfg, &full, rope::config_bytes(abi));
}

extern "C" rope_status rope_config_preset_abi(rope_config* cfg, rope_preset preset, int32_t head_dim,
                                              int32_t abi) {
  rope::clear_error();
  if (cfg == nullptr) return fail(ROPE_ERR_NULL_POINTER, "cfg is NULL");
  ROPE_TRY(rope::check_abi(abi));
  rope_config full;
  const rope_status s = rope::config_preset(&full, preset, head_dim);
  std::memcpy(cfg, &full, rope::config_bytes(abi));
  return s;
}

extern "C" rope_status rope_plan_create_abi(const rope_config* caller_cfg, rope_plan** out, int32_t abi) {
  rope::clear_error();
  if (out == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan output pointer is NULL");
  *out = nullptr;
  if (caller_cfg == nullptr) return fail(ROPE_ERR_NULL_POINTER, "cfg is NULL");
  ROPE_TRY(rope::check_abi(abi));
  const rope_config config = rope::read_struct(*caller_cfg, rope::config_bytes(abi));
  const rope_config* cfg = &config;
  ROPE_TRY(rope::validate_config(*cfg));
  rope_plan* plan = new (std::nothrow) rope_plan;
  if (plan == nullptr) return fail(ROPE_ERR_OUT_OF_MEMORY, "cannot allocate a plan");
  plan->cfg = *cfg;
  plan->n_pairs = cfg->rot_dim / 2;
  const size_t n = static_cast<size_t>(plan->n_pairs);
  if (cfg->scaling.type == ROPE_SCALING_LONGROPE) {
    plan->short_factor.assign(cfg->scaling.short_factor, cfg->scaling.short_factor + n);
    plan->long_factor.assign(cfg->scaling.long_factor, cfg->scaling.long_factor + n);
  }
  if (cfg->freq_factors != nullptr) plan->freq_factors.assign(cfg->freq_factors, cfg->freq_factors + n);
  // The copy must not keep pointers into the caller's memory.
  plan->cfg.scaling.short_factor = nullptr;
  plan->cfg.scaling.long_factor = nullptr;
  plan->cfg.freq_factors = nullptr;
  const rope_status s = rope::plan_derive(plan);
  if (s != ROPE_OK) {
    delete plan;
    return s;
  }
  *out = plan;
  return ROPE_OK;
}

extern "C" void rope_plan_destroy(rope_plan* plan) {
  if (plan != nullptr) rope::cuda_release_plan(plan);
  delete plan;
}

extern "C" rope_status rope_plan_set_seq_len(rope_plan* plan, int64_t seq_len) {
  rope::clear_error();
  if (plan == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan is NULL");
  if (seq_len < 0) return fail(ROPE_ERR_INVALID_ARGUMENT, "seq_len %lld < 0", static_cast<long long>(seq_len));
  const int64_t old = plan->seq_len;
  plan->seq_len = seq_len;
  const rope_scaling_type t = plan->cfg.scaling.type;
  if (t != ROPE_SCALING_DYNAMIC_NTK && t != ROPE_SCALING_LONGROPE) return ROPE_OK;
  const rope_status s = rope::plan_derive(plan);
  if (s != ROPE_OK) {
    plan->seq_len = old;
    rope::plan_derive(plan);
  }
  return s;
}

extern "C" rope_status rope_plan_inv_freq(const rope_plan* plan, double* inv_freq) {
  rope::clear_error();
  if (plan == nullptr || inv_freq == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan or inv_freq is NULL");
  std::memcpy(inv_freq, plan->theta.data(), plan->n_pairs * sizeof(double));
  return ROPE_OK;
}

extern "C" rope_status rope_plan_attention_factor(const rope_plan* plan, double* factor) {
  rope::clear_error();
  if (plan == nullptr || factor == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan or factor is NULL");
  *factor = plan->attention_factor;
  return ROPE_OK;
}

extern "C" rope_status rope_plan_cos_sin(const rope_plan* plan, int64_t position, float* cos_out,
                                         float* sin_out) {
  rope::clear_error();
  if (plan == nullptr || cos_out == nullptr || sin_out == nullptr) {
    return fail(ROPE_ERR_NULL_POINTER, "plan, cos_out or sin_out is NULL");
  }
  if (position < 0 || position >= ROPE_MAX_POSITION) {
    return fail(ROPE_ERR_BAD_POSITION, "position %lld outside [0, 2^48)", static_cast<long long>(position));
  }
  const size_t padded = static_cast<size_t>(plan->n_pairs) + kPairPadding;
  std::vector<double> pos(padded, static_cast<double>(position));
  std::vector<float> c(padded), s(padded);
  rope::simd_cos_sin(pos.data(), plan->theta.data(), plan->n_pairs, c.data(), s.data());
  std::memcpy(cos_out, c.data(), plan->n_pairs * sizeof(float));
  std::memcpy(sin_out, s.data(), plan->n_pairs * sizeof(float));
  return ROPE_OK;
}
