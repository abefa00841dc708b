// The CUDA backend's stand-in for builds without a CUDA compiler: every CUDA request is refused with
// ROPE_ERR_UNSUPPORTED and a message saying why, and the CPU backends are unaffected.
#include "../error.h"
#include "rope_cuda.h"

namespace rope {

namespace {
constexpr const char* kNoCuda = "librope was built without CUDA (no nvcc found, or ROFORMER_CUDA=OFF)";
}

rope_status cuda_available() { return fail(ROPE_ERR_UNSUPPORTED, "%s", kNoCuda); }

rope_status cuda_apply(const ApplyJob&, void*) { return fail(ROPE_ERR_UNSUPPORTED, "%s", kNoCuda); }

rope_status cuda_check(const rope_plan&, void*) { return fail(ROPE_ERR_UNSUPPORTED, "%s", kNoCuda); }

void cuda_release_plan(rope_plan*) {}

}  // namespace rope
