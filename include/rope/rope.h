/* librope: Rotary Position Embedding (RoFormer, arXiv:2104.09864) kernels behind a C ABI.
 *
 * One call rotates q and/or k tensors of shape [batch, tokens, heads, head_dim] (any strides) by
 * position-dependent angles m·θ_i. A rope_plan holds everything that does not depend on the
 * tensors: the frequencies θ_i after scaling, the attention factor, and optionally a cos/sin table.
 * Angles are exact: m·θ_i is formed as a double-double and reduced mod π/2 in extended precision,
 * so cos/sin are correct to float32 rounding at every position 0 <= m < 2^48 (and to a few fp64
 * ulps for ROPE_DTYPE_F64 tensors, which are rotated entirely in double).
 *
 * Every function returns a rope_status; on failure rope_last_error() gives a message (per thread).
 * The formulas behind every option are in docs/rope.md. */
#ifndef ROPE_ROPE_H_
#define ROPE_ROPE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ROPE_API
#else
#define ROPE_API __attribute__((visibility("default")))
#endif

/* The ABI policy (docs/rope.md, "ABI"): MAJOR is the SONAME (librope.so.MAJOR) and changes only
 * when an exported function or a struct field is removed or changed; MINOR grows with additions;
 * scripts/abi-check.sh holds the built library to abi/librope.abi with libabigail's abidiff. */
#define ROPE_VERSION_MAJOR 1
#define ROPE_VERSION_MINOR 0
#define ROPE_VERSION_PATCH 0

/* Layout generation of the public structs in this header. Structs only grow, at their end; each
 * entry point that reads or writes one takes the generation its caller was compiled with (the
 * inline wrappers at the bottom pass this one), and the library reads and writes exactly that
 * much, giving the fields a caller does not know their defaults. A binding that declares the
 * structs itself (ctypes, FFI) calls the *_abi functions with the generation it copied.
 *   1: the structs of librope 0.1.0 as first released (rope_positions up to seq_starts;
 *      rope_exec {n_threads, backend}).
 *   2: rope_positions.index_type, rope_exec.stream. */
#define ROPE_ABI_VERSION 2

/* Enums are int-sized in C; in C++ they get int as their fixed underlying type, so any value a C
 * caller passes is a valid object that librope can check (and reject) without undefined behaviour. */
#ifdef __cplusplus
#define ROPE_ENUM(name) enum name : int
#else
#define ROPE_ENUM(name) enum name
#endif

/* Largest position accepted (exclusive). Angles stay exact up to here. */
#define ROPE_MAX_POSITION (INT64_C(1) << 48)

typedef ROPE_ENUM(rope_status) {
  ROPE_OK = 0,
  ROPE_ERR_NULL_POINTER = 1,     /* a required pointer is NULL */
  ROPE_ERR_INVALID_ARGUMENT = 2, /* unknown enum, non-finite or out-of-range parameter */
  ROPE_ERR_BAD_SHAPE = 3,        /* zero/negative sizes, odd or oversized rotary dim, mismatched shapes */
  ROPE_ERR_BAD_STRIDE = 4,       /* negative strides, or strides that make elements alias */
  ROPE_ERR_BAD_POSITION = 5,     /* negative position, beyond the table, or >= ROPE_MAX_POSITION */
  ROPE_ERR_OVERLAP = 6,          /* out-of-place input and output memory overlap */
  ROPE_ERR_OUT_OF_MEMORY = 7,
  ROPE_ERR_UNSUPPORTED = 8,      /* a valid request this build cannot serve */
  ROPE_ERR_DEVICE = 9            /* the GPU runtime reported an error (the message names it) */
} rope_status;

/* Pairing of the rotated coordinates inside the rotary part of a head. */
typedef ROPE_ENUM(rope_layout) {
  ROPE_LAYOUT_INTERLEAVED = 0, /* pairs (2i, 2i+1): paper eq. 34, RoFormer, GPT-J, Meta Llama */
  ROPE_LAYOUT_HALF = 1         /* pairs (i, i + rot_dim/2): GPT-NeoX, Hugging Face Llama */
} rope_layout;

