// The fused forward of softmax attention with bf16 products (flash_attention.h's
// flash_attention_forward_bf16, for inference and for training from row statistics) and its fused
// backward (flash_attention_backward_bf16, described where it starts below): flash_attention.cc's
// kernel in shape, with the products on AVX512-BF16's dot-product instruction (VDPBF16PS: 16 fp32
// lanes, each += the two products of a pair of bf16), for AttentionShape::bf16_products on CPUs that
// have it (Zen 4, Cooper Lake, Sapphire Rapids). Highway 1.0 has no bf16 dot product, hence intrinsics in functions compiled for
// that ISA (OPS_BF16_TARGET) behind a CPUID check, as activation.cc's bf16_from_f32_avx512.
//
// The same roundings as the per-block bf16 path (attention_bf16.h): queries times 1/√D, keys and
// values rounded to bf16 (nearest even, subnormals to 0), fp32 accumulation, the softmax in fp32, the
// probabilities rounded to bf16 on their way into p·v. One difference: the per-block path rounds the
// normalised probabilities, this kernel exp(score − running maximum), as FlashAttention does (the
// division by the sum comes at the end, in fp32); the relative rounding error is the same 2^-9.
// Attention dropout takes the same counter-based mask (KeepMask16, base::Keep's), applied to the
// probabilities before they are rounded.
//
// Per (batch, head) and block of kBlockRows query rows (OpenMP, static over the triples):
//  - the scaled queries are rounded and stored as bf16 pairs along D, qt2 (Dh = ⌈D/2⌉ pairs,
//    kBlockRows rows) of 32-bit words, a row per lane (an odd D is padded with a zero dimension);
//  - the head's keys and values are rounded once per thread as the blocks first need them (lazily, a
//    tile at a time, so a causal block converts only what it reads): keys k2 (Tk, Dh) pairs along D,
//    values v2 (⌈Tk/2⌉, D) pairs of consecutive keys (an odd last key paired with a zero value).
//    Rounding each tile again for every block instead made the kernel 1.16× slower at 512 keys and
//    1.25× at 2,048 (12 heads of 64, full, 1 thread, Zen 4);
//  - for each tile of kTileKeys keys some row sees: scores transposed, st (keys, rows) = k2 · qt2,
//    register-blocked (4 keys × up to 4 vectors of 16 rows: 16 accumulators, 4 vectors and a
//    broadcast of AVX-512's 32 registers; each step broadcasts a key's pair (k[j,x], k[j,x+1]) and
//    dot-products it with the vectors of (q[i,x], q[i,x+1]) pairs);
//  - the online softmax of flash_attention.cc's TileSoftmax, vectors of rows as lanes, the same
//    arithmetic (its Exp too, vmath-inl.h's, here in intrinsics, with a shorter 2^n: Exp16), which
//    writes the probabilities rounded to bf16 in pairs of keys, pt2 (⌈n/2⌉, rows) (an odd tile's last
//    pair has p = 0 beside its last key, times the next key's value where the tile stops before Tk:
//    finite values are assumed there, as in any cache);
//  - the outputs, kept transposed in fp32, oT (D, rows) = α·oT + v2ᵀ · pt2: the same register-blocked
//    product with D in place of the keys and key pairs in place of dimension pairs, each row's
//    rescaling by α (a lane's) applied as the product loads its accumulators;
//  - rows written as oT / l, transposed back; a row that sees no key gets the fp32 mean of all Tk values
//    (under dropout the mean of the kept ones, scaled).
// A thread holds the block's buffers (about (D + 2·kTileKeys)·kBlockRows words) and one head's bf16
// keys and values (4·Tk·D bytes: 2 MB at 8,192 keys of 64).
// The two products are the kernel's template parameter: AVX512-BF16's dot products above (DotProducts,
// the default), or AMX-BF16's tiles (TileProducts: keys padded to whole tile rows, values kept
// transposed per tile of keys; see its section), which flash_attention_forward_bf16 takes only where
// the CPU and OS have AMX and ROFORMER_AMX_ATTENTION=1 (not yet validated on AMX hardware); the
// backward's five products likewise (DotBackProducts, TileBackProducts). Tests run the tile kernels
// everywhere on tiles emulated in scalar code (EmulatedTiles).
#include "flash_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "attention_mask.h"
#include "base/threads.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside avx512fintrin.h (its intrinsics start from an undefined vector).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#define OPS_BF16_KERNELS 1
#endif
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ops {

#ifdef OPS_BF16_KERNELS

#define OPS_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace {

constexpr int64_t kBlockRows = 64;  // query rows per block: 4 vectors of 16 lanes
constexpr int64_t kTileKeys = 64;   // keys per tile (even: a tile's pairs of keys never straddle tiles)
constexpr int64_t kLanes = 16;      // fp32 lanes of a vector
constexpr int kPanelRows = 4;       // rows of a product's register block (keys, or dimensions for p·v)

// What one thread's blocks read and where they work.
struct Bf16Work {
  // The call's.
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float* out = nullptr;
  uint16_t* out16 = nullptr;  // (B, T, H·D) out in bf16 too, or null
  float* stats = nullptr;  // (B, H, T, 2) row statistics for the backward, or null
  const KeyMask* mask = nullptr;
  const AttentionShape* s = nullptr;
  float scale = 1;
  int64_t Dh = 0;  // pairs of dimensions, ⌈D/2⌉
  // k2's and qt2's pair words per key and query (kw ≥ Dh, zero past Dh): the products' padding
  // (DotProducts: none; TileProducts: whole tile rows).
  int64_t kw = 0;
  // The block's: scaled queries as bf16 pairs (kw, kBlockRows); a tile's scores (kTileKeys,
  // kBlockRows); its probabilities as bf16 pairs of keys (kTileKeys/2, kBlockRows); the outputs
  // transposed (D, or TileProducts' Dp, kBlockRows); each row's running maximum, sum, last rescaling
  // factor, key limit (−1: sees nothing); the head's mean value (D: rows that see no key).
  std::vector<uint32_t> qt2, pt2;
  std::vector<uint16_t> q16;  // one query row's bf16 (2·Dh)
  std::vector<float> st, oT, m, l, alpha, mean;
  std::vector<int32_t> lim;
  // The head's keys and values in bf16 (k2 (Tk, kw) pairs along D; v2 pairs of keys, laid out as
  // the products read them), those of pair head_bh, converted for keys [0, converted).
  std::vector<uint32_t> k2, v2;
  int64_t head_bh = -1, converted = 0, mean_bh = -1;
  // Attention dropout: the block's pair's mask (drop.keep null without), and the block's first row.
  base::Keep keep{0, 0.0};
  BlockDropout drop{};
  int64_t r0 = 0;
};

// e^x for 16 lanes, x ≤ 0 (scores minus their running maximum, −inf for masked keys) or NaN:
// vmath-inl.h's Exp (the fp32 kernel's: Cody–Waite reduction, the Cephes polynomial) with its 2^n made by
// VSCALEFPS, which rounds p·2^n once as its two multiplications by normal powers of two do: the same
// bits for x ≥ −103.97 (its cut to 0), where it returns 0 below and this returns e^x rounded (0 or a
// subnormal under 2^-149, which bf16 rounding flushes to 0 anyway). About half the instructions: the
// softmax is a third of the kernel's time at head dim 64, the products being at the dot-product
// instruction's peak.
OPS_BF16_TARGET inline __m512 Exp16(__m512 x) {
  // −110: e^x underflows to +0 (−inf included); max(lo, x) keeps a NaN x (the second operand's).
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);  // ln2 = 0.693359375 − 2.12194440e-4
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Whether base::Keep keeps each of eight 64-bit indices: SplitMix64's finaliser (dropout-inl.h's, in
// intrinsics), its top 53 bits against the threshold.
OPS_BF16_TARGET inline __mmask8 KeepMask8(const base::Keep& keep, __m512i index) {
  auto c = [](uint64_t x) { return static_cast<long long>(x); };
  __m512i x = _mm512_add_epi64(_mm512_xor_si512(index, _mm512_set1_epi64(c(keep.stream()))),
                               _mm512_set1_epi64(c(0x9e3779b97f4a7c15ull)));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), _mm512_set1_epi64(c(0xbf58476d1ce4e5b9ull)));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), _mm512_set1_epi64(c(0x94d049bb133111ebull)));
  x = _mm512_srli_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 31)), 11);
  return _mm512_cmpge_epu64_mask(x, _mm512_set1_epi64(c(keep.threshold())));
}

// Whether base::Keep keeps elements first + lane·stride, one per lane of 16.
OPS_BF16_TARGET inline __mmask16 KeepMask16(const base::Keep& keep, uint64_t first, uint64_t stride) {
  const __m512i lanes = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi64(static_cast<long long>(stride)));
  const __m512i lo = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first)), lanes);
  const __m512i hi = _mm512_add_epi64(lo, _mm512_set1_epi64(static_cast<long long>(8 * stride)));
  return static_cast<__mmask16>(KeepMask8(keep, lo) | (KeepMask8(keep, hi) << 8));
}

// Attention dropout's mask for rows t0.. (a row per lane of 16) at key j.
OPS_BF16_TARGET inline __mmask16 Kept16(const BlockDropout& drop, const base::Keep& keep, int64_t t0, int64_t j) {
  return KeepMask16(keep, static_cast<uint64_t>(t0) * drop.Tk + static_cast<uint64_t>(j), drop.Tk);
}

