// The model blocks (src/model/blocks.h) on their own: cross-attention and the classification head
// against central differences in float64, a backward that starts from the hidden states, dropout
// masks that do not depend on how a batch is split, and the batched, reorderable KV cache and the
// UniLM mask in decoding, both against the full forward.
#include <gtest/gtest.h>

#include <random>

#include "grad_check.h"
#include "model/blocks.h"
#include "model/generate.h"
#include "model/params.h"
#include "model/roformer.h"

namespace {

using testing_util::expect_gradient;
using testing_util::kModelCheck;
using testing_util::picks;

model::RoFormerConfig tiny() {
  model::RoFormerConfig c;
  c.vocab_size = 13;
  c.embedding_size = c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

std::vector<double> normal(int64_t n, uint64_t seed, double sd = 0.5) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, sd);
  std::vector<double> v(n);
  for (double& x : v) x = z(rng);
  return v;
}

double dot(const std::vector<double>& a, const double* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// One attention sub-layer's parameters in a flat vector: q, k, v, out (H, H) + (H) each, norm (H) × 2.
struct AttentionWeights {
  std::vector<double> w, g;
  model::AttentionParams<double> p, pg;
  explicit AttentionWeights(int64_t H, uint64_t seed) : w(normal(4 * (H * H + H) + 2 * H, seed)), g(w.size(), 0.0) {
    for (int64_t i = 0; i < H; ++i) w[4 * (H * H + H) + i] += 1.0;  // norm weights near 1
    auto bind = [&](std::vector<double>& a, model::AttentionParams<double>& p) {
      double* x = a.data();
      for (auto* l : {&p.q, &p.k, &p.v, &p.out}) {
        l->w = x, l->b = x + H * H;
        x += H * H + H;
      }
      p.norm = {x, x + H};
    };
    bind(w, p);
    bind(g, pg);
  }
};

void check_cross_attention(bool rotate) {
  auto c = tiny();
  const int64_t B = 2, T = 3, Tk = 5, H = c.hidden_size;
  AttentionWeights aw(H, 1);
  std::vector<double> x = normal(B * T * H, 2), memory = normal(B * Tk * H, 3), r = normal(B * T * H, 4);
  std::vector<int64_t> key_mask(B * Tk, 1);
  key_mask[B * Tk - 1] = 0;  // the second source has a padding token
  const rope::Plan plan(model::rope_settings(c));
  model::AttentionContext<double> ctx;
  ctx.config = &c;
  ctx.rope = rotate ? &plan : nullptr;
  ctx.key_mask = key_mask.data();
  model::AttentionActs<double> acts;
  std::vector<double> out(B * T * H);
  auto loss = [&] {  // Σ r ⊙ out: a gradient seed that is not all ones
    model::cross_attention_forward(out.data(), acts, aw.p, ctx, x.data(), memory.data(), B, T, Tk);
    return dot(r, out.data());
  };
  loss();
  std::vector<double> dx(x.size()), dmemory(memory.size(), 0.0);
  model::Scratch<double> s;
  model::cross_attention_backward(dx.data(), dmemory.data(), aw.pg, r.data(), acts, aw.p, ctx, x.data(), memory.data(),
                                  B, T, Tk, s);
  int n = expect_gradient("x", x, dx, picks(x.size(), 8, 1), loss, kModelCheck);
  n += expect_gradient("memory", memory, dmemory, picks(memory.size(), 8, 2), loss, kModelCheck);
  n += expect_gradient("params", aw.w, aw.g, picks(aw.w.size(), 24, 3), loss, kModelCheck);
  EXPECT_GT(n, 40);
}

TEST(Blocks, CrossAttentionGradients) { check_cross_attention(false); }
TEST(Blocks, CrossAttentionGradientsWithRotatedPositions) { check_cross_attention(true); }

// A loss on the last hidden state (and the pooler), with no MLM head in the way.
TEST(Blocks, BackwardFromTheHiddenStates) {
  auto c = tiny();
  c.pooler_activation = model::PoolerActivation::tanh;  // RoFormer-Sim's pooler
  model::RoFormer<double> m(c);
  m.init_weights(3);
  const std::vector<double> jitter = normal(m.params.size(), 10, 0.2);  // away from the tidy initialisation
  for (size_t i = 0; i < jitter.size(); ++i) m.params[i] += jitter[i];
  const int64_t B = 2, T = 5, H = c.hidden_size;
  std::vector<int64_t> ids(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = 1 + i % (c.vocab_size - 1);
  const std::vector<double> r = normal(B * T * H, 8), rp = normal(B * H, 9);
  auto loss = [&] {
    m.forward({.ids = ids.data(), .B = B, .T = T});
    return dot(r, m.hidden_state(c.num_hidden_layers)) + dot(rp, m.pooler_output());
  };
  loss();
  m.zero_grad();
  m.backward_from_hidden(r.data(), rp.data());
  const std::vector<double> analytic = m.grads;
  int n = 0;
  for (const auto& info : m.layout()) {
    if (info.name.rfind("cls.", 0) == 0) continue;  // the MLM head takes no part
    std::vector<int64_t> at;
    for (int64_t j : picks(info.size, 2, info.offset)) {
      if (info.name.find("word_embeddings") == std::string::npos || j / c.embedding_size != c.pad_token_id) {
        at.push_back(info.offset + j);
      }
    }
    n += expect_gradient(info.name, m.params, analytic, at, loss, kModelCheck);
  }
  EXPECT_GT(n, 60);
}

// Dropout masks are keyed by global row: a batch split in two (row0 = 0 and 2) trains identically.
TEST(Blocks, DropoutDoesNotDependOnHowTheBatchIsSplit) {
  auto c = tiny();
  c.hidden_dropout_prob = 0.2;
  c.attention_probs_dropout_prob = 0.3;
  model::RoFormer<float> whole(c), half(c);
  whole.init_weights(4);
  half.init_weights(4);
  const int64_t B = 4, T = 6, H = c.hidden_size;
  std::vector<int64_t> ids(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = 1 + (i * 7) % (c.vocab_size - 1);
  whole.forward({.ids = ids.data(), .B = B, .T = T}, true, 99);
  for (int64_t row0 : {0, 2}) {
    half.forward({.ids = ids.data() + row0 * T, .B = 2, .T = T, .row0 = row0}, true, 99);
    for (int64_t i = 0; i < 2 * T * H; ++i) {
      ASSERT_EQ(half.hidden_state(c.num_hidden_layers)[i], whole.hidden_state(c.num_hidden_layers)[row0 * T * H + i])
          << "row0 " << row0 << " element " << i;
    }
  }
  half.forward({.ids = ids.data() + 2 * T, .B = 2, .T = T}, true, 99);  // row0 0: other masks
  EXPECT_NE(half.hidden_state(c.num_hidden_layers)[0], whole.hidden_state(c.num_hidden_layers)[2 * T * H]);
}

// Two rows decoded together equal each row's full forward; after reorder({1, 1}) both rows continue
// row 1's context.
TEST(Blocks, BatchedCacheMatchesTheFullForwardAndReorders) {
  auto c = tiny();
  c.is_decoder = true;
  model::RoFormer<float> m(c);
  m.init_weights(6);
  const int64_t T = 6, V = c.vocab_size;
  const std::vector<int64_t> rows[2] = {{1, 4, 2, 7, 3, 9}, {5, 5, 8, 1, 12, 2}};
  std::vector<float> full[2];
  for (int r = 0; r < 2; ++r) {
    m.forward({.ids = rows[r].data(), .B = 1, .T = T});
    full[r].assign(m.logits(), m.logits() + T * V);
  }
  model::Generator g(m, 0, 2);
  std::vector<int64_t> prompt;  // (2, 3)
  for (int r = 0; r < 2; ++r) prompt.insert(prompt.end(), rows[r].begin(), rows[r].begin() + 3);
  auto logits = g.feed(prompt);
  for (int r = 0; r < 2; ++r) {
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(logits[r * V + v], full[r][2 * V + v], 2e-5);
  }
  for (int64_t t = 3; t < 5; ++t) {
    logits = g.feed({rows[0][t], rows[1][t]});
    for (int r = 0; r < 2; ++r) {
      for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(logits[r * V + v], full[r][t * V + v], 2e-5) << "row " << r;
    }
  }
  g.reorder({1, 1});
  logits = g.feed({rows[1][5], rows[1][5]});
  for (int r = 0; r < 2; ++r) {
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(logits[r * V + v], full[1][5 * V + v], 2e-5);
  }
  EXPECT_THROW(g.reorder({}), std::invalid_argument);  // reorder({0}) keeps row 0 alone
  EXPECT_THROW(g.reorder({0, 2}), std::out_of_range);
}

// RoFormer-Sim (UniLM mask): a type-0 prompt fed at once, then type-1 tokens one at a time, give the
// full forward's logits with the same token types.
TEST(Blocks, UnilmDecodingMatchesTheFullForward) {
  auto c = tiny();
  c.is_decoder = true;
  c.pooler_activation = model::PoolerActivation::linear;
  model::RoFormer<float> m(c);
  m.init_weights(7);
  const std::vector<int64_t> ids = {2, 6, 3, 9, 4, 11, 5}, types = {0, 0, 0, 1, 1, 1, 1};
  const int64_t T = 7, V = c.vocab_size;
  m.forward({.ids = ids.data(), .token_types = types.data(), .B = 1, .T = T});
  model::Generator g(m);
  auto logits = g.feed({ids.begin(), ids.begin() + 3}, {types.begin(), types.begin() + 3});
  for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(logits[v], m.logits()[2 * V + v], 2e-5);
  for (int64_t t = 3; t < T; ++t) {
    logits = g.feed({ids[t]}, {types[t]});
    for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(logits[v], m.logits()[t * V + v], 2e-5) << "t=" << t;
  }
}

}  // namespace
