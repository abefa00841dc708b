// The one oneDNN CPU engine the ops share (packed linear layers, bf16 attention products, bf16
// training GEMMs), and the plain matmuls the last two run. Internal to the ops: callers above them
// see PackedLinear, attention.h and linear.h, not oneDNN.
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

}  // namespace ops
