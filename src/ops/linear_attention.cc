// Linear attention with RoPE: forward, backward and the recurrent step (see linear_attention.h).
// Non-causal heads use BLAS for the (F, Dv) summaries. Causal heads run in chunks of s.chunk tokens:
// within a chunk a masked (C, C) product, across chunks the (F, Dv) prefix (forward) or suffix
// (backward) sums, the products through BLAS; with s.chunk = 1 they run the prefix sums token by token
// (causal_token, the routine linear_attention_step uses, and causal_head_backward): the reference form
// the tests hold the chunks to. Rotations go through librope (one single-threaded call per head and
// buffer, all of a head's tokens at once: ROPE_DTYPE_F32 for float, ROPE_DTYPE_F64 for double).
// (batch, head) pairs run in parallel on OpenMP, each with single-threaded BLAS calls, like
// ops::attention.
#include "linear_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "blas.h"
#include "base/random.h"
#include "rope/rope.hpp"

namespace ops {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("linear attention: " + what); }

// The librope config rotating F-wide feature vectors (see LinearAttentionShape::rope_cfg).
rope_config feature_rope_config(const LinearAttentionShape& s, int64_t F) {
  rope_config cfg = s.rope_cfg;
  cfg.head_dim = cfg.rot_dim = static_cast<int32_t>(F);
  cfg.rot_offset = 0;
  cfg.mode = ROPE_MODE_ON_THE_FLY;
  cfg.table_positions = 0;
  return cfg;
}

// Validates s (and W for favor); returns F.
int64_t check(const LinearAttentionShape& s, const void* W, bool need_W) {
  if (s.B < 1 || s.T < 0 || s.H < 1 || s.Dk < 1 || s.Dv < 1) {
    bad("bad shape B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
        " Dk=" + std::to_string(s.Dk) + " Dv=" + std::to_string(s.Dv) + " (need T >= 0, the rest >= 1)");
  }
  if (!(s.eps >= 0) || !std::isfinite(s.eps)) bad("eps must be finite and >= 0, got " + std::to_string(s.eps));
  int64_t F = s.Dk;
  if (s.feature_map == FeatureMap::favor) {
    if (s.favor_features < 1) bad("favor needs favor_features (m, the rows of W) >= 1");
    if (need_W && W == nullptr) bad("favor needs the projection W (m, Dk); see favor_projection");
    F = s.favor_features;
  } else if (s.favor_features != 0 && s.favor_features != s.Dk) {
    bad("elu_plus_one has F = Dk = " + std::to_string(s.Dk) + "; favor_features must be 0 or Dk");
  }
  if (F > (int64_t{1} << 30)) bad("feature dimension F = " + std::to_string(F) + " is too large");
  if (s.chunk < 1) bad("chunk must be >= 1 (tokens per causal chunk), got " + std::to_string(s.chunk));
  if (s.rope) {
    if (F % 2 != 0) {
      bad("RoPE rotates pairs of the feature vectors, so the feature dimension F must be even; got F = " +
          std::to_string(F) + (s.feature_map == FeatureMap::favor ? " (favor_features)" : " (= Dk for elu_plus_one)"));
    }
    const rope_config& c = s.rope_cfg;
    if (c.rot_dim != c.head_dim || c.rot_offset != 0) {
      bad("rope_cfg must rotate the whole head (rot_dim == head_dim, rot_offset 0): linear attention rotates "
          "whole feature vectors; got rot_dim " + std::to_string(c.rot_dim) + " of head_dim " +
          std::to_string(c.head_dim) + " at offset " + std::to_string(c.rot_offset));
    }
    if (c.n_axes != 1) bad("rope_cfg.n_axes must be 1 (text positions), got " + std::to_string(c.n_axes));
    const bool per_pair = c.freq_factors != nullptr || (c.scaling.type == ROPE_SCALING_LONGROPE &&
                                                        (c.scaling.short_factor || c.scaling.long_factor));
    if (per_pair && c.head_dim != F) {
      bad("rope_cfg's per-pair factors (freq_factors, LongRoPE) must hold F/2 = " + std::to_string(F / 2) +
          " values (head_dim == F), but head_dim is " + std::to_string(c.head_dim));
    }
    if (s.rope_seq_len < 0) bad("rope_seq_len must be >= 0, got " + std::to_string(s.rope_seq_len));
    const rope_config fc = feature_rope_config(s, F);
    rope_plan* plan = nullptr;
    if (rope_plan_create(&fc, &plan) != ROPE_OK) bad(std::string("rope_cfg: ") + rope_last_error());
    rope_plan_destroy(plan);
  }
  return F;
}

// librope's rotation of F-wide feature rows at positions first, first + 1, ...: a plan made from
// rope_cfg with head_dim = F, and single-threaded calls (they run inside the OpenMP loops over heads).
// A failing call inside a parallel region records its message; throw_if_failed() reports it after.
template <typename T>
class Rotator {
 public:
  // Rotations at positions [first, first + n) will be asked for.
  Rotator(const LinearAttentionShape& s, int64_t F, int64_t first, int64_t n) : F_(F) {
    if (!s.rope || n == 0) return;
    try {
      rope_config cfg = feature_rope_config(s, F);
      if (n >= kMinTableRows && first + n <= 4 * n) {
        // One fp32 cos/sin table for every head of this call (bit-identical to on the fly); fp64
        // rotations compute theirs in double regardless.
        cfg.mode = ROPE_MODE_TABLE;
        cfg.table_positions = first + n;
      }
      plan_.emplace(cfg);
      plan_->set_seq_len(s.rope_seq_len > 0 ? s.rope_seq_len : s.start + s.T);
      // Positions are checked once here, at both ends (librope's limits are monotonic in m).
      std::vector<T> probe(F, T(0));
      for (int64_t m : {first, first + n - 1}) {
        plan_->apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(m), rope::bshd(probe.data(), kDtype, 1, 1, 1, F));
      }
    } catch (const rope::Error& e) {
      bad(std::string("RoPE: ") + e.what());
    }
  }

  // y (n rows, stride ldy) = R_p x or R_pᵀ x (backward) for rows x (n, ldx) at positions p = p0 ..
  // p0 + n − 1; the role picks xPos's q or k scale. y may be x (with ldy == ldx). Without RoPE, a copy.
  void rotate(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t n, int64_t p0, rope_role role,
              rope_direction dir = ROPE_FORWARD) const {
    if (n == 0) return;
    if (!plan_) {
      if (y != x) {
        for (int64_t t = 0; t < n; ++t) std::copy(x + t * ldx, x + t * ldx + F_, y + t * ldy);
      }
      return;
    }
    const rope_tensor in{const_cast<T*>(x), kDtype, 1, n, 1, 0, ldx, 0};
    const rope_tensor out{y, kDtype, 1, n, 1, 0, ldy, 0};
    const rope_positions pos = rope::offset_positions(p0);
    const rope_exec exec{1, ROPE_BACKEND_AUTO, nullptr};
    const bool in_place = y == x && ldy == ldx;
    if (rope_apply(plan_->get(), dir, role, &pos, &in, in_place ? nullptr : &out, &exec) != ROPE_OK) {
      if (!failed_.exchange(true)) error_ = rope_last_error();  // first failure only
    }
  }

  void throw_if_failed() const {
    if (failed_) bad("RoPE: " + error_);
  }

 private:
  static constexpr rope_dtype kDtype = std::is_same_v<T, double> ? ROPE_DTYPE_F64 : ROPE_DTYPE_F32;
  static constexpr int64_t kMinTableRows = 16;
  int64_t F_;
  std::optional<rope::Plan> plan_;
  mutable std::atomic<bool> failed_{false};
  mutable std::string error_;
};

