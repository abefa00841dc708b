// Embedding forward/backward (see embedding.h).
#include "embedding.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ops {

template <typename T>
void embedding_forward(T* out, const int64_t* ids, const T* table, int64_t N, int64_t V, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    if (ids[n] < 0 || ids[n] >= V) {
      throw std::out_of_range("token id " + std::to_string(ids[n]) + " at position " + std::to_string(n) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * C, table + ids[n] * C, C * sizeof(T));
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int64_t* ids, int64_t N, int64_t C) {
  // Serial over tokens: repeated ids add into the same row.
  for (int64_t n = 0; n < N; ++n) {
    T* row = dtable + ids[n] * C;
    const T* d = dout + n * C;
    for (int64_t c = 0; c < C; ++c) row[c] += d[c];
  }
}

template void embedding_forward<float>(float*, const int64_t*, const float*, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const int64_t*, const double*, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int64_t*, int64_t, int64_t);

}  // namespace ops
