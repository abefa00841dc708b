// librope's CUDA backend: one kernel rotates q and k of a call.
//
// A block takes a step of up to 8 consecutive tokens (rows, row = b·n_tokens + t) at a time. Phase A:
// its threads compute each row's per-pair (cos, sin) — read from the plan's fp32 table copied to the
// GPU, or on the fly with the CPU's exact double-double reduction and polynomials (CosSinExact in
// cpu/rope_cpu-inl.h, operation for operation, so the bits are the CPU's) — fold in the attention
// factor, xPos and the direction, and leave them in shared memory (two buffers, so one barrier per
// step suffices). Phase B: every thread rotates units of q's and k's heads: 16-byte vectors when
// alignment allows, single elements otherwise, in fp32 without contraction (y_a = x_a·c − x_p·s,
// y_p = x_p·c + x_a·s, as reference.cc), stored once in the dtype. Positions in device arrays are
// checked here: a pair whose position is out of range gets NaN in its rotated elements and is recorded
// for rope_cuda_check; nothing is read out of bounds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "../error.h"
#include "rope_cuda.h"

namespace rope {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRowsPerStep = 8;  // rows a block takes per barrier (Args::rows_per_step)
constexpr int kDynamicSharedBytes = 46 * 1024;  // 48 KiB without opting in, less the static part (1.5 KiB)

enum DeviceErrorKind : int {
  kBadStart = 1,       // positions.starts[b] outside [0, 2^48)
  kBadId = 2,          // positions.ids[i] outside [0, limit)
  kBadSeqStart = 3,    // positions.seq_starts[s] outside [0, 2^48)
  kBadPosition = 4,    // the token's position (start + offset) outside [0, limit)
  kBadCuSeqlens = 5,   // cu_seqlens does not rise from 0 to n_tokens
  kXposOverflow = 6,   // ζ^(±m/scale_base) leaves fp32's normal range
};

// The first bad device-side position a kernel met; `set` is claimed with atomicCAS.
struct DeviceError {
  unsigned int set;
  int what;
  long long index;
  long long value;
};

}  // namespace

// The plan's copies on each GPU, made by the first call on that GPU and refreshed when the plan's
// generation changes (rope_plan_set_seq_len).
struct CudaPlanState {
  struct Device {
    bool ready = false;
    uint64_t generation = 0;
    double* theta = nullptr;          // [n_pairs]
    uint8_t* pair_axis = nullptr;     // [n_pairs]
    double* xpos_log_zeta = nullptr;  // [n_pairs], xPos only
    float* table_cos = nullptr;       // [table_positions · n_pairs], TABLE only
    float* table_sin = nullptr;
    DeviceError* error = nullptr;
  };
  std::vector<Device> devices;  // by device ordinal
};