// Rows x (n, ldx) → phi (n, ldp): favor writes the logits ℓ_j = w_j·x − ‖x‖²/2 and rowmax[t·ldm] =
// max_j ℓ_j; elu + 1 writes φ(x) itself and rowmax = 0.
template <typename T>
void feature_logits(T* phi, int64_t ldp, T* rowmax, int64_t ldm, const T* x, int64_t ldx, int64_t n, const T* W,
                    const LinearAttentionShape& s, int64_t F) {
  if (s.feature_map == FeatureMap::favor) {
    gemm(false, true, n, F, s.Dk, T(1), x, ldx, W, s.Dk, T(0), phi, ldp);  // (n, F) = x·Wᵀ
    for (int64_t t = 0; t < n; ++t) {
      const T* xr = x + t * ldx;
      T* row = phi + t * ldp;
      T half = 0;
      for (int64_t d = 0; d < s.Dk; ++d) half += xr[d] * xr[d];
      half *= T(0.5);
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < F; ++j) {
        row[j] -= half;
        mx = std::max(mx, row[j]);
      }
      rowmax[t * ldm] = mx;
    }
  } else {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < F; ++j) {
        const T xv = x[t * ldx + j];
        phi[t * ldp + j] = xv > 0 ? xv + T(1) : std::exp(xv);
      }
      rowmax[t * ldm] = 0;
    }
  }
}

// favor: logits → features exp(ℓ − shift)/√m in place (elu + 1: nothing to do).
template <typename T>
void feature_exp(T* row, int64_t F, T shift, const LinearAttentionShape& s) {
  if (s.feature_map != FeatureMap::favor) return;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(F)));
  for (int64_t j = 0; j < F; ++j) row[j] = scale * std::exp(row[j] - shift);
}

// dx (n, ldx) += (∂φ/∂x)ᵀ dphi for rows phi (n, ldp) and dphi (n, F) (overwritten):
// elu + 1: dφ/dx = min(φ, 1); favor: ∂φ_j/∂x = φ_j (w_j − x), the shift held constant.
template <typename T>
void feature_backward(T* dx, int64_t ldx, T* dphi, const T* phi, int64_t ldp, const T* x, int64_t n, const T* W,
                      const LinearAttentionShape& s, int64_t F) {
  if (s.feature_map == FeatureMap::favor) {
    for (int64_t t = 0; t < n; ++t) {
      T sum = 0;
      for (int64_t j = 0; j < F; ++j) {
        dphi[t * F + j] *= phi[t * ldp + j];
        sum += dphi[t * F + j];
      }
      for (int64_t d = 0; d < s.Dk; ++d) dx[t * ldx + d] -= sum * x[t * ldx + d];
    }
    gemm(false, false, n, s.Dk, F, T(1), dphi, F, W, s.Dk, T(1), dx, ldx);  // += (dφ⊙φ)·W
  } else {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < F; ++j) dx[t * ldx + j] += dphi[t * F + j] * std::min(phi[t * ldp + j], T(1));
    }
  }
}

// eps·exp(−s_q − r): eps on the scale of features stabilised by the query shift s_q and key shift r.
template <typename T>
T scaled_eps(double eps, T sq, T r) {
  if (eps == 0) return 0;
  const double e = eps * std::exp(-static_cast<double>(sq) - static_cast<double>(r));
  return static_cast<T>(std::min(e, static_cast<double>(std::numeric_limits<T>::max())));
}

template <typename T>
void scale(T* x, int64_t n, T f) {
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

// Prefix/suffix sums S (F, Dv) and z (F) move from key shift `from` to `to`: × exp(from − to).
template <typename T>
void reshift(T* S, T* z, int64_t F, int64_t Dv, T from, T to) {
  if (from == to) return;
  scale(S, F * Dv, std::exp(from - to));
  scale(z, F, std::exp(from - to));
}

// One causal token of one head: rescale the prefix sums S (F, Dv) and z (F) from key shift r_prev to r
// (r_prev = −inf: empty), add key features c (F, shifted by r; c_rot = R_t c) with value v (Dv), then
// out (Dv) = (R_t a)ᵀ S / (a·z + eps') for query features a (F, shifted by sq; a_rot = R_t a).
// Returns the denominator.
template <typename T>
T causal_token(T* out, T* S, T* z, T r_prev, T r, const T* c, const T* c_rot, const T* v, const T* a, const T* a_rot,
               T sq, int64_t F, int64_t Dv, double eps) {
  reshift(S, z, F, Dv, r_prev, r);
  for (int64_t i = 0; i < F; ++i) {
    z[i] += c[i];
    for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] += c_rot[i] * v[j];
  }
  double den = 0;
  for (int64_t i = 0; i < F; ++i) den += static_cast<double>(a[i]) * z[i];
  const T d = static_cast<T>(den) + scaled_eps(eps, sq, r), inv = T(1) / d;
  std::fill(out, out + Dv, T(0));
  for (int64_t i = 0; i < F; ++i) {
    for (int64_t j = 0; j < Dv; ++j) out[j] += a_rot[i] * S[i * Dv + j];
  }
  scale(out, Dv, inv);
  return d;
}

