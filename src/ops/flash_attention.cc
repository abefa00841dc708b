// The fused inference forward of softmax attention (see flash_attention.h). OpenMP splits the
// (batch, head, block of kBlockRows query rows) triples; a block runs in FlashBlockKernel, compiled
// once per SIMD target (Highway) and dispatched at run time:
//  - its queries, times 1/√D, are copied to the thread's buffer first (so out may be q);
//  - for each tile of kTileKeys keys that some row of the block sees (the causal upper triangle,
//    trailing padding and prefix limits cut the loop; a tile of padding only is skipped), the scores
//    S = Q·Kᵀ of the rows that see the tile come from a register-blocked product (4 rows × up to 4
//    vectors of keys, over the head's keys transposed into (D, kTileKeys) panels), then each row masks
//    the keys it cannot see with −inf, takes the tile's maximum, rescales its running sum and output
//    if the maximum grew, and turns the scores into exp(S − maximum), which the same product adds,
//    times the tile's values, into the block's fp32 output rows;
//  - the rows are divided by their sums and written; a row that sees no key gets the mean of all Tk
//    values (uniform attention, as Hugging Face's finfo.min mask gives).
// A thread transposes each head's keys once, panel by panel as its blocks first reach them (and copies
// the values into rows padded to whole vectors when D is not a multiple of the vector width); the
// blocks of one head follow each other on a thread under the static schedule, so the transposition
// is shared by all of them.
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
  // The thread's buffers: scaled queries (kBlockRows, D), scores then probabilities (kBlockRows,
  // kTileKeys), outputs (kBlockRows, Dp), running maxima and sums and each row's key limit (kBlockRows;
  // −1: uniform), a tile's padding bias (kTileKeys), the head's keys as (D, kTileKeys) panels, its
  // values padded to Dp columns (when D is not a multiple of the vector width) and their mean (Dp).
  float *qs, *sc, *o, *m, *l, *bias, *kt, *vp, *mean;
  int64_t* lim;
  int64_t packed_bh = -1, packed_keys = 0;  // kt (and vp) hold keys [0, packed_keys) of pair packed_bh
  int64_t mean_bh = -1;                     // mean holds pair mean_bh's
};

}  // namespace ops
#endif  // OPS_FLASH_ATTENTION_WORK_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/flash_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
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
#else
constexpr int kColVectors = 2;
#endif
constexpr int kRows = 4;

// c (R rows, NV vectors; row stride ldc) written, or with add accumulated, = a (R, K; row stride lda) ·
// b (K, NV vectors; row stride ldb).
template <int R, int NV>
HWY_INLINE void PanelProduct(const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b, int64_t ldb,
                             int64_t K, float* HWY_RESTRICT c, int64_t ldc, bool add) {
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
      const auto ar = hn::Set(d, a[r * lda + x]);
      for (int j = 0; j < NV; ++j) acc[r][j] = hn::MulAdd(ar, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) hn::StoreU(acc[r][j], d, c + r * ldc + j * N);
  }
}

// R rows of c over `vectors` vectors of columns, in panels of kColVectors and a narrower last one.
template <int R>
HWY_INLINE void RowsProduct(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t K, float* c,
                            int64_t ldc, int64_t vectors, bool add) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  int64_t j = 0;
  for (; j + kColVectors <= vectors; j += kColVectors) {
    PanelProduct<R, kColVectors>(a, lda, b + j * N, ldb, K, c + j * N, ldc, add);
  }
  switch (vectors - j) {
    case 3: return PanelProduct<R, 3>(a, lda, b + j * N, ldb, K, c + j * N, ldc, add);
    case 2: return PanelProduct<R, 2>(a, lda, b + j * N, ldb, K, c + j * N, ldc, add);
    case 1: return PanelProduct<R, 1>(a, lda, b + j * N, ldb, K, c + j * N, ldc, add);
    default: return;
  }
}

