// ops' names for the counter-based RNG that lives in base/random.h (ops::mix64, ops::uniform01), kept
// for the engine code that spells them so (ops, model, train). New code includes base/random.h.
#pragma once

#include "base/random.h"

namespace ops {

using base::mix64;
using base::uniform01;

}  // namespace ops
