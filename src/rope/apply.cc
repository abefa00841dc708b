// The rotation entry points: argument validation (shapes, strides, aliasing, positions), position
// lookup per row, per-pair scales, and OpenMP threading over rows into the chosen backend.
#include "apply.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "abi.h"
#include "convert.h"
#include "cpu/rope_cpu.h"
#include "cuda/rope_cuda.h"
#include "error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rope {

void row_positions(const ApplyJob& job, int64_t b, int64_t t, int64_t* pos) {
  const rope_positions& p = *job.positions;
  const int n_axes = job.plan->cfg.n_axes;
  int64_t m = 0;
  switch (p.kind) {
    case ROPE_POSITIONS_OFFSET:
      m = p.start + (p.starts ? index_at(p, p.starts, b) : 0) + t;
      break;
    case ROPE_POSITIONS_IDS:
      for (int a = 0; a < n_axes; ++a) pos[a] = index_at(p, p.ids, (a * job.n_batch + b) * job.n_tokens + t);
      return;
    case ROPE_POSITIONS_VARLEN: {
      // Sequence s holds tokens [cu[s], cu[s+1]); find the last s with cu[s] <= t (cu[0] = 0 <= t).
      int64_t lo = 0, hi = p.n_seqs;  // invariant: cu[lo] <= t, and cu[hi + 1] > t or hi = n_seqs
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (index_at(p, p.cu_seqlens, mid) <= t) lo = mid; else hi = mid - 1;
      }
      const int64_t s = std::min(lo, p.n_seqs - 1);  // cu[n_seqs] = n_tokens > t
      m = (p.seq_starts ? index_at(p, p.seq_starts, s) : 0) + t - index_at(p, p.cu_seqlens, s);
      break;
    }
  }
  for (int a = 0; a < n_axes; ++a) pos[a] = m;  // text tokens: every axis at the same position
}

namespace {

double pair_scale(const rope_plan& plan, bool is_key, int64_t pos, int32_t i) {
  double f = plan.attention_factor;
  if (plan.cfg.xpos.enabled) f *= std::exp((is_key ? -1.0 : 1.0) * static_cast<double>(pos) * plan.xpos_log_zeta[i]);
  return f;
}

}  // namespace

void pair_scales(const rope_plan& plan, bool is_key, const int64_t* pair_pos, float* scale) {
  for (int32_t i = 0; i < plan.n_pairs; ++i) scale[i] = static_cast<float>(pair_scale(plan, is_key, pair_pos[i], i));
}

void pair_scales_f64(const rope_plan& plan, bool is_key, const int64_t* pair_pos, double* scale) {
  for (int32_t i = 0; i < plan.n_pairs; ++i) scale[i] = pair_scale(plan, is_key, pair_pos[i], i);
}