// The chunked causal form. The key shifts r_t (stride rs) are the token path's: each key's features
// are stabilised by the running max at its own position, and query t weighs key n <= t by
// e^{r_n − r_t} <= 1 and the prefix sums of earlier chunks (kept at the shift r_p of the chunk before's
// last token) by e^{r_p − r_t}, which is what the token path's rescaling amounts to. The shifts are
// constant over most chunks (always for elu + 1), and then every factor is 1 and no exp is evaluated.

// Tokens per chunk of the causal product form for shape s, or 0 when s runs token by token or is not
// causal.
int64_t causal_chunk(const LinearAttentionShape& s) { return s.causal && s.chunk > 1 ? std::min(s.chunk, s.T) : 0; }

// e^{sign·(r − ref)}, exactly 1 where r equals ref (no exp evaluated).
template <typename T>
T shift_factor(T r, T ref, T sign) {
  return r == ref ? T(1) : std::exp(sign * (r - ref));
}

// M (n, n), row stride ldm: zero above the diagonal (key n after query t), and M[t, n] × e^{r_n − r_t}
// on and below it.
template <typename T>
void causal_mask(T* M, int64_t ldm, int64_t n, const T* r, int64_t rs) {
  const bool constant = r[0] == r[(n - 1) * rs];  // r rises monotonically
  for (int64_t t = 0; t < n; ++t) {
    T* row = M + t * ldm;
    if (!constant) {
      for (int64_t i = 0; i < t; ++i) row[i] *= std::exp(r[i * rs] - r[t * rs]);
    }
    std::fill(row + t + 1, row + n, T(0));
  }
}

// Y (n, cols), row stride ldy ← rows of X (n, cols), row stride ldx, × e^{sign·(r_t − ref)} (r_t: the
// rows' shifts, stride rs; sign +1 moves keys to a larger shift ref, −1 moves sums made at ref to the
// rows' own). Y may be X (ldy == ldx); rows whose factor is 1 are copied or left alone.
template <typename T>
void rows_times_shift(T* Y, int64_t ldy, const T* X, int64_t ldx, int64_t n, int64_t cols, const T* r, int64_t rs,
                      T ref, T sign) {
  for (int64_t t = 0; t < n; ++t) {
    const T f = shift_factor(r[t * rs], ref, sign);
    for (int64_t j = 0; j < cols; ++j) Y[t * ldy + j] = X[t * ldx + j] * f;
  }
}

// X (n, cols) itself (stride *ld) when every row's shift is ref, else its rows_times_shift copy in Y
// (*ld set to ldy).
template <typename T>
const T* shifted_rows(T* Y, int64_t ldy, const T* X, int64_t* ld, int64_t n, int64_t cols, const T* r, int64_t rs,
                      T ref, T sign) {
  if (r[0] == ref && r[(n - 1) * rs] == ref) return X;  // r rises monotonically
  rows_times_shift(Y, ldy, X, *ld, n, cols, r, rs, ref, sign);
  *ld = ldy;
  return Y;
}

// One causal head's rows, as the forward and backward see them.
template <typename T>
struct CausalHead {
  const T* pq;   // φ(q_t) (T, F), row stride CF
  const T* pk;   // φ(k_t) (T, F), row stride CF
  const T* ar;   // R_t φ(q_t) (T, F), row stride F
  const T* cr;   // R_t φ(k_t) (T, F), row stride F
  const T* vh;   // v (T, Dv), row stride Cv
  const T* r;    // key shifts r_t (T), stride H
  int64_t CF, Cv, H;
};

// A thread's scratch for the chunked form: the (C, C) products P and W, rows (C, F) and (C, Dv), the
// scaled gradients gs (C, Dv) and a running (F) sum.
template <typename T>
struct ChunkScratch {
  ChunkScratch(int64_t C, int64_t F, int64_t Dv)
      : P(C * C), W(C * C), rowsF(C * F), rowsV(C * Dv), gs(C * Dv), acc(F) {}
  std::vector<T> P, W, rowsF, rowsV, gs, acc;
};

// The causal forward of one head in chunks of C tokens: out (T, Dv) row stride Cv, den (T) stride H;
// S (F, Dv) and z (F) are scratch. Query shifts sq (T).
template <typename T>
void causal_chunked_forward(T* out, T* den, const CausalHead<T>& h, const T* sq, int64_t N, int64_t F, int64_t Dv,
                            int64_t C, double eps, T* S, T* z, ChunkScratch<T>& w) {
  const int64_t CF = h.CF, Cv = h.Cv, H = h.H;
  T r_p = 0;  // shift of the prefix sums S, z (none before the first chunk)
  for (int64_t c0 = 0; c0 < N; c0 += C) {
    const int64_t n = std::min(C, N - c0);
    const T *A = h.ar + c0 * F, *Kr = h.cr + c0 * F, *Aq = h.pq + c0 * CF, *Ku = h.pk + c0 * CF, *V = h.vh + c0 * Cv;
    const T* r = h.r + c0 * H;
    T* O = out + c0 * Cv;
    if (c0 == 0) {
      for (int64_t t = 0; t < n; ++t) std::fill(O + t * Cv, O + t * Cv + Dv, T(0));
    } else {
      gemm(false, false, n, Dv, F, T(1), A, F, S, Dv, T(0), O, Cv);  // earlier chunks: R_t φ(q_t)ᵀ S
      rows_times_shift(O, Cv, O, Cv, n, Dv, r, H, r_p, T(-1));
    }
    gemm(false, true, n, n, F, T(1), A, F, Kr, F, T(0), w.P.data(), C);  // (R_t φ(q_t))·(R_n φ(k_n))
    causal_mask(w.P.data(), C, n, r, H);
    gemm(false, false, n, Dv, n, T(1), w.P.data(), C, V, Cv, T(1), O, Cv);
    gemm(false, true, n, n, F, T(1), Aq, CF, Ku, CF, T(0), w.W.data(), C);  // φ(q_t)·φ(k_n), unrotated
    causal_mask(w.W.data(), C, n, r, H);
    for (int64_t t = 0; t < n; ++t) {
      double d = 0;
      if (c0 > 0) {
        for (int64_t i = 0; i < F; ++i) d += static_cast<double>(Aq[t * CF + i]) * z[i];
        d *= std::exp(static_cast<double>(r_p) - static_cast<double>(r[t * H]));
      }
      for (int64_t i = 0; i <= t; ++i) d += w.W[t * C + i];
      den[(c0 + t) * H] = static_cast<T>(d) + scaled_eps(eps, sq[c0 + t], r[t * H]);
      scale(O + t * Cv, Dv, T(1) / den[(c0 + t) * H]);
    }
    if (c0 + n == N) break;  // no later chunk reads the sums
    // The prefix sums move to the shift of the chunk's last token and take in its keys.
    const T r_e = r[(n - 1) * H];
    if (c0 > 0) reshift(S, z, F, Dv, r_p, r_e);
    int64_t ldk = F;
    const T* Ks = shifted_rows(w.rowsF.data(), F, Kr, &ldk, n, F, r, H, r_e, T(1));
    gemm(true, false, F, Dv, n, T(1), Ks, ldk, V, Cv, c0 > 0 ? T(1) : T(0), S, Dv);
    if (c0 == 0) std::fill(z, z + F, T(0));
    for (int64_t t = 0; t < n; ++t) {
      const T f = shift_factor(r[t * H], r_e, T(1));
      for (int64_t i = 0; i < F; ++i) z[i] += Ku[t * CF + i] * f;
    }
    r_p = r_e;
  }
}

