// Attention forward/backward (see attention.h). Each (batch, head) pair is independent: OpenMP
// splits the pairs, and the products per pair (block_gemm: oneDNN's or OpenBLAS's sgemm in fp32 by
// shape, BLAS in fp64) run single-threaded inside the region (neither nests), so one thread pool serves
// the whole engine.
//
// Work follows the mask. Query rows go in blocks of kRowBlock; a block only multiplies the key
// columns that some row in it can see (causal: up to the block's last row; key padding: up to the
// last real key), so a causal pass does a little over half the products of the full one. Columns a
// row cannot see get probability 0 exactly, as −FLT_MAX in the scores would give; a row that sees
// no key at all attends uniformly to all T keys, as Hugging Face's finfo.min mask gives. The
// backward reads each row's extent back from the probabilities (the last nonzero column). With row
// statistics instead of probabilities, the backward first remakes each block's probabilities: the
// same product over the same columns and the same exponentials, scaled by the kept maximum and
// 1/sum, so every later step, and the gradients, equal the kept-probabilities path bit for bit. That
// per-block path serves fp64, fewer than 16 query rows and the kept probabilities; fp32 from 16 rows
// on, nothing kept or row statistics, runs the fused kernels (flash_attention.h) in both passes.
//
// fp32 rows go through a vectorised softmax (vmath-inl.h's Exp, runtime-dispatched SIMD); fp64
// rows keep std::exp in double, as before, for the gradient checks.
#include "attention.h"

#include "attention_bf16.h"
#include "attention_mask.h"
#include "flash_attention.h"
#include "linear.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {

// row (n) = softmax(row), in place; −inf entries get probability 0. n ≥ 1 and some entry finite.
// stats (2) = the largest entry and 1 / Σ exp(entry − largest): what ExpScaleKernel needs to make the
// same row again.
void SoftmaxKernel(float* row, int64_t n, float* stats) {
  const hn::ScalableTag<float> d;
  const float ninf = -std::numeric_limits<float>::infinity();
  auto vmax = hn::Set(d, ninf);
  ForEachVector(d, n, [&](int64_t i, size_t c) { vmax = hn::Max(vmax, LoadPart(d, row + i, c, ninf)); });
  const auto mx = hn::MaxOfLanes(d, vmax);
  auto vsum = hn::Zero(d);
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    const auto e = Exp(d, hn::Sub(LoadPart(d, row + i, c, ninf), mx));  // padding lanes: e^−inf = 0
    vsum = hn::Add(vsum, e);
    StorePart(d, e, row + i, c);
  });
  const auto inv = hn::Div(hn::Set(d, 1.0f), hn::SumOfLanes(d, vsum));
  ForEachVector(d, n, [&](int64_t i, size_t c) { StorePart(d, hn::Mul(LoadPart(d, row + i, c), inv), row + i, c); });
  stats[0] = hn::GetLane(mx);
  stats[1] = hn::GetLane(inv);
}

// row (n) = exp(row − stats[0]) · stats[1], in place: SoftmaxKernel's probabilities again, bit for bit,
// from the same scores and its stats.
void ExpScaleKernel(float* row, int64_t n, const float* stats) {
  const hn::ScalableTag<float> d;
  const float ninf = -std::numeric_limits<float>::infinity();
  const auto mx = hn::Set(d, stats[0]), inv = hn::Set(d, stats[1]);
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    StorePart(d, hn::Mul(Exp(d, hn::Sub(LoadPart(d, row + i, c, ninf), mx)), inv), row + i, c);
  });
}

// Softmax backward of one row: ds (n) = a ⊙ (ds − Σ a·ds), in place.
void SoftmaxBackwardKernel(const float* a, float* ds, int64_t n) {
  const hn::ScalableTag<float> d;
  auto vin = hn::Zero(d);
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    vin = hn::MulAdd(LoadPart(d, a + i, c), LoadPart(d, ds + i, c), vin);
  });
  const auto in = hn::SumOfLanes(d, vin);
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    StorePart(d, hn::Mul(LoadPart(d, a + i, c), hn::Sub(LoadPart(d, ds + i, c), in)), ds + i, c);
  });
}

