// The fp32 GEMM of the ops (see blas.h). Training's and attention's products are small: about 1,000
// rows of width 256 to 1024 in fine-tuning, 128 × 128 × 64 per head at batch 1. On those, with two
// threads, OpenBLAS's sgemm splits the work poorly (a thread is woken per call and they finish
// unevenly), and oneDNN's reaches 1.1–2.1× its rate; at one thread the two are within 2–9%
// (docs/perf.md, "fp32 GEMMs on oneDNN"). Under 2^18 multiply-adds OpenBLAS's lighter call wins
// (32 × 32 × 64: 1.7 µs against 2.2 µs), so those stay there.
#include "blas.h"

#include <dnnl.h>

namespace ops {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  constexpr int64_t kOneDnnFrom = int64_t{1} << 18;
  if (M * N * K >= kOneDnnFrom &&
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success) {
    return;
  }
  // Small products, and (never seen) any shape oneDNN refuses.
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

}  // namespace ops
