// Embedding lookup. Out-of-range ids are an error (std::out_of_range naming the id and position),
// never a read outside the table.
#pragma once

#include <cstdint>

namespace ops {

// out (N, C) = table (V, C)[ids (N)].
template <typename T>
void embedding_forward(T* out, const int64_t* ids, const T* table, int64_t N, int64_t V, int64_t C);

// dtable (V, C) += scatter of dout (N, C) by ids (checked by the forward).
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int64_t* ids, int64_t N, int64_t C);

}  // namespace ops
