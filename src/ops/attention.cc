// Attention forward/backward (see attention.h). Each (batch, head) pair is independent: OpenMP
// splits the pairs, and the two BLAS products per pair run single-threaded inside the region
// (OpenBLAS's OpenMP build does not nest), so one thread pool serves the whole engine.
#include "attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "blas.h"
#include "dropout.h"
#include "random.h"

namespace ops {
namespace {

// Seed of the dropout mask of one (batch, head) probability block.
uint64_t block_seed(uint64_t seed, int64_t bh) { return mix64(seed ^ mix64(static_cast<uint64_t>(bh))); }

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, const int64_t* key_mask,
                       const AttentionShape& s) {
  const int64_t C = s.H * s.D, TT = s.T * s.T;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
  const T masked = -std::numeric_limits<float>::max();
#pragma omp parallel
  {
    std::vector<T> dropped(s.dropout_p > 0 ? TT : 0);  // (T, T) probabilities after dropout
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const int64_t off = b * s.T * C + h * s.D;  // head h of token 0 in batch b
      T* a = att + bh * TT;                       // (T, T)
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
        const T inv = static_cast<T>(1.0 / sum);
        for (int64_t j = 0; j < s.T; ++j) row[j] *= inv;
      }
      const T* p = a;
      if (s.dropout_p > 0) {
        dropout_forward(dropped.data(), a, TT, s.dropout_p, block_seed(s.dropout_seed, bh));
        p = dropped.data();
      }
      gemm(false, false, s.T, s.D, s.T, T(1), p, s.T, v + off, C, T(0), out + off, C);  // att·v
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v,
                        const AttentionShape& s) {
  const int64_t C = s.H * s.D, TT = s.T * s.T;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
#pragma omp parallel
  {
    std::vector<T> ds(TT), dropped(s.dropout_p > 0 ? TT : 0);  // (T, T) each
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const int64_t off = b * s.T * C + h * s.D;
      const T* a = att + bh * TT;
      const T* p = a;  // the probabilities that multiplied v
      if (s.dropout_p > 0) {
        dropout_forward(dropped.data(), a, TT, s.dropout_p, block_seed(s.dropout_seed, bh));
        p = dropped.data();
      }
      gemm(true, false, s.T, s.D, s.T, T(1), p, s.T, dout + off, C, T(1), dv + off, C);  // dv += pᵀ·dout
      gemm(false, true, s.T, s.T, s.D, T(1), dout + off, C, v + off, C, T(0), ds.data(), s.T);  // dp = dout·vᵀ
      if (s.dropout_p > 0) {  // datt = dropout_backward(dp), in place: keep/(1 − p) or 0
        std::swap(ds, dropped);
        std::fill(ds.begin(), ds.end(), T(0));
        dropout_backward(ds.data(), dropped.data(), TT, s.dropout_p, block_seed(s.dropout_seed, bh));
      }
      // Softmax backward per row: dscore = att ⊙ (datt − Σ_j att·datt). Masked entries have att = 0.
      for (int64_t t = 0; t < s.T; ++t) {
        const T* ar = a + t * s.T;
        T* dr = ds.data() + t * s.T;
        double inner = 0;
        for (int64_t j = 0; j < s.T; ++j) inner += static_cast<double>(ar[j]) * dr[j];
        const T in = static_cast<T>(inner);
        for (int64_t j = 0; j < s.T; ++j) dr[j] = ar[j] * (dr[j] - in);
      }
      gemm(false, false, s.T, s.D, s.T, scale, ds.data(), s.T, k + off, C, T(1), dq + off, C);  // dq += ds·k/√D
      gemm(true, false, s.T, s.D, s.T, scale, ds.data(), s.T, q + off, C, T(1), dk + off, C);   // dk += dsᵀ·q/√D
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                       const AttentionShape&);
template void attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                        const int64_t*, const AttentionShape&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const AttentionShape&);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, const AttentionShape&);

}  // namespace ops