// The forward's saved buffer (see linear_attention_saved_size).
template <typename U>  // T or const T
struct Saved {
  U *phi_q, *phi_k, *den, *shift;  // (B, T, H, F) ×2, (B, T, H) ×2
};

template <typename U>
Saved<U> saved_layout(U* p, const LinearAttentionShape& s, int64_t F) {
  const int64_t n = s.B * s.T * s.H;
  return {p, p + n * F, p + 2 * n * F, p + 2 * n * F + n};
}

}  // namespace

int64_t linear_attention_features(const LinearAttentionShape& s) { return check(s, nullptr, false); }

int64_t linear_attention_saved_size(const LinearAttentionShape& s) {
  return s.B * s.T * s.H * (2 * check(s, nullptr, false) + 2);
}

template <typename T>
void favor_projection(T* W, int64_t m, int64_t D, uint64_t seed, bool orthogonal) {
  if (W == nullptr || m < 1 || D < 1) bad("favor_projection needs W and m, D >= 1");
  auto gaussian = [](uint64_t sd, uint64_t i) {  // Box–Muller on counter-based uniforms
    const double u1 = base::uniform01(sd, 2 * i), u2 = base::uniform01(sd, 2 * i + 1);
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
  };
  std::vector<double> w(m * D);  // (m, D)
  for (int64_t i = 0; i < m * D; ++i) w[i] = gaussian(seed, i);
  if (orthogonal) {
    const uint64_t norm_seed = base::mix64(seed ^ 0x6f7274686f676f6eull);
    for (int64_t b0 = 0; b0 < m; b0 += D) {  // blocks of D rows
      const int64_t rows = std::min(D, m - b0);
      for (int64_t r = 0; r < rows; ++r) {
        double* row = w.data() + (b0 + r) * D;
        for (int pass = 0; pass < 2; ++pass) {  // modified Gram–Schmidt, twice for orthogonality to rounding
          for (int64_t p = 0; p < r; ++p) {
            const double* prev = w.data() + (b0 + p) * D;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += row[d] * prev[d];
            for (int64_t d = 0; d < D; ++d) row[d] -= dot * prev[d];
          }
        }
        double norm = 0;
        for (int64_t d = 0; d < D; ++d) norm += row[d] * row[d];
        scale(row, D, 1 / std::sqrt(norm));
      }
      for (int64_t r = 0; r < rows; ++r) {  // row norms ~ chi_D, as for an unstructured Gaussian row
        double chi = 0;
        for (int64_t d = 0; d < D; ++d) chi += std::pow(gaussian(norm_seed, (b0 + r) * D + d), 2);
        scale(w.data() + (b0 + r) * D, D, std::sqrt(chi));
      }
    }
  }
  for (int64_t i = 0; i < m * D; ++i) W[i] = static_cast<T>(w[i]);
}

template <typename T>
void linear_attention_forward(T* out, T* saved, const T* q, const T* k, const T* v, ProjectionPtr<T> W,
                              const LinearAttentionShape& s) {
  const int64_t F = check(s, W, true);
  if (s.T == 0) return;
  std::vector<T> own(saved == nullptr ? linear_attention_saved_size(s) : 0);
  const Saved<T> sv = saved_layout(saved == nullptr ? own.data() : saved, s, F);
  const Rotator<T> R(s, F, s.start, s.T);
  const int64_t N = s.T, H = s.H, Dv = s.Dv, Ck = H * s.Dk, Cv = H * Dv, CF = H * F;
  const bool favor = s.feature_map == FeatureMap::favor;
#pragma omp parallel
  {
    std::vector<T> sq(N), S(F * Dv), z(F);     // query shifts (T); (F, Dv); (F)
    std::vector<T> ar(N * F), cr(N * F);        // rotated φ(q), φ(k) (T, F)
    const int64_t C = causal_chunk(s);
    ChunkScratch<T> chunk(C, F, Dv);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const T* qh = q + b * N * Ck + h * s.Dk;  // (T, Dk), row stride Ck
      const T* kh = k + b * N * Ck + h * s.Dk;
      const T* vh = v + b * N * Cv + h * Dv;  // (T, Dv), row stride Cv
      T* oh = out + b * N * Cv + h * Dv;
      T* pq = sv.phi_q + (b * N * H + h) * F;  // (T, F), row stride CF
      T* pk = sv.phi_k + (b * N * H + h) * F;
      T* den = sv.den + b * N * H + h;  // (T), stride H
      T* r = sv.shift + b * N * H + h;  // (T), stride H: key shift seen by token t
      feature_logits(pq, CF, sq.data(), 1, qh, Ck, N, W, s, F);
      feature_logits(pk, CF, r, H, kh, Ck, N, W, s, F);
      if (favor) {  // key shifts: running max (causal) or the overall max; then exponentiate
        if (s.causal) {
          for (int64_t t = 1; t < N; ++t) r[t * H] = std::max(r[t * H], r[(t - 1) * H]);
        } else {
          T mx = r[0];
          for (int64_t t = 1; t < N; ++t) mx = std::max(mx, r[t * H]);
          for (int64_t t = 0; t < N; ++t) r[t * H] = mx;
        }
        for (int64_t t = 0; t < N; ++t) {
          feature_exp(pq + t * CF, F, sq[t], s);
          feature_exp(pk + t * CF, F, r[t * H], s);
        }
      }
      R.rotate(ar.data(), F, pq, CF, N, s.start, ROPE_ROLE_QUERY);
      R.rotate(cr.data(), F, pk, CF, N, s.start, ROPE_ROLE_KEY);
      if (C > 0) {
        const CausalHead<T> head{pq, pk, ar.data(), cr.data(), vh, r, CF, Cv, H};
        causal_chunked_forward(oh, den, head, sq.data(), N, F, Dv, C, s.eps, S.data(), z.data(), chunk);
        continue;
      }
      if (s.causal) {
        std::fill(S.begin(), S.end(), T(0));
        std::fill(z.begin(), z.end(), T(0));
        T r_prev = -std::numeric_limits<T>::infinity();
        for (int64_t t = 0; t < N; ++t) {
          den[t * H] = causal_token(oh + t * Cv, S.data(), z.data(), r_prev, r[t * H], pk + t * CF, cr.data() + t * F,
                                    vh + t * Cv, pq + t * CF, ar.data() + t * F, sq[t], F, Dv, s.eps);
          r_prev = r[t * H];
        }
        continue;
      }
      std::fill(z.begin(), z.end(), T(0));
      for (int64_t t = 0; t < N; ++t) {
        for (int64_t i = 0; i < F; ++i) z[i] += pk[t * CF + i];
      }
      gemm(true, false, F, Dv, N, T(1), cr.data(), F, vh, Cv, T(0), S.data(), Dv);   // S (F, Dv) = Σ c̃ vᵀ
      gemm(false, false, N, Dv, F, T(1), ar.data(), F, S.data(), Dv, T(0), oh, Cv);  // numerators (T, Dv)
      for (int64_t t = 0; t < N; ++t) {
        double d = 0;
        for (int64_t i = 0; i < F; ++i) d += static_cast<double>(pq[t * CF + i]) * z[i];
        den[t * H] = static_cast<T>(d) + scaled_eps(s.eps, sq[t], r[t * H]);
        scale(oh + t * Cv, Dv, T(1) / den[t * H]);
      }
    }
  }
  R.throw_if_failed();
}

