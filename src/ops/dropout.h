// Inverted dropout with a regenerated mask: element i is kept iff uniform01(seed, first + i) >= p, and
// kept elements are scaled by 1/(1 − p). Forward writes, backward accumulates. p = 0 is the identity.
// `first` is the counter of element 0: a (rows, C) slice of a larger batch passes row0 · C, so the
// mask an element gets depends on its global row, not on how the batch was split.
#pragma once

#include <cstdint>

namespace ops {

// One thread's share, for callers already inside a parallel region (attention's probability rows):
// out (n) = inp · keep(seed, first + i) / (1 − p), or with accumulate out += that where kept.
template <typename T>
void dropout_apply(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first, bool accumulate);

// out (n) = inp · keep(seed, i) / (1 − p); p in [0, 1).
template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first = 0);
// dinp (n) += dout · keep(seed, i) / (1 − p), with the forward's seed.
template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, double p, uint64_t seed, uint64_t first = 0);

}  // namespace ops
