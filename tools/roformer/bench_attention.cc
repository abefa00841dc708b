// `roformer bench attention`: time per token of one attention layer, forward + backward, against the
// sequence length, for softmax attention (O(T²) time and memory) and linear attention with RoPE
// (elu+1 and FAVOR+, O(T)), to show where linear attention starts to win (paper §3.3).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_util.h"
#include "base/memory.h"
#include "base/random.h"
#include "commands.h"
#include "ops/attention.h"
#include "ops/linear_attention.h"
#include "rope/rope.hpp"

namespace roformer {

int bench_attention(const BenchAttentionOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int64_t H = o.heads, D = o.head_dim, C = H * D;
  fmt::print("one causal attention layer, forward + backward, {} heads of {}, {} threads: microseconds per token\n\n",
             H, D, omp_get_max_threads());
  fmt::print("| tokens | softmax + RoPE | linear (elu+1) + RoPE | performer ({} features) + RoPE |\n|---|---|---|---|\n",
             o.performer_features);
  const rope::Plan plan(rope::default_config(static_cast<int32_t>(D)));
  std::vector<std::string> skipped;  // lengths whose softmax was not run, and why
  std::vector<float> W(o.performer_features * D);
  ops::favor_projection(W.data(), o.performer_features, D, 7);
  for (int64_t T : o.lengths) {
    base::check_fits_in_memory(8.0 * sizeof(float) * static_cast<double>(T) * static_cast<double>(C),
                               "--lengths " + std::to_string(T) + " with --heads " + std::to_string(H) + " and --head-dim " +
                                   std::to_string(D));
    std::vector<float> q(T * C), k(T * C), v(T * C), out(T * C), dq(T * C), dk(T * C), dv(T * C), g(T * C);
    for (int64_t i = 0; i < T * C; ++i) {
      q[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
      k[i] = static_cast<float>(base::uniform01(2, i) - 0.5);
      v[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
      g[i] = static_cast<float>(base::uniform01(4, i) - 0.5);
    }
    auto best_of = [&](auto&& run) {
      double best = INFINITY;
      for (int r = 0; r < o.repetitions; ++r) {
        const auto t0 = bench_clock::now();
        run();
        best = std::min(best, seconds_since(t0));
      }
      return best / T * 1e6;
    };
    const double softmax_gb = static_cast<double>(H) * T * T * sizeof(float) / 1e9;  // the (H, T, T) probabilities
    std::string softmax = "skipped¹";
    if (softmax_gb > o.max_softmax_gb) {
      skipped.push_back(fmt::format("{} tokens: {:.3g} GB", T, softmax_gb));
    } else {
      std::vector<float> att(H * T * T);
      const ops::AttentionShape s{1, T, H, D, true};
      softmax = fmt::format("{:.2f}", best_of([&] {
        plan.apply_qk(ROPE_FORWARD, rope::offset_positions(0), rope::bshd(q.data(), ROPE_DTYPE_F32, 1, T, H, D),
                      rope::bshd(k.data(), ROPE_DTYPE_F32, 1, T, H, D));
        ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), nullptr, s);
        ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(), nullptr,
                                s);
        plan.apply_qk(ROPE_BACKWARD, rope::offset_positions(0), rope::bshd(dq.data(), ROPE_DTYPE_F32, 1, T, H, D),
                      rope::bshd(dk.data(), ROPE_DTYPE_F32, 1, T, H, D));
      }));
    }
    auto linear = [&](ops::FeatureMap map) {
      ops::LinearAttentionShape s{1, T, H, D, D, true};
      s.feature_map = map;
      s.favor_features = map == ops::FeatureMap::favor ? o.performer_features : 0;
      std::vector<float> saved(ops::linear_attention_saved_size(s));
      const float* w = map == ops::FeatureMap::favor ? W.data() : nullptr;
      return fmt::format("{:.2f}", best_of([&] {
        ops::linear_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), w, s);
        ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), q.data(), k.data(),
                                       v.data(), w, s);
      }));
    };
    const std::string elu = linear(ops::FeatureMap::elu_plus_one), favor = linear(ops::FeatureMap::favor);
    fmt::print("| {} | {} | {} | {} |\n", T, softmax, elu, favor);
    std::fflush(stdout);
  }
  if (!skipped.empty()) {
    fmt::print("\n¹ softmax attention not run where its (heads, T, T) probabilities need more than --max-softmax-gb {} "
               "({}); linear attention needs no such matrix\n",
               o.max_softmax_gb, fmt::join(skipped, ", "));
  }
  return 0;
}

}  // namespace roformer
