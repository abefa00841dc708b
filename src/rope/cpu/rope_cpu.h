// Entry points of the SIMD CPU backend (Google Highway, runtime dispatch to the best target).
#pragma once

#include <cstdint>

#include "../apply.h"

namespace rope {

// c[i], s[i] = cos, sin of pos[i]·θ[i] rounded to fp32, for i < n. Arrays must hold n rounded up
// to kPairPadding (θ zero-padded). Exact angle reduction; see angle.h.
void simd_cos_sin(const double* pos, const double* theta, int64_t n, float* c, float* s);

// Rotates work units [unit_begin, unit_end) of every tensor in `job` (see apply.h).
void simd_apply(const ApplyJob& job, int64_t unit_begin, int64_t unit_end);

// Name of the Highway target the dispatch picks on this CPU.
const char* simd_target_name();

}  // namespace rope
