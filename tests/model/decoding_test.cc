// The one decoder (src/model/decoding.h) on a causal LM: beam search against an exhaustive search,
// with and without an eos; every hypothesis's score against a full forward of prompt + tokens (the
// prompt's cache copied to the beams and reordered equals recomputation); greedy = the argmax chain;
// min_new_tokens, no-repeat n-grams and bans; top-p sampling against HF's nucleus rule; bad options.
// translate_test.cc covers the same decoder behind the encoder-decoder.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "model/decoding.h"
#include "model/tiny_models.h"

namespace {

std::unique_ptr<model::RoFormer<float>> tiny_lm(int64_t V, uint64_t seed, double sd) {
  model::RoFormerConfig c = model_testing::tiny_config(V);
  c.is_decoder = true;
  auto m = std::make_unique<model::RoFormer<float>>(c);
  model_testing::randomise(*m, seed, sd);
  return m;
}

// log p of every token of `tokens` (and then of eos, when eos >= 0) after the prompt, by one full
// forward of the whole sequence.
double full_forward_log_prob(model::RoFormer<float>& m, const std::vector<int64_t>& prompt,
                             const std::vector<int64_t>& tokens, int64_t eos) {
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  std::vector<int64_t> targets(tokens);
  if (eos >= 0) targets.push_back(eos);
  else seq.pop_back();  // the last token is not followed by anything
  m.forward({.ids = seq.data(), .B = 1, .T = static_cast<int64_t>(seq.size())});
  const int64_t V = m.config().vocab_size, P = static_cast<int64_t>(prompt.size());
  double sum = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    sum += model_testing::log_prob(m.logits() + (P - 1 + static_cast<int64_t>(i)) * V, V, targets[i]);
  }
  return sum;
}

TEST(Decoding, CausalBeamSearchWithAWideBeamFindsTheExhaustiveBest) {
  const int64_t V = 6, L = 3;
  auto lm = tiny_lm(V, 11, 0.8);
  auto& m = *lm;
  const std::vector<int64_t> prompt = {4, 5, 1, 2};
  for (const int64_t eos : {int64_t{3}, int64_t{-1}}) {
    std::vector<int64_t> best_tokens;
    const double best = model_testing::exhaustive_best(
        V, L, eos,
        [&](const std::vector<int64_t>& toks, bool ended) { return full_forward_log_prob(m, prompt, toks, ended ? eos : -1); },
        best_tokens);
    model::DecodeOptions o;
    o.beam_size = 64, o.length_penalty = 0, o.max_len_b = L;
    const auto out = model::generate(m, prompt, o, eos);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out[0].tokens, best_tokens) << "eos " << eos;
    EXPECT_NEAR(out[0].score, best, 1e-4) << "eos " << eos;
    EXPECT_EQ(out[0].finished, eos >= 0 && static_cast<int64_t>(best_tokens.size()) < L);
  }
}

TEST(Decoding, EveryBeamScoreEqualsAFullForwardSoCopiedAndReorderedCachesEqualRecomputation) {
  for (const double lp : {0.0, 0.6, 1.0}) {
    auto lm = tiny_lm(23, 5, 0.5);
  auto& m = *lm;
    m.p.head.decoder_b[7] += 4.0f;  // eos 7 comes up: some hypotheses finish, some are cut
    const std::vector<int64_t> prompt = {4, 9, 12, 7, 5};
    model::DecodeOptions o;
    o.beam_size = 4, o.nbest = 4, o.length_penalty = lp, o.max_len_b = 6;
    const auto out = model::generate(m, prompt, o, 7);
    ASSERT_EQ(out.size(), 4u);
    for (size_t i = 0; i < out.size(); ++i) {
      const auto& h = out[i];
      if (i > 0) {
        EXPECT_GE(out[i - 1].score, h.score);  // best first
      }
      EXPECT_LE(h.tokens.size(), 6u);
      const int64_t len = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
      const double sum = full_forward_log_prob(m, prompt, h.tokens, h.finished ? 7 : -1);
      EXPECT_NEAR(h.score, sum / std::pow(static_cast<double>(len), lp), 2e-4) << "lp " << lp << " hypothesis " << i;
    }
  }
}

TEST(Decoding, GreedyIsTheArgmaxChainAndBeamOneSamplesAtTemperatureZeroAlike) {
  auto lm = tiny_lm(9, 3, 0.3);
  auto& m = *lm;
  const std::vector<int64_t> prompt = {1, 2};
  std::vector<int64_t> chain, seq = prompt;
  for (int i = 0; i < 10; ++i) {
    m.forward({.ids = seq.data(), .B = 1, .T = static_cast<int64_t>(seq.size())});
    const float* z = m.logits() + (seq.size() - 1) * 9;
    const int64_t t = std::max_element(z, z + 9) - z;
    chain.push_back(t), seq.push_back(t);
  }
  model::DecodeOptions o;
  o.beam_size = 1, o.max_len_b = 10;
  EXPECT_EQ(model::generate(m, prompt, o)[0].tokens, chain);
  o.sample = true, o.temperature = 0;  // sampling at temperature 0 is greedy
  EXPECT_EQ(model::generate(m, prompt, o)[0].tokens, chain);
}