// x's 16 lanes after attention dropout with mask `kept`: kept ones times drop.scale, the others 0.
OPS_BF16_TARGET inline __m512 Drop16(__mmask16 kept, __m512 x, const BlockDropout& drop) {
  return _mm512_maskz_mul_ps(kept, x, _mm512_set1_ps(drop.scale));
}

// 16 bf16 pairs (a[i], b[i]) from two fp32 vectors, rounded to nearest even: word 2i = a[i], 2i + 1 = b[i].
OPS_BF16_TARGET inline __m512i Pairs(__m512 a, __m512 b) {
  // cvtne2ps: words 0..15 = bf16(a), 16..31 = bf16(b); interleaved.
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
}

// n fp32 values of x, times scale, rounded into out as 2·⌈n/2⌉ bf16 (a zero after an odd n).
OPS_BF16_TARGET inline void RoundRow(uint16_t* out, const float* x, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  const int64_t words = (n + 1) / 2 * 2;
  for (int64_t i = 0; i < words; i += 16) {
    const int64_t c = std::min<int64_t>(16, n - i), w = std::min<int64_t>(16, words - i);
    const __m512 xv = _mm512_mul_ps(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << c) - 1), x + i), s);
    _mm256_mask_storeu_epi16(out + i, static_cast<__mmask16>((1u << w) - 1),
                             reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(xv)));
  }
}

// out (n) = x (n) rounded to bf16 (nearest even; vmath.h's bf16_from_f32 bits), exactly n words: an
// output row's head, whose neighbours other threads write.
OPS_BF16_TARGET inline void RoundExact(uint16_t* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = static_cast<__mmask16>((1u << std::min<int64_t>(kLanes, n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i))));
  }
}

// Words [0, width) of out: bf16 pairs (x0[x], x1[x]) times scale for x < D, rounded to nearest even;
// x1 null pairs x0 with zeros, and words from D on are zero (width ≥ D, whole vectors or D).
OPS_BF16_TARGET inline void PairRows(uint32_t* out, const float* x0, const float* x1, int64_t D, int64_t width,
                                     float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t x = 0; x < width; x += kLanes) {
    const __mmask16 in = static_cast<__mmask16>((1u << std::clamp<int64_t>(D - x, 0, kLanes)) - 1);
    const __mmask16 stored = static_cast<__mmask16>((1u << std::min<int64_t>(kLanes, width - x)) - 1);
    const __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, x0 + x), s);
    const __m512 b = x1 ? _mm512_mul_ps(_mm512_maskz_loadu_ps(in, x1 + x), s) : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(out + x, stored, Pairs(a, b));
  }
}

// Rows [0, rows) of x (row stride C, D each) times scale into t2 (⌈D/2⌉ pairs, kBlockRows lanes) as
// bf16 pairs along D, a row per lane (rows from `rows` on zero); row16 (2·⌈D/2⌉) is scratch.
OPS_BF16_TARGET inline void TransposedPairs(uint32_t* t2, uint16_t* row16, const float* x, int64_t C, int64_t rows,
                                            int64_t D, float scale) {
  const int64_t Dh = (D + 1) / 2;
  for (int64_t i = 0; i < kBlockRows; ++i) {
    if (i < rows) {
      RoundRow(row16, x + i * C, D, scale);
      for (int64_t p = 0; p < Dh; ++p) std::memcpy(t2 + p * kBlockRows + i, row16 + 2 * p, sizeof(uint32_t));
    } else {
      for (int64_t p = 0; p < Dh; ++p) t2[p * kBlockRows + i] = 0;
    }
  }
}

// c (R rows, NV vectors of 16 lanes; row stride ldc) written = Σ over K pairs of a's pair (r, x), a
// 32-bit word at a[r·ar + x·ax] broadcast, dot b's vector of pairs (x, vector), b + x·ldb words on; with
// `scale` (NV vectors) that plus c times scale, column by column (the online softmax's rescaling of
// the outputs, folded into the product's loads of them).
template <int R, int NV>
OPS_BF16_TARGET inline void PanelProduct(const uint32_t* a, int64_t ar, int64_t ax, const uint32_t* b, int64_t ldb,
                                         int64_t K, float* c, int64_t ldc, const float* scale) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) {
      acc[r][j] = scale ? _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + j * kLanes), _mm512_loadu_ps(scale + j * kLanes))
                        : _mm512_setzero_ps();
    }
  }
  for (int64_t x = 0; x < K; ++x) {
    __m512bh bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + x * ldb + j * kLanes));
    for (int r = 0; r < R; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r * ar + x * ax])));
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(c + r * ldc + j * kLanes, acc[r][j]);
  }
}

template <int NV>
OPS_BF16_TARGET void ProductNV(const uint32_t* a, int64_t ar, int64_t ax, const uint32_t* b, int64_t ldb, int64_t M,
                               int64_t K, float* c, int64_t ldc, const float* scale) {
  int64_t i = 0;
  for (; i + kPanelRows <= M; i += kPanelRows) {
    PanelProduct<kPanelRows, NV>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, scale);
  }
  switch (M - i) {
    case 3: return PanelProduct<3, NV>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, scale);
    case 2: return PanelProduct<2, NV>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, scale);
    case 1: return PanelProduct<1, NV>(a + i * ar, ar, ax, b, ldb, K, c + i * ldc, ldc, scale);
    default: return;
  }
}

// c (M, vectors·16) written, or with scale (vectors·16) rescaled and accumulated, = a (M, K pairs) ·
// b (K pairs, vectors·16), vectors ≤ 4 (a block's rows), strides as PanelProduct.
OPS_BF16_TARGET void Product(const uint32_t* a, int64_t ar, int64_t ax, const uint32_t* b, int64_t ldb, int64_t M,
                             int64_t K, float* c, int64_t ldc, int64_t vectors, const float* scale) {
  switch (vectors) {
    case 4: return ProductNV<4>(a, ar, ax, b, ldb, M, K, c, ldc, scale);
    case 3: return ProductNV<3>(a, ar, ax, b, ldb, M, K, c, ldc, scale);
    case 2: return ProductNV<2>(a, ar, ax, b, ldb, M, K, c, ldc, scale);
    case 1: return ProductNV<1>(a, ar, ax, b, ldb, M, K, c, ldc, scale);
    default: return;
  }
}

// BlockKernel's two products on AVX512-BF16's dot products, PanelProduct's (the default): keys k2
// (Tk, Dh), values v2 (⌈Tk/2⌉, D) pairs of consecutive keys, D as lanes, outputs oT (D, rows).
struct DotProducts {
  void Allocate(Bf16Work& w) {
    const int64_t D = w.s->D, Tk = w.s->keys();
    w.kw = w.Dh;
    w.k2.resize(Tk * w.Dh), w.v2.resize((Tk + 1) / 2 * D), w.qt2.resize(w.Dh * kBlockRows);
    w.oT.resize(D * kBlockRows);
  }
  void Begin() {}  // per thread and call
  void End() {}

  // Values [w.converted, end) of the head (vh: its key 0) into v2 (end even or Tk).
  OPS_BF16_TARGET void Values(Bf16Work& w, const float* vh, int64_t end) {
    const int64_t C = w.s->H * w.s->D, D = w.s->D;
    for (int64_t j = w.converted; j < end; j += 2) {  // pairs (v[j, x], v[j + 1, x]); an odd Tk's last key with zeros
      PairRows(w.v2.data() + j / 2 * D, vh + j * C, j + 1 < end ? vh + (j + 1) * C : nullptr, D, D, 1.0f);
    }
  }

  // Scores, transposed: st (n, kBlockRows) columns [i0, i1) = k2 (n keys from j0, Dh) · qt2 (Dh, rows).
  OPS_BF16_TARGET void Scores(Bf16Work& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    Product(w.k2.data() + j0 * w.Dh, w.Dh, 1, w.qt2.data() + i0, kBlockRows, n, w.Dh, w.st.data() + i0, kBlockRows,
            (i1 - i0) / kLanes, nullptr);
  }

  // oT (D, rows) columns [i0, i1) = α · oT + v2ᵀ (D, np pairs) · pt2 (np, rows), the outputs of rows
  // whose maximum grew rescaled as they are loaded; the value pairs of keys j0.., the pair's word
  // (x, jp) at v2[(j0/2 + jp)·D + x].
  OPS_BF16_TARGET void Outputs(Bf16Work& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t D = w.s->D;
    Product(w.v2.data() + j0 / 2 * D, 1, D, w.pt2.data() + i0, kBlockRows, D, (n + 1) / 2, w.oT.data() + i0,
            kBlockRows, (i1 - i0) / kLanes, w.alpha.data() + i0);
  }
};

// Keys and values [w.converted, end) of head h in batch b rounded into w.k2 and the products' w.v2
// (end even or Tk).
template <class Products>
OPS_BF16_TARGET void ConvertKeys(Bf16Work& w, Products& products, const float* kh, const float* vh, int64_t end) {
  const AttentionShape& s = *w.s;
  const int64_t C = s.H * s.D, D = s.D;
  for (int64_t j = w.converted; j < end; ++j) {
    RoundRow(reinterpret_cast<uint16_t*>(w.k2.data() + j * w.kw), kh + j * C, D, 1.0f);
  }
  products.Values(w, vh, end);
  w.converted = end;
}

