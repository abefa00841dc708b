// Dropout forward/backward (see dropout.h).
#include "dropout.h"

#include "base/random.h"

namespace ops {

template <typename T>
void dropout_forward(T* out, const T* inp, int64_t n, double p, uint64_t seed, uint64_t first) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const base::Keep keep(seed, p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = keep(first + static_cast<uint64_t>(i)) ? inp[i] * scale : T(0);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t n, double p, uint64_t seed, uint64_t first) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const base::Keep keep(seed, p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (keep(first + static_cast<uint64_t>(i))) dinp[i] += dout[i] * scale;
  }
}

template void dropout_forward<float>(float*, const float*, int64_t, double, uint64_t, uint64_t);
template void dropout_forward<double>(double*, const double*, int64_t, double, uint64_t, uint64_t);
template void dropout_backward<float>(float*, const float*, int64_t, double, uint64_t, uint64_t);
template void dropout_backward<double>(double*, const double*, int64_t, double, uint64_t, uint64_t);

}  // namespace ops