namespace {

// One tensor of the call, strides in elements.
struct DevTensor {
  const void* in;
  void* out;
  long long n_heads;
  long long in_bs, in_ts, in_hs;
  long long out_bs, out_ts, out_hs;
  int in_place;
  int is_key;
};

// Everything the kernel reads, passed by value.
struct Args {
  DevTensor t[2];
  int n_tensors;
  long long n_batch, n_tokens;
  // Positions.
  int pos_kind;
  int index32;
  long long start;
  const void* starts;
  const void* ids;
  const void* cu_seqlens;
  long long n_seqs;
  const void* seq_starts;
  long long limit;  // exclusive: table_positions (TABLE) or 2^48
  // Plan.
  const double* theta;
  const uint8_t* pair_axis;
  const double* xpos_log_zeta;
  const float* table_cos;
  const float* table_sin;
  double attention_factor;
  float attention_factor_f;
  int n_pairs, head_dim, rot_offset, rot_dim, n_axes;
  int backward, xpos, table;
  int rows_per_step;  // in [1, kMaxRowsPerStep]
  DeviceError* error;
};

__device__ __forceinline__ long long load_index(const void* a, long long i, int i32) {
  return i32 ? static_cast<long long>(static_cast<const int*>(a)[i]) : static_cast<const long long*>(a)[i];
}

__device__ void record(DeviceError* e, int what, long long index, long long value) {
  if (atomicCAS(&e->set, 0u, 1u) == 0u) {
    e->what = what;
    e->index = index;
    e->value = value;
  }
}

// Position of row (b, t) on `axis`, or -1 (recorded) when the arrays put it out of range.
__device__ long long row_position(const Args& a, long long b, long long t, int axis) {
  constexpr long long kMax = ROPE_MAX_POSITION;
  switch (a.pos_kind) {
    case ROPE_POSITIONS_OFFSET: {
      long long m = a.start + t;  // the host checked start + n_tokens <= limit
      if (a.starts != nullptr) {
        const long long s = load_index(a.starts, b, a.index32);
        if (s < 0 || s >= kMax) return record(a.error, kBadStart, b, s), -1;
        m += s;
      }
      if (m >= a.limit) return record(a.error, kBadPosition, b * a.n_tokens + t, m), -1;
      return m;
    }
    case ROPE_POSITIONS_IDS: {
      const long long i = (axis * a.n_batch + b) * a.n_tokens + t;
      const long long m = load_index(a.ids, i, a.index32);
      if (m < 0 || m >= a.limit) return record(a.error, kBadId, i, m), -1;
      return m;
    }
    case ROPE_POSITIONS_VARLEN: {
      // The last s with cu[s] <= t, then a check that t really lies in [cu[s], cu[s+1]).
      long long lo = 0, hi = a.n_seqs;
      while (lo < hi) {
        const long long mid = (lo + hi + 1) / 2;
        if (load_index(a.cu_seqlens, mid, a.index32) <= t) lo = mid; else hi = mid - 1;
      }
      const long long s = lo < a.n_seqs ? lo : a.n_seqs - 1;
      const long long c0 = load_index(a.cu_seqlens, s, a.index32), c1 = load_index(a.cu_seqlens, s + 1, a.index32);
      if (!(c0 <= t && t < c1)) return record(a.error, kBadCuSeqlens, s, c0), -1;
      const long long first = a.seq_starts ? load_index(a.seq_starts, s, a.index32) : 0;
      if (first < 0 || first >= kMax) return record(a.error, kBadSeqStart, s, first), -1;
      const long long m = first + (t - c0);
      if (m >= a.limit) return record(a.error, kBadPosition, t, m), -1;
      return m;
    }
  }
  return -1;
}

// cu_seqlens must rise from 0 to n_tokens; one block checks the whole array.
__device__ void check_cu_seqlens(const Args& a) {
  const long long n = a.n_seqs;
  if (threadIdx.x == 0) {
    const long long first = load_index(a.cu_seqlens, 0, a.index32), last = load_index(a.cu_seqlens, n, a.index32);
    if (first != 0) record(a.error, kBadCuSeqlens, 0, first);
    if (last != a.n_tokens) record(a.error, kBadCuSeqlens, n, last);
  }
  for (long long s = threadIdx.x; s < n; s += blockDim.x) {
    const long long c0 = load_index(a.cu_seqlens, s, a.index32), c1 = load_index(a.cu_seqlens, s + 1, a.index32);
    if (c1 < c0) record(a.error, kBadCuSeqlens, s, c0);
  }
}

// cos/sin of m·θ rounded to fp32: CosSinExact of cpu/rope_cpu-inl.h, the same IEEE operations in the
// same order (exact two-products by FMA, Cody–Waite reduction by a two-double π/2, fdlibm kernels).
__device__ void cos_sin_exact(long long m, double theta, float* c_out, float* s_out) {
  const double two_over_pi = 0.63661977236758134308;
  const double pio2_hi = 1.5707963267948966192, pio2_lo = 6.123233995736766036e-17;
  const double md = static_cast<double>(m);
  const double hi = __dmul_rn(md, theta);
  const double lo = __fma_rn(md, theta, -hi);
  const double k = rint(__dmul_rn(hi, two_over_pi));
  const double p = __dmul_rn(k, pio2_hi);
  const double e = __fma_rn(k, pio2_hi, -p);
  const double r = __dadd_rn(__dsub_rn(__dsub_rn(hi, p), e), __fma_rn(-k, pio2_lo, lo));
  const double z = __dmul_rn(r, r);
  double ps = __fma_rn(z, 1.58969099521155010221e-10, -2.50507602534068634195e-08);
  ps = __fma_rn(z, ps, 2.75573137070700676789e-06);
  ps = __fma_rn(z, ps, -1.98412698298579493134e-04);
  ps = __fma_rn(z, ps, 8.33333333332248946124e-03);
  ps = __fma_rn(z, ps, -1.66666666666666324348e-01);
  const double sin_r = __fma_rn(__dmul_rn(r, z), ps, r);
  double pc = __fma_rn(z, -1.13596475577881948265e-11, 2.08757232129817482790e-09);
  pc = __fma_rn(z, pc, -2.75573143513906633035e-07);
  pc = __fma_rn(z, pc, 2.48015872894767294178e-05);
  pc = __fma_rn(z, pc, -1.38888888888741095749e-03);
  pc = __fma_rn(z, pc, 4.16666666666666019037e-02);
  const double cos_r = __fma_rn(__dmul_rn(z, z), pc, __fma_rn(-0.5, z, 1.0));
  // Quadrant q = k mod 4: (sin, cos) = (s, c), (c, −s), (−s, −c), (−c, s).
  const double q = __dsub_rn(k, __dmul_rn(4.0, floor(__dmul_rn(k, 0.25))));
  const bool odd = q == 1.0 || q == 3.0;
  double sin_a = odd ? cos_r : sin_r, cos_a = odd ? sin_r : cos_r;
  if (q >= 2.0) sin_a = -sin_a;
  if (q == 1.0 || q == 2.0) cos_a = -cos_a;
  *c_out = __double2float_rn(cos_a);
  *s_out = __double2float_rn(sin_a);
}

// Phase A for the rows [r0, r0 + nr) of a step: their folded (c, s) per pair in cs_q for q and cs_k for k
// when xPos scales them apart, and each row's element offsets in every tensor. A pair whose position is bad
// gets (NaN, NaN), so its rotated elements come out NaN. Pair i = u·ppu + k of row j (phase B's unit u
// rotates ppu pairs) sits at cs[j · n_pairs + k · (n_pairs / ppu) + u]: the threads of a warp, which take
// consecutive units, then read consecutive (c, s) in phase B, free of shared-memory bank conflicts.
__device__ void pair_cos_sin(const Args& a, long long r0, int nr, float2* cs_q, float2* cs_k, long long* offsets,
                             int ppu) {
  for (int j = threadIdx.x; j < nr * a.n_tensors; j += blockDim.x) {
    const int row = j % nr, tensor = j / nr;
    const long long r = r0 + row, b = r / a.n_tokens, t = r - b * a.n_tokens;
    const DevTensor& x = a.t[tensor];
    offsets[(2 * tensor) * kMaxRowsPerStep + row] = b * x.in_bs + t * x.in_ts;
    offsets[(2 * tensor + 1) * kMaxRowsPerStep + row] = b * x.out_bs + t * x.out_ts;
  }
  const float nan = __int_as_float(0x7fc00000);
  for (int idx = threadIdx.x; idx < nr * a.n_pairs; idx += blockDim.x) {
    const int row = idx / a.n_pairs, i = idx - row * a.n_pairs;
    const long long r = r0 + row, b = r / a.n_tokens, t = r - b * a.n_tokens;
    const int axis = a.n_axes > 1 ? a.pair_axis[i] : 0;
    const long long m = row_position(a, b, t, axis);
    bool ok = m >= 0;
    if (ok && a.xpos && fabs(static_cast<double>(m) * a.xpos_log_zeta[0]) > 80.0) {
      record(a.error, kXposOverflow, r, m);
      ok = false;
    }
    float c = nan, s = nan;
    if (ok) {
      if (a.table) {
        c = a.table_cos[m * a.n_pairs + i];
        s = a.table_sin[m * a.n_pairs + i];
      } else {
        cos_sin_exact(m, a.theta[i], &c, &s);
      }
    }
    const float sn = a.backward ? -s : s;
    // The scale exactly as pair_scales (apply.cc): attention factor × ζ_i^(±m/scale_base) in double.
    float scale_q = a.attention_factor_f, scale_k = a.attention_factor_f;
    if (a.xpos && ok) {
      const double md = static_cast<double>(m);
      scale_q = static_cast<float>(a.attention_factor * exp(md * a.xpos_log_zeta[i]));
      scale_k = static_cast<float>(a.attention_factor * exp(-md * a.xpos_log_zeta[i]));
    }
    const int at = row * a.n_pairs + (i % ppu) * (a.n_pairs / ppu) + i / ppu;
    cs_q[at] = make_float2(__fmul_rn(c, scale_q), __fmul_rn(sn, scale_q));
    if (a.xpos) cs_k[at] = make_float2(__fmul_rn(c, scale_k), __fmul_rn(sn, scale_k));
  }
}

// Storage types: fp32 as float, f16 and bf16 as their 16-bit patterns.
template <int DT> struct Storage { using type = unsigned short; };
template <> struct Storage<ROPE_DTYPE_F32> { using type = float; };

// Elements of one rotary unit of rotate_tensor: a 16-byte vector, or one interleaved pair / one half
// element; and the pairs it holds (V/2 interleaved, V half: each element pairs with one n_pairs on).
template <int DT, bool VEC, bool INTERLEAVED>
__host__ __device__ constexpr int unit_elements() {
  return VEC ? 16 / sizeof(typename Storage<DT>::type) : (INTERLEAVED ? 2 : 1);
}
template <int DT, bool VEC, bool INTERLEAVED>
__host__ __device__ constexpr int unit_pairs() {
  return INTERLEAVED ? unit_elements<DT, VEC, INTERLEAVED>() / 2 : unit_elements<DT, VEC, INTERLEAVED>();
}

template <int DT> __device__ __forceinline__ float to_float(typename Storage<DT>::type x);
template <> __device__ __forceinline__ float to_float<ROPE_DTYPE_F32>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<ROPE_DTYPE_F16>(unsigned short x) {
  return __half2float(__ushort_as_half(x));
}
template <> __device__ __forceinline__ float to_float<ROPE_DTYPE_BF16>(unsigned short x) {
  return __uint_as_float(static_cast<unsigned>(x) << 16);  // exact
}
template <int DT> __device__ __forceinline__ typename Storage<DT>::type from_float(float x);
template <> __device__ __forceinline__ float from_float<ROPE_DTYPE_F32>(float x) { return x; }
template <> __device__ __forceinline__ unsigned short from_float<ROPE_DTYPE_F16>(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
template <> __device__ __forceinline__ unsigned short from_float<ROPE_DTYPE_BF16>(float x) {
  unsigned short r;  // round to nearest even, denormals kept (sm_80+)
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

// N consecutive elements; VEC: one 16-byte access (the caller guarantees alignment).
template <typename S, int N, bool VEC>
struct alignas(VEC ? 16 : sizeof(S)) Chunk {
  S v[N];
};
template <typename S, int N, bool VEC>
__device__ __forceinline__ Chunk<S, N, VEC> load_chunk(const S* p) {
  if constexpr (VEC) {
    return *reinterpret_cast<const Chunk<S, N, VEC>*>(p);
  } else {
    Chunk<S, N, VEC> c;
#pragma unroll
    for (int k = 0; k < N; ++k) c.v[k] = p[k];
    return c;
  }
}
template <typename S, int N, bool VEC>
__device__ __forceinline__ void store_chunk(S* p, const Chunk<S, N, VEC>& c) {
  if constexpr (VEC) {
    *reinterpret_cast<Chunk<S, N, VEC>*>(p) = c;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = c.v[k];
  }
}

// Two 16-bit values in a 32-bit word (element 2k in the low half): both to fp32, and back with one
// conversion instruction (round to nearest even, denormals kept).
template <int DT> __device__ __forceinline__ float2 unpack2(unsigned w);
template <> __device__ __forceinline__ float2 unpack2<ROPE_DTYPE_BF16>(unsigned w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 unpack2<ROPE_DTYPE_F16>(unsigned w) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
template <int DT> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<ROPE_DTYPE_BF16>(float lo, float hi) {
  unsigned w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
template <> __device__ __forceinline__ unsigned pack2<ROPE_DTYPE_F16>(float lo, float hi) {
  unsigned w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}

__device__ __forceinline__ void rotate_pair(float xa, float xp, float2 cs, float* ya, float* yp) {
  *ya = __fsub_rn(__fmul_rn(xa, cs.x), __fmul_rn(xp, cs.y));
  *yp = __fadd_rn(__fmul_rn(xp, cs.x), __fmul_rn(xa, cs.y));
}

// Phase B for one tensor: every head of the step's nr rows. A head has R rotary units (interleaved: V
// elements = V/2 pairs; half: V pairs, two chunks of V) and, out of place, C copy units of the
// pass-through elements. Each thread loads kBatch units before it stores any, to keep loads in flight.
// The (c, s) of pair k of unit u are cs[k · R + u] (pair_cos_sin's order).
// I: the type of the item arithmetic (32-bit when the step's items fit, 64-bit otherwise).
template <int DT, bool VEC, bool INTERLEAVED, typename I>
__device__ void rotate_tensor(const Args& a, const DevTensor& x, int nr, const float2* cs, const long long* in_off,
                              const long long* out_off) {
  using S = typename Storage<DT>::type;
  constexpr int V = unit_elements<DT, VEC, INTERLEAVED>();  // elements per rotary chunk
  constexpr int VC = VEC ? V : 1;                                    // elements per copy chunk
  constexpr int kBatch = VEC && !INTERLEAVED ? 1 : 2;  // two 16-byte loads in flight either way
  const int R = INTERLEAVED ? a.rot_dim / V : a.n_pairs / V;
  const int C = x.in_place ? 0 : (a.head_dim - a.rot_dim) / VC;
  const I U = R + C, per_row = static_cast<I>(x.n_heads) * U, total = per_row * nr;
  for (I base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
    Chunk<S, V, VEC> lo[kBatch], hi[kBatch];
    int unit[kBatch], row[kBatch];
    const S* in[kBatch];
    S* out[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const I item = base + j * static_cast<I>(blockDim.x);
      unit[j] = -1;
      if (item >= total) continue;
      row[j] = static_cast<int>(item / per_row);
      const I rest = item - row[j] * per_row, h = rest / U;
      unit[j] = static_cast<int>(rest - h * U);
      in[j] = static_cast<const S*>(x.in) + in_off[row[j]] + h * x.in_hs;
      out[j] = static_cast<S*>(x.out) + out_off[row[j]] + h * x.out_hs;
      if (unit[j] < R) {
        const int e = a.rot_offset + unit[j] * V;
        lo[j] = load_chunk<S, V, VEC>(in[j] + e);
        if (!INTERLEAVED) hi[j] = load_chunk<S, V, VEC>(in[j] + e + a.n_pairs);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (unit[j] < 0) continue;
      if (unit[j] >= R) {  // pass-through elements, out of place only
        int off = (unit[j] - R) * VC;
        if (off >= a.rot_offset) off += a.rot_dim;
        store_chunk<S, VC, VEC>(out[j] + off, load_chunk<S, VC, VEC>(in[j] + off));
        continue;
      }
      const int e = a.rot_offset + unit[j] * V;
      const float2* row_cs = cs + row[j] * a.n_pairs;
      if constexpr (VEC && sizeof(S) == 2) {  // 16-bit storage: a 32-bit word holds two elements
        unsigned* wl = reinterpret_cast<unsigned*>(lo[j].v);
        unsigned* wh = reinterpret_cast<unsigned*>(hi[j].v);
#pragma unroll
        for (int k = 0; k < V / 2; ++k) {
          float ya, yp, yb, yq;
          if (INTERLEAVED) {  // word k = pair k of the unit
            const float2 x = unpack2<DT>(wl[k]);
            rotate_pair(x.x, x.y, row_cs[k * R + unit[j]], &ya, &yp);
            wl[k] = pack2<DT>(ya, yp);
          } else {  // word k of lo and of hi = pairs 2k and 2k + 1 of the unit
            const float2 xa = unpack2<DT>(wl[k]), xp = unpack2<DT>(wh[k]);
            rotate_pair(xa.x, xp.x, row_cs[2 * k * R + unit[j]], &ya, &yp);
            rotate_pair(xa.y, xp.y, row_cs[(2 * k + 1) * R + unit[j]], &yb, &yq);
            wl[k] = pack2<DT>(ya, yb);
            wh[k] = pack2<DT>(yp, yq);
          }
        }
        store_chunk<S, V, VEC>(out[j] + e, lo[j]);
        if (!INTERLEAVED) store_chunk<S, V, VEC>(out[j] + e + a.n_pairs, hi[j]);
      } else if (INTERLEAVED) {
#pragma unroll
        for (int k = 0; k < V / 2; ++k) {
          float ya, yp;
          rotate_pair(to_float<DT>(lo[j].v[2 * k]), to_float<DT>(lo[j].v[2 * k + 1]), row_cs[k * R + unit[j]],
                      &ya, &yp);
          lo[j].v[2 * k] = from_float<DT>(ya);
          lo[j].v[2 * k + 1] = from_float<DT>(yp);
        }
        store_chunk<S, V, VEC>(out[j] + e, lo[j]);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          float ya, yp;
          rotate_pair(to_float<DT>(lo[j].v[k]), to_float<DT>(hi[j].v[k]), row_cs[k * R + unit[j]], &ya, &yp);
          lo[j].v[k] = from_float<DT>(ya);
          hi[j].v[k] = from_float<DT>(yp);
        }
        store_chunk<S, V, VEC>(out[j] + e, lo[j]);
        store_chunk<S, V, VEC>(out[j] + e + a.n_pairs, hi[j]);
      }
    }
  }
}

// A block takes a step of rows_per_step consecutive rows at a time (grid-stride over steps): one phase A
// and one barrier per step. Shared memory holds two steps' (c, s), so the next step's phase A may start
// while slow threads still rotate this one: the barrier after phase A is the only one.
template <int DT, bool VEC, bool INTERLEAVED>
__global__ void __launch_bounds__(kThreads, 4) rope_kernel(const Args a) {
  extern __shared__ float2 smem[];  // [2 buffers][xpos ? 2 : 1][rows_per_step][n_pairs]
  __shared__ long long offsets[2][4 * kMaxRowsPerStep];  // [buffer][(tensor, in/out)][row]
  if (blockIdx.x == 0 && a.pos_kind == ROPE_POSITIONS_VARLEN) check_cu_seqlens(a);
  const int step = a.rows_per_step;
  const int per_buffer = (a.xpos ? 2 : 1) * step * a.n_pairs;
  const long long rows = a.n_batch * a.n_tokens, steps = (rows + step - 1) / step;
  int parity = 0;
  // The loop bounds are the same for every thread of the block, so every thread meets the barrier.
  for (long long g = blockIdx.x; g < steps; g += gridDim.x, parity ^= 1) {
    const long long r0 = g * step;
    const int nr = static_cast<int>(rows - r0 < step ? rows - r0 : step);
    float2* cs_q = smem + parity * per_buffer;
    float2* cs_k = a.xpos ? cs_q + step * a.n_pairs : cs_q;
    long long* off = offsets[parity];
    pair_cos_sin(a, r0, nr, cs_q, cs_k, off, unit_pairs<DT, VEC, INTERLEAVED>());
    __syncthreads();
    for (int j = 0; j < a.n_tensors; ++j) {
      const float2* cs = a.t[j].is_key ? cs_k : cs_q;
      const long long *in_off = off + 2 * j * kMaxRowsPerStep, *out_off = in_off + kMaxRowsPerStep;
      if (a.t[j].n_heads * (a.head_dim + 1) * nr < (1LL << 31) - 4 * kThreads) {
        rotate_tensor<DT, VEC, INTERLEAVED, int>(a, a.t[j], nr, cs, in_off, out_off);
      } else {
        rotate_tensor<DT, VEC, INTERLEAVED, long long>(a, a.t[j], nr, cs, in_off, out_off);
      }
    }
  }
}

// Blocks of `kernel` resident on one multiprocessor of `device`, asked once per kernel and device: a
// grid of exactly that many blocks per SM walks the rows with no tail wave.
int resident_blocks(const void* kernel, int device, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find({kernel, device});
  if (it != known.end()) return it->second;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem) != cudaSuccess || blocks < 1) {
    cudaGetLastError();
    blocks = 1;
  }
  known[{kernel, device}] = blocks;
  return blocks;
}

// The grid: every resident block, each taking steps of rows; long calls pay one barrier per several
// rows, and the step size balances the blocks (prefill 4,096 × 1 on 528 resident blocks: 8 rows, one step
// each; a step of 7 left 58 blocks with two), while a decode of 64 rows still spreads over 64 blocks.
template <int DT, bool VEC, bool INTERLEAVED>
cudaError_t launch(Args a, long long rows, int device, int sms, size_t pair_bytes, cudaStream_t s) {
  const auto kernel = rope_kernel<DT, VEC, INTERLEAVED>;
  const long long resident =
      static_cast<long long>(sms) * resident_blocks(reinterpret_cast<const void*>(kernel), device, 2 * pair_bytes);
  const long long by_memory = std::max<long long>(1, kDynamicSharedBytes / static_cast<long long>(2 * pair_bytes));
  // The step size whose busiest block has the fewest rows (ceil(steps / resident) steps of it); ties go to
  // the larger step, which pays fewer barriers.
  long long best_rows = -1;
  for (long long step = 1; step <= std::min<long long>(kMaxRowsPerStep, by_memory); ++step) {
    const long long steps = (rows + step - 1) / step, busiest = (steps + resident - 1) / resident * step;
    if (best_rows < 0 || busiest <= best_rows) best_rows = busiest, a.rows_per_step = static_cast<int>(step);
  }
  const long long steps = (rows + a.rows_per_step - 1) / a.rows_per_step;
  const dim3 grid(static_cast<unsigned>(std::min(steps, resident)));
  kernel<<<grid, kThreads, 2 * pair_bytes * a.rows_per_step, s>>>(a);
  return cudaGetLastError();
}

template <int DT>
cudaError_t launch_dtype(const Args& a, bool vec, bool interleaved, long long rows, int device, int sms, size_t smem,
                         cudaStream_t s) {
  if (vec && interleaved) return launch<DT, true, true>(a, rows, device, sms, smem, s);
  if (vec) return launch<DT, true, false>(a, rows, device, sms, smem, s);
  if (interleaved) return launch<DT, false, true>(a, rows, device, sms, smem, s);
  return launch<DT, false, false>(a, rows, device, sms, smem, s);
}

rope_status cuda_fail(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  return fail(ROPE_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define ROPE_CUDA_TRY(expr, what)                   \
  do {                                              \
    const cudaError_t rope_cuda_e_ = (expr);        \
    if (rope_cuda_e_ != cudaSuccess) return cuda_fail(rope_cuda_e_, what); \
  } while (0)

// The GPU that holds `p`, which must be device or managed memory.
rope_status device_of(const void* p, const char* name, int* device) {
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(ROPE_ERR_INVALID_ARGUMENT, "%s is not GPU memory (%s)", name, cudaGetErrorString(e));
  }
  if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "%s is host memory; ROPE_BACKEND_CUDA needs GPU memory", name);
  }
  *device = at.device;
  return ROPE_OK;
}

// Sets the current device for the lifetime of the object, then restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    int now = -1;
    cudaGetDevice(&now);
    if (now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

template <typename T>
rope_status upload(T** dst, const T* src, size_t n, cudaStream_t stream) {
  if (n == 0) return ROPE_OK;
  if (*dst == nullptr) {
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(dst), n * sizeof(T));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return fail(ROPE_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes on the GPU for the plan", n * sizeof(T));
    }
    ROPE_CUDA_TRY(e, "cudaMalloc");
  }
  // From pageable memory: staged before the call returns, ordered on `stream` after earlier kernels.
  ROPE_CUDA_TRY(cudaMemcpyAsync(*dst, src, n * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  return ROPE_OK;
}

void free_device(CudaPlanState::Device& d) {
  cudaFree(d.theta);
  cudaFree(d.pair_axis);
  cudaFree(d.xpos_log_zeta);
  cudaFree(d.table_cos);
  cudaFree(d.table_sin);
  cudaFree(d.error);
  d = CudaPlanState::Device{};
}

// The plan's copies on `device` (current), made or refreshed for the plan's generation. This first call on
// a GPU (and the first after rope_plan_set_seq_len changed θ) copies and waits: make it before capturing
// a CUDA graph.
rope_status plan_on_device(const rope_plan& plan, int device, cudaStream_t stream, CudaPlanState::Device** out) {
  std::lock_guard<std::mutex> lock(plan.cuda_mutex);
  if (plan.cuda == nullptr) plan.cuda = new CudaPlanState;
  auto& devices = plan.cuda->devices;
  if (static_cast<int>(devices.size()) <= device) devices.resize(device + 1);
  CudaPlanState::Device& d = devices[device];
  if (!d.ready || d.generation != plan.generation) {
    const size_t n = static_cast<size_t>(plan.n_pairs);
    ROPE_TRY(upload(&d.theta, plan.theta.data(), n, stream));
    ROPE_TRY(upload(&d.pair_axis, plan.pair_axis.data(), n, stream));
    ROPE_TRY(upload(&d.xpos_log_zeta, plan.xpos_log_zeta.data(), plan.xpos_log_zeta.size(), stream));
    ROPE_TRY(upload(&d.table_cos, plan.table_cos.data(), plan.table_cos.size(), stream));
    ROPE_TRY(upload(&d.table_sin, plan.table_sin.data(), plan.table_sin.size(), stream));
    if (d.error == nullptr) {
      ROPE_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&d.error), sizeof(DeviceError)), "cudaMalloc");
      ROPE_CUDA_TRY(cudaMemsetAsync(d.error, 0, sizeof(DeviceError), stream), "cudaMemsetAsync");
    }
    // Wait for the copies: a later call may come on another stream.
    ROPE_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    d.generation = plan.generation;
    d.ready = true;
  }
  *out = &d;
  return ROPE_OK;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

rope_status cuda_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(ROPE_ERR_UNSUPPORTED, "no usable CUDA GPU: %s", cudaGetErrorString(e));
  }
  if (n == 0) return fail(ROPE_ERR_UNSUPPORTED, "no CUDA GPU is present");
  return ROPE_OK;
}

