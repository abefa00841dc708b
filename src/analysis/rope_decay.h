// The long-term decay of RoPE (RoFormer paper §3.4.3, Fig. 2). With h_i = q_[2i:2i+1]·k*_[2i:2i+1]
// and S_j = Σ_{i<j} e^{i(m−n)θ_i}, Abel summation bounds the attention score by
//   |Σ_i h_i e^{i(m−n)θ_i}| ≤ (max_i |h_{i+1} − h_i|) · Σ_{j=1}^{d/2} |S_j|,
// and the paper plots the relative upper bound (1/(d/2)) Σ_{j=1}^{d/2} |S_j| against the relative
// distance m − n. It decays as the distance grows, which is the property we compute here for any
// frequencies: the paper's θ_i = 10000^(−2i/d), other bases, or a scaling method's θ_i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rope/rope.h"

namespace analysis {

// bound[r] for r = 0 .. max_distance, from inv_freq = (θ_0 .. θ_{d/2−1}); computed in double with
// the angle r·θ_i reduced exactly enough for r up to 2^31. Throws std::invalid_argument on an empty
// inv_freq or a negative max_distance.
std::vector<double> rope_decay_bound(const std::vector<double>& inv_freq, int64_t max_distance);

// A librope config for a RoPE setting written as "[base=B][,scaling=SPEC]" pieces: the base, and
// a scaling spec "none", "linear:F", "ntk:F", "dynamic-ntk:F:ORIG", "yarn:F:ORIG" or
// "llama3:F:ORIG" (F the factor, ORIG the original context length). Throws std::invalid_argument
// naming the bad piece.
rope_config rope_config_from_spec(int32_t dim, double base, const std::string& scaling);

}  // namespace analysis
