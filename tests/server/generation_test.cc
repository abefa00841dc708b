// server::Generation, the step-level batcher of a causal LM: sequences that join and leave the slots
// at any step give `roformer generate`'s tokens (model::generate, greedy and seeded sampling), stop
// strings cut the text, a cancelled stream frees its slot, and the token budget queues what does not fit.
#include "server/generation.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "model/decoding.h"
#include "model/tiny_models.h"
#include "text/char_tokenizer.h"

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz .,";

struct Lm {
  text::CharTokenizer tok = text::CharTokenizer::char_level_from_text(kAlphabet);
  std::unique_ptr<model::RoFormer<float>> m;
  Lm() {
    model::RoFormerConfig c = model_testing::tiny_config(tok.vocab_size());
    c.is_decoder = true;
    c.max_position_embeddings = 64;
    m = std::make_unique<model::RoFormer<float>>(c);
    model_testing::randomise(*m, 11, 0.6);
  }
  std::vector<int64_t> ids(const std::string& s) const {
    std::vector<int64_t> out;
    for (int32_t id : tok.encode_ids(s)) out.push_back(id);
    return out;
  }
};

// Every event of a stream: the token ids, the text and the end.
struct Read {
  std::vector<int64_t> ids;
  std::string text;
  server::GenerationEvent end;
};

Read read_all(server::GenerationStream& s) {
  Read r;
  for (server::GenerationEvent e; s.next(e);) {
    r.text += e.text;
    if (e.has_token) r.ids.push_back(e.id);
    if (e.finish != server::FinishReason::none) r.end = e;
  }
  return r;
}

model::DecodeOptions decode_options(const text::Tokenizer& tok, bool sample, uint64_t seed) {
  model::DecodeOptions o;
  o.beam_size = 1;
  o.sample = sample, o.seed = seed, o.temperature = 0.9, o.top_p = 0.95;
  for (int32_t id : tok.special_ids()) o.banned.push_back(id);
  return o;
}

// With either key/value cache (roformer serve --kv-cache): the served tokens are `roformer generate`'s
// over the same cache type, streamed or read whole.
TEST(Generation, ConcurrentSequencesGiveGeneratesTokens) {
  for (const auto kv : {model::CacheType::f32, model::CacheType::bf16}) {
    SCOPED_TRACE(model::cache_type_name(kv));
    Lm lm;
    lm.m->set_kv_cache(kv);
    server::Metrics metrics;
    server::Generation g(*lm.m, lm.tok, {.slots = 3, .prefill_chunk = 5}, metrics);
    const std::vector<std::string> prompts = {"in the beginning", "and", "god said let there be light, and there was",
                                              "a", "the earth was without form", "b c d"};
    std::vector<std::shared_ptr<server::GenerationStream>> streams;
    std::vector<server::GenerationRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {  // more sequences than slots, prompts longer than a chunk
      server::GenerationRequest r;
      r.prompt = lm.ids(prompts[i]);
      r.max_new_tokens = 4 + static_cast<int64_t>(i) * 3;
      r.decode = decode_options(lm.tok, i % 2 == 1, 100 + i);
      r.stream = i % 3;
      r.whole = i / 2 % 2 == 1;  // read whole: woken at the end only, the same events
      requests.push_back(r);
      streams.push_back(g.submit(r));
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Read got = read_all(*streams[i]);
      model::DecodeOptions o = requests[i].decode;
      o.max_len_b = requests[i].max_new_tokens;
      o.seed ^= requests[i].stream;  // model::generate draws from stream 0: mix64(seed ^ 0)
      const auto want = model::generate(*lm.m, requests[i].prompt, o);
      EXPECT_EQ(got.ids, want[0].tokens) << "sequence " << i;
      EXPECT_EQ(got.text, lm.tok.decode_ids(std::vector<int32_t>(want[0].tokens.begin(), want[0].tokens.end())));
      EXPECT_EQ(got.end.finish, server::FinishReason::length);
      EXPECT_EQ(got.end.generated_tokens, requests[i].max_new_tokens);
      EXPECT_EQ(got.end.prompt_tokens, static_cast<int64_t>(requests[i].prompt.size()));
    }
    EXPECT_EQ(g.in_flight(), 0);
  }
}

TEST(Generation, StopStringsCutTheTextAndAreNeverSent) {
  Lm lm;
  server::Metrics metrics;
  server::Generation g(*lm.m, lm.tok, {.slots = 2}, metrics);
  server::GenerationRequest r;
  r.prompt = lm.ids("in the");
  r.max_new_tokens = 40;
  r.decode = decode_options(lm.tok, false, 0);
  const Read free = read_all(*g.submit(r));
  ASSERT_GE(free.text.size(), 6u);
  // Stop at the text's 4th..5th characters: what comes back is the text before them.
  r.stop = {free.text.substr(3, 2), "zzzzzz"};
  const Read cut = read_all(*g.submit(r));
  const size_t at = free.text.find(r.stop[0]);
  EXPECT_EQ(cut.text, free.text.substr(0, at));
  EXPECT_EQ(cut.end.finish, server::FinishReason::stop);
}

TEST(Generation, CancelledStreamsFreeTheirSlotsAndTheBudgetQueues) {
  Lm lm;
  server::Metrics metrics;
  // Budget for one 60-token sequence at a time: the second waits until the first is cancelled.
  server::Generation g(*lm.m, lm.tok, {.slots = 2, .max_total_tokens = 62}, metrics);
  server::GenerationRequest r;
  r.prompt = lm.ids("in the beginning");
  r.max_new_tokens = 60 - static_cast<int64_t>(r.prompt.size());
  r.decode = decode_options(lm.tok, false, 0);
  // The second starts only after the first has ended.
  const Read a = read_all(*g.submit(r)), b = read_all(*g.submit(r));
  EXPECT_EQ(a.ids, b.ids);
  server::GenerationEvent e;
  auto first = g.submit(r);
  auto second = g.submit(r);
  const Read first_read = read_all(*first);
  ASSERT_TRUE(second->next(e));
  EXPECT_GT(e.step, first_read.end.step);
  // A cancelled stream frees its slot and budget: the next one runs to its end.
  auto third = g.submit(r);
  second->cancel();
  const Read rest = read_all(*third);
  EXPECT_EQ(rest.end.finish, server::FinishReason::length);
  EXPECT_EQ(rest.ids, a.ids);
  EXPECT_EQ(g.in_flight(), 0);
  server::GenerationRequest empty;
  empty.max_new_tokens = 1;
  EXPECT_THROW(g.submit(empty), std::invalid_argument);
  r.max_new_tokens = 64;
  EXPECT_THROW(g.submit(r), std::invalid_argument);  // past the context
}

}  // namespace