rope_status cuda_apply(const ApplyJob& job, void* stream_ptr) {
  ROPE_TRY(cuda_available());
  const rope_plan& plan = *job.plan;
  const rope_config& cfg = plan.cfg;
  const rope_positions& pos = *job.positions;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);

  // Every pointer on one GPU.
  int device = -1;
  const char* names[2][2] = {{"q", "q_out"}, {"k", "k_out"}};
  if (job.n_tensors == 1) names[0][0] = "x", names[0][1] = "x_out";
  for (int j = 0; j < job.n_tensors; ++j) {
    const void* ptrs[2] = {job.tensors[j].in, job.tensors[j].out};
    for (int io = 0; io < 2; ++io) {
      int d = -1;
      ROPE_TRY(device_of(ptrs[io], names[j][io], &d));
      if (device >= 0 && d != device) {
        return fail(ROPE_ERR_INVALID_ARGUMENT, "%s is on GPU %d, the call's other tensors on GPU %d", names[j][io], d, device);
      }
      device = d;
    }
  }
  const std::pair<const void*, const char*> arrays[] = {{pos.starts, "positions.starts"},
                                                        {pos.ids, "positions.ids"},
                                                        {pos.cu_seqlens, "positions.cu_seqlens"},
                                                        {pos.seq_starts, "positions.seq_starts"}};
  const bool used[] = {pos.kind == ROPE_POSITIONS_OFFSET, pos.kind == ROPE_POSITIONS_IDS,
                       pos.kind == ROPE_POSITIONS_VARLEN, pos.kind == ROPE_POSITIONS_VARLEN};
  for (int i = 0; i < 4; ++i) {
    if (!used[i] || arrays[i].first == nullptr) continue;
    int d = -1;
    ROPE_TRY(device_of(arrays[i].first, arrays[i].second, &d));
    if (d != device) {
      return fail(ROPE_ERR_INVALID_ARGUMENT, "%s is on GPU %d, the tensors on GPU %d", arrays[i].second, d, device);
    }
  }
  DeviceGuard guard(device);

  // Shared memory: (c, s) per pair and row of a step, twice with xPos, in two buffers.
  const size_t smem = (cfg.xpos.enabled ? 2 : 1) * static_cast<size_t>(plan.n_pairs) * sizeof(float2);
  if (2 * smem > kDynamicSharedBytes) {
    return fail(ROPE_ERR_UNSUPPORTED, "rot_dim %d is too large for the CUDA backend (at most %d, %d with xPos)",
                cfg.rot_dim, kDynamicSharedBytes / 16 * 2, kDynamicSharedBytes / 32 * 2);
  }

  CudaPlanState::Device* dev = nullptr;
  ROPE_TRY(plan_on_device(plan, device, stream, &dev));

  Args a{};
  a.n_tensors = job.n_tensors;
  a.n_batch = job.n_batch;
  a.n_tokens = job.n_tokens;
  a.pos_kind = pos.kind;
  a.index32 = pos.index_type == ROPE_INDEX_I32;
  a.start = pos.start;
  a.starts = pos.starts;
  a.ids = pos.ids;
  a.cu_seqlens = pos.cu_seqlens;
  a.n_seqs = pos.n_seqs;
  a.seq_starts = pos.seq_starts;
  a.limit = cfg.mode == ROPE_MODE_TABLE ? cfg.table_positions : ROPE_MAX_POSITION;
  a.theta = dev->theta;
  a.pair_axis = dev->pair_axis;
  a.xpos_log_zeta = dev->xpos_log_zeta;
  a.table_cos = dev->table_cos;
  a.table_sin = dev->table_sin;
  a.attention_factor = plan.attention_factor;
  a.attention_factor_f = static_cast<float>(plan.attention_factor);
  a.n_pairs = plan.n_pairs;
  a.head_dim = cfg.head_dim;
  a.rot_offset = cfg.rot_offset;
  a.rot_dim = cfg.rot_dim;
  a.n_axes = cfg.n_axes;
  a.backward = job.backward;
  a.xpos = cfg.xpos.enabled != 0;
  a.table = cfg.mode == ROPE_MODE_TABLE;
  a.error = dev->error;

  // 16-byte vectors when every address, stride and rotary boundary is a multiple of one.
  const rope_dtype dtype = job.tensors[0].dtype;
  const int V = dtype == ROPE_DTYPE_F32 ? 4 : 8;
  const bool interleaved = cfg.layout == ROPE_LAYOUT_INTERLEAVED;
  bool vec = cfg.rot_offset % V == 0 && cfg.head_dim % V == 0 && (interleaved ? cfg.rot_dim : plan.n_pairs) % V == 0;
  for (int j = 0; j < job.n_tensors; ++j) {
    const TensorJob& tj = job.tensors[j];
    DevTensor& x = a.t[j];
    x.in = tj.in;
    x.out = tj.out;
    x.n_heads = tj.n_heads;
    x.in_bs = tj.in_batch_stride, x.in_ts = tj.in_token_stride, x.in_hs = tj.in_head_stride;
    x.out_bs = tj.out_batch_stride, x.out_ts = tj.out_token_stride, x.out_hs = tj.out_head_stride;
    x.in_place = tj.in_place;
    x.is_key = tj.is_key;
    const long long strides[6] = {x.in_bs, x.in_ts, x.in_hs, x.out_bs, x.out_ts, x.out_hs};
    for (long long s : strides) vec = vec && s % V == 0;
    vec = vec && aligned16(tj.in) && aligned16(tj.out);
  }

  int sms = 0;
  ROPE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const long long rows = job.n_batch * job.n_tokens;
  cudaError_t e = cudaSuccess;
  switch (dtype) {
    case ROPE_DTYPE_F32: e = launch_dtype<ROPE_DTYPE_F32>(a, vec, interleaved, rows, device, sms, smem, stream); break;
    case ROPE_DTYPE_F16: e = launch_dtype<ROPE_DTYPE_F16>(a, vec, interleaved, rows, device, sms, smem, stream); break;
    case ROPE_DTYPE_BF16: e = launch_dtype<ROPE_DTYPE_BF16>(a, vec, interleaved, rows, device, sms, smem, stream); break;
    default: return fail(ROPE_ERR_UNSUPPORTED, "dtype %d is not supported on the GPU", static_cast<int>(dtype));
  }
  if (e != cudaSuccess) return cuda_fail(e, "rope kernel launch");
  return ROPE_OK;
}

