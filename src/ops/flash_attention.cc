// The fused fp32 kernels of softmax attention (see flash_attention.h): the forward, for inference and
// for training (row statistics), and the backward (described where flash_attention_backward starts
// below). In the forward OpenMP splits the (batch, head, block of kBlockRows query rows) triples
// statically; a block runs in FlashBlockKernel, compiled once per SIMD target (Highway) and
// dispatched at run time:
//  - its queries are copied transposed to the thread's buffer qt (D, kBlockRows) first (so out may
//    be q), with each row's key limit; from 1,024 queries and keys (kPackFromRows) the thread copies
//    the pair's keys and values into buffers of its own, rows D and Dp apart, as the blocks first need
//    them (see FlashWork::kpack), so that the products walk contiguous rows;
//  - for each tile of kTileKeys keys that some row of the block sees (the causal upper triangle,
//    trailing padding and prefix limits end the loop; a tile of padding only is skipped), the
//    scores come transposed, st (keys, rows) = k·qt, from a register-blocked product (4 keys × up
//    to 4 vectors of rows, each step broadcasting a key's element), over the vectors of rows that
//    see some key of the tile. A vector of rows is then a vector of lanes all through the online
//    softmax: masked scores become −inf (a key past a row's limit, a padded key), each lane's
//    maximum over the tile is a vertical max, the running maxima, sums and rescaling factors are
//    vectors, st becomes exp(score − max); no horizontal reduction anywhere. The scale 1/√D enters
//    there, in one fused multiply-subtract (score·scale − max), not by rounding scaled queries: an
//    error in a score is an error in its exponential, relative to the score's size. Attention
//    dropout then zeroes and scales p by its counter-based mask (dropout-inl.h), after the sums.
//    The block's fp32 outputs are rescaled where a maximum grew and accumulate p·v (the same
//    product, p read from st transposed, values read packed or in place, or, unpacked with D not a
//    multiple of the vector width, from a copy of the tile padded to whole vectors);
//  - the rows are divided by their sums and written (with the statistics m, 1/l for training); a row
//    that sees no key gets the mean of all Tk values (uniform attention, as Hugging Face's finfo.min
//    mask gives; under dropout the mean of the kept ones, scaled).
// A thread holds about (2·D + kTileKeys)·kBlockRows floats, and a pair's packed keys and values
// (about 2·Tk·D floats): memory linear in Tk.
#include "flash_attention.h"

#include "attention_mask.h"

