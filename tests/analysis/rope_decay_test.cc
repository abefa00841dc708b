// RoPE's long-term decay bound (paper §3.4.3, Fig. 2): values against a direct long-double
// evaluation of (1/(d/2)) Σ_j |Σ_{i<j} e^{i r θ_i}|, the decay the paper shows (distances 0, 32, 64,
// 128, 256), and the scaling specs.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "analysis/rope_decay.h"
#include "rope/rope.hpp"

namespace {

std::vector<double> paper_freqs(int d, double base) {
  std::vector<double> f(d / 2);
  for (int i = 0; i < d / 2; ++i) f[i] = std::pow(base, -2.0 * i / d);
  return f;
}

TEST(RopeDecay, MatchesADirectEvaluation) {
  const auto f = paper_freqs(128, 10000);
  const auto bound = analysis::rope_decay_bound(f, 300);
  for (int64_t r : {0, 1, 7, 32, 64, 100, 128, 255, 256, 300}) {
    std::complex<long double> s = 0;
    long double total = 0;
    for (size_t j = 0; j < f.size(); ++j) {
      s += std::polar(1.0L, static_cast<long double>(r) * static_cast<long double>(f[j]));
      total += std::abs(s);
    }
    EXPECT_NEAR(bound[r], static_cast<double>(total / f.size()), 1e-10) << "distance " << r;
  }
  EXPECT_NEAR(bound[0], (64 + 1) / 2.0, 1e-12);  // S_j = j at distance 0: mean of 1..64
}

TEST(RopeDecay, DecaysWithDistanceAsInThePaper) {
  const auto bound = analysis::rope_decay_bound(paper_freqs(128, 10000), 256);
  // The paper's Fig. 2: a steep fall over the first tens of tokens, then a slow, oscillating decay.
  EXPECT_GT(bound[0], bound[32]);
  EXPECT_GT(bound[32], bound[64]);
  EXPECT_GT(bound[64], bound[128]);
  EXPECT_GT(bound[128], bound[256]);
  EXPECT_LT(bound[256], 0.5 * bound[0]);
  // A larger base decays more slowly: its bound stays higher at the same distance.
  const auto slow = analysis::rope_decay_bound(paper_freqs(128, 1e6), 256);
  EXPECT_GT(slow[128], bound[128]);
  EXPECT_GT(slow[256], bound[256]);
}

TEST(RopeDecay, UsesLibropeFrequenciesAndScalingSpecs) {
  rope::Plan plain(analysis::rope_config_from_spec(128, 10000, "none"));
  const auto ours = plain.inv_freq(), paper = paper_freqs(128, 10000);
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], paper[i], 1e-15 * paper[i] + 1e-300);
  rope::Plan linear(analysis::rope_config_from_spec(128, 10000, "linear:4"));
  EXPECT_NEAR(linear.inv_freq()[3], paper[3] / 4, 1e-15);
  for (const char* spec : {"ntk:4", "dynamic-ntk:4:2048", "yarn:4:2048", "llama3:8:8192"}) {
    EXPECT_NO_THROW(rope::Plan(analysis::rope_config_from_spec(128, 10000, spec))) << spec;
  }
  for (const char* bad : {"linear", "linear:-1", "linear:x", "yarn:4", "alibi:2", "linear:4:5", "yarn:4:0.5", "yarn:4:1e300"}) {
    EXPECT_THROW(analysis::rope_config_from_spec(128, 10000, bad), std::invalid_argument) << bad;
  }
  EXPECT_THROW(analysis::rope_decay_bound({}, 10), std::invalid_argument);
}

}  // namespace