TEST(Decoding, MinNewTokensNoRepeatNgramsAndBansHold) {
  auto lm = tiny_lm(9, 3, 0.3);
  auto& m = *lm;
  m.p.head.decoder_b[4] += 8.0f;  // eos 4 is by far the likeliest next token
  for (const int64_t beam : {int64_t{1}, int64_t{3}}) {
    model::DecodeOptions o;
    o.beam_size = beam, o.max_len_b = 12;
    EXPECT_TRUE(model::generate(m, {1, 2}, o, 4)[0].tokens.empty()) << "beam " << beam;
    o.min_new_tokens = 5;
    const auto h = model::generate(m, {1, 2}, o, 4)[0];
    EXPECT_EQ(h.tokens.size(), 5u) << "beam " << beam;  // eos as soon as it is allowed
    EXPECT_TRUE(h.finished);
    o.min_new_tokens = 0;
    o.banned = {4, 0};
    o.no_repeat_ngram_size = 2;
    const auto g = model::generate(m, {1, 2}, o, 4)[0];
    EXPECT_EQ(g.tokens.size(), 12u) << "beam " << beam;
    std::vector<int64_t> seq = {1, 2};
    seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
    std::map<std::pair<int64_t, int64_t>, int> seen;
    for (size_t i = 0; i + 1 < seq.size(); ++i) EXPECT_EQ(++seen[std::make_pair(seq[i], seq[i + 1])], 1) << "beam " << beam;
    for (int64_t t : g.tokens) EXPECT_TRUE(t != 4 && t != 0);
  }
}

TEST(Decoding, TopPKeepsTheSmallestNucleusReachingP) {
  // Probabilities at temperature 1: softmax of log(0.5, 0.3, 0.15, 0.05).
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  model::DecodeOptions o;
  o.top_p = 0.79;  // 0.5 + 0.3 reaches it: tokens 1 and 3, renormalised to 0.625 / 0.375
  std::map<int64_t, int> drawn;
  for (int i = 0; i < 1000; ++i) ++drawn[model::sample_token(logits, o, (i + 0.5) / 1000)];
  EXPECT_EQ(drawn.size(), 2u);
  EXPECT_NEAR(drawn[1], 625, 2);
  EXPECT_NEAR(drawn[3], 375, 2);
  o.top_p = 0.81;  // needs the third token
  drawn.clear();
  for (int i = 0; i < 1000; ++i) ++drawn[model::sample_token(logits, o, (i + 0.5) / 1000)];
  EXPECT_EQ(drawn.size(), 3u);
  o.top_p = 0.3;  // the most probable token alone
  EXPECT_EQ(model::sample_token(logits, o, 0.99), 1);
}

TEST(Decoding, SamplingIsSeededAndBadOptionsAreRefused) {
  auto lm = tiny_lm(15, 9, 0.1);
  auto& m = *lm;
  model::DecodeOptions o;
  o.beam_size = 1, o.sample = true, o.temperature = 1.5, o.top_p = 0.9, o.seed = 4, o.max_len_b = 10;
  const auto a = model::generate(m, {4, 5}, o)[0].tokens;
  EXPECT_EQ(model::generate(m, {4, 5}, o)[0].tokens, a);
  bool differs = false;
  for (uint64_t seed = 5; seed < 15 && !differs; ++seed) {
    o.seed = seed;
    differs = model::generate(m, {4, 5}, o)[0].tokens != a;
  }
  EXPECT_TRUE(differs);
  for (auto bad : std::vector<std::function<void(model::DecodeOptions&)>>{
           [](auto& d) { d.top_p = 0; }, [](auto& d) { d.top_p = 1.5; }, [](auto& d) { d.top_k = -1; },
           [](auto& d) { d.temperature = -1; }, [](auto& d) { d.min_new_tokens = -1; },
           [](auto& d) { d.beam_size = 0; }, [](auto& d) { d.nbest = 5; },
           [](auto& d) { d.length_penalty = NAN; }, [](auto& d) { d.beam_size = 1025; },
           [](auto& d) { d.max_len_a = NAN; }, [](auto& d) { d.max_len_a = 1e300; },
           [](auto& d) { d.temperature = INFINITY; }, [](auto& d) { d.temperature = NAN; }}) {
    model::DecodeOptions d;
    bad(d);
    EXPECT_THROW(model::generate(m, {4}, d), std::invalid_argument);
  }
  model::DecodeOptions d;
  d.banned = {15};
  EXPECT_THROW(model::generate(m, {4}, d), std::out_of_range);
  EXPECT_THROW(model::generate(m, {}, d), std::invalid_argument);
  EXPECT_THROW(model::generate(m, {4}, model::DecodeOptions{}, 15), std::out_of_range);
}