namespace {

// One (batch, head) of the backward: its rows of the inputs and gradients, and of the forward's saved
// buffer.
template <typename T>
struct HeadBackward {
  const T* vh;   // v (T, Dv), row stride Cv = H * Dv
  const T* gh;   // ∂L/∂out (T, Dv), row stride Cv
  T* dvh;        // ∂L/∂v (T, Dv), row stride Cv: added to
  const T* pq;   // φ(q), φ(k) (T, F), row stride CF = H * F
  const T* pk;
  const T* den;  // denominators d_t (T), stride H
  const T* r;    // key shifts r_t (T), stride H
};

// A thread's scratch for the backward: dφ(q), dφ(k) (T, F); ∂L/∂den (T); S or G (F, Dv); z or u (F);
// y (F); rotated φ(q) (non-causal: later scaled by 1/den) and φ(k) (T, F); causal: the unrotated
// terms added after R_tᵀ (T, F).
template <typename T>
struct BackwardScratch {
  BackwardScratch(int64_t N, int64_t F, int64_t Dv, bool causal)
      : dpq(N * F), dpk(N * F), dd(N), S(F * Dv), z(F), y(F), ar(N * F), cr(N * F), extra(causal ? N * F : 0) {}
  std::vector<T> dpq, dpk, dd, S, z, y, ar, cr, extra;
};

// The causal head's dφ(q) and dφ(k) into w.dpq and w.dpk (T, F), and its ∂L/∂v added into hd.dvh.
// On entry w.ar, w.cr hold R_t φ(q_t), R_t φ(k_t) and w.S, w.z are zero.
template <typename T>
void causal_head_backward(const HeadBackward<T>& hd, BackwardScratch<T>& w, const Rotator<T>& R,
                          const LinearAttentionShape& s, int64_t F) {
  const int64_t N = s.T, H = s.H, Dv = s.Dv, Cv = H * Dv, CF = H * F;
  const T *vh = hd.vh, *gh = hd.gh, *pq = hd.pq, *pk = hd.pk, *den = hd.den, *r = hd.r;
  T* dvh = hd.dvh;
  std::vector<T> &dpq = w.dpq, &dpk = w.dpk, &dd = w.dd, &S = w.S, &z = w.z, &ar = w.ar, &cr = w.cr;
  std::vector<T>& extra = w.extra;
  // Forward order: prefix sums S_t, z_t give dφ(q_t) = R_tᵀ S_t g_t/d_t + dd_t z_t; dpq holds
  // S_t g_t/d_t until all rows are rotated at once, extra holds dd_t z_t.
  T r_prev = -std::numeric_limits<T>::infinity();
  for (int64_t t = 0; t < N; ++t) {
    reshift(S.data(), z.data(), F, Dv, r_prev, r[t * H]);
    r_prev = r[t * H];
    const T* tc = cr.data() + t * F;
    for (int64_t i = 0; i < F; ++i) {
      z[i] += pk[t * CF + i];
      for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] += tc[i] * vh[t * Cv + j];
    }
    const T* ta = ar.data() + t * F;
    const T inv = T(1) / den[t * H];
    T go = 0;  // g_t·out_t
    for (int64_t i = 0; i < F; ++i) {
      T yi = 0;
      for (int64_t j = 0; j < Dv; ++j) yi += S[i * Dv + j] * gh[t * Cv + j];
      dpq[t * F + i] = yi * inv;
      go += ta[i] * dpq[t * F + i];
    }
    dd[t] = -go * inv;
    for (int64_t i = 0; i < F; ++i) extra[t * F + i] = dd[t] * z[i];
  }
  R.rotate(dpq.data(), F, dpq.data(), F, N, s.start, ROPE_ROLE_QUERY, ROPE_BACKWARD);
  for (int64_t i = 0; i < N * F; ++i) dpq[i] += extra[i];
  // Reverse order: suffix sums G_t = Σ_{m≥t} e^{r_t − r_m} R_m φ(q_m) g_mᵀ/d_m (F, Dv) in S
  // and u_t = Σ_{m≥t} e^{r_t − r_m} dd_m φ(q_m) (F) in z give dφ(k_t) = R_tᵀ G_t v_t + u_t and
  // dv_t = G_tᵀ R_t φ(k_t); dpk holds G_t v_t until rotated, extra holds u_t.
  std::fill(S.begin(), S.end(), T(0));
  std::fill(z.begin(), z.end(), T(0));
  for (int64_t t = N - 1; t >= 0; --t) {
    if (t + 1 < N) reshift(S.data(), z.data(), F, Dv, r[t * H], r[(t + 1) * H]);
    const T* ta = ar.data() + t * F;
    const T* tc = cr.data() + t * F;
    const T inv = T(1) / den[t * H];
    for (int64_t i = 0; i < F; ++i) {
      const T ai = ta[i] * inv;
      z[i] += dd[t] * pq[t * CF + i];
      T yi = 0;
      for (int64_t j = 0; j < Dv; ++j) {
        S[i * Dv + j] += ai * gh[t * Cv + j];
        yi += S[i * Dv + j] * vh[t * Cv + j];
        dvh[t * Cv + j] += S[i * Dv + j] * tc[i];
      }
      dpk[t * F + i] = yi;
    }
    std::copy(z.begin(), z.end(), extra.begin() + t * F);
  }
  R.rotate(dpk.data(), F, dpk.data(), F, N, s.start, ROPE_ROLE_KEY, ROPE_BACKWARD);
  for (int64_t i = 0; i < N * F; ++i) dpk[i] += extra[i];
}