namespace {

constexpr int64_t kMaxExtent = int64_t{1} << 40;

struct Span {
  uintptr_t begin, end;  // bytes [begin, end)
};

bool spans_overlap(const Span& a, const Span& b) { return a.begin < b.end && b.begin < a.end; }

// Shape and stride checks for one tensor; sets *span to the bytes it touches.
rope_status check_tensor(const rope_tensor& x, const char* name, int32_t head_dim, Span* span) {
  if (x.data == nullptr) return fail(ROPE_ERR_NULL_POINTER, "%s.data is NULL", name);
  if (x.dtype != ROPE_DTYPE_F32 && x.dtype != ROPE_DTYPE_F16 && x.dtype != ROPE_DTYPE_BF16 &&
      x.dtype != ROPE_DTYPE_F64) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "%s has unknown dtype %d", name, static_cast<int>(x.dtype));
  }
  const int64_t counts[3] = {x.n_batch, x.n_tokens, x.n_heads};
  const int64_t strides[3] = {x.batch_stride, x.token_stride, x.head_stride};
  const char* dims[3] = {"n_batch", "n_tokens", "n_heads"};
  for (int i = 0; i < 3; ++i) {
    if (counts[i] <= 0 || counts[i] > kMaxExtent) {
      return fail(ROPE_ERR_BAD_SHAPE, "%s.%s = %lld must be in [1, 2^40]", name, dims[i],
                  static_cast<long long>(counts[i]));
    }
    if (strides[i] < 0 || strides[i] > kMaxExtent) {
      return fail(ROPE_ERR_BAD_STRIDE, "%s stride of %s = %lld must be in [0, 2^40]", name, dims[i],
                  static_cast<long long>(strides[i]));
    }
  }
  // No two elements may share memory: sort the dims by stride; each stride must clear the extent
  // of the dims inside it (head_dim contiguous elements innermost).
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int a, int b) { return strides[a] < strides[b]; });
  __int128 extent = head_dim;  // elements spanned by the dims handled so far
  for (int oi = 0; oi < 3; ++oi) {
    const int i = order[oi];
    if (counts[i] == 1) continue;
    if (strides[i] < extent) {
      return fail(ROPE_ERR_BAD_STRIDE,
                  "%s stride of %s = %lld overlaps the %lld elements inside it (head_dim %d)", name,
                  dims[i], static_cast<long long>(strides[i]), static_cast<long long>(extent), head_dim);
    }
    extent = static_cast<__int128>(strides[i]) * (counts[i] - 1) + extent;
  }
  const __int128 bytes = extent * static_cast<__int128>(dtype_size(x.dtype));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(x.data);
  if (bytes > static_cast<__int128>(UINTPTR_MAX - begin)) {
    return fail(ROPE_ERR_BAD_SHAPE, "%s extends past the end of the address space", name);
  }
  *span = Span{begin, begin + static_cast<uintptr_t>(bytes)};
  return ROPE_OK;
}

bool same_view(const rope_tensor& a, const rope_tensor& b) {
  return a.data == b.data && a.dtype == b.dtype && a.n_batch == b.n_batch && a.n_tokens == b.n_tokens &&
         a.n_heads == b.n_heads && a.batch_stride == b.batch_stride &&
         a.token_stride == b.token_stride && a.head_stride == b.head_stride;
}

// Largest position the plan can serve (exclusive).
int64_t position_limit(const rope_plan& plan) {
  return plan.cfg.mode == ROPE_MODE_TABLE ? plan.cfg.table_positions : ROPE_MAX_POSITION;
}

rope_status check_position(const rope_plan& plan, int64_t m, const char* what, int64_t index) {
  const int64_t limit = position_limit(plan);
  if (m < 0 || m >= limit) {
    return fail(ROPE_ERR_BAD_POSITION, "%s %lld is position %lld, outside [0, %lld)%s", what,
                static_cast<long long>(index), static_cast<long long>(m), static_cast<long long>(limit),
                plan.cfg.mode == ROPE_MODE_TABLE ? " (the table's size)" : "");
  }
  if (plan.cfg.xpos.enabled) {
    // ζ^(±m/scale_base) must stay a normal fp32 number.
    const double worst = std::fabs(static_cast<double>(m) * plan.xpos_log_zeta[0]);
    if (worst > 80.0) {
      return fail(ROPE_ERR_BAD_POSITION, "xPos scale at position %lld overflows fp32",
                  static_cast<long long>(m));
    }
  }
  return ROPE_OK;
}