#ifndef OPS_FLASH_ATTENTION_WORK_
#define OPS_FLASH_ATTENTION_WORK_
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ops {

constexpr int64_t kBlockRows = 64;  // query rows per block
constexpr int64_t kTileKeys = 64;   // keys per tile: a multiple of every target's vector width
constexpr int64_t kMaxLanes = 16;   // the widest target's fp32 lanes (AVX-512): buffers padded to it
// The forward packs each pair's keys and values from this many queries and keys (FlashWork::kpack).
constexpr int64_t kPackFromRows = 1024;

// What one thread's blocks read and where they work (FlashBlockKernel).
struct FlashWork {
  // The call's.
  const float *q, *k, *v;
  float* out;
  const KeyMask* mask;
  const AttentionShape* s;
  float scale;
  // The thread's buffers: the block's queries transposed (D, kBlockRows), a tile's scores (unscaled)
  // transposed then its probabilities (kTileKeys, kBlockRows), the block's outputs (kBlockRows, Dp),
  // each row's running maximum and sum, last rescaling factor and key limit (kBlockRows; limit −1:
  // sees nothing), a tile's values padded to Dp columns (kTileKeys, Dp: when D is not a multiple of
  // the vector width) and the head's mean value (Dp: for rows that see no key).
  float *qt, *st, *o, *m, *l, *alpha, *vt, *mean;
  int32_t* lim;
  int64_t mean_bh = -1;    // mean holds pair mean_bh's
  // A pair's keys and values packed, (Tk, D) and (Tk, Dp), from kPackFromRows queries and keys (else
  // null): pair packed_bh's first `packed` keys, copied as the blocks first need them (a causal block
  // copies only what it reads). In place a head's rows lie C floats apart (3 KB in a 12 × 64 model:
  // about a page per key, and a tile's rows on a quarter of L1's sets), and every block walks all of
  // them. Packed, the forward ran 1.3× faster at 8,192 keys and 1.1× at 2,048, 2–3% at 1,024, the same
  // at 512, and 4–10% slower at 128–256, where too few blocks share the copy (12 heads of 64, full,
  // one thread, Zen 4). The backward, a head per thread, always packs: 1.4× at 8,192 keys.
  float *kpack = nullptr, *vpack = nullptr;
  int64_t packed_bh = -1, packed = 0;
  float* stats = nullptr;  // training: (B, H, T, 2) each row's (m, 1/l) written, else null
  // Attention dropout: the block's pair's mask (drop.keep null without), and the block's first row.
  base::Keep keep{0, 0.0};
  BlockDropout drop{};
  int64_t r0 = 0;
};

// What one thread's heads read and where they work in the backward (BackwardHeadKernel). Dp: D
// rounded up to whole vectors of the widest target (a target's own Dp is at most that).
struct FlashBackWork {
  // The call's.
  const float *q, *k, *v, *out, *dout, *stats;
  float *dq, *dk, *dv;
  const KeyMask* mask;
  const AttentionShape* s;
  float scale;
  // The head's: dK, dV (Tk, Dp) accumulated, and its keys and values packed, rows padded to Dp
  // columns (Tk, Dp: contiguous rows for the products, see FlashWork::kpack). The block's: queries and
  // dO transposed (D, kBlockRows), as rows padded to Dp (kBlockRows, Dp; the queries scaled), its dQ
  // (kBlockRows, Dp), each row's m, 1/l, Δ and key limit. The tile's: scores then probabilities, dP
  // then dS (kTileKeys, kBlockRows).
  float *dK, *dV, *kp, *vp, *qt, *gt, *qs, *go, *dQ, *m, *inv, *delta, *st, *dpt;
  int32_t* lim;
  // Attention dropout: the head's mask (drop.keep null without), and the block's first row.
  base::Keep keep{0, 0.0};
  BlockDropout drop{};
  int64_t r0 = 0;
};

}  // namespace ops
#endif  // OPS_FLASH_ATTENTION_WORK_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/flash_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/dropout-inl.h"
#include "ops/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {

// Register blocks of the products: kRows rows × kColVectors vectors of accumulators, plus one vector
// per column of the right operand and a broadcast: 16 + 4 + 1 of AVX-512's 32 registers, 8 + 2 + 1 of
// the 16 of AVX2 and SSE4.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kColVectors = 4;
constexpr int kRows = 4;
#else
constexpr int kColVectors = 2;
constexpr int kRows = 6;
#endif

// c (R rows, NV vectors; row stride ldc) written, or with add accumulated, = a (R, K) · b (K, NV
// vectors; row stride ldb), where a's element (r, x) is a[r·ar + x·ax].
template <int R, int NV>
HWY_INLINE void PanelProduct(const float* HWY_RESTRICT a, int64_t ar, int64_t ax, const float* HWY_RESTRICT b,
                             int64_t ldb, int64_t K, float* HWY_RESTRICT c, int64_t ldc, bool add) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) acc[r][j] = add ? hn::LoadU(d, c + r * ldc + j * N) : hn::Zero(d);
  }
  for (int64_t x = 0; x < K; ++x) {
    hn::Vec<decltype(d)> bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = hn::LoadU(d, b + x * ldb + j * N);
    for (int r = 0; r < R; ++r) {
      const auto av = hn::Set(d, a[r * ar + x * ax]);
      for (int j = 0; j < NV; ++j) acc[r][j] = hn::MulAdd(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) hn::StoreU(acc[r][j], d, c + r * ldc + j * N);
  }
}

// R rows of c over `vectors` vectors of columns, in panels of kColVectors and a narrower last one.
template <int R>
HWY_INLINE void RowsProduct(const float* a, int64_t ar, int64_t ax, const float* b, int64_t ldb, int64_t K, float* c,
                            int64_t ldc, int64_t vectors, bool add) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  int64_t j = 0;
  for (; j + kColVectors <= vectors; j += kColVectors) {
    PanelProduct<R, kColVectors>(a, ar, ax, b + j * N, ldb, K, c + j * N, ldc, add);
  }
  switch (vectors - j) {
    case 3: return PanelProduct<R, 3>(a, ar, ax, b + j * N, ldb, K, c + j * N, ldc, add);
    case 2: return PanelProduct<R, 2>(a, ar, ax, b + j * N, ldb, K, c + j * N, ldc, add);
    case 1: return PanelProduct<R, 1>(a, ar, ax, b + j * N, ldb, K, c + j * N, ldc, add);
    default: return;
  }
}

