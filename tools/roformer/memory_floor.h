// Memory-floor kernels for the RoPE benchmark (see memory_floor.cc).
#pragma once

#include <cstddef>

namespace roformer {

// x *= a over n floats, split over `threads` OpenMP threads.
void floor_scale(float* x, size_t n, float a, int threads);
// dst = src over n floats with non-temporal stores, split over `threads` OpenMP threads.
void floor_copy(const float* src, float* dst, size_t n, int threads);

}  // namespace roformer
