// Bf16AttentionProducts on oneDNN's matmul. Operands are rounded to bf16 (nearest even) by
// bf16_from_f32; the products accumulate and are written in fp32. Primitives are made per shape on
// first use and kept per thread (a forward at one shape reuses two), as PackedLinear keeps its own.
#include "attention_bf16.h"

#include "onednn.h"
#include "vmath.h"

#include <map>
#include <tuple>

namespace ops {
namespace {

using dnnl::memory;
using dt = memory::data_type;

// (product: 0 scores, 1 mix; rows, keys, destination row stride, head dim): the rest follows from them.
using ShapeKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;

// The primitive for src (M, K) bf16, weights (K, N) bf16 and dst (M, N) f32, each with its strides.
const dnnl::matmul& matmul(const ShapeKey& key, const memory::desc& src, const memory::desc& weights,
                           const memory::desc& dst) {
  thread_local std::map<ShapeKey, dnnl::matmul> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 64) cache.clear();  // a bound for callers whose shapes keep changing
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), onednn_engine());
  return cache.emplace(key, dnnl::matmul(pd)).first->second;
}

void execute(const dnnl::matmul& m, const memory::desc& src_d, const void* src, const memory::desc& w_d,
             const void* w, const memory::desc& dst_d, float* dst) {
  thread_local dnnl::stream stream(onednn_engine());
  const dnnl::engine& engine = onednn_engine();
  m.execute(stream, {{DNNL_ARG_SRC, memory(src_d, engine, const_cast<void*>(src))},
                     {DNNL_ARG_WEIGHTS, memory(w_d, engine, const_cast<void*>(w))},
                     {DNNL_ARG_DST, memory(dst_d, engine, dst)}});
  stream.wait();
}

}  // namespace

void Bf16AttentionProducts::load_head(const float* k, const float* v, int64_t Tk, int64_t C, int64_t D) {
  D_ = D;
  k_.resize(Tk * D);
  v_.resize(Tk * D);
  for (int64_t j = 0; j < Tk; ++j) {
    bf16_from_f32(k_.data() + j * D, k + j * C, D);
    bf16_from_f32(v_.data() + j * D, v + j * C, D);
  }
}

void Bf16AttentionProducts::scores(float* a, int64_t Tn, const float* q, int64_t C, int64_t rows, int64_t E,
                                   float scale) {
  const int64_t D = D_;
  q_.resize(rows * D);
  for (int64_t r = 0; r < rows; ++r) bf16_from_f32(q_.data() + r * D, q + r * C, D, scale);
  // kᵀ as oneDNN's (K, N) = (D, E) weights: the (E, D) row-major keys read column by column.
  const memory::desc src({rows, D}, dt::bf16, memory::dims{D, 1}), weights({D, E}, dt::bf16, memory::dims{1, D});
  const memory::desc dst({rows, E}, dt::f32, memory::dims{Tn, 1});
  execute(matmul({0, rows, E, Tn, D}, src, weights, dst), src, q_.data(), weights, k_.data(), dst, a);
}

void Bf16AttentionProducts::mix(float* out, int64_t C, const float* p, int64_t Tn, int64_t rows, int64_t E) {
  const int64_t D = D_;
  p_.resize(rows * E);
  for (int64_t r = 0; r < rows; ++r) bf16_from_f32(p_.data() + r * E, p + r * Tn, E);
  const memory::desc src({rows, E}, dt::bf16, memory::dims{E, 1}), weights({E, D}, dt::bf16, memory::dims{D, 1});
  const memory::desc dst({rows, D}, dt::f32, memory::dims{C, 1});
  execute(matmul({1, rows, E, C, D}, src, weights, dst), src, p_.data(), weights, v_.data(), dst, out);
}

}  // namespace ops
