// RoPE's long-term decay bound (see rope_decay.h).
#include "rope_decay.h"

#include <cmath>
#include <stdexcept>

#include "rope/rope.hpp"

namespace analysis {

std::vector<double> rope_decay_bound(const std::vector<double>& inv_freq, int64_t max_distance) {
  if (inv_freq.empty()) throw std::invalid_argument("rope_decay_bound: no frequencies");
  if (max_distance < 0) throw std::invalid_argument("rope_decay_bound: max_distance must be >= 0");
  const size_t half = inv_freq.size();
  std::vector<double> bound(max_distance + 1);
  for (int64_t r = 0; r <= max_distance; ++r) {
    double re = 0, im = 0, total = 0;  // S_j accumulated over j
    for (size_t i = 0; i < half; ++i) {
      // r·θ_i reduced modulo 2π in long double: exact enough for r < 2^31 and θ_i ≤ 1.
      const long double angle = std::fmod(static_cast<long double>(r) * inv_freq[i], 2.0L * 3.14159265358979323846264338327950288L);
      re += static_cast<double>(std::cos(angle));
      im += static_cast<double>(std::sin(angle));
      total += std::hypot(re, im);  // |S_{i+1}|
    }
    bound[r] = total / static_cast<double>(half);
  }
  return bound;
}

rope_config rope_config_from_spec(int32_t dim, double base, const std::string& scaling) {
  rope_config cfg = rope::default_config(dim);
  if (!(base > 1)) throw std::invalid_argument("RoPE base must be > 1");
  cfg.base = base;
  rope::apply_scaling_spec(scaling, &cfg);
  return cfg;
}

}  // namespace analysis