// c (M, vectors·Lanes) written or accumulated = a (M, K) · b (K, vectors·Lanes), strides as PanelProduct.
void Product(const float* a, int64_t ar, int64_t ax, const float* b, int64_t ldb, int64_t M, int64_t K, float* c,
             int64_t ldc, int64_t vectors, bool add) {
  int64_t i = 0;
  for (; i + kRows <= M; i += kRows) {
    RowsProduct<kRows>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
  }
  switch (M - i) {
    case 5: return RowsProduct<5>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 4: return RowsProduct<4>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 3: return RowsProduct<3>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 2: return RowsProduct<2>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 1: return RowsProduct<1>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, vectors, add);
    default: return;
  }
}

// Attention dropout's mask for rows t0.. (a row per lane) at key j.
template <class D>
HWY_INLINE hn::Mask<D> KeptLanes(D d, const BlockDropout& drop, const base::Keep& keep, int64_t t0, int64_t j) {
  return KeepStrided(d, static_cast<uint64_t>(t0) * drop.Tk + static_cast<uint64_t>(j), drop.Tk, keep.stream(),
                     keep.threshold());
}

// x's lanes after attention dropout with mask `kept`: kept ones times drop.scale, the others 0.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Dropped(D d, hn::Mask<D> kept, V x, const BlockDropout& drop) {
  return hn::IfThenElseZero(kept, hn::Mul(x, hn::Set(d, drop.scale)));
}

// The online softmax of one tile's scores, st (n keys, rows [i0, i1) in whole vectors) for keys
// j0.., a vector of rows at a time: scores past a row's limit (when `limited`) and of padded keys
// (padded: the batch's key mask, when the tile has padding) become −inf, st becomes
// exp(score·scale − running maximum) (after attention dropout, where there is), and each row's maximum
// (of scaled scores), sum and rescaling factor are updated.
void TileSoftmax(FlashWork& w, int64_t i0, int64_t i1, int64_t j0, int64_t n, bool limited, const int64_t* padded) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = i0; i < i1; i += N) {
    const auto lim = hn::LoadU(di, w.lim + i);
    auto vmax = hn::Set(d, ninf);
    for (int64_t j = 0; j < n; ++j) {
      float* sj = w.st + j * kBlockRows + i;
      auto x = hn::LoadU(d, sj);
      if (limited) {  // −inf in the rows whose limit is at or before key j0 + j
        const auto seen = hn::RebindMask(d, hn::Lt(hn::Set(di, static_cast<int32_t>(j0 + j)), lim));
        x = hn::IfThenElse(seen, x, hn::Set(d, ninf));
      }
      if (padded && padded[j0 + j] == 0) x = hn::Set(d, ninf);
      if (limited || padded) hn::StoreU(x, d, sj);
      vmax = hn::Max(vmax, x);
    }
    const auto scale = hn::Set(d, w.scale);  // > 0: the largest scaled score is the largest score, scaled
    const auto m_old = hn::LoadU(d, w.m + i), m_new = hn::Max(m_old, hn::Mul(vmax, scale));
    // Rows that have seen no key yet subtract 0 instead: e^−inf = 0, not e^NaN.
    const auto m_sub = hn::IfThenZeroElse(hn::Eq(m_new, hn::Set(d, ninf)), m_new);
    auto vsum = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      float* sj = w.st + j * kBlockRows + i;
      auto p = Exp(d, hn::MulSub(hn::LoadU(d, sj), scale, m_sub));
      vsum = hn::Add(vsum, p);  // the softmax's sum: before dropout
      if (w.drop.keep) p = Dropped(d, KeptLanes(d, w.drop, w.keep, w.r0 + i, j0 + j), p, w.drop);
      hn::StoreU(p, d, sj);
    }
    const auto alpha = Exp(d, hn::Sub(m_old, m_sub));
    hn::StoreU(hn::MulAdd(hn::LoadU(d, w.l + i), alpha, vsum), d, w.l + i);
    hn::StoreU(m_new, d, w.m + i);
    hn::StoreU(alpha, d, w.alpha + i);
  }
}