// Feeds ids (rows, n) to those rows of gen (or, given counts, counts[r] tokens to row r, one row's
// after another), appends them to each row's sequence in seq, and calls expect(z, sequence) with each
// row's logits (V) and its whole sequence so far.
void feed_rows_and_check(model::Generator& gen, std::vector<std::vector<int64_t>>& seq, const std::vector<int64_t>& rows,
                         const std::vector<int64_t>& ids, int64_t V,
                         const std::function<void(const float*, const std::vector<int64_t>&)>& expect,
                         const std::vector<int64_t>& counts = {}) {
  const std::vector<float> z = counts.empty() ? gen.feed_rows(rows, ids) : gen.feed_rows(rows, ids, counts);
  size_t at = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t n = counts.empty() ? ids.size() / rows.size() : static_cast<size_t>(counts[r]);
    auto& s = seq[rows[r]];
    s.insert(s.end(), ids.begin() + at, ids.begin() + at + n);
    at += n;
    ASSERT_EQ(gen.position(rows[r]), static_cast<int64_t>(s.size()));
    SCOPED_TRACE(testing::Message() << "row " << rows[r] << " at " << s.size());
    expect(z.data() + r * V, s);
  }
}

}  // namespace

// Step-level batching: rows that join, are fed in chunks, decode beside others, are fed beside rows
// of other token counts and are released give, at every feed, the logits of one full forward of their
// own sequence (RoPE, learned and sinusoidal positions), so a row's output does not depend on its
// neighbours or on where its sequence started.
TEST(Decoding, FeedRowsGivesEachRowTheLogitsOfItsOwnSequence) {
  for (const auto pe : {model::PositionEncoding::rope, model::PositionEncoding::learned,
                        model::PositionEncoding::sinusoidal}) {
    model::RoFormerConfig c = model_testing::tiny_config(11, pe);
    c.is_decoder = true;
    model::RoFormer<float> m(c);
    model_testing::randomise(m, 3, 0.4);
    const int64_t V = 11;
    model::Generator gen(m, 0, 3);
    std::vector<std::vector<int64_t>> seq(3);
    std::mt19937_64 rng(7);
    auto check = [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& ids) {
      feed_rows_and_check(gen, seq, rows, ids, V, [&](const float* z, const std::vector<int64_t>& s) {
        m.forward({.ids = s.data(), .B = 1, .T = static_cast<int64_t>(s.size())});
        const float* want = m.logits() + (s.size() - 1) * V;
        for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(z[v], want[v], 1e-4) << "token " << v;
      });
    };
    auto tokens = [&](size_t n) {
      std::vector<int64_t> t(n);
      for (auto& x : t) x = static_cast<int64_t>(rng() % V);
      return t;
    };
    check({0}, tokens(5));            // row 0's prompt at once
    check({2}, tokens(2));            // row 2's prompt in two chunks
    check({2}, tokens(1));
    for (int step = 0; step < 3; ++step) check({0, 2}, tokens(2));  // decoding side by side
    check({1}, tokens(4));            // row 1 joins
    for (int step = 0; step < 3; ++step) check({2, 0, 1}, tokens(3));  // any order
    gen.release(0), seq[0].clear();   // row 0 finishes; a new sequence takes it
    check({0}, tokens(3));
    check({1, 0}, tokens(2));
    // Rows of different counts in one call: prompts of any length, beside a decoding row.
    auto check_counts = [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& counts) {
      int64_t n = 0;
      for (int64_t k : counts) n += k;
      feed_rows_and_check(gen, seq, rows, tokens(static_cast<size_t>(n)), V, [&](const float* z, const std::vector<int64_t>& s) {
        m.forward({.ids = s.data(), .B = 1, .T = static_cast<int64_t>(s.size())});
        const float* want = m.logits() + (s.size() - 1) * V;
        for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(z[v], want[v], 1e-4) << "token " << v;
      }, counts);
    };
    gen.release(2), seq[2].clear();
    check_counts({2, 0, 1}, {5, 1, 2});
    check_counts({1, 2}, {3, 1});
    EXPECT_THROW(gen.feed_rows({1, 2}, {1, 2, 3}, {1, 1}), std::invalid_argument);  // 3 ids for 2
    EXPECT_THROW(gen.feed_rows({1, 2}, {1, 2}, {2, 0}), std::invalid_argument);     // a row of none
    EXPECT_THROW(gen.feed_rows({1, 2}, {1, 2}, {2}), std::invalid_argument);        // a count short
    EXPECT_THROW(gen.feed_rows({1, 1}, {1, 2}), std::out_of_range);
    EXPECT_THROW(gen.feed_rows({3}, {1}), std::out_of_range);
    EXPECT_THROW(gen.feed_rows({1}, std::vector<int64_t>(32, 1)), std::length_error);
    EXPECT_THROW(gen.feed({1, 2, 3}), std::logic_error);
    EXPECT_THROW(gen.reorder({0}), std::logic_error);
  }
}

