// Rotary frequencies and their scaling methods (linear, NTK, dynamic NTK, YaRN, Llama 3,
// LongRoPE), computed in float64 (long double for the base ladder). Hugging Face's
// ROPE_INIT_FUNCTIONS compute the same formulas in float32; tests/testdata/hf_rope_scaling.json holds
// their values and tests/rope/scaling_test.cc compares.
#include "freqs.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rope {

std::vector<double> base_ladder(double base, int32_t d) {
  const int32_t n_pairs = d / 2;
  std::vector<double> theta(n_pairs);
  const long double log_base = std::log(static_cast<long double>(base));
  for (int32_t i = 0; i < n_pairs; ++i) {
    // base^(-2i/d) with a 64-bit mantissa, then rounded once to double.
    const long double exponent = -2.0L * i / d;
    theta[i] = static_cast<double>(std::exp(exponent * log_base));
  }
  return theta;
}

namespace {

constexpr double kPi = std::numbers::pi;

// YaRN's m(s, a) = 0.1·a·ln s + 1 for s > 1.
double yarn_mscale(double s, double a) { return s <= 1.0 ? 1.0 : 0.1 * a * std::log(s) + 1.0; }

// Dimension index whose wavelength makes `rotations` turns over `context` tokens (YaRN eq. 8).
double yarn_correction_dim(double rotations, int32_t d, double base, double context) {
  return d * std::log(context / (rotations * 2.0 * kPi)) / (2.0 * std::log(base));
}

ScaledFreqs yarn(double base, int32_t d, const rope_scaling& sc) {
  const int32_t n_pairs = d / 2;
  const double s = sc.factor;
  const double context = static_cast<double>(sc.original_max_positions);
  double low = yarn_correction_dim(sc.beta_fast, d, base, context);
  double high = yarn_correction_dim(sc.beta_slow, d, base, context);
  if (sc.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp, as the YaRN reference code does

  ScaledFreqs out;
  out.theta = base_ladder(base, d);
  for (int32_t i = 0; i < n_pairs; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation = (1.0 - ramp) * sc.extrapolation_factor;  // weight of θ_i unscaled
    const double extrapolated = out.theta[i];
    const double interpolated = out.theta[i] / s;
    out.theta[i] = interpolated * (1.0 - extrapolation) + extrapolated * extrapolation;
  }
  if (sc.attention_factor > 0) {
    out.attention_factor = sc.attention_factor;
  } else if (sc.mscale > 0 && sc.mscale_all_dim > 0) {
    out.attention_factor = yarn_mscale(s, sc.mscale) / yarn_mscale(s, sc.mscale_all_dim);
  } else {
    out.attention_factor = yarn_mscale(s, 1.0);
  }
  return out;
}

ScaledFreqs llama3(double base, int32_t d, const rope_scaling& sc) {
  const double s = sc.factor;
  const double context = static_cast<double>(sc.original_max_positions);
  const double low_freq_wavelen = context / sc.low_freq_factor;
  const double high_freq_wavelen = context / sc.high_freq_factor;
  ScaledFreqs out;
  out.theta = base_ladder(base, d);
  for (double& theta : out.theta) {
    const double wavelen = 2.0 * kPi / theta;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies: unchanged
    if (wavelen > low_freq_wavelen) {           // low frequencies: interpolated
      theta /= s;
      continue;
    }
    const double smooth =
        (context / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
    theta = (1.0 - smooth) * theta / s + smooth * theta;
  }
  return out;
}

}  // namespace

ScaledFreqs scaled_freqs(double base, int32_t d, const rope_scaling& sc, int64_t seq_len,
                         const double* short_factor, const double* long_factor) {
  const double s = sc.factor;
  const double ntk_exponent = static_cast<double>(d) / (d - 2);
  ScaledFreqs out;
  switch (sc.type) {
    case ROPE_SCALING_NONE:
      out.theta = base_ladder(base, d);
      break;
    case ROPE_SCALING_LINEAR:
      out.theta = base_ladder(base, d);
      for (double& theta : out.theta) theta /= s;
      break;
    case ROPE_SCALING_NTK:
      out.theta = base_ladder(base * std::pow(s, ntk_exponent), d);
      break;
    case ROPE_SCALING_DYNAMIC_NTK: {
      const double context = static_cast<double>(sc.original_max_positions);
      const double length = std::max(static_cast<double>(seq_len), context);
      const double alpha = s * length / context - (s - 1.0);
      out.theta = base_ladder(base * std::pow(alpha, ntk_exponent), d);
      break;
    }
    case ROPE_SCALING_YARN:
      out = yarn(base, d, sc);
      break;
    case ROPE_SCALING_LLAMA3:
      out = llama3(base, d, sc);
      break;
    case ROPE_SCALING_LONGROPE: {
      const bool use_long = seq_len > sc.original_max_positions;
      const double* factors = use_long ? long_factor : short_factor;
      out.theta = base_ladder(base, d);
      for (size_t i = 0; i < out.theta.size(); ++i) out.theta[i] /= factors[i];
      if (sc.attention_factor > 0) {
        out.attention_factor = sc.attention_factor;
      } else if (s > 1.0) {
        out.attention_factor =
            std::sqrt(1.0 + std::log(s) / std::log(static_cast<double>(sc.original_max_positions)));
      }
      break;
    }
  }
  if (sc.type != ROPE_SCALING_YARN && sc.type != ROPE_SCALING_LONGROPE && sc.attention_factor > 0) {
    out.attention_factor = sc.attention_factor;
  }
  return out;
}

}  // namespace rope
