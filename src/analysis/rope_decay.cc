// RoPE's long-term decay bound (see rope_decay.h).
#include "rope_decay.h"

#include <cmath>
#include <sstream>
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
  std::vector<std::string> parts;
  std::stringstream ss(scaling);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.empty() || parts[0] == "none") return cfg;
  const std::string& kind = parts[0];
  auto number = [&](size_t i, const char* what) {
    if (parts.size() <= i) throw std::invalid_argument("scaling '" + scaling + "' needs " + what);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(parts[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != parts[i].size() || !(v > 0)) {
      throw std::invalid_argument("scaling '" + scaling + "': " + what + " must be a positive number");
    }
    return v;
  };
  cfg.scaling.factor = number(1, "a factor (e.g. linear:4)");
  const bool needs_original = kind == "dynamic-ntk" || kind == "yarn" || kind == "llama3";
  if (needs_original) cfg.scaling.original_max_positions = static_cast<int64_t>(number(2, "the original context (e.g. yarn:4:2048)"));
  if (parts.size() > (needs_original ? 3u : 2u)) throw std::invalid_argument("scaling '" + scaling + "': too many fields");
  if (kind == "linear") cfg.scaling.type = ROPE_SCALING_LINEAR;
  else if (kind == "ntk") cfg.scaling.type = ROPE_SCALING_NTK;
  else if (kind == "dynamic-ntk") cfg.scaling.type = ROPE_SCALING_DYNAMIC_NTK;
  else if (kind == "yarn") cfg.scaling.type = ROPE_SCALING_YARN;
  else if (kind == "llama3") cfg.scaling.type = ROPE_SCALING_LLAMA3;
  else throw std::invalid_argument("unknown scaling '" + kind + "' (none, linear, ntk, dynamic-ntk, yarn, llama3)");
  return cfg;
}

}  // namespace analysis