// flash_attention.cc's TileSoftmax over st (n keys, rows [i0, i1) in whole vectors) for keys j0..:
// masked scores to −inf, exp(score − running maximum) in fp32 summed, each row's maximum, sum and
// rescaling factor updated (the scores come scaled here: the queries are scaled before they are
// rounded to bf16), then attention dropout where there is. The probabilities go straight to
// pt2 as bf16 pairs of keys (⌈n/2⌉, rows), 32-bit lane i holding (p[row i, key 2jp], p[row i, 2jp + 1]),
// with p = 0 beside an odd tile's last key.
OPS_BF16_TARGET void TileSoftmax(Bf16Work& w, int64_t i0, int64_t i1, int64_t j0, int64_t n, bool limited,
                                 const int64_t* padded) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = i0; i < i1; i += kLanes) {
    const __m512i lim = _mm512_loadu_si512(w.lim.data() + i);
    __m512 vmax = ninf;
    for (int64_t j = 0; j < n; ++j) {
      float* sj = w.st.data() + j * kBlockRows + i;
      __m512 x = _mm512_loadu_ps(sj);
      if (limited) {  // −inf in the rows whose limit is at or before key j0 + j
        const __mmask16 seen = _mm512_cmplt_epi32_mask(_mm512_set1_epi32(static_cast<int32_t>(j0 + j)), lim);
        x = _mm512_mask_mov_ps(ninf, seen, x);
      }
      if (padded && padded[j0 + j] == 0) x = ninf;
      if (limited || padded) _mm512_storeu_ps(sj, x);
      vmax = _mm512_max_ps(vmax, x);
    }
    const __m512 m_old = _mm512_loadu_ps(w.m.data() + i), m_new = _mm512_max_ps(m_old, vmax);
    // Rows that have seen no key yet subtract 0 instead: e^−inf = 0, not e^NaN.
    const __m512 m_sub = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m_new, ninf, _CMP_NEQ_UQ), m_new);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 2) {
      const float* sj = w.st.data() + j * kBlockRows + i;
      __m512 p0 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(sj), m_sub));
      vsum = _mm512_add_ps(vsum, p0);  // the softmax's sum: before dropout
      __m512 p1 = _mm512_setzero_ps();
      if (j + 1 < n) {
        p1 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(sj + kBlockRows), m_sub));
        vsum = _mm512_add_ps(vsum, p1);
        if (w.drop.keep) p1 = Drop16(Kept16(w.drop, w.keep, w.r0 + i, j0 + j + 1), p1, w.drop);
      }
      if (w.drop.keep) p0 = Drop16(Kept16(w.drop, w.keep, w.r0 + i, j0 + j), p0, w.drop);
      _mm512_storeu_si512(w.pt2.data() + j / 2 * kBlockRows + i, Pairs(p0, p1));
    }
    const __m512 alpha = Exp16(_mm512_sub_ps(m_old, m_sub));
    _mm512_storeu_ps(w.l.data() + i, _mm512_fmadd_ps(_mm512_loadu_ps(w.l.data() + i), alpha, vsum));
    _mm512_storeu_ps(w.m.data() + i, m_new);
    _mm512_storeu_ps(w.alpha.data() + i, alpha);
  }
}

// Rows [r0, r0 + rows) of pair bh written from oT: oT[x, i] / l[i], or the mean of all Tk values for
// a row that sees no key (its head's, kept for the thread's next such row of the same pair; with
// dropout the row's own, dropped_uniform_row); with
// stats, each row's (m, 1/l) beside them ((0, 1) for a row that sees no key: unused); with out16, the
// rows in bf16 as well, while they are in L1.
OPS_BF16_TARGET void WriteRows(Bf16Work& w, int64_t bh, int64_t r0, int64_t rows, const float* vh) {
  const AttentionShape& s = *w.s;
  const int64_t D = s.D, C = s.H * D, Tk = s.keys(), b = bh / s.H, h = bh % s.H;
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
        std::fill(w.mean.begin(), w.mean.end(), 0.0f);
        for (int64_t j = 0; j < Tk; ++j) {
          for (int64_t x = 0; x < D; ++x) w.mean[x] += vh[j * C + x];
        }
        const float inv = 1.0f / static_cast<float>(Tk);
        for (int64_t x = 0; x < D; ++x) w.mean[x] *= inv;
      }
      std::copy(w.mean.begin(), w.mean.begin() + D, oi);
      continue;
    }
    const float inv = 1.0f / w.l[i];
    for (int64_t x = 0; x < D; ++x) oi[x] = w.oT[x * kBlockRows + i] * inv;
  }
  for (int64_t i = 0; w.out16 && i < rows; ++i) {
    const int64_t at = (b * s.T + r0 + i) * C + h * D;
    RoundExact(w.out16 + at, w.out + at, D);
  }
}

// Rows [r0, r0 + rows) of pair bh (see the file comment), the products on `products` (DotProducts,
// TileProducts).
template <class Products>
OPS_BF16_TARGET void BlockKernel(Bf16Work& w, Products& products, int64_t bh, int64_t r0, int64_t rows) {
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H;
  constexpr int64_t vectors = kBlockRows / kLanes;
  const float* kh = w.k + b * s.key_stride() * C + h * D;  // head h of key 0 in batch b
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  const int64_t* keys = w.mask->keys(b);
  if (w.head_bh != bh) w.head_bh = bh, w.converted = 0;
  set_block_dropout(w, s, bh);
  w.r0 = r0;

  // The scaled queries as bf16 pairs, a row per lane; the rows' key limits (−1: sees no key, or past
  // the block), the extent of the keys any row sees and each query vector's.
  TransposedPairs(w.qt2.data(), w.q16.data(), w.q + (b * s.T + r0) * C + h * D, C, rows, D, w.scale);
  int64_t E = 0, vector_extent[vectors] = {};
  for (int64_t i = 0; i < kBlockRows; ++i) {
    int64_t lim = -1;
    if (i < rows) {
      const RowKeys rk = w.mask->row(b, r0 + i, s.causal);
      lim = rk.uniform ? -1 : rk.lim;
    }
    w.lim[i] = static_cast<int32_t>(lim);
    E = std::max(E, lim);
    vector_extent[i / kLanes] = std::max(vector_extent[i / kLanes], lim);
    w.m[i] = -std::numeric_limits<float>::infinity();
    w.l[i] = 0;
  }
  std::fill(w.oT.begin(), w.oT.end(), 0.0f);

  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});  // keys of the tile some row sees
    int64_t v0, v1;  // the query vectors [v0, v1) hold the rows that see a key of the tile
    tile_vectors(vector_extent, vectors, j0, v0, v1);
    const int64_t i0 = v0 * kLanes, i1 = v1 * kLanes, real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only
    bool limited = false;     // some row of those vectors sees only part of the tile
    for (int64_t i = i0; i < i1; ++i) limited |= w.lim[i] < j0 + n;
    // The tile's keys and values in bf16, the first time this thread reads them for this head; the
    // next tile's rows asked for meanwhile (C apart: the hardware prefetchers miss them).
    const int64_t end = std::min(Tk, j0 + kTileKeys);
    if (w.converted < end) {
      for (int64_t j = end; j < std::min(Tk, end + kTileKeys); ++j) {
        for (int64_t x = 0; x < D; x += kLanes) {
          _mm_prefetch(reinterpret_cast<const char*>(kh + j * C + x), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(vh + j * C + x), _MM_HINT_T0);
        }
      }
      ConvertKeys(w, products, kh, vh, end);
    }
    products.Scores(w, j0, n, i0, i1);  // st (n, rows) = k2 · qt2
    TileSoftmax(w, i0, i1, j0, n, limited, real < n ? keys : nullptr);  // the probabilities: pt2
    products.Outputs(w, j0, n, i0, i1);  // oT (D, rows) = α · oT + v2ᵀ · pt2
  }

  WriteRows(w, bh, r0, rows, vh);
}

// ---- The products on AMX-BF16's tiles (TileProducts) ----
// TDPBF16PS: C (16 rows × 16 fp32) += A (16 rows × 16 pair words) · B (16 pair rows × 16 words, VNNI:
// each word a pair along K), C[m][n] += A[m].bf16[2k]·B[k].bf16[2n] + A[m].bf16[2k+1]·B[k].bf16[2n+1]
// over k; tiles of 16 rows of 64 bytes are loaded from and stored to memory at a byte stride. The two
// products of BlockKernel map onto it where the operands already are rows of pair words:
//  - scores: st (keys, rows) = k2 (keys, pairs along D) · qt2 (pairs along D, rows): A = k2 with rows
//    of kw = Dh rounded up to 16 words, B = qt2 with kw rows, both zero past Dh; a C tile is 16 keys ×
//    16 query rows; a partial tile's keys past n get scores from whatever k2 holds there (zeros past
//    Tk), never read;
//  - p·v: oT (Dp, rows) = α·oT + v2ᵀ (D, key pairs) · pt2 (key pairs, rows): A must hold the key pairs
//    along its rows, so the values are kept transposed per tile of keys, v2 (⌈Tk/64⌉ tiles, Dp, 32
//    pair words) with D padded to whole tiles by zero rows; pt2's pairs past the tile's ⌈n/2⌉ are
//    zeroed up to the 16-pair chunk the product reads, so the keys past n add exactly 0 (their values
//    finite, zero past Tk); α multiplies oT's columns before its tiles are loaded (AVX-512; skipped
//    where every α is 1, which changes no bit).
// Every tile is 16 rows of 64 bytes (partial shapes are padded): one configuration per thread and call.
// Registers: C[r][c] in tmm 2r + c, A[r] in tmm 4 + r, B[c] in tmm 6 + c (r, c < 2): blocks of 2 × 2
// C tiles, 32 × 32 fp32, each A and B tile loaded once per block and K chunk.
#define OPS_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