// Rows [r0, r0 + rows) of pair bh written: o / l, or for a row that sees no key the mean of all Tk
// values (the head's, kept for the thread's next such row of the same pair; with dropout the row's
// own, dropped_uniform_row); with stats, each row's (m, 1/l) beside them ((0, 1) for a row that sees
// no key: unused).
void WriteRows(FlashWork& w, int64_t bh, int64_t r0, int64_t rows, int64_t Dp) {
  const hn::ScalableTag<float> d;
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  for (int64_t i = 0; i < rows; ++i) {
    float* oi = w.out + (b * s.T + r0 + i) * C + h * D;
    if (w.stats) {
      float* st = w.stats + (bh * s.T + r0 + i) * 2;
      st[0] = w.lim[i] < 0 ? 0.0f : w.m[i];
      st[1] = w.lim[i] < 0 ? 1.0f : 1.0f / w.l[i];
    }
    if (w.lim[i] < 0 && w.drop.keep) {
      dropped_uniform_row(oi, vh, Tk, D, C, w.drop, r0 + i);
      continue;
    }
    if (w.lim[i] < 0) {
      if (w.mean_bh != bh) {
        w.mean_bh = bh;
        std::fill(w.mean, w.mean + Dp, 0.0f);
        for (int64_t j = 0; j < Tk; ++j) {
          ForEachVector(d, D, [&](int64_t x, size_t c) {
            StorePart(d, hn::Add(LoadPart(d, w.mean + x, c), LoadPart(d, vh + j * C + x, c)), w.mean + x, c);
          });
        }
        const float inv = 1.0f / static_cast<float>(Tk);
        for (int64_t x = 0; x < D; ++x) w.mean[x] *= inv;
      }
      std::copy(w.mean, w.mean + D, oi);
      continue;
    }
    const auto inv = hn::Set(d, 1.0f / w.l[i]);
    ForEachVector(d, D, [&](int64_t x, size_t c) {
      StorePart(d, hn::Mul(hn::LoadU(d, w.o + i * Dp + x), inv), oi + x, c);
    });
  }
}

// The pair's keys and values [w.packed, end) (k_in, v_in: in place, rows C apart) packed into w.kpack
// and w.vpack (rows D and Dp apart, the padding zero).
void PackKeys(FlashWork& w, const float* k_in, const float* v_in, int64_t C, int64_t D, int64_t Dp, int64_t end) {
  for (; w.packed < end; ++w.packed) {
    const int64_t j = w.packed;
    std::copy(k_in + j * C, k_in + j * C + D, w.kpack + j * D);
    std::copy(v_in + j * C, v_in + j * C + D, w.vpack + j * Dp);
    std::fill(w.vpack + j * Dp + D, w.vpack + (j + 1) * Dp, 0.0f);
  }
}

