// Entry points of the CUDA backend (rope_cuda.cu), or of its stand-in (no_cuda.cc) in builds
// without nvcc, which report the backend unavailable. apply.cc validates a call as for the CPU
// and hands the job here; everything device-specific (pointer kinds, the plan's GPU copies, launch,
// device-side position checks) lives behind these functions.
#pragma once

#include "../apply.h"

namespace rope {

// ROPE_OK when the build has CUDA and a GPU is present; else ROPE_ERR_UNSUPPORTED with the reason.
rope_status cuda_available();

// Every pointer the job reads or writes (tensors and position arrays) must be memory of one GPU
// (device or managed). Launches the rotation on `stream` and returns without waiting. The host has
// checked shapes, strides, overlap and every position it can see; the kernel checks the positions held
// in device arrays.
rope_status cuda_apply(const ApplyJob& job, void* stream);

// rope_cuda_check: waits for `stream`, then reports and clears the plan's device-side position record.
rope_status cuda_check(const rope_plan& plan, void* stream);

// Frees the plan's GPU copies (rope_plan_destroy).
void cuda_release_plan(rope_plan* plan);

}  // namespace rope