constexpr int64_t kTileRows = 16;   // rows of a tile
constexpr int64_t kTileWords = 16;  // 32-bit words of a tile's row (64 bytes)
constexpr int64_t kPairs = kTileKeys / 2;  // pair words of a key tile's row in TilePairs' layout

// The tile operations on AMX (a CPU where flash_attention_amx_available()). GCC's intrinsics are
// inline assembly with the register's number in the instruction text (literal numbers only, hence a
// case per register), and they tell the compiler neither that ldtilecfg reads all 64 bytes of its
// configuration nor that tileloadd reads memory: a compiler barrier before each keeps the stores
// that wrote what they read before them. Strides in bytes.
struct AmxTiles {
  OPS_AMX_TARGET void Configure() {
    alignas(64) uint8_t config[64] = {};
    config[0] = 1;  // palette 1
    for (int t = 0; t < 8; ++t) {
      const uint16_t bytes = kTileWords * 4;
      std::memcpy(config + 16 + 2 * t, &bytes, sizeof bytes);  // bytes per row
      config[48 + t] = kTileRows;                             // rows
    }
    Barrier();
    _tile_loadconfig(config);
  }
  OPS_AMX_TARGET void Release() { _tile_release(); }
  template <int R>
  OPS_AMX_TARGET void LoadA(const uint32_t* a, int64_t stride) {
    Barrier();
    if constexpr (R == 0) _tile_loadd(4, a, stride);
    else _tile_loadd(5, a, stride);
  }
  template <int C>
  OPS_AMX_TARGET void LoadB(const uint32_t* b, int64_t stride) {
    Barrier();
    if constexpr (C == 0) _tile_loadd(6, b, stride);
    else _tile_loadd(7, b, stride);
  }
  template <int R, int C>
  OPS_AMX_TARGET void LoadC(const float* c, int64_t stride) {
    Barrier();
    if constexpr (2 * R + C == 0) _tile_loadd(0, c, stride);
    else if constexpr (2 * R + C == 1) _tile_loadd(1, c, stride);
    else if constexpr (2 * R + C == 2) _tile_loadd(2, c, stride);
    else _tile_loadd(3, c, stride);
  }
  template <int R, int C>
  OPS_AMX_TARGET void ZeroC() {
    if constexpr (2 * R + C == 0) _tile_zero(0);
    else if constexpr (2 * R + C == 1) _tile_zero(1);
    else if constexpr (2 * R + C == 2) _tile_zero(2);
    else _tile_zero(3);
  }
  template <int R, int C>
  OPS_AMX_TARGET void StoreC(float* c, int64_t stride) {  // _tile_stored tells the compiler it writes memory
    if constexpr (2 * R + C == 0) _tile_stored(0, c, stride);
    else if constexpr (2 * R + C == 1) _tile_stored(1, c, stride);
    else if constexpr (2 * R + C == 2) _tile_stored(2, c, stride);
    else _tile_stored(3, c, stride);
  }
  template <int R, int C>
  OPS_AMX_TARGET void Dp() {  // C[R][C] += A[R] · B[C]
    if constexpr (2 * R + C == 0) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (2 * R + C == 1) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (2 * R + C == 2) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
  }

 private:
  static void Barrier() { asm volatile("" ::: "memory"); }
};

// The same tile operations on arrays, in scalar code: for the tests of TileProducts' layouts, padding
// and tiling on CPUs without AMX, not a speed path. TDPBF16PS as the SDM gives it: for each k in
// order, C[m][n] += A[m][2k]·B[k][2n], then += A[m][2k+1]·B[k][2n+1], each bf16 product exact in fp32
// and each addition rounded to fp32 (its flushing of subnormals is not modelled: the kernel's bf16
// rounding flushes the inputs' already). With kDotOrder, each pair's odd product first instead, as
// AVX512-BF16's VDPBF16PS adds them: the tile kernel then gives DotProducts' bits, which tests its
// layouts and padding to the last bit. A tile operation outside Configure … Release aborts.
// TileProducts' functions carry OPS_AMX_TARGET whichever the tiles, but GCC never emits a tile
// instruction on its own: on these tiles they run on any CPU with AVX512-BF16.
template <bool kDotOrder>
struct EmulatedTiles {
  void Configure() { configured = true; }
  void Release() { configured = false; }
  template <int R>
  void LoadA(const uint32_t* a, int64_t stride) { Load(4 + R, a, stride); }
  template <int C>
  void LoadB(const uint32_t* b, int64_t stride) { Load(6 + C, b, stride); }
  template <int R, int C>
  void LoadC(const float* c, int64_t stride) { Load(2 * R + C, c, stride); }
  template <int R, int C>
  void ZeroC() {
    Check();
    std::memset(tile[2 * R + C], 0, sizeof tile[0]);
  }
  template <int R, int C>
  void StoreC(float* c, int64_t stride) {
    Check();
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(reinterpret_cast<char*>(c) + r * stride, tile[2 * R + C][r], 64);
  }
  template <int R, int C>
  void Dp() { DotProduct(tile[2 * R + C], tile[4 + R], tile[6 + C]); }

 private:
  using Tile = uint32_t[kTileRows][kTileWords];
  void Check() const {
    if (!configured) std::abort();
  }
  void Load(int t, const void* p, int64_t stride) {
    Check();
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(tile[t][r], static_cast<const char*>(p) + r * stride, 64);
  }
  static float Half(uint32_t word, int high) { return std::bit_cast<float>(high ? word & 0xffff0000u : word << 16); }
  void DotProduct(Tile& c, const Tile& a, const Tile& b) {
    Check();
    for (int64_t m = 0; m < kTileRows; ++m) {
      for (int64_t k = 0; k < kTileWords; ++k) {
        const float a0 = Half(a[m][k], 0), a1 = Half(a[m][k], 1);
        for (int64_t n = 0; n < kTileWords; ++n) {
          float acc = std::bit_cast<float>(c[m][n]);
          if constexpr (kDotOrder) acc += a1 * Half(b[k][n], 1);
          acc += a0 * Half(b[k][n], 0);
          if constexpr (!kDotOrder) acc += a1 * Half(b[k][n], 1);
          c[m][n] = std::bit_cast<uint32_t>(acc);
        }
      }
    }
  }
  alignas(64) Tile tile[8] = {};
  bool configured = false;
};

// C (MR·16 rows × NR·16 fp32, row stride ldc words) = C (accumulate) or 0, + A (MR·16 rows of
// chunks·16 pair words, row stride lda words) · B (chunks·16 pair rows of NR·16 words, row stride ldb
// words): a block of MR × NR ≤ 2 × 2 C tiles, K's chunks of 16 pairs in order.
template <int MR, int NR, class Tiles>
OPS_AMX_TARGET void TileBlock(Tiles& t, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t chunks,
                              float* c, int64_t ldc, bool accumulate) {
  const int64_t sa = lda * 4, sb = ldb * 4, sc = ldc * 4;  // byte strides
  float* const c1 = c + kTileRows * ldc;                    // the second row of C tiles
  if (accumulate) {
    t.template LoadC<0, 0>(c, sc);
    if constexpr (NR > 1) t.template LoadC<0, 1>(c + kTileWords, sc);
    if constexpr (MR > 1) t.template LoadC<1, 0>(c1, sc);
    if constexpr (MR > 1 && NR > 1) t.template LoadC<1, 1>(c1 + kTileWords, sc);
  } else {
    t.template ZeroC<0, 0>();
    if constexpr (NR > 1) t.template ZeroC<0, 1>();
    if constexpr (MR > 1) t.template ZeroC<1, 0>();
    if constexpr (MR > 1 && NR > 1) t.template ZeroC<1, 1>();
  }
  for (int64_t k = 0; k < chunks; ++k) {
    const uint32_t *ak = a + k * kTileWords, *bk = b + k * kTileRows * ldb;
    t.template LoadA<0>(ak, sa);
    if constexpr (MR > 1) t.template LoadA<1>(ak + kTileRows * lda, sa);
    t.template LoadB<0>(bk, sb);
    if constexpr (NR > 1) t.template LoadB<1>(bk + kTileWords, sb);
    t.template Dp<0, 0>();
    if constexpr (NR > 1) t.template Dp<0, 1>();
    if constexpr (MR > 1) t.template Dp<1, 0>();
    if constexpr (MR > 1 && NR > 1) t.template Dp<1, 1>();
  }
  t.template StoreC<0, 0>(c, sc);
  if constexpr (NR > 1) t.template StoreC<0, 1>(c + kTileWords, sc);
  if constexpr (MR > 1) t.template StoreC<1, 0>(c1, sc);
  if constexpr (MR > 1 && NR > 1) t.template StoreC<1, 1>(c1 + kTileWords, sc);
}

