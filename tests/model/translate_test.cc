// Decoding the encoder-decoder (src/model/translate.h): beam search against an exhaustive search on
// a tiny model; every hypothesis's score against a teacher-forced forward of its tokens (the cached,
// reordered decoder states equal recomputation); batching and padding; greedy = beam 1; n-best;
// no_repeat_ngram_size; sampling; bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/tiny_models.h"
#include "model/translate.h"

namespace {

model::Seq2SeqConfig tiny(int64_t V, model::PositionEncoding pe = model::PositionEncoding::rope) {
  return model::Seq2SeqConfig::symmetric(model_testing::tiny_config(V, pe));
}

using model_testing::randomise;

// Σ log p of each decoder token given the source (teacher forcing over start + tokens), plus eos.
double teacher_forced(model::Seq2Seq<float>& m, const std::vector<int64_t>& src, const std::vector<int64_t>& toks,
                      bool with_eos) {
  if (with_eos) return model::sequence_log_prob(m, src, toks);
  std::vector<int64_t> s = src, dec = {m.config().decoder_start_token_id};
  s.push_back(m.config().eos_token_id);
  dec.insert(dec.end(), toks.begin(), toks.end() - 1);
  model::Seq2SeqInputs in;
  in.source = s.data(), in.decoder_input = dec.data(), in.B = 1;
  in.S = static_cast<int64_t>(s.size()), in.T = static_cast<int64_t>(dec.size());
  m.forward(in);
  const int64_t V = m.config().decoder.vocab_size;
  double sum = 0;
  for (int64_t t = 0; t < in.T; ++t) sum += model_testing::log_prob(m.logits() + t * V, V, toks[t]);
  return sum;
}

TEST(Translate, BeamSearchWithAWideBeamFindsTheExhaustiveBest) {
  const int64_t V = 6, L = 3;  // tokens 0..5, eos 3; at most 3 new tokens
  model::Seq2Seq<float> m(tiny(V));
  randomise(m, 11, 0.8);
  const std::vector<int64_t> src = {4, 5, 1};
  std::vector<int64_t> best_tokens;
  const double best = model_testing::exhaustive_best(
      V, L, m.config().eos_token_id,
      [&](const std::vector<int64_t>& toks, bool eos) { return teacher_forced(m, src, toks, eos); }, best_tokens);
  model::DecodeOptions o;
  o.beam_size = 64, o.length_penalty = 0, o.max_len_b = L, o.max_len_a = 0;
  const auto out = model::translate(m, {src}, o);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][0].tokens, best_tokens);
  EXPECT_NEAR(out[0][0].score, best, 1e-4);
}

TEST(Translate, ScoresEqualTeacherForcingSoReorderedCachesEqualRecomputation) {
  for (auto pe : {model::PositionEncoding::rope, model::PositionEncoding::sinusoidal}) {
    model::Seq2Seq<float> m(tiny(23, pe));
    randomise(m, 5);
    m.decoder().p.head.decoder_b[m.config().eos_token_id] += 6.0f;  // some hypotheses end with eos
    const std::vector<std::vector<int64_t>> sources = {{4, 9, 12, 7, 5}, {8, 6}, {20, 21, 22, 4, 4, 9, 1, 10}};
    model::DecodeOptions o;
    o.beam_size = 4, o.nbest = 4, o.length_penalty = 0.6, o.max_len_a = 1.0, o.max_len_b = 4;
    const auto out = model::translate(m, sources, o);
    ASSERT_EQ(out.size(), sources.size());
    int finished = 0;
    for (size_t b = 0; b < sources.size(); ++b) {
      ASSERT_EQ(out[b].size(), 4u);
      for (size_t i = 0; i < out[b].size(); ++i) {
        const auto& h = out[b][i];
        if (i > 0) {
          EXPECT_GE(out[b][i - 1].score, h.score);  // best first
        }
        const int64_t len = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
        EXPECT_LE(static_cast<int64_t>(h.tokens.size()), static_cast<int64_t>(sources[b].size()) + 1 + 4);
        const double sum = teacher_forced(m, sources[b], h.tokens, h.finished);
        EXPECT_NEAR(h.score, sum / std::pow(static_cast<double>(len), 0.6), 2e-4) << b << " " << i;
        finished += h.finished;
      }
    }
    EXPECT_GT(finished, 0);
  }
}