rope_status check_positions(const rope_plan& plan, const rope_positions& p, int64_t n_batch,
                            int64_t n_tokens) {
  switch (p.kind) {
    case ROPE_POSITIONS_OFFSET:
      for (int64_t b = 0; b < n_batch; ++b) {
        const int64_t s = p.starts ? index_at(p, p.starts, b) : 0;
        if (s < 0 || p.start < 0) return check_position(plan, std::min(s, p.start), "sequence", b);
        if (s > ROPE_MAX_POSITION || p.start > ROPE_MAX_POSITION - s) {
          return check_position(plan, ROPE_MAX_POSITION, "sequence", b);
        }
        ROPE_TRY(check_position(plan, p.start + s, "first token of sequence", b));
        ROPE_TRY(check_position(plan, p.start + s + n_tokens - 1, "last token of sequence", b));
      }
      return ROPE_OK;
    case ROPE_POSITIONS_IDS: {
      if (p.ids == nullptr) return fail(ROPE_ERR_NULL_POINTER, "positions.ids is NULL");
      const int64_t n = plan.cfg.n_axes * n_batch * n_tokens;
      for (int64_t i = 0; i < n; ++i) ROPE_TRY(check_position(plan, index_at(p, p.ids, i), "id", i));
      return ROPE_OK;
    }
    case ROPE_POSITIONS_VARLEN: {
      if (p.cu_seqlens == nullptr) return fail(ROPE_ERR_NULL_POINTER, "positions.cu_seqlens is NULL");
      if (n_batch != 1) return fail(ROPE_ERR_BAD_SHAPE, "VARLEN positions need n_batch == 1 (packed tokens)");
      if (p.n_seqs <= 0) return fail(ROPE_ERR_BAD_SHAPE, "VARLEN n_seqs %lld must be > 0", static_cast<long long>(p.n_seqs));
      const auto cu = [&](int64_t s) { return index_at(p, p.cu_seqlens, s); };
      if (cu(0) != 0 || cu(p.n_seqs) != n_tokens) {
        return fail(ROPE_ERR_BAD_SHAPE, "cu_seqlens must start at 0 and end at n_tokens (%lld)",
                    static_cast<long long>(n_tokens));
      }
      for (int64_t s = 0; s < p.n_seqs; ++s) {
        const int64_t len = cu(s + 1) - cu(s);
        if (len < 0) return fail(ROPE_ERR_BAD_SHAPE, "cu_seqlens decreases at %lld", static_cast<long long>(s));
        const int64_t first = p.seq_starts ? index_at(p, p.seq_starts, s) : 0;
        ROPE_TRY(check_position(plan, first, "first token of sequence", s));
        if (len > 0) {
          if (first > ROPE_MAX_POSITION - len) return check_position(plan, ROPE_MAX_POSITION, "sequence", s);
          ROPE_TRY(check_position(plan, first + len - 1, "last token of sequence", s));
        }
      }
      return ROPE_OK;
    }
  }
  return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown positions kind %d", static_cast<int>(p.kind));
}

// The checks of check_positions that read no position array: what a CUDA call can verify on the host
// before its kernel checks the values (OFFSET without starts is checked in full).
rope_status check_positions_on_host(const rope_plan& plan, const rope_positions& p, int64_t n_batch,
                                    int64_t n_tokens) {
  switch (p.kind) {
    case ROPE_POSITIONS_OFFSET:
      if (p.starts == nullptr) return check_positions(plan, p, n_batch, n_tokens);
      if (p.start < 0 || p.start > position_limit(plan) - n_tokens) {
        return fail(ROPE_ERR_BAD_POSITION, "positions.start %lld + %lld tokens is outside [0, %lld)",
                    static_cast<long long>(p.start), static_cast<long long>(n_tokens),
                    static_cast<long long>(position_limit(plan)));
      }
      return ROPE_OK;
    case ROPE_POSITIONS_IDS:
      if (p.ids == nullptr) return fail(ROPE_ERR_NULL_POINTER, "positions.ids is NULL");
      return ROPE_OK;
    case ROPE_POSITIONS_VARLEN:
      if (p.cu_seqlens == nullptr) return fail(ROPE_ERR_NULL_POINTER, "positions.cu_seqlens is NULL");
      if (n_batch != 1) return fail(ROPE_ERR_BAD_SHAPE, "VARLEN positions need n_batch == 1 (packed tokens)");
      if (p.n_seqs <= 0) return fail(ROPE_ERR_BAD_SHAPE, "VARLEN n_seqs %lld must be > 0", static_cast<long long>(p.n_seqs));
      return ROPE_OK;
  }
  return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown positions kind %d", static_cast<int>(p.kind));
}

void fill_tensor_job(const rope_tensor& in, const rope_tensor* out, bool is_key, TensorJob* tj) {
  const rope_tensor& o = out ? *out : in;
  tj->in = static_cast<const uint8_t*>(in.data);
  tj->out = static_cast<uint8_t*>(o.data);
  tj->dtype = in.dtype;
  tj->n_heads = in.n_heads;
  tj->in_batch_stride = in.batch_stride;
  tj->in_token_stride = in.token_stride;
  tj->in_head_stride = in.head_stride;
  tj->out_batch_stride = o.batch_stride;
  tj->out_token_stride = o.token_stride;
  tj->out_head_stride = o.head_stride;
  tj->in_place = out == nullptr || same_view(in, *out);
  tj->is_key = is_key;
}