// A bf16 key/value cache (RoFormer::set_kv_cache): every feed reads the same rounded keys and values,
// so a row fed in chunks, beside others, one token a step (the decoding kernel) or after the cache
// grows gives the logits of one feed of its whole sequence over a bf16 cache (which widens the rows
// first); those differ from the fp32 cache's by the rounding alone. Beams copied and reordered over
// it score as a full forward does, to that rounding.
TEST(Decoding, ABf16CacheDecodesAlikeInEveryFeedAndCloseToFp32) {
  for (const auto pe : {model::PositionEncoding::rope, model::PositionEncoding::learned}) {
    model::RoFormerConfig c = model_testing::tiny_config(11, pe);
    c.is_decoder = true;
    model::RoFormer<float> m(c);
    model_testing::randomise(m, 3, 0.4);
    m.set_kv_cache(model::CacheType::bf16);
    const int64_t V = 11;
    model::Generator gen(m, 8, 3);
    std::vector<std::vector<int64_t>> seq(3);
    std::mt19937_64 rng(7);
    double rounding = 0;  // the largest difference from the fp32 forward
    auto check = [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& ids) {
      feed_rows_and_check(gen, seq, rows, ids, V, [&](const float* z, const std::vector<int64_t>& s) {
        model::Generator whole(m, static_cast<int64_t>(s.size()));
        const std::vector<float> want = whole.feed(s);
        m.forward({.ids = s.data(), .B = 1, .T = static_cast<int64_t>(s.size())});
        const float* fp32 = m.logits() + (s.size() - 1) * V;
        for (int64_t v = 0; v < V; ++v) {
          ASSERT_NEAR(z[v], want[v], 1e-5) << "token " << v;
          ASSERT_NEAR(z[v], fp32[v], 5e-2) << "token " << v;
          rounding = std::max(rounding, std::abs(static_cast<double>(z[v]) - fp32[v]));
        }
      });
    };
    auto tokens = [&](size_t n) {
      std::vector<int64_t> t(n);
      for (auto& x : t) x = static_cast<int64_t>(rng() % V);
      return t;
    };
    check({0}, tokens(5));
    check({2}, tokens(2));
    check({2}, tokens(1));
    for (int step = 0; step < 3; ++step) check({0, 2}, tokens(2));  // decoding steps, a token per row
    gen.reserve(24);                                                  // the cache grows, keeping its rows
    check({1}, tokens(4));
    for (int step = 0; step < 4; ++step) check({2, 0, 1}, tokens(3));
    gen.copy_rows({1}, {0}), seq[1] = seq[0];                         // a beam continues another row
    check({1, 0}, tokens(2));
    gen.release(0), seq[0].clear();
    check({0}, tokens(3));
    check({1, 0}, tokens(2));
    gen.release(2), seq[2].clear();  // rows of different counts in one call, over the bf16 cache
    feed_rows_and_check(gen, seq, {2, 0}, tokens(4), V, [&](const float* z, const std::vector<int64_t>& s) {
      model::Generator whole(m, static_cast<int64_t>(s.size()));
      const std::vector<float> want = whole.feed(s);
      for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(z[v], want[v], 1e-5) << "token " << v;
    }, {3, 1});
    EXPECT_GT(rounding, 0.0) << "the cache held fp32 values";
  }
  // Beam search over a bf16 cache: each hypothesis's score is a full forward's, to the rounding (a
  // score is a sum of about 6 log-probabilities).
  auto lm = tiny_lm(23, 5, 0.5);
  auto& m = *lm;
  m.set_kv_cache(model::CacheType::bf16);
  m.p.head.decoder_b[7] += 4.0f;
  const std::vector<int64_t> prompt = {4, 9, 12, 7, 5};
  model::DecodeOptions o;
  o.beam_size = 4, o.nbest = 4, o.length_penalty = 0, o.max_len_b = 6;
  const auto out = model::generate(m, prompt, o, 7);
  ASSERT_EQ(out.size(), 4u);
  for (const auto& h : out) EXPECT_NEAR(h.score, full_forward_log_prob(m, prompt, h.tokens, h.finished ? 7 : -1), 0.1);
}
