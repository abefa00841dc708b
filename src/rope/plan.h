// The rope_plan: a validated copy of the config plus everything derived from it that does not
// depend on the tensors (θ per rotary pair, axis per pair, attention factor, cos/sin table).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "rope/rope.h"

namespace rope {
struct CudaPlanState;  // the plan's copies on each GPU (cuda/rope_cuda.cu)
}

// Lanes the SIMD code may read past n_pairs in per-pair arrays; they are padded with zeros.
inline constexpr int kPairPadding = 64;

struct rope_plan {
  rope_config cfg;                  // pointers below replace the config's borrowed pointers
  std::vector<double> short_factor;  // LongRoPE
  std::vector<double> long_factor;
  std::vector<double> freq_factors;
  int64_t seq_len = 0;  // DYNAMIC_NTK, LONGROPE

  int32_t n_pairs = 0;             // rot_dim / 2
  std::vector<double> theta;       // (n_pairs + padding) θ_i after scaling, zero-padded
  std::vector<uint8_t> pair_axis;  // (n_pairs) axis whose position rotates pair i
  double attention_factor = 1.0;
  std::vector<double> xpos_log_zeta;  // (n_pairs) ln ζ_i / scale_base, when xPos is on

  // TABLE mode: cos/sin of m·θ_i rounded to fp32, (table_positions, n_pairs) each.
  std::vector<float> table_cos;
  std::vector<float> table_sin;

  uint64_t generation = 0;  // bumped by every plan_derive: GPU copies of θ and the table follow it
  mutable std::mutex cuda_mutex;               // guards `cuda`
  mutable rope::CudaPlanState* cuda = nullptr;  // created by the first CUDA call, freed with the plan
};

namespace rope {

// Checks every config field; returns ROPE_OK or an error with a message.
rope_status validate_config(const rope_config& cfg);

// Recomputes θ, the attention factor and the table from plan->cfg and plan->seq_len.
rope_status plan_derive(rope_plan* plan);

}  // namespace rope