// C (mt·16 rows × nt·16) = C (accumulate) or 0, + A (mt·16 rows, chunks·16 pair words) · B (chunks·16
// pair rows, nt·16 words), in blocks of 2 × 2 C tiles; strides as TileBlock's.
template <class Tiles>
OPS_AMX_TARGET void TileProduct(Tiles& t, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t mt,
                                int64_t nt, int64_t chunks, float* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < mt; i += 2) {
    for (int64_t j = 0; j < nt; j += 2) {
      const uint32_t *ai = a + i * kTileRows * lda, *bj = b + j * kTileWords;
      float* cij = c + i * kTileRows * ldc + j * kTileWords;
      if (i + 1 < mt && j + 1 < nt) {
        TileBlock<2, 2>(t, ai, lda, bj, ldb, chunks, cij, ldc, accumulate);
      } else if (i + 1 < mt) {
        TileBlock<2, 1>(t, ai, lda, bj, ldb, chunks, cij, ldc, accumulate);
      } else if (j + 1 < nt) {
        TileBlock<1, 2>(t, ai, lda, bj, ldb, chunks, cij, ldc, accumulate);
      } else {
        TileBlock<1, 1>(t, ai, lda, bj, ldb, chunks, cij, ldc, accumulate);
      }
    }
  }
}

// Keys [from, end) of a head (xh: its key 0, rows C apart, D values each) as bf16 pairs of consecutive
// keys, kept transposed per tile of kTileKeys keys: pair word (x[j, d], x[j + 1, d]) at
// t2[(j / 64·Dp + d)·32 + j % 64 / 2] (an odd end's last key with a zero; from even). The forward's
// values and the backward's keys, as A of a product over key pairs; row (D) is scratch.
OPS_AMX_TARGET void TilePairs(uint32_t* t2, uint32_t* row, const float* xh, int64_t C, int64_t D, int64_t Dp,
                              int64_t from, int64_t end) {
  for (int64_t j = from; j < end; j += 2) {
    PairRows(row, xh + j * C, j + 1 < end ? xh + (j + 1) * C : nullptr, D, D, 1.0f);
    uint32_t* column = t2 + j / kTileKeys * Dp * kPairs + j % kTileKeys / 2;
    for (int64_t d = 0; d < D; ++d) column[d * kPairs] = row[d];
  }
}

// BlockKernel's two products on tiles (AmxTiles, or EmulatedTiles in tests), laid out as the section's
// comment says.
template <class Tiles>
struct TileProducts {
  void Allocate(Bf16Work& w) {
    const int64_t D = w.s->D, Tk = w.s->keys(), tiles = (Tk + kTileKeys - 1) / kTileKeys;
    w.kw = (w.Dh + kTileWords - 1) / kTileWords * kTileWords, Dp = (D + kTileRows - 1) / kTileRows * kTileRows;
    // Zeros in the padding, never written after: k2 past Dh and past Tk (to whole tiles of rows), qt2
    // past Dh, v2 past D and past Tk.
    w.k2.assign((Tk + kTileRows - 1) / kTileRows * kTileRows * w.kw, 0u);
    w.qt2.assign(w.kw * kBlockRows, 0u);
    w.v2.assign(tiles * Dp * kPairs, 0u);
    w.oT.resize(Dp * kBlockRows), vrow.resize(D);
  }
  OPS_AMX_TARGET void Begin() { tiles.Configure(); }  // per thread and call
  OPS_AMX_TARGET void End() { tiles.Release(); }

  // Values [w.converted, end) of the head (vh: its key 0) into v2: pair word (v[j, x], v[j + 1, x]) at
  // v2[(j / 64·Dp + x)·32 + j % 64 / 2] (an odd Tk's last key with a zero; end even or Tk).
  OPS_AMX_TARGET void Values(Bf16Work& w, const float* vh, int64_t end) {
    TilePairs(w.v2.data(), vrow.data(), vh, w.s->H * w.s->D, w.s->D, Dp, w.converted, end);
  }

  // st (n, kBlockRows) columns [i0, i1) = k2 (n keys from j0, kw) · qt2 (kw, rows), in whole tiles of
  // 16 keys.
  OPS_AMX_TARGET void Scores(Bf16Work& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    TileProduct(tiles, w.k2.data() + j0 * w.kw, w.kw, w.qt2.data() + i0, kBlockRows, (n + kTileRows - 1) / kTileRows,
                (i1 - i0) / kTileWords, w.kw / kTileWords, w.st.data() + i0, kBlockRows, false);
  }

  // oT (Dp, rows) columns [i0, i1) = α · oT + v2ᵀ (Dp, pairs) · pt2 (pairs, rows) over the tile's
  // ⌈n/2⌉ pairs of keys, in chunks of 16 pairs (pt2 zeroed past them).
  OPS_AMX_TARGET void Outputs(Bf16Work& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t pairs = (n + 1) / 2, chunks = (pairs + kTileRows - 1) / kTileRows, R = kBlockRows;
    for (int64_t p = pairs; p < chunks * kTileRows; ++p) std::fill_n(w.pt2.data() + p * R + i0, i1 - i0, 0u);
    __mmask16 rescaled = 0;
    for (int64_t i = i0; i < i1; i += kLanes) {
      rescaled |= _mm512_cmp_ps_mask(_mm512_loadu_ps(w.alpha.data() + i), _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
    }
    for (int64_t x = 0; rescaled && x < w.s->D; ++x) {
      for (int64_t i = i0; i < i1; i += kLanes) {
        float* o = w.oT.data() + x * R + i;
        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), _mm512_loadu_ps(w.alpha.data() + i)));
      }
    }
    TileProduct(tiles, w.v2.data() + j0 / kTileKeys * Dp * kPairs, kPairs, w.pt2.data() + i0, R, Dp / kTileRows,
                (i1 - i0) / kTileWords, chunks, w.oT.data() + i0, R, true);
  }

  Tiles tiles;
  int64_t Dp = 0;             // oT's and each tile of v2's rows: D rounded up to whole tiles, zero past D
  std::vector<uint32_t> vrow;  // one pair of keys' value pairs (D): Values' scratch
};

// flash_attention_forward_bf16 with the products on `Products` (DotProducts, TileProducts).
template <class Products>
void Forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
             const AttentionShape& s, float* stats, uint16_t* out16) {
  const int64_t D = s.D, Dh = (D + 1) / 2, Tk = s.keys(), blocks = (s.T + kBlockRows - 1) / kBlockRows;
  const KeyMask mask(key_mask, s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    Bf16Work w;
    w.q = q, w.k = k, w.v = v, w.out = out, w.stats = stats, w.mask = &mask, w.s = &s, w.scale = scale, w.Dh = Dh;
    w.out16 = out16;
    w.q16.resize(2 * Dh), w.pt2.resize(kTileKeys / 2 * kBlockRows), w.st.resize(kTileKeys * kBlockRows);
    w.mean.resize(D), w.m.resize(kBlockRows), w.l.resize(kBlockRows), w.alpha.resize(kBlockRows);
    w.lim.resize(kBlockRows);
    Products products;
    products.Allocate(w);  // k2, v2, qt2, oT
    products.Begin();
#pragma omp for schedule(static)
    for (int64_t item = 0; item < s.B * s.H * blocks; ++item) {
      const int64_t bh = item / blocks, r0 = item % blocks * kBlockRows;
      BlockKernel(w, products, bh, r0, std::min(kBlockRows, s.T - r0));
    }
    products.End();
  }
}

// ---- The backward (flash_attention_backward_bf16) ----
// Per (batch, head), on one thread (its keys' gradients accumulate in the thread's buffers, then are
// added to dk and dv once): the head's keys rounded as the scores read them (k2, pairs along D) and
// as dQ's product reads them (kp2, pairs of consecutive keys), its values as dP's product reads them
// (vd2, pairs along D); then per block of kBlockRows query rows, the block's scaled queries and output
// gradients as bf16 pairs along D with a row per lane (qt2, gt2) and as pairs of consecutive rows
// (qr2, gr2); per tile of keys some row sees, with the rows as lanes:
//   st (n, rows)  = k2 · qt2                       the scores again
//   dpt (n, rows) = vd2 · gt2                      dP = dO·vᵀ
//   P = exp(st − m)·inv from the forward's statistics, dS = scale · P ⊙ (dP − Δ), Δ = rowsum(dO ⊙ out)
//   (under attention dropout dP through the mask's backward, and pr2 below holds P after the mask);
//   P and dS rounded in pairs of rows (pr2, dsr2) and dS in pairs of keys (dsk2);
//   dV (n, D) += pr2 · gr2, dK (n, D) += dsr2 · qr2 (D as lanes), dQᵀ (D, rows) += kp2ᵀ · dsk2 (rows
//   as lanes), each product accumulating into its fp32 buffer as it loads it.
// The roundings are the per-block bf16 backward's (attention_bf16.h): q, k, v, dO, P and scale·dS
// rounded to bf16, fp32 accumulation and softmax; Δ in fp32 from the forward's output and dO rounded
// as dP's product reads it.
// The five products are the kernel's template parameter, as the forward's two: AVX512-BF16's dot
// products (DotBackProducts, the default) or AMX-BF16's tiles (TileBackProducts, laid out as its
// comment says), which flash_attention_backward_bf16 takes where the forward takes its tiles.
struct Bf16BackWork {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr, *stats = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const KeyMask* mask = nullptr;
  const AttentionShape* s = nullptr;
  float scale = 1;
  int64_t Dh = 0, Dp = 0;  // pairs of dimensions ⌈D/2⌉; D rounded up to whole vectors
  // k2's and vd2's pair words per key, qt2's and gt2's rows (kw ≥ Dh, zero past Dh): the products'
  // padding (DotBackProducts: none; TileBackProducts: whole tile rows).
  int64_t kw = 0;
  // The head's: k2, vd2 (Tk, kw); kp2 as the products read it; dK, dV (Tk, or Tk rounded up to 16,
  // Dp) fp32.
  std::vector<uint32_t> k2, vd2, kp2;
  std::vector<float> dK, dV;
  // The block's: qt2, gt2 (kw, kBlockRows); qr2, gr2 (kBlockRows/2, Dp); dQT (D, or Dp, kBlockRows)
  // fp32; per row the statistics m, inv, Δ and the key limit (−1: sees no key, or past the block).
  std::vector<uint32_t> qt2, gt2, qr2, gr2;
  std::vector<float> dQT, m, inv, delta, ones;
  std::vector<int32_t> lim;
  std::vector<uint16_t> row16;  // one row's bf16 (2·Dh): RoundBlock's scratch
  // The tile's: st, dpt (kTileKeys, kBlockRows) fp32; pr2, dsr2 (kTileKeys, kBlockRows/2); dsk2
  // (kTileKeys/2, kBlockRows).
  std::vector<float> st, dpt;
  std::vector<uint32_t> pr2, dsr2, dsk2;
  // Attention dropout: the head's mask (drop.keep null without), and the block's first row.
  base::Keep keep{0, 0.0};
  BlockDropout drop{};
  int64_t r0 = 0;
};