TEST(Translate, BatchedAndPaddedSourcesDecodeAsAlone) {
  model::Seq2Seq<float> m(tiny(23));
  randomise(m, 7);
  const std::vector<std::vector<int64_t>> sources = {{4, 9, 12, 7, 5, 5, 6}, {8, 6}, {11, 13, 4}};
  for (int64_t beam : {1, 3}) {
    model::DecodeOptions o;
    o.beam_size = beam, o.max_len_b = 6;
    const auto together = model::translate(m, sources, o);
    for (size_t b = 0; b < sources.size(); ++b) {
      const auto alone = model::translate(m, {sources[b]}, o);
      EXPECT_EQ(together[b][0].tokens, alone[0][0].tokens) << "beam " << beam << " source " << b;
      EXPECT_NEAR(together[b][0].score, alone[0][0].score, 1e-4);
    }
  }
}

TEST(Translate, GreedyIsTheArgmaxChainAndNoRepeatNgramHolds) {
  model::Seq2Seq<float> m(tiny(9));
  randomise(m, 3, 0.2);
  const std::vector<int64_t> src = {4, 5, 6, 7};
  model::DecodeOptions o;
  o.beam_size = 1, o.max_len_b = 12;
  const auto greedy = model::translate(m, {src}, o)[0][0];
  // The argmax chain, token by token, with full forwards.
  std::vector<int64_t> chain;
  for (int64_t i = 0; i < 12; ++i) {
    std::vector<int64_t> s = src, dec = {2};
    s.push_back(3);
    dec.insert(dec.end(), chain.begin(), chain.end());
    model::Seq2SeqInputs in;
    in.source = s.data(), in.decoder_input = dec.data(), in.B = 1, in.S = 5, in.T = static_cast<int64_t>(dec.size());
    m.forward(in);
    const float* z = m.logits() + (in.T - 1) * 9;
    const int64_t t = std::max_element(z, z + 9) - z;
    if (t == 3) break;
    chain.push_back(t);
  }
  EXPECT_EQ(greedy.tokens, chain);
  // no_repeat_ngram_size 2: no bigram (decoder start included) occurs twice.
  for (int64_t beam : {1, 4}) {
    o.beam_size = beam, o.no_repeat_ngram_size = 2;
    const auto h = model::translate(m, {src}, o)[0][0];
    std::vector<int64_t> seq = {2};
    seq.insert(seq.end(), h.tokens.begin(), h.tokens.end());
    std::map<std::pair<int64_t, int64_t>, int> seen;
    for (size_t i = 0; i + 1 < seq.size(); ++i) EXPECT_EQ(++seen[std::make_pair(seq[i], seq[i + 1])], 1) << "beam " << beam;
  }
}

TEST(Translate, SamplingIsSeededAndOptionsAreChecked) {
  model::Seq2Seq<float> m(tiny(15));
  randomise(m, 9, 0.1);
  model::DecodeOptions o;
  o.beam_size = 1, o.sample = true, o.temperature = 1.5, o.seed = 4, o.max_len_b = 10;
  const auto a = model::translate(m, {{4, 5}}, o), b = model::translate(m, {{4, 5}}, o);
  EXPECT_EQ(a[0][0].tokens, b[0][0].tokens);
  bool differs = false;
  for (uint64_t seed = 5; seed < 15 && !differs; ++seed) {
    o.seed = seed;
    differs = model::translate(m, {{4, 5}}, o)[0][0].tokens != a[0][0].tokens;
  }
  EXPECT_TRUE(differs);
  model::DecodeOptions bad;
  bad.nbest = 5, bad.beam_size = 4;
  EXPECT_THROW(model::translate(m, {{4}}, bad), std::invalid_argument);
  bad = {};
  bad.sample = true;  // with beam 4
  EXPECT_THROW(model::translate(m, {{4}}, bad), std::invalid_argument);
  EXPECT_THROW(model::translate(m, {{}}, model::DecodeOptions{}), std::invalid_argument);
  EXPECT_THROW(model::translate(m, {{99}}, model::DecodeOptions{}), std::out_of_range);
}