// Rows [r0, r0 + rows) of pair bh (see the file comment).
void FlashBlockKernel(FlashWork& w, int64_t bh, int64_t r0, int64_t rows) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), vectors = kBlockRows / N;  // query vectors
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const int64_t Dp = (D + N - 1) / N * N;  // output columns: whole vectors
  const float* k_in = w.k + b * s.key_stride() * C + h * D;  // head h of key 0 in batch b, in place
  const float* v_in = w.v + b * s.key_stride() * C + h * D;
  if (w.kpack && w.packed_bh != bh) w.packed_bh = bh, w.packed = 0;
  const float *kh = w.kpack ? w.kpack : k_in, *vh = w.kpack ? w.vpack : v_in;  // what the products read
  const int64_t ks = w.kpack ? D : C, vs = w.kpack ? Dp : C;
  const bool direct_v = w.kpack || Dp == D;  // values read where they are, else from vt (rows Dp apart)
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t* keys = w.mask->keys(b);

  // The rows' key limits (−1: sees no key, or past the block), the extent of the keys any row sees,
  // each query vector's, and the queries, transposed; the pair's dropout mask.
  set_block_dropout(w, s, bh);
  w.r0 = r0;
  int64_t E = 0, vector_extent[kBlockRows] = {};
  for (int64_t i = 0; i < kBlockRows; ++i) {
    int64_t lim = -1;
    if (i < rows) {
      const RowKeys rk = w.mask->row(b, r0 + i, s.causal);
      lim = rk.uniform ? -1 : rk.lim;
      const float* qi = w.q + (b * s.T + r0 + i) * C + h * D;
      for (int64_t x = 0; x < D; ++x) w.qt[x * kBlockRows + i] = qi[x];
    } else {
      for (int64_t x = 0; x < D; ++x) w.qt[x * kBlockRows + i] = 0.0f;
    }
    w.lim[i] = static_cast<int32_t>(lim);
    E = std::max(E, lim);
    vector_extent[i / N] = std::max(vector_extent[i / N], lim);
    w.m[i] = ninf;
    w.l[i] = 0;
  }
  std::fill(w.o, w.o + rows * Dp, 0.0f);

  // The next tile's keys and values, where they are still to be packed or are read in place, are asked
  // for while this one's are multiplied: rows C apart, from L3 at long lengths (a head's keys and
  // values outgrow L2 past about 2,048 keys at head dim 64).
  const int64_t line = 64 / static_cast<int64_t>(sizeof(float));
  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    for (int64_t j = std::max(j0 + kTileKeys, w.kpack ? w.packed : 0); j < std::min(j0 + 2 * kTileKeys, E); ++j) {
      for (int64_t x = 0; x < D; x += line) hwy::Prefetch(k_in + j * C + x), hwy::Prefetch(v_in + j * C + x);
    }
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});  // keys of the tile some row sees
    int64_t v0, v1;  // the query vectors [v0, v1) hold the rows that see a key of the tile
    tile_vectors(vector_extent, vectors, j0, v0, v1);
    const int64_t i0 = v0 * N, i1 = std::min(v1 * N, rows), real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only
    if (w.kpack) PackKeys(w, k_in, v_in, C, D, Dp, j0 + n);
    bool limited = false;     // some row of those vectors sees only part of the tile
    for (int64_t i = i0; i < v1 * N; ++i) limited |= w.lim[i] < j0 + n;
    // Scores, transposed: st (n, kBlockRows) columns [i0, v1·N) = k (n, D) · qt.
    Product(kh + j0 * ks, ks, 1, w.qt + i0, kBlockRows, n, D, w.st + i0, kBlockRows, v1 - v0, false);
    TileSoftmax(w, i0, v1 * N, j0, n, limited, real < n ? keys : nullptr);
    for (int64_t i = i0; i < i1; ++i) {  // outputs of rows whose maximum grew: rescaled
      if (w.alpha[i] == 1.0f) continue;
      float* oi = w.o + i * Dp;
      const auto va = hn::Set(d, w.alpha[i]);
      for (int64_t x = 0; x < Dp; x += N) hn::StoreU(hn::Mul(hn::LoadU(d, oi + x), va), d, oi + x);
    }
    const float* vt = vh + j0 * vs;
    if (!direct_v) {
      for (int64_t j = 0; j < n; ++j) {
        std::copy(vh + (j0 + j) * C, vh + (j0 + j) * C + D, w.vt + j * Dp);
        std::fill(w.vt + j * Dp + D, w.vt + (j + 1) * Dp, 0.0f);
      }
      vt = w.vt;
    }
    // o (rows, Dp) rows [i0, i1) += p (rows, n) · v (n, Dp), p read from st transposed.
    if (i1 > i0) {
      Product(w.st + i0, 1, kBlockRows, vt, direct_v ? vs : Dp, i1 - i0, n, w.o + i0 * Dp, Dp, Dp / N, true);
    }
  }

  WriteRows(w, bh, r0, rows, Dp);
}