// Rows [0, rows) of x (row stride C, D each) times scale, rounded to bf16: into t2 (Dh, kBlockRows) as
// pairs along D, a row per lane, and into r2 (kBlockRows/2, Dp) as pairs of consecutive rows, D as
// lanes (either null: not wanted); rows past `rows` zero in both.
OPS_BF16_TARGET void RoundBlock(Bf16BackWork& w, const float* x, int64_t C, int64_t rows, float scale,
                                uint32_t* t2, uint32_t* r2) {
  const int64_t D = w.s->D, Dp = w.Dp;
  if (t2) TransposedPairs(t2, w.row16.data(), x, C, rows, D, scale);
  for (int64_t i = 0; r2 && i < kBlockRows; i += 2) {
    uint32_t* out = r2 + i / 2 * Dp;
    if (i >= rows) {
      std::fill(out, out + Dp, 0u);
    } else {
      PairRows(out, x + i * C, i + 1 < rows ? x + (i + 1) * C : nullptr, D, Dp, scale);
    }
  }
}

// The head's keys and values rounded (k2, vd2; the products' kp2) and its gradient buffers zeroed.
template <class Products>
OPS_BF16_TARGET void LoadHead(Bf16BackWork& w, Products& products, const float* kh, const float* vh) {
  const AttentionShape& s = *w.s;
  const int64_t C = s.H * s.D, D = s.D, Tk = s.keys();
  for (int64_t j = 0; j < Tk; ++j) {
    RoundRow(reinterpret_cast<uint16_t*>(w.k2.data() + j * w.kw), kh + j * C, D, 1.0f);
    RoundRow(reinterpret_cast<uint16_t*>(w.vd2.data() + j * w.kw), vh + j * C, D, 1.0f);
  }
  products.KeyPairs(w, kh);
  std::fill(w.dK.begin(), w.dK.end(), 0.0f);
  std::fill(w.dV.begin(), w.dV.end(), 0.0f);
}

// Key j (of the tile from j0) for the rows of vector i: its probabilities exp(score − m)·inv, 0 where
// masked (the row's limit, a padded key), stored after dropout in pairs of rows in pr2, and its score
// gradients scale · p ⊙ (dP − Δ) (dP through dropout's backward), stored so in dsr2 and returned.
OPS_BF16_TARGET inline __m512 KeyGrads(Bf16BackWork& w, int64_t i, int64_t j0, int64_t j, const int64_t* padded,
                                       __m512i lim, __m512 m, __m512 inv, __m512 delta, __m512 scale) {
  constexpr int64_t R = kBlockRows, R2 = kBlockRows / 2;
  __m512 x = _mm512_loadu_ps(w.st.data() + j * R + i);
  const __mmask16 seen = _mm512_cmplt_epi32_mask(_mm512_set1_epi32(static_cast<int32_t>(j0 + j)), lim);
  x = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), seen, x);
  if (padded && padded[j0 + j] == 0) x = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 p = _mm512_mul_ps(Exp16(_mm512_sub_ps(x, m)), inv);
  __m512 dp = _mm512_loadu_ps(w.dpt.data() + j * R + i), pv = p;  // pv: the probabilities dV's product reads
  if (w.drop.keep) {  // dropout: dV's product reads P after it, P's gradient goes through its backward
    const __mmask16 kept = Kept16(w.drop, w.keep, w.r0 + i, j0 + j);
    pv = Drop16(kept, p, w.drop);
    dp = Drop16(kept, dp, w.drop);
  }
  const __m512 ds = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(dp, delta)), scale);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.pr2.data() + j * R2 + i / 2),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(pv)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.dsr2.data() + j * R2 + i / 2),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(ds)));
  return ds;
}

// The tile's probabilities and score gradients from st and dpt (n keys from j0, rows [i0, i1) in whole
// vectors): pr2, dsr2 (pairs of rows) and dsk2 (pairs of keys; dS = 0 beside an odd tile's last key).
OPS_BF16_TARGET void TileGrads(Bf16BackWork& w, int64_t i0, int64_t i1, int64_t j0, int64_t n, const int64_t* padded) {
  const __m512 scale = _mm512_set1_ps(w.scale);
  for (int64_t i = i0; i < i1; i += kLanes) {
    const __m512i lim = _mm512_loadu_si512(w.lim.data() + i);
    const __m512 m = _mm512_loadu_ps(w.m.data() + i), inv = _mm512_loadu_ps(w.inv.data() + i);
    const __m512 delta = _mm512_loadu_ps(w.delta.data() + i);
    for (int64_t j = 0; j < n; j += 2) {
      const __m512 ds0 = KeyGrads(w, i, j0, j, padded, lim, m, inv, delta, scale);
      const __m512 ds1 = j + 1 < n ? KeyGrads(w, i, j0, j + 1, padded, lim, m, inv, delta, scale) : _mm512_setzero_ps();
      _mm512_storeu_si512(w.dsk2.data() + j / 2 * kBlockRows + i, Pairs(ds0, ds1));
    }
  }
}

// The backward's five products on AVX512-BF16's dot products (PanelProduct's): k2, vd2 (Tk, Dh);
// kp2 (⌈Tk/2⌉, D) pairs of consecutive keys, D as lanes; dQT (D, rows).
struct DotBackProducts {
  void Allocate(Bf16BackWork& w) {
    const int64_t D = w.s->D, Tk = w.s->keys();
    w.kw = w.Dh;
    w.k2.resize(Tk * w.kw), w.vd2.resize(Tk * w.kw), w.kp2.resize((Tk + 1) / 2 * D);
    w.qt2.resize(w.kw * kBlockRows), w.gt2.resize(w.kw * kBlockRows);
    w.dK.resize(Tk * w.Dp), w.dV.resize(Tk * w.Dp), w.dQT.resize(D * kBlockRows);
  }
  void Begin() {}  // per thread and call
  void End() {}
  void Rows(int64_t&, int64_t&) const {}  // a tile's rows [i0, i1): whole vectors suffice

  // The head's keys (kh: its key 0) in pairs of consecutive keys into kp2 (an odd Tk's last key with zeros).
  OPS_BF16_TARGET void KeyPairs(Bf16BackWork& w, const float* kh) {
    const int64_t C = w.s->H * w.s->D, D = w.s->D, Tk = w.s->keys();
    for (int64_t j = 0; j < Tk; j += 2) {
      PairRows(w.kp2.data() + j / 2 * D, kh + j * C, j + 1 < Tk ? kh + (j + 1) * C : nullptr, D, D, 1.0f);
    }
  }

  // st, dpt (n, kBlockRows) columns [i0, i1) = k2, vd2 (n keys from j0, Dh) · qt2, gt2 (Dh, rows).
  OPS_BF16_TARGET void Scores(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t R = kBlockRows, Dh = w.Dh, vectors = (i1 - i0) / kLanes;
    Product(w.k2.data() + j0 * Dh, Dh, 1, w.qt2.data() + i0, R, n, Dh, w.st.data() + i0, R, vectors, nullptr);
    Product(w.vd2.data() + j0 * Dh, Dh, 1, w.gt2.data() + i0, R, n, Dh, w.dpt.data() + i0, R, vectors, nullptr);
  }

  // dV and dK (n keys from j0, Dp) += pr2, dsr2 (n, row pairs [i0/2, i1/2)) · gr2, qr2 (row pairs, Dp),
  // 4 vectors of D at a time.
  OPS_BF16_TARGET void KeyGradients(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    constexpr int64_t R2 = kBlockRows / 2;
    const int64_t Dp = w.Dp;
    for (int64_t c = 0; c < Dp; c += 4 * kLanes) {
      const int64_t nv = std::min<int64_t>(4, (Dp - c) / kLanes);
      Product(w.pr2.data() + i0 / 2, R2, 1, w.gr2.data() + i0 / 2 * Dp + c, Dp, n, (i1 - i0) / 2,
              w.dV.data() + j0 * Dp + c, Dp, nv, w.ones.data());
      Product(w.dsr2.data() + i0 / 2, R2, 1, w.qr2.data() + i0 / 2 * Dp + c, Dp, n, (i1 - i0) / 2,
              w.dK.data() + j0 * Dp + c, Dp, nv, w.ones.data());
    }
  }

