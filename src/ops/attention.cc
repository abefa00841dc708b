// Attention forward/backward (see attention.h), per (batch, head) with BLAS for the two products.
#include "attention.h"

#include <cmath>
#include <limits>

#include "blas.h"

namespace ops {

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, const int64_t* key_mask,
                       const AttentionShape& s) {
  const int64_t C = s.H * s.D, TT = s.T * s.T;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
  const T masked = -std::numeric_limits<float>::max();
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t off = b * s.T * C + h * s.D;  // head h of token 0 in batch b
      T* a = att + (b * s.H + h) * TT;           // (T, T)
      gemm(false, true, s.T, s.T, s.D, scale, q + off, C, k + off, C, T(0), a, s.T);  // q·kᵀ/√D
      for (int64_t t = 0; t < s.T; ++t) {
        T* row = a + t * s.T;
        for (int64_t j = 0; j < s.T; ++j) {
          if ((key_mask && key_mask[b * s.T + j] == 0) || (s.causal && j > t)) row[j] += masked;
        }
        T mx = row[0];
        for (int64_t j = 1; j < s.T; ++j) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < s.T; ++j) {
          row[j] = static_cast<T>(std::exp(static_cast<double>(row[j] - mx)));
          sum += row[j];
        }
        for (int64_t j = 0; j < s.T; ++j) row[j] = static_cast<T>(row[j] / sum);
      }
      gemm(false, false, s.T, s.D, s.T, T(1), a, s.T, v + off, C, T(0), out + off, C);  // att·v
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, const AttentionShape& s) {
  const int64_t C = s.H * s.D, TT = s.T * s.T;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t off = b * s.T * C + h * s.D;
      const T* a = att + (b * s.H + h) * TT;
      T* ds = scratch;  // (T, T): first datt, then dscore
      gemm(true, false, s.T, s.D, s.T, T(1), a, s.T, dout + off, C, T(1), dv + off, C);   // dv += attᵀ·dout
      gemm(false, true, s.T, s.T, s.D, T(1), dout + off, C, v + off, C, T(0), ds, s.T);   // datt = dout·vᵀ
      // Softmax backward per row: dscore = att ⊙ (datt − Σ_j att·datt). Masked entries have att = 0.
      for (int64_t t = 0; t < s.T; ++t) {
        const T* ar = a + t * s.T;
        T* dr = ds + t * s.T;
        double inner = 0;
        for (int64_t j = 0; j < s.T; ++j) inner += static_cast<double>(ar[j]) * dr[j];
        for (int64_t j = 0; j < s.T; ++j) dr[j] = static_cast<T>(ar[j] * (dr[j] - inner));
      }
      gemm(false, false, s.T, s.D, s.T, scale, ds, s.T, k + off, C, T(1), dq + off, C);  // dq += ds·k/√D
      gemm(true, false, s.T, s.D, s.T, scale, ds, s.T, q + off, C, T(1), dk + off, C);   // dk += dsᵀ·q/√D
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                       const AttentionShape&);
template void attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                        const int64_t*, const AttentionShape&);
template void attention_backward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const AttentionShape&);
template void attention_backward<double>(double*, double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, const AttentionShape&);

}  // namespace ops
