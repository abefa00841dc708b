// Counter-based random numbers: value i of stream `seed` is a pure function of (seed, i), so
// dropout masks can be regenerated in the backward instead of stored, and results do not depend on
// thread count or on resuming from a checkpoint. SplitMix64's finaliser as the mixing function.
// Shared by ops (dropout, attention dropout, FAVOR+ features), model, data (MLM masking, corpus
// windows) and train.
#pragma once

#include <cmath>
#include <cstdint>

namespace base {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t seed, uint64_t index) {
  return static_cast<double>(mix64(mix64(seed) ^ index) >> 11) * 0x1.0p-53;
}

// Dropout's keep decision, uniform01(seed, i) ≥ p, in integers: uniform01 is k·2^-53 for the 53
// random bits k, exactly, so it is ≥ p iff k ≥ ⌈p·2^53⌉. The same outcomes without the int-to-double
// conversion and a compare of doubles in the masks' inner loops.
class Keep {
 public:
  Keep(uint64_t seed, double p) : stream_(mix64(seed)), threshold_(static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)))) {}
  bool operator()(uint64_t index) const { return (mix64(stream_ ^ index) >> 11) >= threshold_; }
  uint64_t stream() const { return stream_; }        // mix64(seed): what a vectorised mask starts from
  uint64_t threshold() const { return threshold_; }  // ⌈p·2^53⌉

 private:
  uint64_t stream_, threshold_;
};

}  // namespace base