  // dQᵀ (D, rows) columns [i0, i1) += kp2ᵀ (D, key pairs from j0/2) · dsk2 (key pairs, rows).
  OPS_BF16_TARGET void QueryGradients(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t D = w.s->D, R = kBlockRows;
    Product(w.kp2.data() + j0 / 2 * D, 1, D, w.dsk2.data() + i0, R, D, (n + 1) / 2, w.dQT.data() + i0, R,
            (i1 - i0) / kLanes, w.ones.data());
  }
};

// The backward's products on tiles (AmxTiles, or EmulatedTiles in tests), the forward's TileProduct
// with these layouts:
//  - st, dpt (keys, rows) = k2, vd2 (keys, kw) · qt2, gt2 (kw, rows): as the forward's scores (kw = Dh
//    rounded up to 16 words, keys to whole tiles of 16 rows, zeros in the padding; rows of C past n
//    never read);
//  - dV, dK (keys, Dp) += pr2, dsr2 (keys, row pairs) · gr2, qr2 (row pairs, Dp): K runs over pairs of
//    query rows in chunks of 16 pairs, so a tile's rows are widened to whole 32-row halves of the
//    block (Rows): the rows it adds see none of the tile's keys, and TileGrads gives them P = dS = 0;
//    pr2's and dsr2's keys past n are zeroed up to the 16-key tile, so that they add exactly 0 to rows
//    of dK and dV that belong to real keys (dK and dV hold Tk rounded up to 16 rows);
//  - dQᵀ (Dp, rows) += kp2ᵀ (Dp, key pairs) · dsk2 (key pairs, rows): the keys kept transposed per
//    tile of keys as the forward keeps the values (kp2 (⌈Tk/64⌉ tiles, Dp, 32 pair words), zero past D
//    and Tk), dsk2's pairs past ⌈n/2⌉ zeroed up to the 16-pair chunk.
template <class Tiles>
struct TileBackProducts {
  // Dp (D rounded up to whole vectors) is then whole tiles of rows and of words.
  static_assert(kLanes == kTileRows && kLanes == kTileWords);

  void Allocate(Bf16BackWork& w) {
    const int64_t D = w.s->D, Tk = w.s->keys(), tiles = (Tk + kTileKeys - 1) / kTileKeys;
    const int64_t keys = (Tk + kTileRows - 1) / kTileRows * kTileRows;
    w.kw = (w.Dh + kTileWords - 1) / kTileWords * kTileWords;
    // Zeros in the padding, never written after: k2 and vd2 past Dh and Tk, qt2 and gt2 past Dh, kp2
    // past D and Tk.
    w.k2.assign(keys * w.kw, 0u), w.vd2.assign(keys * w.kw, 0u), w.kp2.assign(tiles * w.Dp * kPairs, 0u);
    w.qt2.assign(w.kw * kBlockRows, 0u), w.gt2.assign(w.kw * kBlockRows, 0u);
    w.dK.resize(keys * w.Dp), w.dV.resize(keys * w.Dp), w.dQT.resize(w.Dp * kBlockRows);
    krow.resize(D);
  }
  OPS_AMX_TARGET void Begin() { tiles.Configure(); }  // per thread and call
  OPS_AMX_TARGET void End() { tiles.Release(); }
  void Rows(int64_t& i0, int64_t& i1) const {  // whole chunks of 16 row pairs
    i0 = i0 / (2 * kTileRows) * (2 * kTileRows), i1 = (i1 + 2 * kTileRows - 1) / (2 * kTileRows) * (2 * kTileRows);
  }

  OPS_AMX_TARGET void KeyPairs(Bf16BackWork& w, const float* kh) {
    TilePairs(w.kp2.data(), krow.data(), kh, w.s->H * w.s->D, w.s->D, w.Dp, 0, w.s->keys());
  }

  OPS_AMX_TARGET void Scores(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t R = kBlockRows, mt = (n + kTileRows - 1) / kTileRows, nt = (i1 - i0) / kTileWords;
    TileProduct(tiles, w.k2.data() + j0 * w.kw, w.kw, w.qt2.data() + i0, R, mt, nt, w.kw / kTileWords,
                w.st.data() + i0, R, false);
    TileProduct(tiles, w.vd2.data() + j0 * w.kw, w.kw, w.gt2.data() + i0, R, mt, nt, w.kw / kTileWords,
                w.dpt.data() + i0, R, false);
  }

  OPS_AMX_TARGET void KeyGradients(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    constexpr int64_t R2 = kBlockRows / 2;
    const int64_t Dp = w.Dp, keys = (n + kTileRows - 1) / kTileRows * kTileRows, c0 = i0 / 2, pairs = (i1 - i0) / 2;
    for (int64_t j = n; j < keys; ++j) {
      std::fill_n(w.pr2.data() + j * R2 + c0, pairs, 0u);
      std::fill_n(w.dsr2.data() + j * R2 + c0, pairs, 0u);
    }
    const int64_t mt = keys / kTileRows, nt = Dp / kTileWords, chunks = pairs / kTileRows;
    TileProduct(tiles, w.pr2.data() + c0, R2, w.gr2.data() + c0 * Dp, Dp, mt, nt, chunks, w.dV.data() + j0 * Dp, Dp,
                true);
    TileProduct(tiles, w.dsr2.data() + c0, R2, w.qr2.data() + c0 * Dp, Dp, mt, nt, chunks, w.dK.data() + j0 * Dp, Dp,
                true);
  }

  OPS_AMX_TARGET void QueryGradients(Bf16BackWork& w, int64_t j0, int64_t n, int64_t i0, int64_t i1) {
    const int64_t R = kBlockRows, pairs = (n + 1) / 2, chunks = (pairs + kTileRows - 1) / kTileRows;
    for (int64_t p = pairs; p < chunks * kTileRows; ++p) std::fill_n(w.dsk2.data() + p * R + i0, i1 - i0, 0u);
    TileProduct(tiles, w.kp2.data() + j0 / kTileKeys * w.Dp * kPairs, kPairs, w.dsk2.data() + i0, R,
                w.Dp / kTileRows, (i1 - i0) / kTileWords, chunks, w.dQT.data() + i0, R, true);
  }

  Tiles tiles;
  std::vector<uint32_t> krow;  // one pair of keys' pairs (D): KeyPairs' scratch
};

// Rows [r0, r0 + rows) of pair bh: their dq rows, and their share of the head's dK and dV buffers, the
// products on `products` (DotBackProducts, TileBackProducts).
template <class Products>
OPS_BF16_TARGET void BackwardBlock(Bf16BackWork& w, Products& products, int64_t bh, int64_t r0, int64_t rows) {
  const AttentionShape& s = *w.s;
  const int64_t H = s.H, D = s.D, C = H * D, Tk = s.keys(), b = bh / H, h = bh % H, Dp = w.Dp;
  constexpr int64_t R = kBlockRows, vectors = kBlockRows / kLanes;
  const float* kh = w.k + b * s.key_stride() * C + h * D;
  const float* vh = w.v + b * s.key_stride() * C + h * D;
  const int64_t row0 = (b * s.T + r0) * C + h * D;  // head h of query row r0 in batch b
  const int64_t* keys = w.mask->keys(b);

  int64_t vector_extent[vectors];
  const int64_t E = backward_block_rows(*w.mask, s, w.stats, bh, r0, rows, R, kLanes, w.lim.data(), w.m.data(),
                                        w.inv.data(), vector_extent);
  w.r0 = r0;
  if (E > 0) {
    RoundBlock(w, w.q + row0, C, rows, w.scale, w.qt2.data(), nullptr);  // scaled queries for the scores
    RoundBlock(w, w.q + row0, C, rows, 1.0f, nullptr, w.qr2.data());  // unscaled, in pairs of rows, for dK
    RoundBlock(w, w.dout + row0, C, rows, 1.0f, w.gt2.data(), w.gr2.data());
    std::fill(w.dQT.begin(), w.dQT.end(), 0.0f);
    // Δ = rowsum(dO ⊙ out) with dO as dP's product reads it (gt2, bf16): a row that sees one key then
    // gets dP − Δ = 0 up to fp32 sums, as the exact gradient (the per-block path takes Σ p·dP from
    // the same products instead).
    for (int64_t i = 0; i < R; ++i) {
      float delta = 0;
      for (int64_t x = 0; w.lim[i] >= 0 && x < D; ++x) {  // rows that see a key
        // Pair word p holds dimension 2p in its low half, 2p + 1 in its high half.
        const uint32_t pair = w.gt2[x / 2 * R + i], bits = x % 2 == 0 ? pair << 16 : pair & 0xffff0000u;
        float g;
        std::memcpy(&g, &bits, sizeof g);
        delta += g * w.out[row0 + i * C + x];
      }
      w.delta[i] = delta;
    }
  }
  for (int64_t j0 = 0; j0 < E; j0 += kTileKeys) {
    const int64_t n = std::min({kTileKeys, Tk - j0, E - j0});
    int64_t v0, v1;
    tile_vectors(vector_extent, vectors, j0, v0, v1);
    const int64_t real = w.mask->real_keys(b, j0, j0 + n);
    if (real == 0) continue;  // padding only: P = 0
    int64_t i0 = v0 * kLanes, i1 = v1 * kLanes;
    products.Rows(i0, i1);
    products.Scores(w, j0, n, i0, i1);  // st, dpt
    TileGrads(w, i0, i1, j0, n, real < n ? keys : nullptr);  // pr2, dsr2, dsk2
    products.KeyGradients(w, j0, n, i0, i1);  // dV, dK
    products.QueryGradients(w, j0, n, i0, i1);  // dQT
  }
  for (int64_t i = 0; i < rows; ++i) {  // dq rows once each (dQT is scratch for uniform rows after)
    if (w.lim[i] < 0) continue;
    float* dqi = w.dq + row0 + i * C;
    for (int64_t x = 0; x < D; ++x) dqi[x] += w.dQT[x * R + i];
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (w.lim[i] >= 0) continue;
    uniform_row_grads(w.dout + row0 + i * C, w.out + row0 + i * C, w.q + row0 + i * C, w.dq + row0 + i * C, kh, vh,
                      Tk, D, C, w.scale, w.dK.data(), w.dV.data(), Dp, w.dQT.data(), w.drop, r0 + i);
  }
}