rope_status cuda_check(const rope_plan& plan, void* stream_ptr) {
  ROPE_TRY(cuda_available());
  ROPE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_ptr)), "cudaStreamSynchronize");
  std::lock_guard<std::mutex> lock(plan.cuda_mutex);
  if (plan.cuda == nullptr) return ROPE_OK;
  DeviceError first{};
  for (size_t device = 0; device < plan.cuda->devices.size(); ++device) {
    CudaPlanState::Device& d = plan.cuda->devices[device];
    if (d.error == nullptr) continue;
    DeviceGuard guard(static_cast<int>(device));
    DeviceError e{};
    ROPE_CUDA_TRY(cudaMemcpy(&e, d.error, sizeof e, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (e.set && !first.set) first = e;
    if (e.set) ROPE_CUDA_TRY(cudaMemset(d.error, 0, sizeof e), "cudaMemset");
  }
  if (!first.set) return ROPE_OK;
  const long long limit = plan.cfg.mode == ROPE_MODE_TABLE ? plan.cfg.table_positions : ROPE_MAX_POSITION;
  switch (first.what) {
    case kBadStart:
      return fail(ROPE_ERR_BAD_POSITION, "positions.starts[%lld] = %lld is outside [0, 2^48)", first.index, first.value);
    case kBadId:
      return fail(ROPE_ERR_BAD_POSITION, "positions.ids[%lld] = %lld is outside [0, %lld)", first.index, first.value, limit);
    case kBadSeqStart:
      return fail(ROPE_ERR_BAD_POSITION, "positions.seq_starts[%lld] = %lld is outside [0, 2^48)", first.index,
                  first.value);
    case kBadPosition:
      return fail(ROPE_ERR_BAD_POSITION, "token %lld is at position %lld, outside [0, %lld)", first.index,
                  first.value, limit);
    case kBadCuSeqlens:
      return fail(ROPE_ERR_BAD_POSITION,
                  "positions.cu_seqlens[%lld] = %lld: cu_seqlens must rise from 0 to n_tokens", first.index,
                  first.value);
    case kXposOverflow:
      return fail(ROPE_ERR_BAD_POSITION, "xPos scale at position %lld (token %lld) overflows fp32", first.value,
                  first.index);
  }
  return fail(ROPE_ERR_BAD_POSITION, "a device-side position was out of range");
}

void cuda_release_plan(rope_plan* plan) {
  std::lock_guard<std::mutex> lock(plan->cuda_mutex);
  if (plan->cuda == nullptr) return;
  for (size_t device = 0; device < plan->cuda->devices.size(); ++device) {
    CudaPlanState::Device& d = plan->cuda->devices[device];
    if (!d.ready && d.error == nullptr) continue;
    DeviceGuard guard(static_cast<int>(device));
    free_device(d);
  }
  delete plan->cuda;
  plan->cuda = nullptr;
}

}  // namespace rope