struct Operand {
  const rope_tensor* in;
  const rope_tensor* out;  // may be NULL (in place)
  const char* name;
  bool is_key;
};

// The call's own arguments: plan, positions, direction, exec and the positions' index type. *ex gets
// the exec (defaults when exec is NULL: all threads, automatic backend).
rope_status check_call(const rope_plan* plan, rope_direction direction, const rope_positions* positions,
                       const rope_exec* exec, rope_exec* ex) {
  if (plan == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan is NULL");
  if (positions == nullptr) return fail(ROPE_ERR_NULL_POINTER, "positions is NULL");
  if (direction != ROPE_FORWARD && direction != ROPE_BACKWARD) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown direction %d", static_cast<int>(direction));
  }
  *ex = exec ? *exec : rope_exec{0, ROPE_BACKEND_AUTO, nullptr};
  if (ex->n_threads < 0) return fail(ROPE_ERR_INVALID_ARGUMENT, "n_threads %d < 0", ex->n_threads);
  if (ex->backend != ROPE_BACKEND_AUTO && ex->backend != ROPE_BACKEND_REFERENCE && ex->backend != ROPE_BACKEND_CUDA) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown backend %d", static_cast<int>(ex->backend));
  }
  if (positions->index_type != ROPE_INDEX_I64 && positions->index_type != ROPE_INDEX_I32) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown positions.index_type %d", static_cast<int>(positions->index_type));
  }
  return ROPE_OK;
}

// Shapes, strides and the memory each of the n_ops (1: x, or 2: q and k) operands reads (reads[i], its
// in) and writes (writes[i], its out, or its in when rotated in place); no write may overlap another
// buffer, except an operand rotated in place onto itself.
rope_status check_operands(const Operand* ops, int n_ops, int32_t head_dim, Span* reads, Span* writes) {
  char label[32];
  for (int i = 0; i < n_ops; ++i) {
    const Operand& op = ops[i];
    if (op.in == nullptr) return fail(ROPE_ERR_NULL_POINTER, "%s is NULL", op.name);
    ROPE_TRY(check_tensor(*op.in, op.name, head_dim, &reads[i]));
    writes[i] = reads[i];
    if (op.out != nullptr) {
      std::snprintf(label, sizeof label, "%s_out", op.name);
      ROPE_TRY(check_tensor(*op.out, label, head_dim, &writes[i]));
      const rope_tensor &a = *op.in, &b = *op.out;
      if (a.dtype != b.dtype || a.n_batch != b.n_batch || a.n_tokens != b.n_tokens || a.n_heads != b.n_heads) {
        return fail(ROPE_ERR_BAD_SHAPE, "%s_out must have %s's dtype and shape", op.name, op.name);
      }
      if (!same_view(a, b) && spans_overlap(reads[i], writes[i])) {
        return fail(ROPE_ERR_OVERLAP, "%s and %s_out overlap; rotate in place or use disjoint buffers",
                    op.name, op.name);
      }
    }
    if (op.in->n_batch != ops[0].in->n_batch || op.in->n_tokens != ops[0].in->n_tokens) {
      return fail(ROPE_ERR_BAD_SHAPE, "q and k must have the same n_batch and n_tokens");
    }
  }
  if (n_ops == 2) {
    // Whatever one operand writes must not be read or written by the other.
    if (spans_overlap(writes[0], reads[1]) || spans_overlap(writes[1], reads[0]) ||
        spans_overlap(writes[0], writes[1])) {
      return fail(ROPE_ERR_OVERLAP, "q and k buffers overlap");
    }
  }
  return ROPE_OK;
}