/* Storage type of q/k. F32, F16 and BF16 load into fp32, rotate in fp32 (angles in fp64) and round
 * once on store. F64 keeps everything in fp64: cos/sin of the exact angle in double (the same values
 * the fp32 path rounds; a TABLE plan's fp32 table is not used, its position limit still applies),
 * multiplied by the attention factor and xPos scale in double, fp64 rotation. F64 always runs the
 * scalar reference code (ROPE_BACKEND_AUTO included); q and k may have different dtypes. */
typedef ROPE_ENUM(rope_dtype) {
  ROPE_DTYPE_F32 = 0,
  ROPE_DTYPE_F16 = 1,
  ROPE_DTYPE_BF16 = 2,
  ROPE_DTYPE_F64 = 3
} rope_dtype;

/* Frequency scaling for context extension. Formulas and citations: docs/rope.md. */
typedef ROPE_ENUM(rope_scaling_type) {
  ROPE_SCALING_NONE = 0,
  ROPE_SCALING_LINEAR = 1,      /* position interpolation: θ_i / s (Chen et al. 2023) */
  ROPE_SCALING_NTK = 2,         /* NTK-aware base change: base · s^(d/(d-2)) */
  ROPE_SCALING_DYNAMIC_NTK = 3, /* NTK with s from the current length (HF "dynamic") */
  ROPE_SCALING_YARN = 4,        /* YaRN (Peng et al. 2023), incl. DeepSeek mscale */
  ROPE_SCALING_LLAMA3 = 5,      /* Llama 3.1 frequency-band scaling */
  ROPE_SCALING_LONGROPE = 6     /* LongRoPE / Phi-3 per-dim short/long factors */
} rope_scaling_type;

/* Where cos/sin come from. Both give bit-identical results. */
typedef ROPE_ENUM(rope_cos_sin_mode) {
  ROPE_MODE_ON_THE_FLY = 0, /* computed per token from the exact angle */
  ROPE_MODE_TABLE = 1       /* precomputed fp32 table for positions [0, table_positions) */
} rope_cos_sin_mode;

/* How rotary pairs are shared among position axes when n_axes > 1. */
typedef ROPE_ENUM(rope_axes_mode) {
  ROPE_AXES_SECTIONS = 0,    /* pair i uses the axis whose section holds i (Qwen2-VL M-RoPE) */
  ROPE_AXES_INTERLEAVED = 1, /* pair i uses axis i mod n_axes (Qwen3-VL style) */
  ROPE_AXES_AXIAL = 2        /* sections, each with its own ladder θ_j = base^(-j/section) (2-D ViT) */
} rope_axes_mode;

typedef ROPE_ENUM(rope_direction) {
  ROPE_FORWARD = 0, /* y = R(m) x */
  ROPE_BACKWARD = 1 /* x̄ = R(m)ᵀ ȳ: the inverse rotation, i.e. the gradient of the forward */
} rope_direction;

/* Which tensor a single-tensor call rotates. Only xPos treats them differently (q·ζ^m, k·ζ^-m). */
typedef ROPE_ENUM(rope_role) { ROPE_ROLE_QUERY = 0, ROPE_ROLE_KEY = 1 } rope_role;

/* Element type of the position arrays (starts, ids, cu_seqlens, seq_starts). The fields are declared
 * int64_t*; with ROPE_INDEX_I32 pass int32_t arrays cast to that type (PyTorch/FlashAttention's int32). */
typedef ROPE_ENUM(rope_index_type) {
  ROPE_INDEX_I64 = 0,
  ROPE_INDEX_I32 = 1
} rope_index_type;

typedef ROPE_ENUM(rope_position_kind) {
  ROPE_POSITIONS_OFFSET = 0, /* pos(b, t) = start + (starts ? starts[b] : 0) + t */
  ROPE_POSITIONS_IDS = 1,    /* pos(a, b, t) = ids[(a · n_batch + b) · n_tokens + t], a < n_axes */
  ROPE_POSITIONS_VARLEN = 2  /* packed sequences: cu_seqlens; pos = (seq_starts ? seq_starts[s] : 0) + t - cu[s] */
} rope_position_kind;