// causal_head_backward in chunks of C tokens (see causal_chunked_forward). Forward order, with the
// prefix sums S, z: dφ(q_t) = R_tᵀ (S_t g_t/d_t) + dd_t z_t; reverse order, with the suffix sums G (F,
// Dv) and u (F): dφ(k_n) = R_nᵀ (G_n v_n) + u_n and dv_n += G_nᵀ R_n φ(k_n). Within a chunk the sums
// over the other tokens are masked (C, C) products: W[t, n] = (g_t/d_t)·v_n and P[t, n] = R_t φ(q_t)·R_n
// φ(k_n), n <= t, each × e^{r_n − r_t}.
template <typename T>
struct ChunkedBackward {
  const HeadBackward<T>& hd;
  BackwardScratch<T>& w;
  ChunkScratch<T>& cw;
  int64_t N, F, Dv, H, C;

  // cw.gs (n, Dv) ← g_t/d_t for the n tokens from c0.
  void scaled_gradients(int64_t c0, int64_t n) {
    const int64_t Cv = H * Dv;
    for (int64_t t = 0; t < n; ++t) {
      const T inv = T(1) / hd.den[(c0 + t) * H];
      for (int64_t j = 0; j < Dv; ++j) cw.gs[t * Dv + j] = hd.gh[(c0 + t) * Cv + j] * inv;
    }
  }

  // Forward order: w.dpq (T, F) ← S_t g_t/d_t (to be rotated back), w.dd, and w.extra ← dd_t z_t.
  void query_gradients() {
    const int64_t Cv = H * Dv, CF = H * F;
    T *S = w.S.data(), *z = w.z.data(), *Wm = cw.W.data(), *gs = cw.gs.data();
    T r_p = 0;
    for (int64_t c0 = 0; c0 < N; c0 += C) {
      const int64_t n = std::min(C, N - c0);
      const T *A = w.ar.data() + c0 * F, *Kr = w.cr.data() + c0 * F, *Ku = hd.pk + c0 * CF, *V = hd.vh + c0 * Cv;
      const T* r = hd.r + c0 * H;
      T* dq = w.dpq.data() + c0 * F;
      scaled_gradients(c0, n);
      if (c0 == 0) {
        std::fill(dq, dq + n * F, T(0));
      } else {
        gemm(false, true, n, F, Dv, T(1), gs, Dv, S, Dv, T(0), dq, F);  // earlier chunks: S g_t/d_t
        rows_times_shift(dq, F, dq, F, n, F, r, H, r_p, T(-1));
      }
      gemm(false, true, n, n, Dv, T(1), gs, Dv, V, Cv, T(0), Wm, C);
      causal_mask(Wm, C, n, r, H);
      gemm(false, false, n, F, n, T(1), Wm, C, Kr, F, T(1), dq, F);
      // dd_t = −(R_t φ(q_t))·(S_t g_t/d_t)/d_t; z_t (prefix sums of φ(k) through t) gives dd_t z_t.
      T* zr = cw.acc.data();
      std::copy(z, z + F, zr);
      T shift = r_p;
      for (int64_t t = 0; t < n; ++t) {
        T go = 0;
        for (int64_t i = 0; i < F; ++i) go += A[t * F + i] * dq[t * F + i];
        w.dd[c0 + t] = -go / hd.den[(c0 + t) * H];
        if (c0 + t == 0) {
          std::fill(zr, zr + F, T(0));
        } else if (r[t * H] != shift) {
          scale(zr, F, std::exp(shift - r[t * H]));
        }
        shift = r[t * H];
        for (int64_t i = 0; i < F; ++i) {
          zr[i] += Ku[t * CF + i];
          w.extra[(c0 + t) * F + i] = w.dd[c0 + t] * zr[i];
        }
      }
      if (c0 + n == N) break;  // no later chunk reads the sums
      std::copy(zr, zr + F, z);  // at the chunk's last shift
      const T r_e = r[(n - 1) * H];
      if (c0 > 0 && r_p != r_e) scale(S, F * Dv, std::exp(r_p - r_e));
      int64_t ldk = F;
      const T* Ks = shifted_rows(cw.rowsF.data(), F, Kr, &ldk, n, F, r, H, r_e, T(1));
      gemm(true, false, F, Dv, n, T(1), Ks, ldk, V, Cv, c0 > 0 ? T(1) : T(0), S, Dv);
      r_p = r_e;
    }
  }

