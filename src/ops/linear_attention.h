// Linear attention with RoPE (RoFormer §3.3, eq. 19), O(N) in the sequence length:
//
//   out_m = Σ_n (R_m φ(q_m))ᵀ (R_n φ(k_n)) v_n / (Σ_n φ(q_m)ᵀ φ(k_n) + eps)
//
// R_m is librope's rotation of a feature vector (F wide) at position m, configured by
// LinearAttentionShape::rope_cfg: by default the paper's interleaved pairs (2i, 2i+1) rotated by m·θ_i,
// θ_i = 10000^(−2i/F); the half layout (pairs (i, i + F/2)), any base, every scaling method (its
// attention factor included: it multiplies both R_m φ(q) and R_n φ(k)) and xPos work the same way.
// float rotates in ROPE_DTYPE_F32, double in ROPE_DTYPE_F64. RoPE acts in the numerator only; the denominator stays
// unrotated, so rotated terms can be negative and the output is not a convex combination of values
// (as the paper specifies). Sums run over all n, or over n ≤ m when causal.
//
// Feature maps φ: R^Dk → R^F:
//   elu_plus_one  φ(x) = elu(x) + 1 (Katharopoulos et al. 2020), F = Dk;
//   favor         φ(x) = exp(Wx − ‖x‖²/2)/√m (Performer FAVOR+ positive random features,
//                 Choromanski et al. 2020), W (m, Dk) from favor_projection or the caller, F = m.
//                 E[φ(q)·φ(k)] = exp(q·k); scale q and k by Dk^(−1/4) to approximate softmax(q·kᵀ/√Dk).
// Gradients flow to q, k and v, never to W (redraw it by passing a new seed/matrix).
//
// Stabilisation (FAVOR+): each query's features are computed as exp(ℓ − s_m) with s_m its largest
// logit ℓ_j = w_j·q_m − ‖q_m‖²/2, and keys as exp(ℓ − r) with r the largest key logit seen so far
// (a running max; rescaling the prefix sums by exp(r_old − r_new) when it grows, like online softmax).
// Numerator and denominator are both linear in each, so the scales cancel in the ratio provided eps
// is scaled the same way: we add eps·exp(−s_m − r) to the stabilised denominator. The result is
// therefore the unstabilised formula above exactly (in exact arithmetic) for any shifts, and the
// backward treats the shifts as constants. elu + 1 needs no shift.
//
// Memory: the forward saves φ(q), φ(k) (stabilised, unrotated), the denominators and the key shifts,
// (B, T, H, 2F + 2) elements = O(N·F), never O(N²). The backward recomputes the (F, Dv) prefix sums.
// Each thread holds one head's rotated R_t φ(q_t), R_t φ(k_t) (T, F) (librope rotates all of a head's
// tokens in one call), the backward a few more (T, F) rows; the chunked causal form adds two (C, C)
// products and a few (C, F) and (C, Dv) rows, C = min(chunk, T) (so a chunk as long as T would be
// O(T²) again: keep it small).
// Modes: non-causal uses the (F, Dv) summary Σ_n R_n φ(k_n) v_nᵀ and the (F) vector Σ_n φ(k_n) per
// head (BLAS). Causal runs the same sums as prefix sums over chunks of `chunk` tokens (BLAS): within a
// chunk the masked (C, C) products of its queries and keys, across chunks the sums of the chunks before
// (the backward: after); chunk = 1 runs them token by token, the recurrent form that
// linear_attention_step exposes for generation, and the reference the chunks are tested against. Both
// give eq. 19 to rounding. (batch, head) pairs run in parallel (OpenMP).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "rope/rope.hpp"

