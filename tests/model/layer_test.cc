// The layer stack (src/model/layer.h): UniLM's row limits fed incrementally equal the whole
// sequence's, one layer_forward over a growing cache equals the same layer over the whole sequence,
// a cached cross-attention memory equals recomputing it, and the contexts the forward pass and
// decoding share (cross-attention on the dropout sites of layer L + l, precision from the call).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/layer.h"
#include "model/roformer.h"
#include "tiny_models.h"

namespace {

model::RoFormerConfig tiny_decoder() {
  auto c = model_testing::tiny_config(13);
  c.is_decoder = true;
  return c;
}

std::vector<float> uniform(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(LayerStack, UnilmRowLimitsOfTheWholeSequence) {
  const std::vector<int64_t> types = {0, 0, 0, 1, 1, 1, 1, /* row 1 */ 0, 0, 1, 0, 2, 0, 1};
  std::vector<int64_t> limit(14), segment(14);
  model::unilm_row_limits(limit.data(), segment.data(), 7, types.data(), 2, 7, 0);
  EXPECT_EQ(segment, (std::vector<int64_t>{0, 0, 0, 1, 2, 3, 4, 0, 0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(limit, (std::vector<int64_t>{3, 3, 3, 4, 5, 6, 7, 2, 2, 4, 4, 6, 6, 7}));
  model::unilm_row_limits(limit.data(), segment.data(), 7, nullptr, 2, 7, 0);  // all type 0: all see all
  EXPECT_EQ(limit, std::vector<int64_t>(14, 7));
}

// Decoding's form: a type-0 prefix fed at once, then one token at a time, extending each row's
// segments, gives the whole sequence's limits.
TEST(LayerStack, UnilmRowLimitsFedIncrementallyEqualTheWholeSequences) {
  const int64_t B = 2, S = 7, P = 3, capacity = 10;
  const std::vector<int64_t> types = {0, 0, 0, 1, 1, 1, 1, /* row 1 */ 0, 0, 0, 2, 1, 1, 3};
  std::vector<int64_t> whole(B * S), segment(B * S);
  model::unilm_row_limits(whole.data(), segment.data(), S, types.data(), B, S, 0);
  std::vector<int64_t> cumulative(B * capacity, -1), limit(B * P), prefix(B * P);
  for (int64_t b = 0; b < B; ++b) std::copy_n(types.begin() + b * S, P, prefix.begin() + b * P);
  model::unilm_row_limits(limit.data(), cumulative.data(), capacity, prefix.data(), B, P, 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < P; ++t) EXPECT_EQ(limit[b * P + t], whole[b * S + t]) << "row " << b << " t " << t;
  }
  for (int64_t t = P; t < S; ++t) {
    const int64_t step[2] = {types[t], types[S + t]};
    model::unilm_row_limits(limit.data(), cumulative.data(), capacity, step, B, 1, t);
    for (int64_t b = 0; b < B; ++b) EXPECT_EQ(limit[b], whole[b * S + t]) << "row " << b << " t " << t;
  }
}

// Prefill and decode run one layer_forward: over a key/value cache fed 3 tokens, then one at a time,
// it gives the uncached layer's outputs; out may alias x.
TEST(LayerStack, CachedLayerEqualsTheWholeSequence) {
  const auto c = tiny_decoder();
  model::RoFormer<float> m(c);
  model_testing::randomise(m, 11);
  const int64_t B = 2, S = 6, H = c.hidden_size;
  const std::vector<float> x = uniform(B * S * H, 3);
  model::LayerStatics<float> statics(c);
  model::AttentionCall call;
  call.saved = ops::AttentionSaved::none;
  const auto self = statics.self_context(1, call), cross = statics.cross_context(1, call);
  EXPECT_TRUE(self.causal);
  std::vector<float> whole(B * S * H);
  model::LayerActs<float> acts;
  model::layer_forward(whole.data(), acts, m.p.layers[1], self, cross, x.data(), B, S, 0);
  model::KVCache<float> cache;
  cache.B = B, cache.capacity = S;
  cache.k.assign(B * S * H, 0.0f), cache.v = cache.k;
  for (int64_t start = 0, n = 3; start < S; start += n, n = 1) {
    std::vector<float> step(B * n * H);  // (B, n, H), written in place
    for (int64_t b = 0; b < B; ++b) std::copy_n(x.begin() + (b * S + start) * H, n * H, step.begin() + b * n * H);
    model::layer_forward(step.data(), acts, m.p.layers[1], self, cross, step.data(), B, n, start, &cache);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < n * H; ++i) {
        ASSERT_NEAR(step[b * n * H + i], whole[(b * S + start) * H + i], 1e-5) << "row " << b << " start " << start;
      }
    }
  }
  EXPECT_EQ(cache.length, S);
}

// A decoder layer over the encoder's states, and over a cache of their keys and values (decoding's
// set_memory), gives the same bits.
TEST(LayerStack, CachedCrossAttentionMemoryEqualsTheStates) {
  auto c = tiny_decoder();
  c.add_cross_attention = true;
  model::RoFormer<float> m(c);
  model_testing::randomise(m, 12);
  const int64_t B = 2, S = 3, Tk = 5, H = c.hidden_size;
  const std::vector<float> x = uniform(B * S * H, 4), memory = uniform(B * Tk * H, 5);
  const std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  model::LayerStatics<float> statics(c);
  model::AttentionCall call;
  call.saved = ops::AttentionSaved::none;
  call.memory_mask = mask.data();
  const auto self = statics.self_context(0, call), cross = statics.cross_context(0, call);
  std::vector<float> direct(B * S * H), cached(B * S * H);
  model::LayerActs<float> acts;
  model::KVCache<float>* const no_cache = nullptr;  // no self-attention cache
  model::layer_forward(direct.data(), acts, m.p.layers[0], self, cross, x.data(), B, S, 0, no_cache,
                       model::CrossMemory<float>{memory.data(), Tk});
  model::KVCache<float> kv;
  model::cross_attention_memory(kv.k, kv.v, m.p.layers[0].cross, cross, memory.data(), B, Tk);
  kv.B = B, kv.capacity = kv.length = Tk;
  model::layer_forward(cached.data(), acts, m.p.layers[0], self, cross, x.data(), B, S, 0, no_cache,
                       model::CrossMemory<float>{nullptr, Tk, &kv});
  EXPECT_EQ(direct, cached);
}

TEST(LayerStack, ContextsOfSelfAndCrossAttention) {
  auto c = tiny_decoder();
  c.add_cross_attention = true;
  model::LayerStatics<float> statics(c);
  const std::vector<int64_t> keys(4, 1), memory(4, 1), limits(4, 2);
  model::AttentionCall call;
  call.key_mask = keys.data(), call.memory_mask = memory.data(), call.row_limit = limits.data();
  call.saved = ops::AttentionSaved::none, call.bf16_products = true;
  call.dropout.hidden = 0.25;
  const auto self = statics.self_context(1, call), cross = statics.cross_context(1, call);
  EXPECT_EQ(self.layer, 1);
  EXPECT_EQ(cross.layer, c.num_hidden_layers + 1);  // the dropout sites of layer L + l
  EXPECT_TRUE(self.causal);
  EXPECT_FALSE(cross.causal);
  EXPECT_EQ(self.key_mask, keys.data());
  EXPECT_EQ(cross.key_mask, memory.data());
  EXPECT_EQ(self.row_limit, limits.data());
  EXPECT_EQ(cross.row_limit, nullptr);
  EXPECT_NE(self.rope, nullptr);
  EXPECT_EQ(cross.rope, nullptr);  // rotate_cross_attention off
  EXPECT_EQ(cross.favor, nullptr);
  for (const auto* ctx : {&self, &cross}) {
    EXPECT_EQ(ctx->config, &c);
    EXPECT_EQ(ctx->saved, ops::AttentionSaved::none);
    EXPECT_TRUE(ctx->bf16_products);
    EXPECT_EQ(ctx->dropout.hidden, 0.25);
  }
  c.rotate_cross_attention = true;
  EXPECT_EQ(model::LayerStatics<float>(c).cross_context(0, call).rope != nullptr, true);
  c.pooler_activation = model::PoolerActivation::linear;  // RoFormer-Sim: UniLM's limits instead of the causal mask
  EXPECT_FALSE(model::LayerStatics<float>(c).self_context(0, call).causal);
}

}  // namespace