typedef ROPE_ENUM(rope_backend) {
  ROPE_BACKEND_AUTO = 0,      /* best SIMD target of this CPU (runtime dispatch) */
  ROPE_BACKEND_REFERENCE = 1, /* the plain scalar reference: the readable specification */
  ROPE_BACKEND_CUDA = 2       /* an NVIDIA GPU: tensors and position arrays in device memory, launched
                                 on exec->stream; see "CUDA" below */
} rope_backend;

typedef struct rope_scaling {
  rope_scaling_type type;
  double factor;                  /* s (> 0); LINEAR, NTK, DYNAMIC_NTK, YARN, LLAMA3, LONGROPE */
  int64_t original_max_positions; /* pre-training context; DYNAMIC_NTK, YARN, LLAMA3, LONGROPE */
  double attention_factor;        /* multiplies cos and sin; 0 = the method's default (YARN, LONGROPE) */
  /* YaRN */
  double beta_fast;            /* default 32 */
  double beta_slow;            /* default 1 */
  double extrapolation_factor; /* weight of the extrapolated band, default 1 */
  double mscale;               /* DeepSeek variant: attention factor = m(s, mscale) / m(s, mscale_all_dim) */
  double mscale_all_dim;       /*   with m(s, a) = 0.1·a·ln s + 1; both 0 = plain YaRN 0.1·ln s + 1 */
  int32_t truncate;            /* floor/ceil the correction range (HF default 1) */
  /* Llama 3 */
  double low_freq_factor;  /* default 1 */
  double high_freq_factor; /* default 4 */
  /* LongRoPE: [rot_dim/2] divisors of θ_i; long ones once the length exceeds original_max_positions.
   * Copied at plan creation. */
  const double* short_factor;
  const double* long_factor;
} rope_scaling;

typedef struct rope_xpos {
  int32_t enabled;   /* xPos (Sun et al. 2022): q scaled by ζ_i^(m/scale_base), k by ζ_i^(-m/scale_base) */
  double gamma;      /* ζ_i = (2i/d + gamma) / (1 + gamma); default 0.4 */
  double scale_base; /* default 512 */
} rope_xpos;

typedef struct rope_config {
  int32_t head_dim;   /* elements per head (contiguous) */
  int32_t rot_dim;    /* rotated elements, even, rot_offset + rot_dim <= head_dim */
  int32_t rot_offset; /* first rotated element in the head; the rest pass through untouched */
  rope_layout layout;
  double base;                /* θ_i = base^(-2i/rot_dim); 10000 in the paper */
  rope_scaling scaling;
  const double* freq_factors; /* optional [rot_dim/2] raw divisors: θ_i / freq_factors[i]; copied */
  rope_xpos xpos;
  int32_t n_axes;             /* 1 for text; 2 for 2-D images; 3 for M-RoPE (t, h, w) */
  rope_axes_mode axes_mode;
  int32_t sections[4];        /* pairs per axis (SECTIONS, AXIAL); sum = rot_dim/2 */
  rope_cos_sin_mode mode;
  int64_t table_positions;    /* TABLE mode: positions [0, table_positions) */
} rope_config;

/* Strided [n_batch, n_tokens, n_heads, head_dim] tensor; strides in elements, head_dim contiguous.
 * bshd: (S·H·D, H·D, D); sbhd: (H·D, B·H·D, D); bhsd: (H·S·D, D, S·D). */
typedef struct rope_tensor {
  void* data;
  rope_dtype dtype;
  int64_t n_batch, n_tokens, n_heads;
  int64_t batch_stride, token_stride, head_stride;
} rope_tensor;

typedef struct rope_positions {
  rope_position_kind kind;
  int64_t start;               /* OFFSET */
  const int64_t* starts;       /* OFFSET: optional [n_batch] per-sequence starts */
  const int64_t* ids;          /* IDS: [n_axes, n_batch, n_tokens] */
  const int64_t* cu_seqlens;   /* VARLEN: [n_seqs + 1], 0 = cu[0] <= ... <= cu[n_seqs] = n_tokens */
  int64_t n_seqs;              /* VARLEN */
  const int64_t* seq_starts;   /* VARLEN: optional [n_seqs] first position of each sequence */
  rope_index_type index_type;  /* of starts, ids, cu_seqlens and seq_starts; 0 = int64_t */
} rope_positions;