// What the CUDA backend cannot rotate: fp64 tensors, and q and k of different dtypes.
rope_status check_gpu_operands(const Operand* ops, int n_ops) {
  for (int i = 0; i < n_ops; ++i) {
    if (ops[i].in->dtype == ROPE_DTYPE_F64) {
      return fail(ROPE_ERR_UNSUPPORTED, "%s: fp64 tensors are rotated on the CPU only", ops[i].name);
    }
    if (ops[i].in->dtype != ops[0].in->dtype) {
      return fail(ROPE_ERR_UNSUPPORTED, "q and k must have the same dtype on the GPU");
    }
  }
  return ROPE_OK;
}

// Fills job.tensors[0, n_ops) from the checked operands; `bytes` (all reads plus separate writes)
// decides whether the call streams from DRAM.
void fill_tensor_jobs(const Operand* ops, int n_ops, uintptr_t bytes, ApplyJob* job) {
  // Calls whose data fits in a core's L2 are rotated in full vectors; larger ones stream from DRAM
  // (256-bit vectors on AVX-512 too, and non-temporal stores out of place). Measured on Zen 4 and
  // Zen 5 (docs/perf.md).
  constexpr uintptr_t kCacheResidentBytes = uintptr_t{1} << 20;
  for (int i = 0; i < n_ops; ++i) {
    fill_tensor_job(*ops[i].in, ops[i].out, ops[i].is_key, &job->tensors[i]);
    job->tensors[i].from_dram = bytes > kCacheResidentBytes;
    // A separate output that streams from DRAM is written with non-temporal stores, so its lines
    // are not read first (read-for-ownership): 2/3 of the traffic of ordinary stores.
    job->tensors[i].stream_out = !job->tensors[i].in_place && job->tensors[i].from_dram;
  }
}

// Rotates a checked job on the CPU: picks the backend, the thread count (from the call's `bytes`) and
// how rows (n_batch * n_tokens) are split into units (rows × head_parts), then runs the units on
// the calling thread or an OpenMP team.
rope_status run_on_cpu(ApplyJob* job, const Operand* ops, int n_ops, const rope_exec& ex, uintptr_t bytes) {
  // The SIMD kernels compute in fp32; fp64 storage (any operand) runs the scalar reference.
  bool any_f64 = false;
  for (int i = 0; i < n_ops; ++i) any_f64 = any_f64 || ops[i].in->dtype == ROPE_DTYPE_F64;
  auto* backend = ex.backend == ROPE_BACKEND_REFERENCE || any_f64 ? &reference_apply : &simd_apply;
  const int64_t rows = job->n_batch * job->n_tokens;
  int64_t threads = 1;
#ifdef _OPENMP
  threads = ex.n_threads > 0 ? ex.n_threads : omp_get_max_threads();
#endif
  // Opening and joining a parallel region costs about a microsecond even with spinning workers
  // (tens with OMP_WAIT_POLICY=PASSIVE); one thread rotates 32 KiB in about that time, so each
  // thread gets at least 64 KiB: a one-token decode runs on the calling thread. Measured with
  // AVX2 kernels on Zen 4 (docs/perf.md).
  constexpr uintptr_t kMinBytesPerThread = uintptr_t{64} << 10;
  threads = std::min(threads, static_cast<int64_t>(std::max<uintptr_t>(1, bytes / kMinBytesPerThread)));
  // Threads split rows; with fewer rows than threads they split each row's heads too.
  int64_t max_heads = 1;
  for (int i = 0; i < n_ops; ++i) max_heads = std::max(max_heads, ops[i].in->n_heads);
  job->head_parts = rows >= threads ? 1 : std::min(max_heads, (threads + rows - 1) / rows);
  const int64_t units = rows * job->head_parts;
  threads = std::clamp<int64_t>(threads, 1, units);
  if (threads == 1) {
    backend(*job, 0, units);
    return ROPE_OK;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    const int64_t n = omp_get_num_threads(), id = omp_get_thread_num();
    backend(*job, units * id / n, units * (id + 1) / n);
  }
#endif
  return ROPE_OK;
}