// flash_attention_backward_bf16 with the products on `Products` (DotBackProducts, TileBackProducts).
template <class Products>
void Backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* stats, const float* q,
              const float* k, const float* v, const int64_t* key_mask, const AttentionShape& s) {
  const int64_t D = s.D, Tk = s.keys(), C = s.H * D;
  const KeyMask mask(key_mask, s);
  const double work = static_cast<double>(s.B * s.H) * static_cast<double>(s.T) * static_cast<double>(Tk) * D;
#pragma omp parallel if (work >= base::kParallelMinElements)
  {
    Bf16BackWork w;
    w.q = q, w.k = k, w.v = v, w.out = out, w.dout = dout, w.stats = stats, w.dq = dq, w.dk = dk, w.dv = dv;
    w.mask = &mask, w.s = &s, w.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    w.Dh = (D + 1) / 2, w.Dp = (D + kLanes - 1) / kLanes * kLanes;
    w.qr2.resize(kBlockRows / 2 * w.Dp), w.gr2.resize(kBlockRows / 2 * w.Dp);
    w.m.resize(kBlockRows), w.inv.resize(kBlockRows), w.delta.resize(kBlockRows), w.lim.resize(kBlockRows);
    w.ones.assign(4 * kLanes, 1.0f), w.row16.resize(2 * w.Dh);  // a product's 4 vectors at most
    w.st.resize(kTileKeys * kBlockRows), w.dpt.resize(kTileKeys * kBlockRows);
    w.pr2.resize(kTileKeys * kBlockRows / 2), w.dsr2.resize(kTileKeys * kBlockRows / 2);
    w.dsk2.resize(kTileKeys / 2 * kBlockRows);
    Products products;
    products.Allocate(w);  // k2, vd2, kp2, qt2, gt2, dK, dV, dQT
    products.Begin();
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H, key0 = b * s.key_stride() * C + h * D;  // head h of key 0 in batch b
      LoadHead(w, products, k + key0, v + key0);
      set_block_dropout(w, s, bh);
      for (int64_t r0 = 0; r0 < s.T; r0 += kBlockRows) {
        BackwardBlock(w, products, bh, r0, std::min(kBlockRows, s.T - r0));
      }
      for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t x = 0; x < D; ++x) {
          dk[key0 + j * C + x] += w.dK[j * w.Dp + x];
          dv[key0 + j * C + x] += w.dV[j * w.Dp + x];
        }
      }
    }
    products.End();
  }
}

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

bool flash_attention_bf16_applies(const AttentionShape& s) {  // key limits are int32 lanes
  return (s.saved == AttentionSaved::none || s.saved == AttentionSaved::row_stats) && s.bf16_products &&
         s.keys() <= std::numeric_limits<int32_t>::max() && cpu_has_avx512_bf16();
}

void flash_attention_forward_bf16(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                                  const AttentionShape& s, float* stats, uint16_t* out16) {
  flash_attention_forward_bf16_with(flash_attention_amx_enabled() ? Bf16Products::amx : Bf16Products::dot, out, q, k,
                                    v, key_mask, s, stats, out16);
}

void flash_attention_forward_bf16_with(Bf16Products products, float* out, const float* q, const float* k,
                                       const float* v, const int64_t* key_mask, const AttentionShape& s, float* stats,
                                       uint16_t* out16) {
  if (!flash_attention_bf16_applies(s)) {
    throw std::invalid_argument(
        "flash_attention_forward_bf16: bf16 products (nothing saved, or row statistics), on a CPU "
        "with AVX512-BF16");
  }
  if ((s.saved == AttentionSaved::row_stats) != (stats != nullptr)) {
    throw std::invalid_argument("flash_attention_forward_bf16: row statistics are written where, and only where, "
                                "the shape saves them");
  }
  switch (products) {
    case Bf16Products::dot: return Forward<DotProducts>(out, q, k, v, key_mask, s, stats, out16);
    case Bf16Products::amx:
      if (!flash_attention_amx_available()) {
        throw std::invalid_argument("flash_attention_forward_bf16: AMX tiles on a CPU and OS without AMX-BF16");
      }
      return Forward<TileProducts<AmxTiles>>(out, q, k, v, key_mask, s, stats, out16);
    case Bf16Products::amx_emulated:
      return Forward<TileProducts<EmulatedTiles<false>>>(out, q, k, v, key_mask, s, stats, out16);
    case Bf16Products::amx_emulated_in_dot_order:
      return Forward<TileProducts<EmulatedTiles<true>>>(out, q, k, v, key_mask, s, stats, out16);
  }
}

bool flash_attention_amx_available() {
  static const bool available = [] {
    // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16 (read directly: Clang's __builtin_cpu_supports
    // does not know these names).
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!cpu_has_avx512_bf16() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) ||
        !(edx & (1u << 22))) {
      return false;
    }
#ifdef __linux__
    // Linux hands out the tile data state (XFEATURE_XTILEDATA, 18) per process, on request
    // (ARCH_REQ_XCOMP_PERM): a tile instruction faults without it.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
  }();
  return available;
}

bool flash_attention_amx_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("ROFORMER_AMX_ATTENTION");
    return env && std::string_view(env) == "1" && flash_attention_amx_available();
  }();
  return enabled;
}

void flash_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                   const float* stats, const float* q, const float* k, const float* v,
                                   const int64_t* key_mask, const AttentionShape& s) {
  flash_attention_backward_bf16_with(flash_attention_amx_enabled() ? Bf16Products::amx : Bf16Products::dot, dq, dk, dv,
                                     dout, out, stats, q, k, v, key_mask, s);
}

void flash_attention_backward_bf16_with(Bf16Products products, float* dq, float* dk, float* dv, const float* dout,
                                        const float* out, const float* stats, const float* q, const float* k,
                                        const float* v, const int64_t* key_mask, const AttentionShape& s) {
  if (!flash_attention_bf16_applies(s) || s.saved != AttentionSaved::row_stats || !out || !stats) {
    throw std::invalid_argument(
        "flash_attention_backward_bf16: bf16 products from row statistics and the forward's "
        "output, on a CPU with AVX512-BF16");
  }
  switch (products) {
    case Bf16Products::dot: return Backward<DotBackProducts>(dq, dk, dv, dout, out, stats, q, k, v, key_mask, s);
    case Bf16Products::amx:
      if (!flash_attention_amx_available()) {
        throw std::invalid_argument("flash_attention_backward_bf16: AMX tiles on a CPU and OS without AMX-BF16");
      }
      return Backward<TileBackProducts<AmxTiles>>(dq, dk, dv, dout, out, stats, q, k, v, key_mask, s);
    case Bf16Products::amx_emulated:
      return Backward<TileBackProducts<EmulatedTiles<false>>>(dq, dk, dv, dout, out, stats, q, k, v, key_mask, s);
    case Bf16Products::amx_emulated_in_dot_order:
      return Backward<TileBackProducts<EmulatedTiles<true>>>(dq, dk, dv, dout, out, stats, q, k, v, key_mask, s);
  }
}

#else  // not x86-64: no AVX512-BF16, never applies

bool flash_attention_bf16_applies(const AttentionShape&) { return false; }

void flash_attention_forward_bf16(float*, const float*, const float*, const float*, const int64_t*,
                                  const AttentionShape&, float*, uint16_t*) {
  throw std::invalid_argument("flash_attention_forward_bf16: needs AVX512-BF16 (x86-64)");
}

void flash_attention_forward_bf16_with(Bf16Products, float*, const float*, const float*, const float*, const int64_t*,
                                       const AttentionShape&, float*, uint16_t*) {
  throw std::invalid_argument("flash_attention_forward_bf16: needs AVX512-BF16 (x86-64)");
}

bool flash_attention_amx_available() { return false; }

bool flash_attention_amx_enabled() { return false; }

void flash_attention_backward_bf16(float*, float*, float*, const float*, const float*, const float*, const float*,
                                   const float*, const float*, const int64_t*, const AttentionShape&) {
  throw std::invalid_argument("flash_attention_backward_bf16: needs AVX512-BF16 (x86-64)");
}

void flash_attention_backward_bf16_with(Bf16Products, float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const float*, const int64_t*,
                                        const AttentionShape&) {
  throw std::invalid_argument("flash_attention_backward_bf16: needs AVX512-BF16 (x86-64)");
}

#endif

}  // namespace ops
