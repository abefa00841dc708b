// The fused inference forward of softmax attention (see flash_attention.h). OpenMP splits the
// (batch, head, block of kBlockRows query rows) triples statically; a block runs in FlashBlockKernel,
// compiled once per SIMD target (Highway) and dispatched at run time:
//  - its queries, times 1/√D, are copied transposed to the thread's buffer qt (D, kBlockRows) first
//    (so out may be q), with each row's key limit;
//  - for each tile of kTileKeys keys that some row of the block sees (the causal upper triangle,
//    trailing padding and prefix limits end the loop; a tile of padding only is skipped), the scores
//    come transposed, st (keys, rows) = k·qt, from a register-blocked product (4 keys × up to 4 vectors
//    of rows, the keys read in place), over the vectors of rows that see some key of the tile. A
//    vector of rows is then a vector of lanes all through the online softmax: masked scores become
//    −inf (a key past a row's limit, a padded key), each lane's maximum over the tile is a vertical
//    max, the running maxima, sums and rescaling factors are vectors, st becomes exp(score − max);
//    no horizontal reduction anywhere. The block's fp32 outputs are rescaled where a maximum grew
//    and accumulate p·v (the same product, p read from st transposed, values read in place, or from a
//    copy padded to whole vectors when D is not a multiple of the vector width);
//  - the rows are divided by their sums and written; a row that sees no key gets the mean of all Tk
//    values (uniform attention, as Hugging Face's finfo.min mask gives).
// A thread holds about (2·D + kTileKeys)·kBlockRows floats, whatever T and Tk are.
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

// What one thread's blocks read and where they work (FlashBlockKernel).
struct FlashWork {
  // The call's.
  const float *q, *k, *v;
  float* out;
  const KeyMask* mask;
  const AttentionShape* s;
  float scale;
  // The thread's buffers: the block's scaled queries transposed (D, kBlockRows), a tile's scores
  // transposed then its probabilities (kTileKeys, kBlockRows), the block's outputs (kBlockRows, Dp),
  // each row's running maximum and sum, last rescaling factor and key limit (kBlockRows; limit −1:
  // sees nothing), a tile's values padded to Dp columns (kTileKeys, Dp: when D is not a multiple of
  // the vector width) and the head's mean value (Dp: for rows that see no key).
  float *qt, *st, *o, *m, *l, *alpha, *vt, *mean;
  int32_t* lim;
  int64_t mean_bh = -1;  // mean holds pair mean_bh's
};

}  // namespace ops
#endif  // OPS_FLASH_ATTENTION_WORK_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/flash_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
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

// The online softmax of one tile's scores, st (n keys, rows [i0, i1) in whole vectors) for keys
// j0.., a vector of rows at a time: scores past a row's limit (when `limited`) and of padded keys
// (padded: the batch's key mask, when the tile has padding) become −inf, st becomes
// exp(score − running maximum), and each row's maximum, sum and rescaling factor are updated.
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
    const auto m_old = hn::LoadU(d, w.m + i), m_new = hn::Max(m_old, vmax);
    // Rows that have seen no key yet subtract 0 instead: e^−inf = 0, not e^NaN.
    const auto m_sub = hn::IfThenZeroElse(hn::Eq(m_new, hn::Set(d, ninf)), m_new);
    auto vsum = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      float* sj = w.st + j * kBlockRows + i;
      const auto p = Exp(d, hn::Sub(hn::LoadU(d, sj), m_sub));
      vsum = hn::Add(vsum, p);
      hn::StoreU(p, d, sj);
    }
    const auto alpha = Exp(d, hn::Sub(m_old, m_sub));
    hn::StoreU(hn::MulAdd(hn::LoadU(d, w.l + i), alpha, vsum), d, w.l + i);
    hn::StoreU(m_new, d, w.m + i);
    hn::StoreU(alpha, d, w.alpha + i);
  }
}