namespace ops {

// The FAVOR+ projection W (m, Dk) argument; not deduced, so nullptr works for elu_plus_one.
template <typename T>
using ProjectionPtr = const std::type_identity_t<T>*;

enum class FeatureMap { elu_plus_one, favor };

struct LinearAttentionShape {
  int64_t B, T, H;  // batch, tokens, heads
  int64_t Dk, Dv;   // q, k: (B, T, H·Dk); v, out: (B, T, H·Dv)
  bool causal;      // query m sees keys n <= m
  FeatureMap feature_map = FeatureMap::elu_plus_one;
  int64_t favor_features = 0;  // m, the rows of W (favor only); F = m, else F = Dk
  bool rope = true;            // rotate the numerator's feature vectors (F must then be even)
  // The librope configuration of that rotation, e.g. the model's softmax RoPE settings. Linear
  // attention rotates whole feature vectors: it sets head_dim = rot_dim = F itself, so the config
  // must be full-rotary (rot_dim == head_dim, rot_offset 0; head_dim itself may be anything), with
  // n_axes 1. Per-pair arrays (freq_factors, LongRoPE factors) must then hold F/2 values
  // (head_dim == F). layout, base, scaling, freq_factors and xPos are used as given; mode and
  // table_positions are ignored (linear attention picks on the fly or a per-call table: same bits).
  // The default is the paper's: interleaved, base 10000, no scaling.
  rope_config rope_cfg = rope::default_config(0);
  // Sequence length given to the plan (rope_plan_set_seq_len: DYNAMIC_NTK, LONGROPE); 0 = start + T.
  // The recurrent step uses it too, so set it (or T) to the generation's length there.
  int64_t rope_seq_len = 0;
  int64_t start = 0;           // position of token 0
  double eps = 1e-6;           // added to the (unstabilised) denominator, >= 0
  int64_t chunk = 64;          // causal: tokens per chunk of the product form (>= 1; 1 = token by token)
};

// F, the feature dimension. Throws std::invalid_argument for a bad shape (all functions below do).
int64_t linear_attention_features(const LinearAttentionShape& s);

// Elements of the forward's `saved` buffer, (B, T, H, 2F + 2): φ(q) (B, T, H, F) | φ(k) (B, T, H, F) |
// denominators (B, T, H) | key shifts (B, T, H).
int64_t linear_attention_saved_size(const LinearAttentionShape& s);

// W (m, D) ← FAVOR+ random features, a pure function of seed: rows N(0, I_D); with `orthogonal`
// (Performer's default), each block of D rows is orthogonalised (Gram–Schmidt) and row i rescaled to
// the norm of an independent N(0, I_D) vector, which keeps the estimator unbiased with lower variance.
template <typename T>
void favor_projection(T* W, int64_t m, int64_t D, uint64_t seed, bool orthogonal = true);

// out (B, T, H·Dv) from q, k (B, T, H·Dk) and v (B, T, H·Dv); W (m, Dk) for favor (else unused, may
// be null). saved (linear_attention_saved_size) is written for the backward; null = not needed.
template <typename T>
void linear_attention_forward(T* out, T* saved, const T* q, const T* k, const T* v, ProjectionPtr<T> W,
                              const LinearAttentionShape& s);

// dq, dk (B, T, H·Dk) and dv (B, T, H·Dv) += gradients given dout (B, T, H·Dv) and the forward's saved.
template <typename T>
void linear_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* saved, const T* q, const T* k, const T* v,
                               ProjectionPtr<T> W, const LinearAttentionShape& s);

// Recurrent (causal) state of B sequences, for generation one token at a time.
template <typename T>
struct LinearAttentionState {
  int64_t pos = 0;       // position of the next token
  std::vector<T> S;      // (B, H, F, Dv) Σ_n R_n φ(k_n) v_nᵀ, scaled by exp(−shift)
  std::vector<T> z;      // (B, H, F) Σ_n φ(k_n), scaled by exp(−shift)
  std::vector<T> shift;  // (B, H) key shift r: largest FAVOR key logit so far (elu + 1: 0); −inf before any key
};

// An empty state for shape s (s.T is unused), at position s.start.
template <typename T>
LinearAttentionState<T> linear_attention_state(const LinearAttentionShape& s);

// One token of every sequence at position st.pos: adds k, v (B, H·Dk), (B, H·Dv) to the state, then
// out (B, H·Dv) = the causal forward's output for q (B, H·Dk) at that position; st.pos advances.
template <typename T>
void linear_attention_step(T* out, const T* q, const T* k, const T* v, ProjectionPtr<T> W,
                           const LinearAttentionShape& s, LinearAttentionState<T>& st);

}  // namespace ops
