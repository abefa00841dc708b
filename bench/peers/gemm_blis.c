/* BLIS's sgemm on the linear shapes of `roformer bench gemm` (RoFormer-base: hidden 768, ff 3072,
 * q/k/v fused into 768 -> 2304), y (M, N) = x (M, K) · Wᵀ with W in PyTorch's (N, K) layout, as
 * ops::linear_forward calls OpenBLAS. Each case is the best of 3 timings of at least 0.5 s, GFLOP/s
 * counting 2·M·N·K, so the figures compare with bench gemm's columns. Built and run by
 * bench/peers/gemm_blis.sh against Debian's libblis4-openmp, unpacked beside the build (never
 * installed, so the system's BLAS alternatives are untouched). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
  const long rows[] = {128, 4096};
  const long shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}}; /* (K, N) */
  const double min_time = argc > 1 ? atof(argv[1]) : 0.5;
  printf("| M × K → N | BLIS sgemm GFLOP/s |\n|---|---|\n");
  for (int r = 0; r < 2; ++r) {
    for (int s = 0; s < 4; ++s) {
      const long M = rows[r], K = shapes[s][0], N = shapes[s][1];
      float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), *y = malloc(sizeof(float) * M * N);
      for (long i = 0; i < M * K; ++i) x[i] = (float)((i * 7919 % 1000) / 1000.0 - 0.5);
      for (long i = 0; i < N * K; ++i) w[i] = (float)(((i * 104729 % 1000) / 1000.0 - 0.5) * 0.07);
      double best = 1e30;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N); /* warm-up */
      for (int rep = 0; rep < 3; ++rep) {
        long calls = 0;
        const double t0 = now();
        do {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
          ++calls;
        } while (now() - t0 < min_time);
        const double t = (now() - t0) / calls;
        if (t < best) best = t;
      }
      printf("| %ld × %ld → %ld | %.1f |\n", M, K, N, 2.0 * M * N * K / best * 1e-9);
      free(x), free(w), free(y);
    }
  }
  return 0;
}
