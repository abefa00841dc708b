// Thin C++ wrapper over the librope C ABI: an owning Plan and exceptions for errors.
#pragma once

#include <cmath>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>


#include "rope/rope.h"

namespace rope {

class Error : public std::runtime_error {
 public:
  Error(rope_status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  rope_status status() const { return status_; }

 private:
  rope_status status_;
};

// Throws rope::Error with rope_last_error() when status is not ROPE_OK.
inline void check(rope_status status) {
  if (status != ROPE_OK) {
    throw Error(status, std::string(rope_status_string(status)) + ": " + rope_last_error());
  }
}

inline rope_config default_config(int32_t head_dim) {
  rope_config cfg;
  rope_config_init(&cfg, head_dim);
  return cfg;
}

class Plan {
 public:
  explicit Plan(const rope_config& cfg) : n_pairs_(cfg.rot_dim / 2) {
    rope_plan* p = nullptr;
    check(rope_plan_create(&cfg, &p));
    plan_.reset(p);
  }
  const rope_plan* get() const { return plan_.get(); }
  rope_plan* get() { return plan_.get(); }

  void set_seq_len(int64_t seq_len) { check(rope_plan_set_seq_len(plan_.get(), seq_len)); }

  // θ_i after scaling, one per rotary pair.
  std::vector<double> inv_freq() const {
    std::vector<double> f(n_pairs_);
    check(rope_plan_inv_freq(plan_.get(), f.data()));
    return f;
  }

  void apply(rope_direction dir, rope_role role, const rope_positions& pos, const rope_tensor& in,
             const rope_tensor* out = nullptr, const rope_exec* exec = nullptr) const {
    check(rope_apply(plan_.get(), dir, role, &pos, &in, out, exec));
  }

  void apply_qk(rope_direction dir, const rope_positions& pos, const rope_tensor& q, const rope_tensor& k,
                const rope_tensor* q_out = nullptr, const rope_tensor* k_out = nullptr,
                const rope_exec* exec = nullptr) const {
    check(rope_apply_qk(plan_.get(), dir, &pos, &q, q_out, &k, k_out, exec));
  }

 private:
  struct Deleter {
    void operator()(rope_plan* p) const { rope_plan_destroy(p); }
  };
  int32_t n_pairs_;  // rot_dim / 2, sizes what the plan writes
  std::unique_ptr<rope_plan, Deleter> plan_;
};

// Contiguous [batch, tokens, heads, head_dim] (bshd) view.
inline rope_tensor bshd(void* data, rope_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d) {
  return rope_tensor{data, dtype, b, s, h, s * h * d, h * d, d};
}

// Positions start, start+1, ... for every sequence.
inline rope_positions offset_positions(int64_t start = 0) {
  rope_positions p{};
  p.kind = ROPE_POSITIONS_OFFSET;
  p.start = start;
  return p;
}

// Sets cfg->scaling from a spec string: "none", "linear:F", "ntk:F", "dynamic-ntk:F:ORIG",
// "yarn:F:ORIG" or "llama3:F:ORIG" (F the factor, ORIG the original context length); the other
// scaling fields keep their defaults. Throws std::invalid_argument naming the bad spec.
inline void apply_scaling_spec(const std::string& spec, rope_config* cfg) {
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t end = spec.find(':', begin);
    parts.push_back(spec.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  const std::string& kind = parts[0];
  if (kind == "none" && parts.size() == 1) {
    cfg->scaling.type = ROPE_SCALING_NONE;
    return;
  }
  auto number = [&](size_t i, const char* what) {
    if (parts.size() <= i) throw std::invalid_argument("scaling '" + spec + "' needs " + what);
    char* end = nullptr;
    const double v = std::strtod(parts[i].c_str(), &end);
    if (parts[i].empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
      throw std::invalid_argument("scaling '" + spec + "': " + what + " must be a positive number");
    }
    return v;
  };
  rope_scaling_type type;
  if (kind == "linear") type = ROPE_SCALING_LINEAR;
  else if (kind == "ntk") type = ROPE_SCALING_NTK;
  else if (kind == "dynamic-ntk") type = ROPE_SCALING_DYNAMIC_NTK;
  else if (kind == "yarn") type = ROPE_SCALING_YARN;
  else if (kind == "llama3") type = ROPE_SCALING_LLAMA3;
  else throw std::invalid_argument("unknown RoPE scaling '" + kind + "' (none, linear, ntk, dynamic-ntk, yarn, llama3)");
  const bool needs_original = type != ROPE_SCALING_LINEAR && type != ROPE_SCALING_NTK;
  cfg->scaling.factor = number(1, "a factor (e.g. linear:4)");
  if (needs_original) {
    const double original = number(2, "the original context (e.g. yarn:4:2048)");
    if (original != std::floor(original) || original > 9007199254740992.0) {  // an integer the cast keeps
      throw std::invalid_argument("scaling '" + spec + "': the original context must be a whole number of tokens");
    }
    cfg->scaling.original_max_positions = static_cast<int64_t>(original);
  }
  if (parts.size() > (needs_original ? 3u : 2u)) throw std::invalid_argument("scaling '" + spec + "': too many fields");
  cfg->scaling.type = type;
}

}  // namespace rope
