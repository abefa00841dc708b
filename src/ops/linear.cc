// Linear forward/backward on CBLAS (OpenBLAS, OpenMP build: one thread runtime with the rest), and
// their bf16 mixed-precision twins on oneDNN's bf16 matmul.
#include "linear.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/threads.h"
#include "blas.h"
#include "onednn.h"
#include "packed_linear.h"
#include "vmath.h"

namespace ops {
namespace {

// dbias (OC) += Σ_n dout (N, OC), rows in order for every column (so the result does not depend on
// the thread count): each thread takes a band of columns and walks the rows, reading a contiguous
// segment of each into a band of running sums, instead of striding down one column at a time.
// segment(band, row, first column, width) gives each segment's values (the bf16 backward rounds
// dout there while it is in cache, or forms dout there: one pass instead of two). dbias may be null
// when only the segments' side effects are wanted.
template <typename T, class Segment>
void add_column_sums(T* dbias, int64_t N, int64_t OC, const Segment& segment) {
  const bool parallel = N * OC >= base::kParallelMinElements;
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  const int64_t band = std::max<int64_t>(16, ((OC + threads - 1) / threads + 15) & ~int64_t{15});
  const int64_t bands = (OC + band - 1) / band;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < bands; ++i) {
    const int64_t o0 = i * band, width = std::min(OC, o0 + band) - o0;
    std::vector<T> sum(width, T(0));
    for (int64_t n = 0; n < N; ++n) {
      const T* row = segment(i, n, o0, width);
      for (int64_t o = 0; o < width; ++o) sum[o] += row[o];
    }
    if (dbias) {
      for (int64_t o = 0; o < width; ++o) dbias[o0 + o] += sum[o];
    }
  }
}

template <typename T>
void add_column_sums(T* dbias, const T* dout, int64_t N, int64_t OC) {
  add_column_sums(dbias, N, OC, [&](int64_t, int64_t n, int64_t o0, int64_t) { return dout + n * OC + o0; });
}

void require_native_bf16(const char* what) {
  if (!bf16_is_native()) {
    throw std::invalid_argument(std::string(what) + ": bf16 products need a CPU with AVX512-BF16 or AMX; oneDNN found " +
                                cpu_isa_name());
  }
}

// The census of GradientUnderflow, process-wide, and its two thresholds: bf16's smallest normal (the
// bf16 dot products flush below it) and fp16's smallest subnormal.
std::atomic<int64_t> g_values{0}, g_nonzero{0}, g_below_bf16{0}, g_below_fp16{0};
std::atomic<bool> g_census{false};  // set_bf16_gradient_census
constexpr float kCensusBelow[2] = {0x1p-126f, 0x1p-24f};

// n values counted by count_small_f32 into counts (nonzero, below bf16, below fp16): added to the census.
void add_to_census(int64_t n, const int64_t counts[3]) {
  g_values += n;
  g_nonzero += counts[0];
  g_below_bf16 += counts[1];
  g_below_fp16 += counts[2];
}

// buf grown to hold n values; its data.
uint16_t* grown(std::vector<uint16_t>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// out (n) = x rounded to bf16 in parallel chunks; census (while it is on): count x's small values into the totals.
void round_chunks(uint16_t* out, const float* x, int64_t n, bool census) {
  census = census && g_census.load(std::memory_order_relaxed);
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  int64_t counts[3] = {0, 0, 0};
#pragma omp parallel for schedule(static) if (chunks > 1) reduction(+ : counts[:3])
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(n, begin + kChunk) - begin;
    bf16_from_f32(out + begin, x + begin, count);
    if (census) count_small_f32(x + begin, count, kCensusBelow, counts);
  }
  if (census) add_to_census(n, counts);
}

// x (n) rounded to bf16 into buf, grown to n.
const uint16_t* rounded_to_bf16(std::vector<uint16_t>& buf, const float* x, int64_t n, bool census) {
  uint16_t* out = grown(buf, n);
  round_chunks(out, x, n, census);
  return out;
}

// dout (N, OC) rounded to bf16 into buf with its census, as rounded_to_bf16, and dbias (OC) += Σ_n dout
// as add_column_sums (dbias may be null), in the one pass over dout that the column sums make. With
// slope16, dout is d ⊙ slope16 (d (N, OC) fp32, slope16 (N, OC) bf16), formed segment by segment in
// that pass and never stored.
const uint16_t* rounded_with_column_sums(std::vector<uint16_t>& buf, float* dbias, const float* d,
                                         const uint16_t* slope16, int64_t N, int64_t OC) {
  uint16_t* out = grown(buf, N * OC);
  const bool census = g_census.load(std::memory_order_relaxed);
  std::vector<std::array<int64_t, 3>> counts(census ? static_cast<size_t>(OC) : 0);  // per band; at most OC bands
  add_column_sums(dbias, N, OC, [&](int64_t band, int64_t n, int64_t o0, int64_t width) {
    const float* dout = d + n * OC + o0;
    if (slope16) {
      thread_local std::vector<float> formed;
      if (static_cast<int64_t>(formed.size()) < width) formed.resize(static_cast<size_t>(width));
      mul_bf16_f32(formed.data(), dout, slope16 + n * OC + o0, width);
      dout = formed.data();
    }
    bf16_from_f32(out + n * OC + o0, dout, width);
    if (census) count_small_f32(dout, width, kCensusBelow, counts[static_cast<size_t>(band)].data());
    return dout;
  });
  if (census) {
    int64_t total[3] = {0, 0, 0};
    for (const auto& c : counts) total[0] += c[0], total[1] += c[1], total[2] += c[2];
    add_to_census(N * OC, total);
  }
  return out;
}

using dnnl::memory;
using dt = memory::data_type;

// A row-major (rows, cols) matrix, or with transposed its transpose (cols, rows) read in place.
memory::desc matrix(int64_t rows, int64_t cols, dt type, bool transposed = false) {
  return transposed ? memory::desc({cols, rows}, type, memory::dims{1, cols})
                    : memory::desc({rows, cols}, type, memory::dims{cols, 1});
}

}  // namespace

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC, int64_t OC) {
  T beta = 0;
  if (bias) {
#pragma omp parallel for schedule(static) if (N * OC >= base::kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
    beta = 1;
  }
  gemm(false, true, N, OC, IC, T(1), inp, IC, weight, IC, beta, out, OC);  // (N, IC)·(OC, IC)ᵀ
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t IC, int64_t OC, Grad dinp_mode) {
  const T beta = dinp_mode == Grad::accumulate ? T(1) : T(0);
  if (dinp) gemm(false, false, N, IC, OC, T(1), dout, OC, weight, IC, beta, dinp, IC);  // (N, OC)·(OC, IC)
  gemm(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);             // (N, OC)ᵀ·(N, IC)
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

void linear_forward_bf16(float* out, const float* inp, const uint16_t* weight16, const float* bias, int64_t N,
                         int64_t IC, int64_t OC) {
  thread_local std::vector<uint16_t> inp16;
  linear_forward_bf16(out, rounded_to_bf16(inp16, inp, N * IC, false), weight16, bias, N, IC, OC);
}

void linear_forward_bf16(float* out, const uint16_t* x, const uint16_t* weight16, const float* bias, int64_t N,
                         int64_t IC, int64_t OC) {
  require_native_bf16("linear_forward_bf16");
  // (N, IC)·(OC, IC)ᵀ: the weight read as oneDNN's (K, N) = (IC, OC) weights.
  onednn_matmul(matrix(N, IC, dt::bf16), x, matrix(OC, IC, dt::bf16, true), weight16, bias, matrix(N, OC, dt::f32),
                out, false);
}

void linear_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const uint16_t* weight16, int64_t N, int64_t IC, int64_t OC, Grad dinp_mode) {
  thread_local std::vector<uint16_t> inp16;
  linear_backward_bf16(dinp, dweight, dbias, dout, rounded_to_bf16(inp16, inp, N * IC, false), weight16, N, IC, OC,
                       dinp_mode);
}