// One decoding query of one head over n keys (key j at k + j·stride, value j at v + j·stride):
// out (D) = softmax(q·kⱼ · scale)·v, the keys and values fp32 or bf16 bits (a bf16 cache, widened
// exactly as they are read: the same operations on the same values as the fp32 kernel over the
// widened cache); p (n) is scratch for the scores, then the probabilities. It stays beside DecodeGroup
// for the head-major bf16 cache, where a head's keys are one run already: its sums over the values
// live in registers across all keys, where DecodeGroup's go through L1 a key at a time, and
// DecodeGroup with one head ran that cache 1.1-2.8x slower (`roformer bench attention --decode 32`).
template <typename KV>
void DecodeHead(float* out, const float* q, const KV* k, const KV* v, int64_t n, int64_t D, int64_t stride, float scale,
                float* p) {
  const hn::ScalableTag<float> d;
  // Position-major caches put key rows H·D apart, each in a page of its own in a long cache, where the
  // hardware prefetchers do not follow: the rows kAhead keys on are asked for while this one is read.
  constexpr int64_t kAhead = 8;
  const int64_t row_bytes = D * static_cast<int64_t>(sizeof(KV));
  auto prefetch_row = [&](const KV* row) {
    for (int64_t b = 0; b < row_bytes; b += 64) hwy::Prefetch(reinterpret_cast<const char*>(row) + b);
  };
  for (int64_t j = 0; j < n; ++j) {
    const KV* kj = k + j * stride;
    if (j + kAhead < n) prefetch_row(kj + kAhead * stride);
    auto acc = hn::Zero(d);
    ForEachVector(d, D, [&](int64_t i, size_t c) { acc = hn::MulAdd(LoadPart(d, q + i, c), LoadPart(d, kj + i, c), acc); });
    p[j] = hn::GetLane(hn::SumOfLanes(d, acc)) * scale;
  }
  float stats[2];
  SoftmaxKernel(p, n, stats);
  // Σ_j p_j·v_j: every lane adds the keys in order, one fused multiply-add each. Four vectors of D at
  // a time over all keys (four independent chains, each key row's 4·L values read once, in order),
  // then the rest a vector at a time.
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 4 * L <= D; i += 4 * L) {
    auto o0 = hn::Zero(d), o1 = hn::Zero(d), o2 = hn::Zero(d), o3 = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const auto pj = hn::Set(d, p[j]);
      const KV* vj = v + j * stride + i;
      if (i == 0 && j + kAhead < n) prefetch_row(vj + kAhead * stride);
      o0 = hn::MulAdd(pj, LoadPart(d, vj, L), o0);
      o1 = hn::MulAdd(pj, LoadPart(d, vj + L, L), o1);
      o2 = hn::MulAdd(pj, LoadPart(d, vj + 2 * L, L), o2);
      o3 = hn::MulAdd(pj, LoadPart(d, vj + 3 * L, L), o3);
    }
    hn::StoreU(o0, d, out + i), hn::StoreU(o1, d, out + i + L), hn::StoreU(o2, d, out + i + 2 * L), hn::StoreU(o3, d, out + i + 3 * L);
  }
  ForEachVector(d, D - i, [&](int64_t at, size_t c) {
    auto o = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) o = hn::MulAdd(hn::Set(d, p[j]), LoadPart(d, v + j * stride + i + at, c), o);
    StorePart(d, o, out + i + at, c);
  });
}
// One decoding query over n keys for a group of `heads` consecutive heads of a position-major cache
// (key j's heads side by side at k + j·stride, as are its values): DecodeHead's result for each head bit
// for bit (each head's dot products, softmax and per-lane sums in the same order), but reading each key's
// heads·D values as one run, key after key. A row of a position-major cache is then one sequential
// stream that the hardware prefetchers follow, where DecodeHead's per-head walk jumps H·D values a key.
// q, out (heads·D); p (heads, n) is scratch for the scores, then the probabilities. The sums over the
// values are kept in `out` (L1) as each key's run goes by.
template <typename KV>
void DecodeGroup(float* out, const float* q, const KV* k, const KV* v, int64_t n, int64_t heads, int64_t D,
                 int64_t stride, float scale, float* p) {
  const hn::ScalableTag<float> d;
  const int64_t width = heads * D, run_bytes = width * static_cast<int64_t>(sizeof(KV));
  // A group narrower than the key rows is a strided walk again: ask for the runs kAhead keys on.
  constexpr int64_t kAhead = 8;
  const bool strided = width < stride;
  auto prefetch_run = [&](const KV* run) {
    for (int64_t b = 0; b < run_bytes; b += 64) hwy::Prefetch(reinterpret_cast<const char*>(run) + b);
  };
  for (int64_t j = 0; j < n; ++j) {
    const KV* kj = k + j * stride;
    if (strided && j + kAhead < n) prefetch_run(kj + kAhead * stride);
    for (int64_t h = 0; h < heads; ++h) {
      auto acc = hn::Zero(d);
      ForEachVector(d, D, [&](int64_t i, size_t c) {
        acc = hn::MulAdd(LoadPart(d, q + h * D + i, c), LoadPart(d, kj + h * D + i, c), acc);
      });
      p[h * n + j] = hn::GetLane(hn::SumOfLanes(d, acc)) * scale;
    }
  }
  float stats[2];
  for (int64_t h = 0; h < heads; ++h) SoftmaxKernel(p + h * n, n, stats);
  std::fill(out, out + width, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const KV* vj = v + j * stride;
    if (strided && j + kAhead < n) prefetch_run(vj + kAhead * stride);
    for (int64_t h = 0; h < heads; ++h) {
      const auto pj = hn::Set(d, p[h * n + j]);
      ForEachVector(d, D, [&](int64_t i, size_t c) {
        float* o = out + h * D + i;
        StorePart(d, hn::MulAdd(pj, LoadPart(d, vj + h * D + i, c), LoadPart(d, o, c)), o, c);
      });
    }
  }
}
void DecodeGroupKernel(float* out, const float* q, const float* k, const float* v, int64_t n, int64_t heads, int64_t D,
                       int64_t stride, float scale, float* p) {
  DecodeGroup(out, q, k, v, n, heads, D, stride, scale, p);
}
void DecodeGroupBf16Kernel(float* out, const float* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads,
                           int64_t D, int64_t stride, float scale, float* p) {
  DecodeGroup(out, q, k, v, n, heads, D, stride, scale, p);
}
void DecodeHeadKernel(float* out, const float* q, const float* k, const float* v, int64_t n, int64_t D, int64_t stride,
                      float scale, float* p) {
  DecodeHead(out, q, k, v, n, D, stride, scale, p);
}
void DecodeHeadBf16Kernel(float* out, const float* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t D,
                          int64_t stride, float scale, float* p) {
  DecodeHead(out, q, k, v, n, D, stride, scale, p);
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "blas.h"
#include "onednn.h"
#include "base/random.h"
#include "base/threads.h"
#include "dropout.h"

namespace ops {

HWY_EXPORT(SoftmaxKernel);
HWY_EXPORT(DecodeHeadKernel);
HWY_EXPORT(DecodeHeadBf16Kernel);
HWY_EXPORT(DecodeGroupKernel);
HWY_EXPORT(DecodeGroupBf16Kernel);
HWY_EXPORT(ExpScaleKernel);
HWY_EXPORT(SoftmaxBackwardKernel);

namespace {

constexpr int64_t kRowBlock = 64;  // query rows per block of products
// The fused kernels (inference, and training from row statistics) run from this many query rows on. Its products run down
// vectors of query rows: below a vector's worth (16 on AVX-512) most lanes idle, and these per-block
// products are faster (after 512 cached keys: 0.22× at 1 query, 1.10× at 16; `roformer bench attention
// --fused --mask causal --batches 1 --lengths 1,4,16 --past 512 --thread-counts 1`, Zen 4). The bf16
// kernel crosses over at about 8 rows (0.64× at 1 query, 0.97× at 8, 1.28× at 16; the same command
// with --precision bf16 --heads 12 --lengths 1,4,8,16,32), so the same threshold serves both.
constexpr int64_t kFusedMinRows = 16;

// row (Tn): scores in [0, lim) → probabilities over the visible keys, 0 elsewhere (keys: the batch's
// key mask or null); a row that sees no key gets 1/Tn everywhere. stats (2), when given, get the
// largest visible score and 1/Σexp; given those as `again`, a second call makes the first one's
// probabilities again from the same scores, bit for bit.
template <typename T>
void softmax_row(T* row, int64_t Tn, const RowKeys& rk, const int64_t* keys, T* stats, const T* again = nullptr) {
  if (rk.uniform) {  // every key masked: all scores equal −FLT_MAX, softmax is uniform
    std::fill(row, row + Tn, static_cast<T>(1.0 / static_cast<double>(Tn)));
    return;
  }
  const int64_t n = rk.lim;
  if constexpr (std::is_same_v<T, float>) {
    if (keys) {
      for (int64_t j = 0; j < n; ++j) {
        if (keys[j] == 0) row[j] = -std::numeric_limits<float>::infinity();
      }
    }
    float unused[2];
    if (again) {
      HWY_DYNAMIC_DISPATCH(ExpScaleKernel)(row, n, again);
    } else {
      HWY_DYNAMIC_DISPATCH(SoftmaxKernel)(row, n, stats ? stats : unused);
    }
  } else {
    T mx = again ? again[0] : -std::numeric_limits<T>::infinity();
    if (!again) {
      for (int64_t j = 0; j < n; ++j) {
        if (!keys || keys[j] != 0) mx = row[j] > mx ? row[j] : mx;
      }
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = keys && keys[j] == 0 ? T(0) : static_cast<T>(std::exp(static_cast<double>(row[j] - mx)));
      sum += row[j];
    }
    const T inv = again ? again[1] : static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    if (stats) stats[0] = mx, stats[1] = inv;
  }
  std::fill(row + n, row + Tn, T(0));
}

// 1 + the last column of row (Tk) with a nonzero probability (0 if none). Causal rows other than
// uniform ones end at the diagonal (column q_start + t), so the scan starts there.
template <typename T>
int64_t row_extent(const T* row, int64_t diagonal, int64_t Tn, bool causal) {
  int64_t j = causal && row[Tn - 1] == T(0) ? std::clamp<int64_t>(diagonal, -1, Tn - 1) : Tn - 1;
  while (j >= 0 && row[j] == T(0)) --j;
  return j + 1;
}

template <typename T>
void softmax_backward_row(const T* a, T* ds, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    HWY_DYNAMIC_DISPATCH(SoftmaxBackwardKernel)(a, ds, n);
  } else {
    double inner = 0;
    for (int64_t j = 0; j < n; ++j) inner += static_cast<double>(a[j]) * ds[j];
    const T in = static_cast<T>(inner);
    for (int64_t j = 0; j < n; ++j) ds[j] = a[j] * (ds[j] - in);
  }
}

// ops::gemm's product for one block. fp32: a full block of kRowBlock query rows whose product has 2^20
// multiply-adds or more and an untransposed left operand (q·kᵀ, p·v, dout·vᵀ and ds·k over 256 keys or
// more at head dim 64) runs on oneDNN's sgemm, 1.1–1.25× OpenBLAS's on AVX2 and AVX-512 whichever
// kernels OpenBLAS picked for the CPU. The rest stays on OpenBLAS: the backward's pᵀ·dout and dsᵀ·q
// (oneDNN 0.92–1.01× on AVX-512, 0.8× on AVX2), small blocks (at 64 keys oneDNN's fixed cost per call
// puts it at 0.92× on AVX-512) and the rows of a partial block or a decoding step, not measured
// (`roformer bench gemm`, docs/perf.md). fp64: BLAS, the reference the fp32 path is checked against.
void block_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  constexpr int64_t kOnednnFrom = int64_t{1} << 20;
  const bool onednn = !ta && M == kRowBlock && M * N * K >= kOnednnFrom;
  if (onednn && onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void block_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// One (batch, head)'s two products per block of query rows: block_gemm in T, or, with bf16_products
// (fp32 only), bf16 operands through oneDNN's matmul, the head's keys and values converted once in
// load_head.
template <typename T>
class BlockProducts {
 public:
  BlockProducts(const T* k, const T* v, int64_t C, int64_t D, int64_t Tn, bool bf16)
      : k_(k), v_(v), C_(C), D_(D), Tn_(Tn), bf16_(bf16) {}
  void load_head(int64_t koff) {
    koff_ = koff;
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) bf16_ops_.load_head(k_ + koff, v_ + koff, Tn_, C_, D_);
    }
  }
  // a (rows, E), row stride Tn, written = scale · q (rows, D; row stride C) · kᵀ.
  void scores(T* a, const T* q, int64_t rows, int64_t E, T scale) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_ops_.scores(a, Tn_, q, C_, rows, E, scale);
    }
    block_gemm(false, true, rows, E, D_, scale, q, C_, k_ + koff_, C_, T(0), a, Tn_);
  }
  // out (rows, D), row stride C, written = p (rows, E; row stride Tn) · v.
  void mix(T* out, const T* p, int64_t rows, int64_t E) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_ops_.mix(out, C_, p, Tn_, rows, E);
    }
    block_gemm(false, false, rows, D_, E, T(1), p, Tn_, v_ + koff_, C_, T(0), out, C_);
  }
  // The backward: dv (E, D) += pᵀ·dout; dp (rows, E; row stride Tn) written = dout·vᵀ, for
  // dout (rows, D; row stride C).
  void value_grads(T* dv, T* dp, const T* p, const T* dout, int64_t rows, int64_t E) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_ops_.value_grads(dv + koff_, dp, Tn_, p, dout, C_, rows, E);
    }
    block_gemm(true, false, E, D_, rows, T(1), p, Tn_, dout, C_, T(1), dv + koff_, C_);
    block_gemm(false, true, rows, E, D_, T(1), dout, C_, v_ + koff_, C_, T(0), dp, Tn_);
  }
  // dq (rows, D) += scale · ds·k; dk (E, D) += scale · dsᵀ·q, for ds (rows, E; row stride Tn).
  void query_key_grads(T* dq, T* dk, const T* ds, const T* q, int64_t rows, int64_t E, T scale) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_ops_.query_key_grads(dq, dk + koff_, ds, Tn_, q, C_, rows, E, scale);
    }
    block_gemm(false, false, rows, D_, E, scale, ds, Tn_, k_ + koff_, C_, T(1), dq, C_);
    block_gemm(true, false, E, D_, rows, scale, ds, Tn_, q, C_, T(1), dk + koff_, C_);
  }

 private:
  const T *k_, *v_;
  int64_t C_, D_, Tn_, koff_ = 0;
  bool bf16_;
  Bf16AttentionProducts bf16_ops_;
};

}  // namespace