// c (M, vectors·Lanes) written or accumulated = a (M, K) · b (K, vectors·Lanes), strides as PanelProduct.
void Product(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t M, int64_t K, float* c, int64_t ldc,
             int64_t vectors, bool add) {
  int64_t i = 0;
  for (; i + kRows <= M; i += kRows) RowsProduct<kRows>(a + i * lda, lda, b, ldb, K, c + i * ldc, ldc, vectors, add);
  switch (M - i) {
    case 3: return RowsProduct<3>(a + i * lda, lda, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 2: return RowsProduct<2>(a + i * lda, lda, b, ldb, K, c + i * ldc, ldc, vectors, add);
    case 1: return RowsProduct<1>(a + i * lda, lda, b, ldb, K, c + i * ldc, ldc, vectors, add);
    default: return;
  }
}

// Rows [r0, r0 + rows) of pair bh (see the file comment).
void FlashBlockKernel(FlashWork& w, int64_t bh, int64_t r0, int64_t rows) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  const int64_t Dp = (D + N - 1) / N * N;  // output columns: whole vectors
  const bool direct_v = Dp == D;           // values read in place (rows C apart), else from vp (rows Dp apart)
  const float* kh = w.k + b * s.key_stride() * C + h * D;  // head h of key 0 in batch b
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  const float ninf = -std::numeric_limits<float>::infinity();

  // The rows' key limits, the extent of the keys any row sees, and the scaled queries.
  int64_t E = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const RowKeys rk = w.mask->row(b, r0 + i, s.causal);
    w.lim[i] = rk.uniform ? -1 : rk.lim;
    E = std::max(E, w.lim[i]);
    const float* qi = w.q + (b * s.T + r0 + i) * C + h * D;
    for (int64_t x = 0; x < D; ++x) w.qs[i * D + x] = qi[x] * w.scale;
    w.m[i] = ninf;
    w.l[i] = 0;
  }
  std::fill(w.o, w.o + rows * Dp, 0.0f);

  // The head's keys as (D, kTileKeys) panels (zero past Tk), and its values as rows of Dp, up to E.
  if (w.packed_bh != bh) w.packed_bh = bh, w.packed_keys = 0;
  for (; w.packed_keys < E; w.packed_keys += kTileKeys) {
    const int64_t j0 = w.packed_keys, n = std::min(kTileKeys, Tk - j0);
    float* panel = w.kt + j0 * D;  // panel j0 / kTileKeys: D · kTileKeys floats
    for (int64_t j = 0; j < kTileKeys; ++j) {
      const float* kj = kh + (j0 + j) * C;
      for (int64_t x = 0; x < D; ++x) panel[x * kTileKeys + j] = j < n ? kj[x] : 0.0f;
    }
    if (direct_v) continue;
    for (int64_t j = 0; j < n; ++j) {
      float* row = w.vp + (j0 + j) * Dp;
      std::copy(vh + (j0 + j) * C, vh + (j0 + j) * C + D, row);
      std::fill(row + D, row + Dp, 0.0f);
    }
  }

  const int64_t* keys = w.mask->keys(b);
  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});  // keys of the tile some row sees
    int64_t ra = 0, rb = rows;  // the rows that see some key of the tile
    while (ra < rb && w.lim[ra] <= j0) ++ra;
    while (rb > ra && w.lim[rb - 1] <= j0) --rb;
    if (ra == rb) continue;
    const int64_t real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only
    const bool padded = real < n;
    if (padded) {
      for (int64_t j = 0; j < kTileKeys; ++j) w.bias[j] = j < n && keys[j0 + j] == 0 ? ninf : 0.0f;
    }
    Product(w.qs + ra * D, D, w.kt + j0 * D, kTileKeys, rb - ra, D, w.sc + ra * kTileKeys, kTileKeys,
            kTileKeys / N, false);
    for (int64_t i = ra; i < rb; ++i) {
      float* row = w.sc + i * kTileKeys;
      const int64_t visible = std::min(w.lim[i] - j0, kTileKeys);
      if (visible <= 0) {  // sees nothing here: probabilities 0
        std::fill(row, row + kTileKeys, 0.0f);
        continue;
      }
      std::fill(row + visible, row + kTileKeys, ninf);
      auto vmax = hn::Set(d, ninf);
      for (int64_t j = 0; j < kTileKeys; j += N) {
        auto x = hn::LoadU(d, row + j);
        if (padded) x = hn::Add(x, hn::LoadU(d, w.bias + j));
        hn::StoreU(x, d, row + j);
        vmax = hn::Max(vmax, x);
      }
      const float m_new = std::max(w.m[i], hn::GetLane(hn::MaxOfLanes(d, vmax)));
      if (m_new == ninf) {  // every key it sees here is padding
        std::fill(row, row + kTileKeys, 0.0f);
        continue;
      }
      const auto mx = hn::Set(d, m_new);
      auto vsum = hn::Zero(d);
      for (int64_t j = 0; j < kTileKeys; j += N) {
        const auto e = Exp(d, hn::Sub(hn::LoadU(d, row + j), mx));  // −inf: 0
        vsum = hn::Add(vsum, e);
        hn::StoreU(e, d, row + j);
      }
      const float alpha = w.m[i] == ninf ? 0.0f : std::exp(w.m[i] - m_new);
      w.l[i] = w.l[i] * alpha + hn::GetLane(hn::SumOfLanes(d, vsum));
      w.m[i] = m_new;
      if (alpha != 1.0f) {
        float* oi = w.o + i * Dp;
        const auto va = hn::Set(d, alpha);
        for (int64_t x = 0; x < Dp; x += N) hn::StoreU(hn::Mul(hn::LoadU(d, oi + x), va), d, oi + x);
      }
    }
    const float* vt = direct_v ? vh + j0 * C : w.vp + j0 * Dp;
    Product(w.sc + ra * kTileKeys, kTileKeys, vt, direct_v ? C : Dp, rb - ra, n, w.o + ra * Dp, Dp, Dp / N, true);
  }

  // Outputs: o / l, or the mean of all values for a row that sees no key.
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
    ForEachVector(d, D, [&](int64_t x, size_t c) { StorePart(d, hn::Mul(hn::LoadU(d, w.o + i * Dp + x), inv), oi + x, c); });
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