typedef struct rope_exec {
  int32_t n_threads; /* 0 = OpenMP default; threads split tokens, at most one per 64 KiB moved */
  rope_backend backend;
  void* stream;      /* ROPE_BACKEND_CUDA: the cudaStream_t to launch on (NULL = the default stream) */
} rope_exec;

typedef struct rope_plan rope_plan;

ROPE_API const char* rope_status_string(rope_status status);
/* Message of the last failing call on this thread ("" if none). */
ROPE_API const char* rope_last_error(void);
ROPE_API const char* rope_version(void);
/* Name of the SIMD target ROPE_BACKEND_AUTO uses on this CPU, e.g. "AVX3". */
ROPE_API const char* rope_cpu_target(void);

/* Paper defaults: rot_dim = head_dim, offset 0, interleaved, base 10000, no scaling, on the fly.
 * (rope_config_init below; abi = ROPE_ABI_VERSION of the caller's struct definitions.) */
ROPE_API void rope_config_init_abi(rope_config* cfg, int32_t head_dim, int32_t abi);

typedef ROPE_ENUM(rope_preset) {
  ROPE_PRESET_ROFORMER = 0, /* interleaved, base 1e4: RoFormer / HF RoFormer sinusoidal table */
  ROPE_PRESET_GPTJ = 1,     /* interleaved, base 1e4, rot_dim = 64 (GPT-J 6B) */
  ROPE_PRESET_NEOX = 2,     /* half, base 1e4, rot_dim = head_dim / 4 (GPT-NeoX 20B) */
  ROPE_PRESET_LLAMA = 3,    /* half (HF layout), base 1e4 (Llama 1/2) */
  ROPE_PRESET_LLAMA3 = 4,   /* half, base 5e5, Llama 3.1 scaling s=8, 1, 4, 8192 */
  ROPE_PRESET_QWEN2 = 5,    /* half, base 1e6 */
  ROPE_PRESET_QWEN2_VL = 6  /* half, base 1e6, M-RoPE sections (16, 24, 24) for head_dim 128 */
} rope_preset;
ROPE_API rope_status rope_config_preset_abi(rope_config* cfg, rope_preset preset, int32_t head_dim,
                                           int32_t abi);

ROPE_API rope_status rope_plan_create_abi(const rope_config* cfg, rope_plan** plan, int32_t abi);
ROPE_API void rope_plan_destroy(rope_plan* plan);
/* Current sequence length, for DYNAMIC_NTK and LONGROPE (recomputes θ and the table).
 * Not safe to call while another thread applies the same plan. */
ROPE_API rope_status rope_plan_set_seq_len(rope_plan* plan, int64_t seq_len);
/* θ_i after scaling, [rot_dim/2]. */
ROPE_API rope_status rope_plan_inv_freq(const rope_plan* plan, double* inv_freq);
ROPE_API rope_status rope_plan_attention_factor(const rope_plan* plan, double* factor);
/* cos(m·θ_i), sin(m·θ_i) rounded to fp32 for one position on axis 0 (no attention factor, no xPos). */
ROPE_API rope_status rope_plan_cos_sin(const rope_plan* plan, int64_t position, float* cos_out,
                                       float* sin_out);

/* Rotate one tensor (rope_apply below). out == NULL (or out describing the same memory and strides)
 * rotates in place. exec == NULL means defaults. */
ROPE_API rope_status rope_apply_abi(const rope_plan* plan, rope_direction direction, rope_role role,
                                    const rope_positions* positions, const rope_tensor* in,
                                    const rope_tensor* out, const rope_exec* exec, int32_t abi);

/* Rotate q and k in one pass over the tokens (heads may differ: GQA/MQA). Batch and token counts
 * must agree. q_out/k_out NULL = in place. (rope_apply_qk below.) */
