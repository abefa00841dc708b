// Memory-floor kernels for the RoPE benchmark (see memory_floor.cc).
#pragma once

#include <cstddef>

namespace roformer {

// x *= a over n floats, split over `threads` OpenMP threads.
void floor_scale(float* x, size_t n, float a, int threads);
// dst = src over n floats, split over `threads` OpenMP threads. Non-temporal stores when the
// whole call moves more than 1 MiB (call_bytes, read plus written), as librope does.
void floor_copy(const float* src, float* dst, size_t n, size_t call_bytes, int threads);

}  // namespace roformer