bool flash_attention_applies(const AttentionShape& s) {
  return s.saved == AttentionSaved::none && s.dropout_p == 0 && !s.bf16_products;
}

void flash_attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                             const AttentionShape& s) {
  if (!flash_attention_applies(s)) {
    throw std::invalid_argument("flash_attention_forward: inference only (nothing saved, no dropout, fp32 products)");
  }
  const int64_t D = s.D, Tk = s.keys(), blocks = (s.T + kBlockRows - 1) / kBlockRows;
  const int64_t Dp = (D + kMaxLanes - 1) / kMaxLanes * kMaxLanes, panels = (Tk + kTileKeys - 1) / kTileKeys;
  const KeyMask mask(key_mask, s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    std::vector<float> qs(kBlockRows * D), sc(kBlockRows * kTileKeys), o(kBlockRows * Dp), m(kBlockRows),
        l(kBlockRows), bias(kTileKeys), kt(panels * kTileKeys * D), vp(D % kMaxLanes ? Tk * Dp : 0), mean(Dp);
    std::vector<int64_t> lim(kBlockRows);
    FlashWork w{q, k, v, out, &mask, &s, scale, qs.data(), sc.data(), o.data(), m.data(), l.data(),
                bias.data(), kt.data(), vp.data(), mean.data(), lim.data()};
#pragma omp for schedule(static)
    for (int64_t item = 0; item < s.B * s.H * blocks; ++item) {
      const int64_t bh = item / blocks, r0 = item % blocks * kBlockRows;
      HWY_DYNAMIC_DISPATCH(FlashBlockKernel)(w, bh, r0, std::min(kBlockRows, s.T - r0));
    }
  }
}

}  // namespace ops
#endif  // HWY_ONCE