namespace {

// linear_backward_bf16's two products on dout already rounded (dy).
void backward_products_bf16(float* dinp, float* dweight, const uint16_t* dy, const uint16_t* x,
                            const uint16_t* weight16, int64_t N, int64_t IC, int64_t OC, Grad dinp_mode) {
  if (dinp) {  // (N, OC)·(OC, IC)
    onednn_matmul(matrix(N, OC, dt::bf16), dy, matrix(OC, IC, dt::bf16), weight16, nullptr, matrix(N, IC, dt::f32),
                  dinp, dinp_mode == Grad::accumulate);
  }
  // (N, OC)ᵀ·(N, IC): dout read transposed in place.
  onednn_matmul(matrix(N, OC, dt::bf16, true), dy, matrix(N, IC, dt::bf16), x, nullptr, matrix(OC, IC, dt::f32),
                dweight, true);
}

}  // namespace

void linear_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* x,
                          const uint16_t* weight16, int64_t N, int64_t IC, int64_t OC, Grad dinp_mode) {
  require_native_bf16("linear_backward_bf16");
  thread_local std::vector<uint16_t> dout16;
  // dout rounded once for both products; the bias gradient summed from fp32 dout in the same pass.
  const uint16_t* dy = dbias ? rounded_with_column_sums(dout16, dbias, dout, nullptr, N, OC)
                             : rounded_to_bf16(dout16, dout, N * OC, true);
  backward_products_bf16(dinp, dweight, dy, x, weight16, N, IC, OC, dinp_mode);
}

void linear_backward_bf16_with_slope(float* dinp, float* dweight, float* dbias, const float* d,
                                     const uint16_t* slope16, const uint16_t* x, const uint16_t* weight16, int64_t N,
                                     int64_t IC, int64_t OC, Grad dinp_mode) {
  require_native_bf16("linear_backward_bf16_with_slope");
  thread_local std::vector<uint16_t> dout16;
  const uint16_t* dy = rounded_with_column_sums(dout16, dbias, d, slope16, N, OC);  // d ⊙ slope, rounded
  backward_products_bf16(dinp, dweight, dy, x, weight16, N, IC, OC, dinp_mode);
}

void round_to_bf16(uint16_t* out, const float* x, int64_t n) { round_chunks(out, x, n, false); }

void set_bf16_gradient_census(bool on) { g_census.store(on, std::memory_order_relaxed); }

GradientUnderflow bf16_gradient_underflow() {
  return {g_values.load(), g_nonzero.load(), g_below_bf16.load(), g_below_fp16.load()};
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                     int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int64_t, int64_t, Grad);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t, Grad);

}  // namespace ops