// One rotation call: checks everything (check_call, check_operands, positions), builds the ApplyJob
// and hands it to the CUDA backend or run_on_cpu.
rope_status run(const rope_plan* plan, rope_direction direction, const rope_positions* positions,
                const Operand* ops, int n_ops, const rope_exec* exec) {
  rope_exec ex{};
  ROPE_TRY(check_call(plan, direction, positions, exec, &ex));
  const bool on_gpu = ex.backend == ROPE_BACKEND_CUDA;
  Span reads[2], writes[2];
  ROPE_TRY(check_operands(ops, n_ops, plan->cfg.head_dim, reads, writes));
  const int64_t n_batch = ops[0].in->n_batch, n_tokens = ops[0].in->n_tokens;
  if (on_gpu) {
    ROPE_TRY(check_gpu_operands(ops, n_ops));
    ROPE_TRY(check_positions_on_host(*plan, *positions, n_batch, n_tokens));
  } else {
    ROPE_TRY(check_positions(*plan, *positions, n_batch, n_tokens));
  }

  ApplyJob job{};
  job.plan = plan;
  job.backward = direction == ROPE_BACKWARD;
  job.positions = positions;
  job.n_batch = n_batch;
  job.n_tokens = n_tokens;
  job.n_tensors = n_ops;
  uintptr_t bytes = 0;
  for (int i = 0; i < n_ops; ++i) bytes += (reads[i].end - reads[i].begin) + (ops[i].out ? writes[i].end - writes[i].begin : 0);
  fill_tensor_jobs(ops, n_ops, bytes, &job);
  if (on_gpu) {
    job.head_parts = 1;
    return cuda_apply(job, ex.stream);
  }
  return run_on_cpu(&job, ops, n_ops, ex, bytes);
}

// run() over the caller's structs of generation `abi`, copied to this library's layout.
rope_status run_abi(const rope_plan* plan, rope_direction direction, const rope_positions* positions,
                    const Operand* ops, int n_ops, const rope_exec* exec, int32_t abi) {
  rope_positions pos_copy{};
  rope_exec exec_copy{};
  if (positions != nullptr) {
    pos_copy = read_struct(*positions, positions_bytes(abi));
    positions = &pos_copy;
  }
  if (exec != nullptr) {
    exec_copy = read_struct(*exec, exec_bytes(abi));
    exec = &exec_copy;
  }
  return run(plan, direction, positions, ops, n_ops, exec);
}

}  // namespace
}  // namespace rope

using rope::fail;

// The entry points read positions_bytes(abi) and exec_bytes(abi) bytes of the caller's structs
// (rope_tensor has one layout in every generation) and run on full copies.
extern "C" rope_status rope_apply_abi(const rope_plan* plan, rope_direction direction, rope_role role,
                                      const rope_positions* positions, const rope_tensor* in,
                                      const rope_tensor* out, const rope_exec* exec, int32_t abi) {
  rope::clear_error();
  ROPE_TRY(rope::check_abi(abi));
  if (role != ROPE_ROLE_QUERY && role != ROPE_ROLE_KEY) {
    return fail(ROPE_ERR_INVALID_ARGUMENT, "unknown role %d", static_cast<int>(role));
  }
  const rope::Operand op{in, out, "x", role == ROPE_ROLE_KEY};
  return rope::run_abi(plan, direction, positions, &op, 1, exec, abi);
}

extern "C" rope_status rope_cuda_available(void) {
  rope::clear_error();
  return rope::cuda_available();
}

extern "C" rope_status rope_cuda_check(const rope_plan* plan, void* stream) {
  rope::clear_error();
  if (plan == nullptr) return fail(ROPE_ERR_NULL_POINTER, "plan is NULL");
  return rope::cuda_check(*plan, stream);
}

extern "C" rope_status rope_apply_qk_abi(const rope_plan* plan, rope_direction direction,
                                         const rope_positions* positions, const rope_tensor* q,
                                         const rope_tensor* q_out, const rope_tensor* k,
                                         const rope_tensor* k_out, const rope_exec* exec, int32_t abi) {
  rope::clear_error();
  ROPE_TRY(rope::check_abi(abi));
  const rope::Operand ops[2] = {{q, q_out, "q", false}, {k, k_out, "k", true}};
  return rope::run_abi(plan, direction, positions, ops, 2, exec, abi);
}
