// Runtime dispatch of the SIMD kernels in rope_cpu-inl.h over every Highway target built in.
#include "rope_cpu.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "rope/cpu/rope_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "rope/cpu/rope_cpu-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace HWY_NAMESPACE {

void CosSinExactEntry(const double* pos, const double* theta, int64_t n, float* c, float* s) {
  CosSinExact(pos, theta, n, c, s);
}

int64_t TargetEntry() { return HWY_TARGET; }

void ApplyRowsEntry(const ApplyJob& job, int64_t unit_begin, int64_t unit_end) {
  ApplyRowsImpl(job, unit_begin, unit_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace rope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rope {

HWY_EXPORT(CosSinExactEntry);
HWY_EXPORT(ApplyRowsEntry);
HWY_EXPORT(TargetEntry);

void simd_cos_sin(const double* pos, const double* theta, int64_t n, float* c, float* s) {
  HWY_DYNAMIC_DISPATCH(CosSinExactEntry)(pos, theta, n, c, s);
}

void simd_apply(const ApplyJob& job, int64_t unit_begin, int64_t unit_end) {
  HWY_DYNAMIC_DISPATCH(ApplyRowsEntry)(job, unit_begin, unit_end);
}

const char* simd_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetEntry)());
}

}  // namespace rope

extern "C" const char* rope_cpu_target(void) { return rope::simd_target_name(); }
#endif  // HWY_ONCE