  // Reverse order: w.dpk (T, F) ← G_n v_n (to be rotated back), w.extra ← u_n, hd.dvh += G_nᵀ R_n φ(k_n).
  // G (in w.S) and u (in w.z) hold the sums over later chunks at the shift r_f of the next chunk's first
  // token.
  void key_gradients() {
    const int64_t Cv = H * Dv, CF = H * F;
    T *S = w.S.data(), *z = w.z.data(), *P = cw.P.data(), *Wm = cw.W.data(), *gs = cw.gs.data();
    const int64_t last = (N - 1) / C * C;
    T r_f = 0;
    for (int64_t c0 = last; c0 >= 0; c0 -= C) {
      const int64_t n = std::min(C, N - c0);
      const bool later = c0 != last;
      const T *A = w.ar.data() + c0 * F, *Kr = w.cr.data() + c0 * F, *Aq = hd.pq + c0 * CF, *V = hd.vh + c0 * Cv;
      const T* r = hd.r + c0 * H;
      T *dk = w.dpk.data() + c0 * F, *dV = hd.dvh + c0 * Cv;
      scaled_gradients(c0, n);
      if (later) {
        gemm(false, true, n, F, Dv, T(1), V, Cv, S, Dv, T(0), dk, F);  // later chunks: G v_n
        rows_times_shift(dk, F, dk, F, n, F, r, H, r_f, T(1));
        T* dvl = cw.rowsV.data();  // later chunks: Gᵀ R_n φ(k_n)
        gemm(false, false, n, Dv, F, T(1), Kr, F, S, Dv, T(0), dvl, Dv);
        rows_times_shift(dvl, Dv, dvl, Dv, n, Dv, r, H, r_f, T(1));
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t j = 0; j < Dv; ++j) dV[t * Cv + j] += dvl[t * Dv + j];
        }
      } else {
        std::fill(dk, dk + n * F, T(0));
      }
      gemm(false, true, n, n, Dv, T(1), gs, Dv, V, Cv, T(0), Wm, C);
      causal_mask(Wm, C, n, r, H);
      gemm(true, false, n, F, n, T(1), Wm, C, A, F, T(1), dk, F);  // Σ_{t >= n} W[t, n] R_t φ(q_t)
      gemm(false, true, n, n, F, T(1), A, F, Kr, F, T(0), P, C);
      causal_mask(P, C, n, r, H);
      gemm(true, false, n, Dv, n, T(1), P, C, gs, Dv, T(1), dV, Cv);  // Σ_{t >= n} P[t, n] g_t/d_t
      // u_n: suffix sums of dd_t φ(q_t) from n on.
      T* ur = cw.acc.data();
      if (later) {
        std::copy(z, z + F, ur);
      } else {
        std::fill(ur, ur + F, T(0));
      }
      T shift = later ? r_f : r[(n - 1) * H];
      for (int64_t t = n - 1; t >= 0; --t) {
        if (r[t * H] != shift) scale(ur, F, std::exp(r[t * H] - shift));
        shift = r[t * H];
        for (int64_t i = 0; i < F; ++i) {
          ur[i] += w.dd[c0 + t] * Aq[t * CF + i];
          w.extra[(c0 + t) * F + i] = ur[i];
        }
      }
      if (c0 == 0) break;  // no earlier chunk reads the sums
      std::copy(ur, ur + F, z);
      // G moves to this chunk's first shift and takes in its queries.
      const T r0 = r[0];
      if (later && r_f != r0) scale(S, F * Dv, std::exp(r0 - r_f));
      int64_t lda = F;
      const T* As = shifted_rows(cw.rowsF.data(), F, A, &lda, n, F, r, H, r0, T(-1));
      gemm(true, false, F, Dv, n, T(1), As, lda, gs, Dv, later ? T(1) : T(0), S, Dv);
      r_f = r0;
    }
  }
};

// The causal head's dφ(q) and dφ(k) into w.dpq and w.dpk (T, F), and its ∂L/∂v added into hd.dvh, in
// chunks of s.chunk tokens. On entry w.ar, w.cr hold R_t φ(q_t), R_t φ(k_t) and w.S, w.z are zero.
template <typename T>
void causal_chunked_backward(const HeadBackward<T>& hd, BackwardScratch<T>& w, ChunkScratch<T>& cw,
                             const Rotator<T>& R, const LinearAttentionShape& s, int64_t F) {
  const int64_t N = s.T;
  ChunkedBackward<T> cb{hd, w, cw, N, F, s.Dv, s.H, causal_chunk(s)};
  cb.query_gradients();
  R.rotate(w.dpq.data(), F, w.dpq.data(), F, N, s.start, ROPE_ROLE_QUERY, ROPE_BACKWARD);
  for (int64_t i = 0; i < N * F; ++i) w.dpq[i] += w.extra[i];
  cb.key_gradients();
  R.rotate(w.dpk.data(), F, w.dpk.data(), F, N, s.start, ROPE_ROLE_KEY, ROPE_BACKWARD);
  for (int64_t i = 0; i < N * F; ++i) w.dpk[i] += w.extra[i];
}

// The non-causal head's dφ(q) and dφ(k) into w.dpq and w.dpk (T, F), and its ∂L/∂v added into hd.dvh,
// through BLAS on the whole-sequence summaries S = Σ c̃ vᵀ and G (F, Dv). On entry w.ar, w.cr hold
// R_t φ(q_t), R_t φ(k_t) (w.ar is then scaled by 1/d_t) and w.z is zero.
template <typename T>
void noncausal_head_backward(const HeadBackward<T>& hd, BackwardScratch<T>& w, const Rotator<T>& R,
                             const LinearAttentionShape& s, int64_t F) {
  const int64_t N = s.T, H = s.H, Dv = s.Dv, Cv = H * Dv, CF = H * F;
  const T *vh = hd.vh, *gh = hd.gh, *pq = hd.pq, *pk = hd.pk, *den = hd.den;
  T* dvh = hd.dvh;
  std::vector<T> &dpq = w.dpq, &dpk = w.dpk, &dd = w.dd, &S = w.S, &z = w.z, &ar = w.ar, &cr = w.cr;
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t i = 0; i < F; ++i) z[i] += pk[t * CF + i];
  }
  gemm(true, false, F, Dv, N, T(1), cr.data(), F, vh, Cv, T(0), S.data(), Dv);   // S (F, Dv) = Σ c̃ vᵀ
  gemm(false, true, N, F, Dv, T(1), gh, Cv, S.data(), Dv, T(0), dpq.data(), F);  // (T, F) g·Sᵀ
  std::vector<T>& u = w.y;
  std::fill(u.begin(), u.end(), T(0));  // u (F) = Σ_m dd_m φ(q_m)
  for (int64_t t = 0; t < N; ++t) {
    T* row = dpq.data() + t * F;
    const T inv = T(1) / den[t * H];
    T go = 0;
    for (int64_t i = 0; i < F; ++i) {
      row[i] *= inv;
      go += ar[t * F + i] * row[i];
      ar[t * F + i] *= inv;  // R_t φ(q_t)/d_t
    }
    dd[t] = -go * inv;
    for (int64_t i = 0; i < F; ++i) u[i] += dd[t] * pq[t * CF + i];
  }
  R.rotate(dpq.data(), F, dpq.data(), F, N, s.start, ROPE_ROLE_QUERY, ROPE_BACKWARD);  // R_tᵀ S g_t/d_t
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t i = 0; i < F; ++i) dpq[t * F + i] += dd[t] * z[i];
  }
  gemm(true, false, F, Dv, N, T(1), ar.data(), F, gh, Cv, T(0), S.data(), Dv);    // G (F, Dv)
  gemm(false, false, N, Dv, F, T(1), cr.data(), F, S.data(), Dv, T(1), dvh, Cv);  // dv += c̃·G
  gemm(false, true, N, F, Dv, T(1), vh, Cv, S.data(), Dv, T(0), dpk.data(), F);   // (T, F) v·Gᵀ
  R.rotate(dpk.data(), F, dpk.data(), F, N, s.start, ROPE_ROLE_KEY, ROPE_BACKWARD);
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t i = 0; i < F; ++i) dpk[t * F + i] += u[i];
  }
}

}  // namespace