ROPE_API rope_status rope_apply_qk_abi(const rope_plan* plan, rope_direction direction,
                                       const rope_positions* positions, const rope_tensor* q,
                                       const rope_tensor* q_out, const rope_tensor* k,
                                       const rope_tensor* k_out, const rope_exec* exec, int32_t abi);

/* Permute the rows of a q or k projection (weight [n_heads·head_dim, row_bytes] or bias) between
 * layouts, so a checkpoint converted this way gives identical attention scores. in == out allowed. */
ROPE_API rope_status rope_permute_rows(const void* in, void* out, size_t row_bytes, int64_t n_heads,
                                       int32_t head_dim, int32_t rot_dim, int32_t rot_offset,
                                       rope_layout from, rope_layout to);

/* CUDA (ROPE_BACKEND_CUDA). The call checks everything it can on the host (plan, shapes, strides,
 * overlap, dtypes, that every pointer is device memory of one GPU) and returns an error as the CPU
 * backends do; then it launches on exec->stream and returns without waiting. Positions held in device
 * arrays (starts, ids, cu_seqlens, seq_starts) are checked by the kernel: a token whose position is
 * out of range (or malformed cu_seqlens) gets NaN in its rotated elements, never an out-of-bounds
 * read, and is recorded in the plan; rope_cuda_check reports it. cos/sin are the CPU's bits (TABLE:
 * the plan's table copied to the GPU once; ON_THE_FLY: the same double-double reduction and
 * polynomials evaluated on the GPU); q and k are rotated in fp32 exactly as the reference backend
 * does, stored once in their dtype. F64 tensors are not supported on the GPU; q and k share one dtype.
 * The first call with a plan on a GPU (and the first after rope_plan_set_seq_len changed θ) copies the
 * plan there and waits for the copy: make it before capturing a CUDA graph; later calls only launch. */

/* ROPE_OK when this build has CUDA and a GPU is present; else ROPE_ERR_UNSUPPORTED with the reason. */
ROPE_API rope_status rope_cuda_available(void);
/* Waits for `stream` (a cudaStream_t; NULL = the default stream), then reports the first bad device-side
 * position that any CUDA call with this plan met since the last check (ROPE_ERR_BAD_POSITION, naming
 * the array and index), and clears the record. Do not call it while other streams use the plan. */
ROPE_API rope_status rope_cuda_check(const rope_plan* plan, void* stream);

/* Hugging Face RoFormerSinusoidalPositionalEmbedding weight, built as HF builds it:
 * out[p, j] = sin(p / 10000^(2j/dim)) for j < dim/2, cos(p / 10000^(2(j-dim/2)/dim)) after. */
ROPE_API rope_status rope_hf_roformer_table(int64_t n_positions, int32_t dim, float* out);

/* The calls a C or C++ program makes: each passes the struct generation of this header. */
static inline void rope_config_init(rope_config* cfg, int32_t head_dim) {
  rope_config_init_abi(cfg, head_dim, ROPE_ABI_VERSION);
}
static inline rope_status rope_config_preset(rope_config* cfg, rope_preset preset, int32_t head_dim) {
  return rope_config_preset_abi(cfg, preset, head_dim, ROPE_ABI_VERSION);
}
static inline rope_status rope_plan_create(const rope_config* cfg, rope_plan** plan) {
  return rope_plan_create_abi(cfg, plan, ROPE_ABI_VERSION);
}
static inline rope_status rope_apply(const rope_plan* plan, rope_direction direction, rope_role role,
                                     const rope_positions* positions, const rope_tensor* in,
                                     const rope_tensor* out, const rope_exec* exec) {
  return rope_apply_abi(plan, direction, role, positions, in, out, exec, ROPE_ABI_VERSION);
}
static inline rope_status rope_apply_qk(const rope_plan* plan, rope_direction direction,
                                        const rope_positions* positions, const rope_tensor* q,
                                        const rope_tensor* q_out, const rope_tensor* k,
                                        const rope_tensor* k_out, const rope_exec* exec) {
  return rope_apply_qk_abi(plan, direction, positions, q, q_out, k, k_out, exec, ROPE_ABI_VERSION);
}

#ifdef __cplusplus
}
#endif

#endif /* ROPE_ROPE_H_ */