// The backward's tile of n keys from j0, rows [i0, i1) in whole vectors: st's scores become the
// probabilities exp(score·scale − m)·inv (0 past a row's limit or at a padded key: padded, the batch's key
// mask, or null), after dropout where there is, and dpt's dP the score gradients P ⊙ (dP − Δ) (unscaled,
// dP through dropout's backward).
void TileGrads(FlashBackWork& w, int64_t i0, int64_t i1, int64_t j0, int64_t n, const int64_t* padded) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto scale = hn::Set(d, w.scale);
  for (int64_t i = i0; i < i1; i += N) {
    const auto lim = hn::LoadU(di, w.lim + i);
    const auto m = hn::LoadU(d, w.m + i), inv = hn::LoadU(d, w.inv + i), delta = hn::LoadU(d, w.delta + i);
    for (int64_t j = 0; j < n; ++j) {
      float *sj = w.st + j * kBlockRows + i, *dj = w.dpt + j * kBlockRows + i;
      const auto seen = hn::RebindMask(d, hn::Lt(hn::Set(di, static_cast<int32_t>(j0 + j)), lim));
      auto x = hn::IfThenElse(seen, hn::LoadU(d, sj), ninf);
      if (padded && padded[j0 + j] == 0) x = ninf;
      const auto p = hn::Mul(Exp(d, hn::MulSub(x, scale, m)), inv);
      auto dp = hn::LoadU(d, dj);  // the gradient of the probabilities after dropout
      if (w.drop.keep) {  // P's own gradient: dropout's backward; dV's product reads P after dropout
        const int64_t t0 = w.r0 + i;
        const auto kept = KeptLanes(d, w.drop, w.keep, t0, j0 + j);
        hn::StoreU(Dropped(d, kept, p, w.drop), d, sj);
        dp = Dropped(d, kept, dp, w.drop);
      } else {
        hn::StoreU(p, d, sj);
      }
      hn::StoreU(hn::Mul(p, hn::Sub(dp, delta)), d, dj);
    }
  }
}

// x's rows [0, rows) (row stride C, D each) into t (D, kBlockRows) transposed and, times r_scale, into
// r (kBlockRows, Dp) as rows padded with zeros; rows past `rows` zero in both.
void LoadBlock(const float* x, int64_t C, int64_t rows, int64_t D, int64_t Dp, float r_scale, float* t, float* r) {
  for (int64_t i = 0; i < kBlockRows; ++i) {
    float* ri = r + i * Dp;
    if (i >= rows) {
      for (int64_t c = 0; c < D; ++c) t[c * kBlockRows + i] = 0.0f;
      std::fill(ri, ri + Dp, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < D; ++c) t[c * kBlockRows + i] = x[i * C + c], ri[c] = x[i * C + c] * r_scale;
    std::fill(ri + D, ri + Dp, 0.0f);
  }
}

// Rows [r0, r0 + rows) of pair bh: their dq rows, and their share of the head's dK and dV (see
// flash_attention_backward's comment in the HWY_ONCE part).
void BackwardBlock(FlashBackWork& w, int64_t bh, int64_t r0, int64_t rows, int64_t Dp) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), vectors = kBlockRows / N;
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const float* kh = w.k + b * s.key_stride() * C + h * D;
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  const int64_t row0 = (b * s.T + r0) * C + h * D;  // head h of query row r0 in batch b
  const int64_t* keys = w.mask->keys(b);

  int64_t vector_extent[kBlockRows];
  const int64_t E = backward_block_rows(*w.mask, s, w.stats, bh, r0, rows, kBlockRows, N, w.lim, w.m, w.inv,
                                        vector_extent);
  w.r0 = r0;
  if (E > 0) {
    LoadBlock(w.q + row0, C, rows, D, Dp, w.scale, w.qt, w.qs);
    LoadBlock(w.dout + row0, C, rows, D, Dp, 1.0f, w.gt, w.go);
    std::fill(w.dQ, w.dQ + kBlockRows * Dp, 0.0f);
    for (int64_t i = 0; i < kBlockRows; ++i) {  // Δ = rowsum(dO ⊙ out), for rows that see a key
      double delta = 0;
      for (int64_t x = 0; w.lim[i] >= 0 && x < D; ++x) {
        delta += static_cast<double>(w.go[i * Dp + x]) * w.out[row0 + i * C + x];
      }
      w.delta[i] = static_cast<float>(delta);
    }
  }
  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});
    int64_t v0, v1;
    tile_vectors(vector_extent, vectors, j0, v0, v1);
    const int64_t i0 = v0 * N, i1 = v1 * N, real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only: P = 0
    // st, dpt (n, rows) columns [i0, i1) = k (n, D) · qt and v (n, D) · gt: the scores and dP.
    Product(w.kp + j0 * Dp, Dp, 1, w.qt + i0, kBlockRows, n, D, w.st + i0, kBlockRows, v1 - v0, false);
    Product(w.vp + j0 * Dp, Dp, 1, w.gt + i0, kBlockRows, n, D, w.dpt + i0, kBlockRows, v1 - v0, false);
    TileGrads(w, i0, i1, j0, n, real < n ? keys : nullptr);
    // dV, dK (n, Dp) += Pᵀ · dO and dSᵀ · (scale·q) over rows [i0, i1): P and dS read from st, dpt.
    Product(w.st + i0, kBlockRows, 1, w.go + i0 * Dp, Dp, n, i1 - i0, w.dV + j0 * Dp, Dp, Dp / N, true);
    Product(w.dpt + i0, kBlockRows, 1, w.qs + i0 * Dp, Dp, n, i1 - i0, w.dK + j0 * Dp, Dp, Dp / N, true);
    // dQ (rows, Dp) rows [i0, i1) += dS (rows, n) · k (n, Dp), dS read from dpt transposed.
    Product(w.dpt + i0, 1, kBlockRows, w.kp + j0 * Dp, Dp, i1 - i0, n, w.dQ + i0 * Dp, Dp, Dp / N, true);
  }
  for (int64_t i = 0; i < rows; ++i) {  // dq rows once each (dQ is scratch for uniform rows after)
    if (w.lim[i] < 0) continue;
    float* dqi = w.dq + row0 + i * C;
    for (int64_t x = 0; x < D; ++x) dqi[x] += w.scale * w.dQ[i * Dp + x];
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (w.lim[i] >= 0) continue;
    uniform_row_grads(w.dout + row0 + i * C, w.out + row0 + i * C, w.q + row0 + i * C, w.dq + row0 + i * C, kh, vh,
                      Tk, D, C, w.scale, w.dK, w.dV, Dp, w.dQ, w.drop, r0 + i);
  }
}