template <typename T>
void linear_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* saved, const T* q, const T* k, const T* v,
                               ProjectionPtr<T> W, const LinearAttentionShape& s) {
  const int64_t F = check(s, W, true);
  if (s.T == 0) return;
  if (saved == nullptr) bad("the backward needs the forward's saved buffer");
  const Saved<const T> sv = saved_layout(saved, s, F);
  const Rotator<T> R(s, F, s.start, s.T);
  const int64_t N = s.T, H = s.H, Dv = s.Dv, Ck = H * s.Dk, Cv = H * Dv, CF = H * F;
#pragma omp parallel
  {
    BackwardScratch<T> w(N, F, Dv, s.causal);
    ChunkScratch<T> cw(causal_chunk(s), F, Dv);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const T* qh = q + b * N * Ck + h * s.Dk;  // (T, Dk), row stride Ck
      const T* kh = k + b * N * Ck + h * s.Dk;
      T* dqh = dq + b * N * Ck + h * s.Dk;
      T* dkh = dk + b * N * Ck + h * s.Dk;
      const HeadBackward<T> hd{.vh = v + b * N * Cv + h * Dv,
                               .gh = dout + b * N * Cv + h * Dv,
                               .dvh = dv + b * N * Cv + h * Dv,
                               .pq = sv.phi_q + (b * N * H + h) * F,
                               .pk = sv.phi_k + (b * N * H + h) * F,
                               .den = sv.den + b * N * H + h,
                               .r = sv.shift + b * N * H + h};
      R.rotate(w.ar.data(), F, hd.pq, CF, N, s.start, ROPE_ROLE_QUERY);  // R_t φ(q_t)
      R.rotate(w.cr.data(), F, hd.pk, CF, N, s.start, ROPE_ROLE_KEY);    // R_t φ(k_t)
      std::fill(w.S.begin(), w.S.end(), T(0));
      std::fill(w.z.begin(), w.z.end(), T(0));
      if (causal_chunk(s) > 0) {
        causal_chunked_backward(hd, w, cw, R, s, F);
      } else if (s.causal) {
        causal_head_backward(hd, w, R, s, F);
      } else {
        noncausal_head_backward(hd, w, R, s, F);
      }
      feature_backward(dqh, Ck, w.dpq.data(), hd.pq, CF, qh, N, W, s, F);
      feature_backward(dkh, Ck, w.dpk.data(), hd.pk, CF, kh, N, W, s, F);
    }
  }
  R.throw_if_failed();
}

template <typename T>
LinearAttentionState<T> linear_attention_state(const LinearAttentionShape& s) {
  const int64_t F = check(s, nullptr, false);
  LinearAttentionState<T> st;
  st.pos = s.start;
  st.S.assign(s.B * s.H * F * s.Dv, T(0));
  st.z.assign(s.B * s.H * F, T(0));
  st.shift.assign(s.B * s.H, -std::numeric_limits<T>::infinity());
  return st;
}

template <typename T>
void linear_attention_step(T* out, const T* q, const T* k, const T* v, ProjectionPtr<T> W,
                           const LinearAttentionShape& s, LinearAttentionState<T>& st) {
  const int64_t F = check(s, W, true), H = s.H, Dv = s.Dv, Ck = H * s.Dk, Cv = H * Dv;
  if (static_cast<int64_t>(st.S.size()) != s.B * H * F * Dv || static_cast<int64_t>(st.z.size()) != s.B * H * F ||
      static_cast<int64_t>(st.shift.size()) != s.B * H) {
    bad("the state does not match the shape (make it with linear_attention_state)");
  }
  const Rotator<T> R(s, F, st.pos, 1);
#pragma omp parallel
  {
    std::vector<T> a(F), c(F), a_rot(F), c_rot(F);  // φ(q), φ(k), R φ(q), R φ(k) (F)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      T sq, kmax;
      feature_logits(a.data(), F, &sq, 1, q + b * Ck + h * s.Dk, Ck, 1, W, s, F);
      feature_logits(c.data(), F, &kmax, 1, k + b * Ck + h * s.Dk, Ck, 1, W, s, F);
      const T r_prev = st.shift[bh], r = std::max(r_prev, kmax);
      feature_exp(a.data(), F, sq, s);
      feature_exp(c.data(), F, r, s);
      R.rotate(a_rot.data(), F, a.data(), F, 1, st.pos, ROPE_ROLE_QUERY);
      R.rotate(c_rot.data(), F, c.data(), F, 1, st.pos, ROPE_ROLE_KEY);
      causal_token(out + b * Cv + h * Dv, st.S.data() + bh * F * Dv, st.z.data() + bh * F, r_prev, r, c.data(),
                   c_rot.data(), v + b * Cv + h * Dv, a.data(), a_rot.data(), sq, F, Dv, s.eps);
      st.shift[bh] = r;
    }
  }
  R.throw_if_failed();
  ++st.pos;
}

#define LINEAR_ATTENTION_INSTANTIATE(T)                                                                    \
  template void favor_projection<T>(T*, int64_t, int64_t, uint64_t, bool);                                 \
  template void linear_attention_forward<T>(T*, T*, const T*, const T*, const T*, ProjectionPtr<T>,        \
                                            const LinearAttentionShape&);                                  \
  template void linear_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                             ProjectionPtr<T>, const LinearAttentionShape&);               \
  template LinearAttentionState<T> linear_attention_state<T>(const LinearAttentionShape&);                 \
  template void linear_attention_step<T>(T*, const T*, const T*, const T*, ProjectionPtr<T>,               \
                                         const LinearAttentionShape&, LinearAttentionState<T>&);
LINEAR_ATTENTION_INSTANTIATE(float)
LINEAR_ATTENTION_INSTANTIATE(double)
#undef LINEAR_ATTENTION_INSTANTIATE

}  // namespace ops
