// This machine's memory floor for `roformer bench rope`: an in-place scale and a streaming copy over
// the same bytes as a RoPE benchmark, vectorised with Highway (best target at run time) and split
// over threads as librope splits rows. A RoPE kernel cannot beat these; the bench reports the ratio.
#include "memory_floor.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "roformer/memory_floor.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace roformer {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ScaleInPlace(float* x, size_t n, float a) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto va = hn::Set(d, a);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), va), d, x + i);
  for (; i < n; ++i) x[i] *= a;
}

// A copy; with `stream`, non-temporal stores (no read-for-ownership of dst) once dst is aligned.
void Copy(const float* src, float* dst, size_t n, bool stream) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  if (stream) {
    for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % (lanes * sizeof(float)) != 0; ++i) dst[i] = src[i];
    for (; i + lanes <= n; i += lanes) hn::Stream(hn::LoadU(d, src + i), d, dst + i);
  }
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  for (; i < n; ++i) dst[i] = src[i];
  if (stream) hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace roformer
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

namespace roformer {

HWY_EXPORT(ScaleInPlace);
HWY_EXPORT(Copy);

void floor_scale(float* x, size_t n, float a, int threads) {
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t begin = n * t / nt, end = n * (t + 1) / nt;
    HWY_DYNAMIC_DISPATCH(ScaleInPlace)(x + begin, end - begin, a);
  }
}

void floor_copy(const float* src, float* dst, size_t n, size_t call_bytes, int threads) {
  // The same rule as librope's out-of-place kernels: stream only what cannot stay in cache.
  const bool stream = call_bytes > (size_t{1} << 20);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t begin = n * t / nt, end = n * (t + 1) / nt;
    HWY_DYNAMIC_DISPATCH(Copy)(src + begin, dst + begin, end - begin, stream);
  }
}

}  // namespace roformer
#endif  // HWY_ONCE