int64_t attention_saved_size(const AttentionShape& s) {
  switch (s.saved) {
    case AttentionSaved::none: return 0;
    case AttentionSaved::probabilities: return s.B * s.H * s.T * s.keys();
    case AttentionSaved::row_stats: return s.B * s.H * s.T * 2;
  }
  return 0;
}

namespace {

// attention_forward without the fused kernel: per block of query rows, its products and softmax.
template <typename T>
void forward_blocks(T* out, T* saved, const T* q, const T* k, const T* v, const int64_t* key_mask,
                    const AttentionShape& s) {
  const int64_t C = s.H * s.D, Tq = s.T, Tn = s.keys(), TT = Tq * Tn;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
  const KeyMask mask(key_mask, s);
  T* att = saved && s.saved == AttentionSaved::probabilities ? saved : nullptr;
  T* stats = saved && s.saved == AttentionSaved::row_stats ? saved : nullptr;  // (B, H, T, 2)
#pragma omp parallel
  {
    std::vector<T> dropped(s.dropout_p > 0 ? kRowBlock * Tn : 0);  // a block of rows after dropout
    std::vector<T> tile(att ? 0 : kRowBlock * Tn);                   // no att: one block of rows at a time
    BlockProducts<T> products(k, v, C, s.D, Tn, s.bf16_products);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const int64_t off = b * Tq * C + h * s.D;  // head h of query 0 in batch b
      products.load_head(b * s.key_stride() * C + h * s.D);  // head h of key 0 in batch b
      const uint64_t seed = s.dropout_p > 0 ? dropout_block_seed(s, b, h) : 0;
      for (int64_t r0 = 0; r0 < Tq; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, Tq - r0);
        int64_t E = 0;  // key columns this block reads
        for (int64_t t = r0; t < r0 + rows; ++t) E = std::max(E, mask.row(b, t, s.causal).extent(Tn));
        T* a = att ? att + bh * TT + r0 * Tn : tile.data();  // (rows, Tk): rows r0 .. of the (T, Tk) block
        products.scores(a, q + off + r0 * C, rows, E, scale);  // q·kᵀ/√D
        for (int64_t t = r0; t < r0 + rows; ++t) {
          softmax_row(a + (t - r0) * Tn, Tn, mask.row(b, t, s.causal), mask.keys(b),
                      stats ? stats + (bh * Tq + t) * 2 : nullptr);
        }
        const T* p = a;
        if (s.dropout_p > 0) {
          for (int64_t t = r0; t < r0 + rows; ++t) {
            dropout_apply(dropped.data() + (t - r0) * Tn, a + (t - r0) * Tn, E, s.dropout_p, seed, t * Tn, false);
          }
          p = dropped.data();
        }
        products.mix(out + off + r0 * C, p, rows, E);  // att·v
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* saved, const T* q, const T* k, const T* v, const int64_t* key_mask,
                       const AttentionShape& s, uint16_t* out16) {
  if (saved && s.saved == AttentionSaved::none) throw std::invalid_argument("attention_forward: a saved buffer for AttentionSaved::none");
  if ((s.bf16_products || out16) && !std::is_same_v<T, float>) {
    throw std::invalid_argument("attention_forward: bf16 products and outputs are for fp32 tensors");
  }
  // fp32 from kFusedMinRows queries on: a fused kernel, for inference and for row statistics (which
  // need their buffer: without one, nothing is kept, as the per-block path allows).
  if constexpr (std::is_same_v<T, float>) {
    float* stats = s.saved == AttentionSaved::row_stats ? saved : nullptr;
    if (s.T >= kFusedMinRows && (s.saved == AttentionSaved::none || stats)) {
      if (flash_attention_applies(s)) {
        flash_attention_forward(out, q, k, v, key_mask, s, stats);
        if (out16) round_to_bf16(out16, out, s.B * s.T * s.H * s.D);
        return;
      }
      if (flash_attention_bf16_applies(s)) return flash_attention_forward_bf16(out, q, k, v, key_mask, s, stats, out16);
    }
  }
  forward_blocks(out, saved, q, k, v, key_mask, s);
  if constexpr (std::is_same_v<T, float>) {
    if (out16) round_to_bf16(out16, out, s.B * s.T * s.H * s.D);
  }
}

void attention_forward_blocks(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                              const AttentionShape& s) {
  if (s.saved != AttentionSaved::none) throw std::invalid_argument("attention_forward_blocks: nothing saved");
  forward_blocks(out, static_cast<float*>(nullptr), q, k, v, key_mask, s);
}

namespace {

// attention_decode_forward over keys and values of type KV (T, or bf16 bits with T = float).
template <typename T, typename KV>
void decode_forward(T* out, const T* q, const KV* k, const KV* v, const DecodeAttentionShape& s) {
  const int64_t C = s.H * s.D, D = s.D;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  int64_t longest = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    if (s.keys[b] < 1 || s.keys[b] > s.kv_stride) {
      throw std::invalid_argument("attention_decode_forward: row " + std::to_string(b) + " has " +
                                  std::to_string(s.keys[b]) + " keys");
    }
    longest = std::max(longest, s.keys[b]);
  }
  const bool parallel = s.B * s.H * longest * D >= base::kParallelMinElements;
  if constexpr (std::is_same_v<T, float>) {
    if (!s.heads_major) {  // position-major: a row's heads together, in G groups (DecodeGroup)
      // One group (a row's whole key runs) per item once the rows alone give every thread work; fewer
      // rows (a lone sequence, a few beams) split the heads.
      const int64_t threads = parallel ? omp_get_max_threads() : 1;
      const int64_t G = s.B >= threads ? 1 : std::min(s.H, (threads + s.B - 1) / s.B);
#pragma omp parallel if (parallel)
      {
        std::vector<float> p((s.H + G - 1) / G * longest);  // a group's scores, then probabilities
#pragma omp for schedule(dynamic, 1)
        for (int64_t bg = 0; bg < s.B * G; ++bg) {
          const int64_t b = bg / G, h0 = bg % G * s.H / G, h1 = (bg % G + 1) * s.H / G;
          const int64_t at = (s.kv_rows ? s.kv_rows[b] : b) * s.kv_stride * C + h0 * D;  // key 0, head h0
          const float* qb = q + b * C + h0 * D;
          float* ob = out + b * C + h0 * D;
          if constexpr (std::is_same_v<KV, uint16_t>) {
            HWY_DYNAMIC_DISPATCH(DecodeGroupBf16Kernel)(ob, qb, k + at, v + at, s.keys[b], h1 - h0, D, C, scale, p.data());
          } else {
            HWY_DYNAMIC_DISPATCH(DecodeGroupKernel)(ob, qb, k + at, v + at, s.keys[b], h1 - h0, D, C, scale, p.data());
          }
        }
      }
      return;
    }
  }
#pragma omp parallel if (parallel)
  {
    std::vector<T> p(longest);  // one row's scores, then probabilities
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H, n = s.keys[b];
      const int64_t head = s.heads_major ? h * s.kv_stride * D : h * D, key_stride = s.heads_major ? D : C;
      const int64_t row = (s.kv_rows ? s.kv_rows[b] : b) * s.kv_stride * C + head;  // key 0 of head h
      const T* qh = q + b * C + h * D;
      T* oh = out + b * C + h * D;
      if constexpr (std::is_same_v<KV, uint16_t>) {
        HWY_DYNAMIC_DISPATCH(DecodeHeadBf16Kernel)(oh, qh, k + row, v + row, n, D, key_stride, scale, p.data());
      } else if constexpr (std::is_same_v<T, float>) {
        HWY_DYNAMIC_DISPATCH(DecodeHeadKernel)(oh, qh, k + row, v + row, n, D, key_stride, scale, p.data());
      } else {
        for (int64_t j = 0; j < n; ++j) {  // q·kᵀ/√D
          const T* kj = k + row + j * key_stride;
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qh[d] * kj[d];
          p[j] = dot * scale;
        }
        softmax_row(p.data(), n, RowKeys{n, false}, nullptr, static_cast<T*>(nullptr));
        std::fill(oh, oh + D, T(0));
        for (int64_t j = 0; j < n; ++j) {  // Σ p_j v_j
          const T* vj = v + row + j * key_stride;
          for (int64_t d = 0; d < D; ++d) oh[d] += p[j] * vj[d];
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_decode_forward(T* out, const T* q, const T* k, const T* v, const DecodeAttentionShape& s) {
  decode_forward(out, q, k, v, s);
}

void attention_decode_forward(float* out, const float* q, const uint16_t* k, const uint16_t* v,
                              const DecodeAttentionShape& s) {
  decode_forward(out, q, k, v, s);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* saved, const T* q, const T* k, const T* v,
                        const int64_t* key_mask, const AttentionShape& s, const T* out) {
  const int64_t C = s.H * s.D, Tq = s.T, Tn = s.keys(), TT = Tq * Tn;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.D)));
  if (s.saved == AttentionSaved::none || !saved) throw std::invalid_argument("attention_backward: the forward saved nothing");
  if constexpr (std::is_same_v<T, float>) {  // training from row statistics: the fused backwards
    if (out && s.T >= kFusedMinRows && s.saved == AttentionSaved::row_stats) {
      if (flash_attention_applies(s)) {
        return flash_attention_backward(dq, dk, dv, dout, out, saved, q, k, v, key_mask, s);
      }
      if (flash_attention_bf16_applies(s)) {
        return flash_attention_backward_bf16(dq, dk, dv, dout, out, saved, q, k, v, key_mask, s);
      }
    }
  }
  const bool recompute = s.saved == AttentionSaved::row_stats;
  const KeyMask mask(recompute ? key_mask : nullptr, s);  // the probabilities carry the mask themselves
#pragma omp parallel
  {
    std::vector<T> ds(kRowBlock * Tn), dropped(s.dropout_p > 0 ? kRowBlock * Tn : 0);  // a block of rows each
    std::vector<T> tile(recompute ? kRowBlock * Tn : 0);  // row statistics: the block's probabilities again
    BlockProducts<T> products(k, v, C, s.D, Tn, s.bf16_products);  // recomputes the forward's q·kᵀ, bit for bit
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const int64_t off = b * Tq * C + h * s.D;
      const int64_t koff = b * s.key_stride() * C + h * s.D;
      products.load_head(koff);
      const uint64_t seed = s.dropout_p > 0 ? dropout_block_seed(s, b, h) : 0;
      for (int64_t r0 = 0; r0 < Tq; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, Tq - r0);
        const T* a = saved + bh * TT + r0 * Tn;  // (rows, Tk): the block's probabilities
        if (recompute) {  // the forward's products and softmax over the same columns, bit for bit
          int64_t E = 0;
          for (int64_t t = r0; t < r0 + rows; ++t) E = std::max(E, mask.row(b, t, s.causal).extent(Tn));
          products.scores(tile.data(), q + off + r0 * C, rows, E, scale);
          for (int64_t t = r0; t < r0 + rows; ++t) {
            softmax_row(tile.data() + (t - r0) * Tn, Tn, mask.row(b, t, s.causal), mask.keys(b), static_cast<T*>(nullptr),
                        saved + (bh * Tq + t) * 2);
          }
          a = tile.data();
        }
        int64_t E = 0;  // from here on as with kept probabilities: the columns up to the last nonzero
        for (int64_t t = r0; t < r0 + rows; ++t) {
          E = std::max(E, row_extent(a + (t - r0) * Tn, s.q_start + t, Tn, s.causal));
        }
        if (E == 0) continue;
        const T* p = a;  // the probabilities that multiplied v
        if (s.dropout_p > 0) {
          for (int64_t t = r0; t < r0 + rows; ++t) {
            dropout_apply(dropped.data() + (t - r0) * Tn, a + (t - r0) * Tn, E, s.dropout_p, seed, t * Tn, false);
          }
          p = dropped.data();
        }
        products.value_grads(dv, ds.data(), p, dout + off + r0 * C, rows, E);  // dv += pᵀ·dout; dp = dout·vᵀ
        for (int64_t t = r0; t < r0 + rows; ++t) {
          T* dr = ds.data() + (t - r0) * Tn;
          if (s.dropout_p > 0) dropout_apply(dr, dr, E, s.dropout_p, seed, t * Tn, false);  // datt = dropout'(dp)
          // Softmax backward: dscore = att ⊙ (datt − Σ_j att·datt). Columns past a row's extent have
          // att = 0, so [0, E) covers every row of the block.
          softmax_backward_row(a + (t - r0) * Tn, dr, E);
        }
        products.query_key_grads(dq + off + r0 * C, dk, ds.data(), q + off + r0 * C, rows, E, scale);  // ·k/√D, ·q/√D
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                       const AttentionShape&, uint16_t*);
template void attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                        const int64_t*, const AttentionShape&, uint16_t*);
template void attention_decode_forward<float>(float*, const float*, const float*, const float*,
                                              const DecodeAttentionShape&);
template void attention_decode_forward<double>(double*, const double*, const double*, const double*,
                                               const DecodeAttentionShape&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const int64_t*, const AttentionShape&,
                                        const float*);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, const int64_t*, const AttentionShape&,
                                         const double*);

}  // namespace ops
#endif  // HWY_ONCE
