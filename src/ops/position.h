// Additive sinusoidal position encoding (Vaswani et al. 2017; the RoFormer paper's eq. 4 baseline):
// PE[m, 2i] = sin(m·θ_i), PE[m, 2i+1] = cos(m·θ_i), θ_i = 10000^(−2i/C), from librope's exact
// cos/sin. (Learned absolute positions are an embedding of position ids: ops::embedding_*.)
#pragma once

#include <cstdint>

namespace ops {

// table (n_positions, C) of the encoding; C even.
void sinusoidal_table(float* table, int64_t n_positions, int64_t C);

// x (B, T, C) += table[t] for every batch row (the encoding has no parameters and passes gradients
// through unchanged, so there is no backward).
void add_positions(float* x, const float* table, int64_t B, int64_t T, int64_t C);

}  // namespace ops