// Rows [r0, r0 + rows) of pair bh written: o / l, or the mean of all Tk values for a row that sees
// no key (its head's mean, kept for the thread's next such row of the same pair).
void WriteRows(FlashWork& w, int64_t bh, int64_t r0, int64_t rows, int64_t Dp) {
  const hn::ScalableTag<float> d;
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  for (int64_t i = 0; i < rows; ++i) {
    float* oi = w.out + (b * s.T + r0 + i) * C + h * D;
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

// Rows [r0, r0 + rows) of pair bh (see the file comment).
void FlashBlockKernel(FlashWork& w, int64_t bh, int64_t r0, int64_t rows) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), vectors = kBlockRows / N;  // query vectors
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const int64_t Dp = (D + N - 1) / N * N;  // output columns: whole vectors
  const bool direct_v = Dp == D;           // values read in place (rows C apart), else from vt (rows Dp apart)
  const float* kh = w.k + b * s.key_stride() * C + h * D;  // head h of key 0 in batch b
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t* keys = w.mask->keys(b);

  // The rows' key limits (−1: sees no key, or past the block), the extent of the keys any row sees,
  // each query vector's, and the scaled queries, transposed.
  int64_t E = 0, vector_extent[kBlockRows] = {};
  for (int64_t i = 0; i < kBlockRows; ++i) {
    int64_t lim = -1;
    if (i < rows) {
      const RowKeys rk = w.mask->row(b, r0 + i, s.causal);
      lim = rk.uniform ? -1 : rk.lim;
      const float* qi = w.q + (b * s.T + r0 + i) * C + h * D;
      for (int64_t x = 0; x < D; ++x) w.qt[x * kBlockRows + i] = qi[x] * w.scale;
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

  // The next tile's keys and values are asked for while this one's are multiplied: rows C apart, read
  // an element at a time by the products, from L3 at long lengths (a head's keys and values outgrow L2
  // past about 2,048 keys at head dim 64).
  const int64_t line = 64 / static_cast<int64_t>(sizeof(float));
  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    for (int64_t j = j0 + kTileKeys; j < std::min(j0 + 2 * kTileKeys, E); ++j) {
      for (int64_t x = 0; x < D; x += line) hwy::Prefetch(kh + j * C + x), hwy::Prefetch(vh + j * C + x);
    }
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});  // keys of the tile some row sees
    int64_t v0 = 0, v1 = vectors;  // the query vectors [v0, v1) hold the rows that see a key of the tile
    while (vector_extent[v0] <= j0) ++v0;
    while (vector_extent[v1 - 1] <= j0) --v1;
    const int64_t i0 = v0 * N, i1 = std::min(v1 * N, rows), real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only
    bool limited = false;     // some row of those vectors sees only part of the tile
    for (int64_t i = i0; i < v1 * N; ++i) limited |= w.lim[i] < j0 + n;
    // Scores, transposed: st (n, kBlockRows) columns [i0, v1·N) = k (n, D) · qt.
    Product(kh + j0 * C, C, 1, w.qt + i0, kBlockRows, n, D, w.st + i0, kBlockRows, v1 - v0, false);
    TileSoftmax(w, i0, v1 * N, j0, n, limited, real < n ? keys : nullptr);
    for (int64_t i = i0; i < i1; ++i) {  // outputs of rows whose maximum grew: rescaled
      if (w.alpha[i] == 1.0f) continue;
      float* oi = w.o + i * Dp;
      const auto va = hn::Set(d, w.alpha[i]);
      for (int64_t x = 0; x < Dp; x += N) hn::StoreU(hn::Mul(hn::LoadU(d, oi + x), va), d, oi + x);
    }
    const float* vt = vh + j0 * C;
    if (!direct_v) {
      for (int64_t j = 0; j < n; ++j) {
        std::copy(vh + (j0 + j) * C, vh + (j0 + j) * C + D, w.vt + j * Dp);
        std::fill(w.vt + j * Dp + D, w.vt + (j + 1) * Dp, 0.0f);
      }
      vt = w.vt;
    }
    // o (rows, Dp) rows [i0, i1) += p (rows, n) · v (n, Dp), p read from st transposed.
    if (i1 > i0) {
      Product(w.st + i0, 1, kBlockRows, vt, direct_v ? C : Dp, i1 - i0, n, w.o + i0 * Dp, Dp, Dp / N, true);
    }
  }

  WriteRows(w, bh, r0, rows, Dp);
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

bool flash_attention_applies(const AttentionShape& s) {  // key limits are int32 lanes
  return s.saved == AttentionSaved::none && s.dropout_p == 0 && !s.bf16_products &&
         s.keys() <= std::numeric_limits<int32_t>::max();
}

void flash_attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                             const AttentionShape& s) {
  if (!flash_attention_applies(s)) {
    throw std::invalid_argument("flash_attention_forward: inference only (nothing saved, no dropout, fp32 products)");
  }
  const int64_t D = s.D, Tk = s.keys(), blocks = (s.T + kBlockRows - 1) / kBlockRows;
  const int64_t Dp = (D + kMaxLanes - 1) / kMaxLanes * kMaxLanes;
  const KeyMask mask(key_mask, s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    std::vector<float> qt(D * kBlockRows), st(kTileKeys * kBlockRows), o(kBlockRows * Dp), m(kBlockRows),
        l(kBlockRows), alpha(kBlockRows), vt(D % kMaxLanes ? kTileKeys * Dp : 0), mean(Dp);
    std::vector<int32_t> lim(kBlockRows);
    FlashWork w{q, k, v, out, &mask, &s, scale, qt.data(), st.data(), o.data(), m.data(), l.data(),
                alpha.data(), vt.data(), mean.data(), lim.data()};
#pragma omp for schedule(static)
    for (int64_t item = 0; item < s.B * s.H * blocks; ++item) {
      const int64_t bh = item / blocks, r0 = item % blocks * kBlockRows;
      HWY_DYNAMIC_DISPATCH(FlashBlockKernel)(w, bh, r0, std::min(kBlockRows, s.T - r0));
    }
  }
}

}  // namespace ops
#endif  // HWY_ONCE
