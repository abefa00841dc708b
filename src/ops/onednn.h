// The one oneDNN CPU engine the ops share (packed linear layers, bf16 attention products, bf16
// training GEMMs), the plain matmuls the last two run, and oneDNN's sgemm, which fp32 attention's
// larger blocks run. Internal to the ops: callers above them see PackedLinear, attention.h and
// linear.h, not oneDNN.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ops {

const dnnl::engine& onednn_engine();

// dst (M, N) f32 [+]= src (M, K) · weights (K, N) [+ bias (1, N) f32], each operand described with
// its own strides and type (bf16 operands: oneDNN accumulates in fp32). accumulate adds to what dst
// holds (a sum post-op) instead of writing it. Primitives are made on first use and kept per thread
// with their argument memories, keyed by the descriptors (oneDNN's runtime-dimension matmul falls back
// to its reference kernel, so shapes stay fixed); a thread keeps the 64 it used last. Matrices only
// (two dimensions). Runs on the calling thread's stream and waits; it allocates nothing itself.
void onednn_matmul(const dnnl::memory::desc& src, const void* src_data, const dnnl::memory::desc& weights,
                   const void* weights_data, const float* bias, dnnl::memory::desc dst, float* dst_data,
                   bool accumulate);

// C (M, N) = alpha·op(A)·op(B) + beta·C, row-major, op = transpose when ta / tb: ops::gemm's contract
// (blas.h) on oneDNN's fp32 kernels (dnnl_sgemm, `gemm:jit`); false, with C untouched, if oneDNN
// refuses the arguments (the caller then uses BLAS). Inside a parallel region it runs on the calling
// thread. Where it beats OpenBLAS is attention.cc's block_gemm to say (`roformer bench gemm`).
bool onednn_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace ops
