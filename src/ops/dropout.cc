// Dropout forward/backward (see dropout.h). The keep decision is base::Keep's, element by element:
// fp32 takes it eight or sixteen lanes at a time (dropout-inl.h: SplitMix64's finaliser on 64-bit
// lanes), fp64 and the tails one at a time; both give the same mask bit for bit, which the tests check
// on every SIMD target.
#include "dropout.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/dropout.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/dropout-inl.h"

#include "base/random.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[i] (=, or += with accumulate) keep(first + i) ? in[i] · scale : 0 for i < n, whole vectors only;
// returns how many elements it did (a multiple of the lane count).
int64_t DropoutKernel(float* out, const float* in, int64_t n, uint64_t stream, uint64_t threshold, uint64_t first,
                      float scale, bool accumulate) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no 64-bit half to split it into; the caller's loop does it all
  (void)out, (void)in, (void)n, (void)stream, (void)threshold, (void)first, (void)scale, (void)accumulate;
  return 0;
#else
  const hn::ScalableTag<float> df;
  const hn::Repartition<uint64_t, decltype(df)> d64;  // half as many lanes
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), half = N / 2;
  auto index = hn::Add(hn::Iota(d64, 0), hn::Set(d64, first));
  const auto step = hn::Set(d64, static_cast<uint64_t>(half));
  const auto vscale = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto lo = KeepLanes(d64, index, stream, threshold);
    index = hn::Add(index, step);
    const auto hi = KeepLanes(d64, index, stream, threshold);
    index = hn::Add(index, step);
    const auto keep = KeepFloats(df, lo, hi);
    const auto scaled = hn::Mul(hn::LoadU(df, in + i), vscale);
    if (accumulate) {  // dropped elements keep their value as it is (−0 stays −0)
      const auto o = hn::LoadU(df, out + i);
      hn::StoreU(hn::IfThenElse(keep, hn::Add(o, scaled), o), df, out + i);
    } else {
      hn::StoreU(hn::IfThenElseZero(keep, scaled), df, out + i);
    }
  }
  return i;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <type_traits>

namespace ops {

HWY_EXPORT(DropoutKernel);

template <typename T>
void dropout_apply(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first, bool accumulate) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const base::Keep keep(seed, p);
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    i = HWY_DYNAMIC_DISPATCH(DropoutKernel)(out, inp, n, keep.stream(), keep.threshold(), first, scale, accumulate);
  }
  for (; i < n; ++i) {
    const bool kept = keep(first + static_cast<uint64_t>(i));
    if (accumulate) {
      if (kept) out[i] += inp[i] * scale;
    } else {
      out[i] = kept ? inp[i] * scale : T(0);
    }
  }
}

namespace {

constexpr int64_t kChunk = 4096;  // elements per OpenMP work item

template <typename T>
void dropout_parallel(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    dropout_apply(out + c, inp + c, std::min(kChunk, n - c), p, seed, first + static_cast<uint64_t>(c), accumulate);
  }
}

}  // namespace

template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first) {
  dropout_parallel(out, inp, n, p, seed, first, false);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, double p, uint64_t seed, uint64_t first) {
  dropout_parallel(dinp, dout, n, p, seed, first, true);
}

template void dropout_apply<float>(float*, const float*, int64_t, double, uint64_t, uint64_t, bool);
template void dropout_apply<double>(double*, const double*, int64_t, double, uint64_t, uint64_t, bool);
template void dropout_forward<float>(float*, const float*, int64_t, double, uint64_t, uint64_t);
template void dropout_forward<double>(double*, const double*, int64_t, double, uint64_t, uint64_t);
template void dropout_backward<float>(float*, const float*, int64_t, double, uint64_t, uint64_t);
template void dropout_backward<double>(double*, const double*, int64_t, double, uint64_t, uint64_t);

}  // namespace ops
#endif  // HWY_ONCE
