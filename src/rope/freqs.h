// Rotary frequencies θ_i after scaling, and the attention factor, in float64.
// Formulas and citations: docs/rope.md ("Frequency scaling").
#pragma once

#include <cstdint>
#include <vector>

#include "rope/rope.h"

namespace rope {

struct ScaledFreqs {
  std::vector<double> theta;  // (n_pairs)
  double attention_factor = 1.0;
};

// The unscaled ladder θ_i = base^(-2i/d), i < d/2, each the double nearest the exact value.
std::vector<double> base_ladder(double base, int32_t d);

// θ for one ladder of d = 2·n_pairs dims under `scaling` at the current `seq_len`.
// `long_factor`/`short_factor` have n_pairs entries when scaling is LONGROPE.
ScaledFreqs scaled_freqs(double base, int32_t d, const rope_scaling& scaling, int64_t seq_len,
                         const double* short_factor, const double* long_factor);

}  // namespace rope