// Pair bh's gradients: its keys and values packed, dK and dV zeroed, its blocks of query rows, then
// dK and dV added to dk and dv once.
void BackwardHeadKernel(FlashBackWork& w, int64_t bh) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  const AttentionShape& s = *w.s;
  const int64_t D = s.D, C = s.H * D, Tk = s.keys(), Dp = (D + N - 1) / N * N;
  const int64_t key0 = bh / s.H * s.key_stride() * C + bh % s.H * D;  // head h of key 0 in batch b
  for (int64_t j = 0; j < Tk; ++j) {
    std::copy(w.k + key0 + j * C, w.k + key0 + j * C + D, w.kp + j * Dp);
    std::fill(w.kp + j * Dp + D, w.kp + (j + 1) * Dp, 0.0f);
    std::copy(w.v + key0 + j * C, w.v + key0 + j * C + D, w.vp + j * Dp);
    std::fill(w.vp + j * Dp + D, w.vp + (j + 1) * Dp, 0.0f);
  }
  std::fill(w.dK, w.dK + Tk * Dp, 0.0f);
  std::fill(w.dV, w.dV + Tk * Dp, 0.0f);
  set_block_dropout(w, s, bh);
  for (int64_t r0 = 0; r0 < s.T; r0 += kBlockRows) BackwardBlock(w, bh, r0, std::min(kBlockRows, s.T - r0), Dp);
  for (int64_t j = 0; j < Tk; ++j) {
    for (int64_t x = 0; x < D; ++x) {
      w.dk[key0 + j * C + x] += w.dK[j * Dp + x];
      w.dv[key0 + j * C + x] += w.dV[j * Dp + x];
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <stdexcept>
#include <vector>

#include "base/threads.h"

namespace ops {

HWY_EXPORT(FlashBlockKernel);
HWY_EXPORT(BackwardHeadKernel);

bool flash_attention_applies(const AttentionShape& s) {  // key limits are int32 lanes
  return (s.saved == AttentionSaved::none || s.saved == AttentionSaved::row_stats) && !s.bf16_products &&
         s.keys() <= std::numeric_limits<int32_t>::max();
}

void flash_attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                             const AttentionShape& s, float* stats) {
  if (!flash_attention_applies(s)) {
    throw std::invalid_argument("flash_attention_forward: fp32 products, nothing saved or row statistics");
  }
  if ((s.saved == AttentionSaved::row_stats) != (stats != nullptr)) {
    throw std::invalid_argument("flash_attention_forward: row statistics are written where, and only where, the "
                                "shape saves them");
  }
  const int64_t D = s.D, Tk = s.keys(), blocks = (s.T + kBlockRows - 1) / kBlockRows;
  const int64_t Dp = (D + kMaxLanes - 1) / kMaxLanes * kMaxLanes;
  const KeyMask mask(key_mask, s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
  const bool pack = s.T >= kPackFromRows && Tk >= kPackFromRows;  // see FlashWork::kpack
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    std::vector<float> qt(D * kBlockRows), st(kTileKeys * kBlockRows), o(kBlockRows * Dp), m(kBlockRows),
        l(kBlockRows), alpha(kBlockRows), vt(D % kMaxLanes ? kTileKeys * Dp : 0), mean(Dp),
        kpack(pack ? Tk * D : 0), vpack(pack ? Tk * Dp : 0);
    std::vector<int32_t> lim(kBlockRows);
    FlashWork w{q, k, v, out, &mask, &s, scale, qt.data(), st.data(), o.data(), m.data(), l.data(),
                alpha.data(), vt.data(), mean.data(), lim.data()};
    w.stats = stats;
    if (pack) w.kpack = kpack.data(), w.vpack = vpack.data();
#pragma omp for schedule(static)
    for (int64_t item = 0; item < s.B * s.H * blocks; ++item) {
      const int64_t bh = item / blocks, r0 = item % blocks * kBlockRows;
      HWY_DYNAMIC_DISPATCH(FlashBlockKernel)(w, bh, r0, std::min(kBlockRows, s.T - r0));
    }
  }
}

// Per (batch, head) on one thread (its dK and dV in the thread's buffers, added once), per block of
// kBlockRows query rows (queries and dO, transposed with a row per lane and as padded rows), per tile
// of keys that some row sees, five products on the forward's register-blocked kernel, the rows as
// lanes where they are the output's columns: st = k·qt (the scores again), dpt = v·gt (dP = dO·vᵀ);
// P = exp(st·scale − m)·inv from the forward's statistics, dS = P ⊙ (dP − Δ) with Δ = rowsum(dO ⊙ out);
// dV += Pᵀ·dO, dK += dSᵀ·(scale·q), dQ += dS·k; dq += scale·dQ per block. Under attention dropout dV's
// product reads P after the mask and dP passes through the mask's backward (Δ stays rowsum(dO ⊙ out),
// = Σ P·dP). Rows that see no key get their gradients on the side (uniform_row_grads).
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* stats,
                              const float* q, const float* k, const float* v, const int64_t* key_mask,
                              const AttentionShape& s) {
  if (!flash_attention_applies(s) || s.saved != AttentionSaved::row_stats || !out || !stats) {
    throw std::invalid_argument(
        "flash_attention_backward: fp32 products, from row statistics and the forward's output");
  }
  const int64_t D = s.D, Tk = s.keys(), Dp = (D + kMaxLanes - 1) / kMaxLanes * kMaxLanes;
  const KeyMask mask(key_mask, s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    std::vector<float> dK(Tk * Dp), dV(Tk * Dp), kp(Tk * Dp), vp(Tk * Dp), qt(D * kBlockRows),
        gt(D * kBlockRows), qs(kBlockRows * Dp), go(kBlockRows * Dp), dQ(kBlockRows * Dp), m(kBlockRows),
        inv(kBlockRows), delta(kBlockRows), st(kTileKeys * kBlockRows), dpt(kTileKeys * kBlockRows);
    std::vector<int32_t> lim(kBlockRows);
    FlashBackWork w{q, k, v, out, dout, stats, dq, dk, dv, &mask, &s, scale,
                    dK.data(), dV.data(), kp.data(), vp.data(), qt.data(), gt.data(), qs.data(), go.data(), dQ.data(),
                    m.data(), inv.data(), delta.data(), st.data(), dpt.data(), lim.data()};
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) HWY_DYNAMIC_DISPATCH(BackwardHeadKernel)(w, bh);
  }
}

}  // namespace ops
#endif  // HWY_ONCE