// The step batcher (TranslationBatch): sources of different lengths and options join a running batch
// at different steps (some wait for free rows) and leave when done; each gets translate's hypotheses
// for it alone: greedy, sampling, beams 2–4 with n-best, one longer than the rows' first capacity. A
// dropped source frees its rows mid-way.
TEST(Translate, StepBatchedSourcesJoiningAtAnyStepDecodeAsTranslateDoes) {
  for (auto pe : {model::PositionEncoding::rope, model::PositionEncoding::learned}) {
    model::Seq2Seq<float> m(tiny(23, pe));
    randomise(m, 5);
    m.decoder().p.head.decoder_b[m.config().eos_token_id] += 4.0f;  // some hypotheses end early, some not
    auto opts = [](int64_t beam, int64_t nbest, bool sample = false) {
      model::DecodeOptions o;
      o.beam_size = beam, o.nbest = nbest, o.length_penalty = 0.8, o.max_len_a = 1.0, o.max_len_b = 3;
      o.sample = sample, o.temperature = 1.3, o.seed = 7;
      return o;
    };
    // Past the 32 positions the rows hold at first (RoPE; learned positions cut it at 31): the batch's
    // caches grow while other sources decode.
    model::DecodeOptions long_opts = opts(2, 1);
    long_opts.max_len_b = 40, long_opts.min_new_tokens = 36;
    struct Case {
      std::vector<int64_t> tokens;
      model::DecodeOptions o;
      int64_t join;  // the step it is admitted at (or later, waiting for rows)
    };
    const std::vector<Case> cases = {{{4, 9, 12, 7, 5}, opts(4, 2), 0},     {{8, 6}, opts(1, 1), 0},
                                     {{20, 21, 22, 4, 4, 9, 1, 10}, opts(3, 3), 1}, {{11, 13, 4}, opts(2, 1), 2},
                                     {{5}, opts(1, 1, true), 2},            {{7, 7, 8, 9}, opts(4, 4), 3},
                                     {{10, 4, 12}, opts(1, 1), 5},          {{6, 5}, long_opts, 3}};
    model::TranslationBatch batch(m, 9);  // 9 rows: the beam-4 sources wait for room at times
    std::map<int64_t, size_t> which;      // batch id → case
    std::map<size_t, std::vector<model::Hypothesis>> got;
    size_t next = 0;
    int64_t dropped = -1;
    for (int64_t step = 0; next < cases.size() || !batch.empty(); ++step) {
      std::vector<model::TranslationBatch::Source> join;
      int64_t rows = 0;
      std::vector<size_t> joined;
      while (next < cases.size() && cases[next].join <= step && rows + cases[next].o.beam_size <= batch.free_rows()) {
        join.push_back({cases[next].tokens, cases[next].o, 0});
        rows += cases[next].o.beam_size;
        joined.push_back(next++);
      }
      const std::vector<int64_t> ids = batch.admit(join);  // several at once: one encoder forward
      for (size_t i = 0; i < ids.size(); ++i) which[ids[i]] = joined[i];
      if (step == 2) {  // a client gone: source 0's rows are freed, the others run on
        dropped = 0;
        for (const auto& [id, c] : which) {
          if (c == 0) EXPECT_TRUE(batch.drop(id));
        }
      }
      for (auto& [id, hyps] : batch.step()) got[which.at(id)] = std::move(hyps);
      ASSERT_LT(step, 100);
    }
    EXPECT_EQ(batch.free_rows(), 9);
    for (size_t c = 0; c < cases.size(); ++c) {
      if (static_cast<int64_t>(c) == dropped) {
        EXPECT_EQ(got.count(c), 0u);
        continue;
      }
      const auto want = model::translate(m, {cases[c].tokens}, cases[c].o)[0];
      ASSERT_EQ(got[c].size(), want.size()) << c;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[c][i].tokens, want[i].tokens) << "case " << c << " hypothesis " << i;
        EXPECT_EQ(got[c][i].finished, want[i].finished) << c << " " << i;
        EXPECT_NEAR(got[c][i].score, want[i].score, 1e-4) << c << " " << i;
      }
    }
    // Refused before anything is admitted: rows it cannot have, bad sources and options.
    EXPECT_THROW(batch.admit({{{4, 5}, opts(4, 1), 0}, {{4}, opts(4, 1), 0}, {{6}, opts(2, 1), 0}}), std::length_error);
    EXPECT_THROW(batch.admit({{{}, opts(1, 1), 0}}), std::invalid_argument);
    EXPECT_THROW(batch.admit({{{99}, opts(1, 1), 0}}), std::out_of_range);
    EXPECT_THROW(batch.admit({{{4}, opts(2, 3), 0}}), std::invalid_argument);
    EXPECT_EQ(batch.free_rows(), 9);
    EXPECT_TRUE(batch.empty());
  }
}

}  // namespace
