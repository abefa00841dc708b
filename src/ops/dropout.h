// Inverted dropout with a regenerated mask: element i is kept iff uniform01(seed, first + i) >= p, and
// kept elements are scaled by 1/(1 − p). Forward writes, backward accumulates. p = 0 is the identity.
// `first` is the counter of element 0: a (rows, C) slice of a larger batch passes row0 · C, so the
// mask an element gets depends on its global row, not on how the batch was split.
#pragma once

#include <cstdint>

namespace ops {

// out (n) = inp · keep(seed, i) / (1 − p); p in [0, 1).
template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first = 0);
// dinp (n) += dout · keep(seed, i) / (1 − p), with the forward's seed.
template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, double p, uint64_t seed, uint64_t first = 0);

}  // namespace ops
