// How a backward op treats an input-gradient buffer it is handed: adds to what it holds (an input
// read by several layers sums their gradients there) or overwrites it (its only reader: no zeroing
// pass before, and the op reads nothing of it).
#pragma once

namespace ops {

enum class Grad { accumulate, overwrite };

}  // namespace ops
