// The one oneDNN CPU engine the ops share (packed linear layers, bf16 attention products). Internal to
// the ops: callers above them see PackedLinear and attention.h, not oneDNN.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ops {

const dnnl::engine& onednn_engine();

}  // namespace ops
