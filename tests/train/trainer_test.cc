// The training step API: per-row MLM masks independent of how a batch is split, the task's loss
// against the model's own, a normaliser passed in, Trainer::step / evaluate, and gradient
// accumulation (micro-batches of a batch's rows give the whole batch's step).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/random.h"
#include "text/char_tokenizer.h"
#include "train/lm_task.h"
#include "train/trainer.h"
#include "train/train_testing.h"

namespace {

constexpr int64_t kV = 23;

// B rows of T + 1 tokens, some of them special (never masked).
data::Batch windows(int64_t B, int64_t T, uint64_t seed) {
  data::Batch w;
  w.B = B;
  w.T = T;
  for (int64_t i = 0; i < B * (T + 1); ++i) {
    const auto u = base::mix64(seed + static_cast<uint64_t>(i));
    using text::CharTokenizer;
    w.tokens.push_back(u % 11 == 0 ? CharTokenizer::kSep
                                   : static_cast<int32_t>(CharTokenizer::kNumSpecial + u % (kV - CharTokenizer::kNumSpecial)));
  }
  return w;
}

model::RoFormerConfig tiny(bool causal) {
  model::RoFormerConfig c = train_testing::tiny_config(kV, 32);
  c.is_decoder = causal;
  return c;
}

TEST(MlmMaskRows, ShardsDrawTheMasksOfTheWholeBatch) {
  const int64_t B = 8, T = 37;
  const data::Batch w = windows(B, T, 5);
  train::LmTaskConfig c;
  c.causal = false;
  c.vocab_size = kV;
  c.mask_prob = 0.3;
  const uint64_t seed = train::stream_seed(1337, train::kMaskStream, 12);
  const train::Batch whole = train::lm_batch(w, c, seed, 0);
  std::vector<int64_t> ids, targets;
  for (int64_t half = 0; half < 2; ++half) {
    data::Batch part;
    part.B = B / 2;
    part.T = T;
    part.tokens.assign(w.tokens.begin() + half * (B / 2) * (T + 1), w.tokens.begin() + (half + 1) * (B / 2) * (T + 1));
    const train::Batch shard = train::lm_batch(part, c, seed, half * (B / 2));
    EXPECT_EQ(shard.row0, half * (B / 2));
    ids.insert(ids.end(), shard.ids.begin(), shard.ids.end());
    targets.insert(targets.end(), shard.targets.begin(), shard.targets.end());
  }
  EXPECT_EQ(ids, whole.ids);
  EXPECT_EQ(targets, whole.targets);
  int64_t masked = 0;
  for (int64_t i = 0; i < B * T; ++i) masked += whole.targets[i] != model::kIgnoreIndex;
  EXPECT_GT(masked, 0);
  // Keyed by the global row: a shard placed at another row0 draws other masks.
  data::Batch first;
  first.B = B / 2;
  first.T = T;
  first.tokens.assign(w.tokens.begin(), w.tokens.begin() + (B / 2) * (T + 1));
  EXPECT_NE(train::lm_batch(first, c, seed, 1).targets, std::vector<int64_t>(whole.targets.begin(), whole.targets.begin() + (B / 2) * T));
}

// The task's loss and gradient equal the model's own cross-entropy and backward() bit for bit.
TEST(TokenTask, MatchesTheModelsLossAndBackward) {
  for (bool causal : {true, false}) {
    train::LmTaskConfig c;
    c.causal = causal;
    c.vocab_size = kV;
    train::LmTask task(nullptr, c, {});
    const train::Batch b = train::lm_batch(windows(3, 9, 7), c, 99);
    train::Model ref(tiny(causal)), m(tiny(causal));
    ref.init_weights(3);
    m.init_weights(3);
    model::Inputs in = b.inputs();
    in.targets = b.targets.data();
    ref.zero_grad();
    const double ref_loss = ref.forward(in, true, 4);
    ref.backward();
    m.zero_grad();
    const train::LossStats s = task.loss_and_grad(m, b, 4, task.loss_count(b));
    EXPECT_EQ(s.loss, ref_loss);
    EXPECT_EQ(s.count, ref.counted());
    EXPECT_EQ(m.grads, ref.grads);
  }
}

// Loss and gradient scale with 1 / normaliser: twice the count halves both.
TEST(TokenTask, NormalisesByTheCountPassedIn) {
  train::LmTaskConfig c;
  c.vocab_size = kV;
  train::LmTask task(nullptr, c, {});
  const train::Batch b = train::lm_batch(windows(2, 8, 3), c, 0);
  const int64_t n = task.loss_count(b);
  EXPECT_EQ(n, 16);
  train::Model m(tiny(true));
  m.init_weights(1);
  m.zero_grad();
  const double own = task.loss_and_grad(m, b, 0, n).loss;
  const std::vector<float> g1 = m.grads;
  m.zero_grad();
  const train::LossStats twice = task.loss_and_grad(m, b, 0, 2 * n);
  EXPECT_NEAR(twice.loss, own / 2, 1e-12);
  EXPECT_EQ(twice.count, n);
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(m.grads[i], g1[i] / 2, 1e-6 * std::fabs(g1[i]) + 1e-12) << i;
}

TEST(Trainer, StepsAndEvaluates) {
  train::LmTaskConfig c;
  c.vocab_size = kV;
  const std::vector<data::Batch> val = {windows(2, 8, 11), windows(1, 8, 12)};
  train::LmTask task(nullptr, c, val);
  EXPECT_THROW(task.train_batch(0), std::logic_error);
  train::Model m(tiny(true));
  m.init_weights(2);
  train::TrainerConfig tc;
  tc.schedule = {.peak_lr = 1e-2, .min_lr = 0, .warmup_steps = 2, .total_steps = 10, .decay = train::Decay::linear};
  train::Trainer trainer(m, task, tc);
  const train::EvalStats before = trainer.evaluate();
  EXPECT_EQ(before.count, 24);
  ASSERT_EQ(before.metrics.size(), 1u);
  EXPECT_GE(before.metrics[0], 0.0);
  EXPECT_LE(before.metrics[0], 1.0);
  EXPECT_EQ(before.loss, train::validation_loss(m, val, train::TrainOptions{}, text::CharTokenizer::byte_level()));
  const train::Batch b = train::lm_batch(windows(2, 8, 11), c, 0);
  double first = NAN, last = NAN;
  for (int64_t s = 0; s < 10; ++s) {
    const train::StepStats st = trainer.step(b, s, task.loss_count(b));
    ASSERT_TRUE(st.finite());
    EXPECT_EQ(st.lr, train::learning_rate(tc.schedule, s));
    EXPECT_EQ(st.counted, 16);
    EXPECT_EQ(st.tokens, 16);
    if (s == 0) first = st.loss;
    last = st.loss;
  }
  EXPECT_LT(last, first);  // it learns the batch
  EXPECT_EQ(trainer.optimizer().steps(), 10);
  EXPECT_LT(trainer.evaluate().loss, before.loss);
}

TEST(Batch, RowsCutsEveryPerRowField) {
  train::Batch b;
  b.B = 3, b.T = 2, b.row0 = 10;
  b.ids = {1, 2, 3, 4, 5, 6};
  b.attention_mask = {1, 1, 1, 0, 1, 1};
  b.targets = {7, 8, 9};  // one per row
  b.values = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
  const train::Batch r = b.rows(1, 3);
  EXPECT_EQ(r.B, 2);
  EXPECT_EQ(r.row0, 11);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(r.attention_mask, (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_TRUE(r.token_types.empty());
  EXPECT_EQ(r.targets, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(r.values, (std::vector<float>{2.5f, 3.5f, 4.5f, 5.5f}));
  EXPECT_THROW(b.rows(2, 4), std::out_of_range);
}

// K micro-batches of one MLM batch, with dropout on: the same losses and weights for K = 1, 2, 3, 6;
// K = 9 > 6 rows (an epoch's short last batch) runs as 6.
TEST(Trainer, GradientAccumulationGivesTheWholeBatchStep) {
  train::LmTaskConfig c;
  c.vocab_size = kV;
  c.causal = false;
  c.mask_prob = 0.3;
  train::LmTask task(nullptr, c, {});
  const train::Batch b = train::lm_batch(windows(6, 8, 21), c, 5);
  auto cfg = tiny(false);
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.1;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<double>> losses;
  for (const int64_t K : {1, 2, 3, 6, 9}) {
    train::Model m(cfg);
    m.init_weights(4);
    train::TrainerConfig tc;
    tc.schedule = {.peak_lr = 1e-2, .min_lr = 0, .warmup_steps = 0, .total_steps = 5, .decay = train::Decay::linear};
    tc.grad_accum = K;
    train::Trainer trainer(m, task, tc);
    losses.emplace_back();
    for (int64_t s = 0; s < 5; ++s) {
      const train::StepStats st = trainer.step(b, s, task.loss_count(b));
      EXPECT_EQ(st.counted, task.loss_count(b));
      losses.back().push_back(st.loss);
    }
    weights.push_back(m.params);
  }
  for (size_t k = 1; k < weights.size(); ++k) {
    for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[k][s], losses[0][s], 1e-5 * losses[0][s]) << k;
    for (size_t i = 0; i < weights[0].size(); ++i) {
      ASSERT_NEAR(weights[k][i], weights[0][i], 2e-5 + 1e-4 * std::fabs(weights[0][i])) << "K index " << k << " param " << i;
    }
  }
}

}  // namespace
