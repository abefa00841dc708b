// libFuzzer target: the Hugging Face vocab.txt reader (text::Vocab, wordpiece.h) and what is built on
// it. Contract: any bytes either give a vocabulary or throw io::Error (invalid UTF-8); Vocab::load on
// the same bytes as a file agrees with Vocab::from_text; ids follow HF's load_vocab (a duplicated
// token maps to its last line); and a BERT-mode RoFormerTokenizer over that vocabulary (special tokens
// missing from it get fresh ids) encodes text made of its own tokens plus a fixed mixed-script sample
// without crashing, with consistent ids (fuzz/encoding_checks.h).
#include <memory>
#include <string>

#include "encoding_checks.h"
#include "fuzz_common.h"
#include "io/weights.h"
#include "text/roformer_tokenizer.h"
#include "text/wordpiece.h"

namespace {
const char kSample[] =
    "[CLS] Hello, WORLD! naïve café ÅNGSTRÖM don't 3.14 ##ing [MASK] 今天天气很好，我们去公园。 "
    "e\xcc\x81 \xef\xbf\xbd \t\r\n x[SEP]y unaffable";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile mem;
  const std::string_view content(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const text::Vocab> vocab;
  try {
    vocab = std::make_shared<const text::Vocab>(text::Vocab::from_text(content, "vocab.txt"));
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
    try {
      (void)text::Vocab::load(mem.write(data, size));
      fuzz::finding("Vocab::load accepts what Vocab::from_text rejects");
    } catch (const io::Error&) {
    }
    return 0;
  } catch (const std::exception& e) {
    fuzz::undocumented("Vocab::from_text", e);
  }
  fuzz::note("accepted: " + std::to_string(vocab->lines()) + " lines, " + std::to_string(vocab->size()) + " tokens");
  try {
    const text::Vocab loaded = text::Vocab::load(mem.write(data, size));
    FUZZ_CHECK(loaded.lines() == vocab->lines() && loaded.size() == vocab->size(), "load and from_text differ");
    for (int32_t i = 0; i < loaded.lines(); ++i) FUZZ_CHECK(loaded.token(i) == vocab->token(i), "line differs");
  } catch (const io::Error& e) {
    fuzz::finding(std::string("Vocab::load rejects what Vocab::from_text accepts: ") + e.what());
  }
  FUZZ_CHECK(vocab->size() <= vocab->lines(), "more distinct tokens than lines");
  for (int32_t i = 0; i < vocab->lines(); ++i) {
    const int32_t id = vocab->find(vocab->token(i));
    FUZZ_CHECK(id >= i && vocab->token(id) == vocab->token(i), "a token does not map to its last line");
  }
  try {
    (void)vocab->token(static_cast<int32_t>(vocab->lines()));
    fuzz::finding("Vocab::token past the end did not throw");
  } catch (const std::out_of_range&) {
  }

  text::TokenizerConfig config;
  config.use_jieba = false;  // jieba is fuzzed with the fixture vocabulary in fuzz_tokenizer
  try {
    const text::RoFormerTokenizer tok(vocab, config);
    std::string sample = kSample;
    for (int32_t i = 0; i < vocab->lines() && i < 48; ++i) sample += (i % 3 ? "" : " ") + vocab->token(i);
    text::EncodeOptions o;  // one pair encoding (both texts tokenized in full, then truncated and padded)
    o.truncation = text::Truncation::LongestFirst;
    o.max_length = 16;
    o.padding = text::Padding::MaxLength;
    const text::Encoding p = tok.encode_pair(sample, "[SEP]a##b [UNK]x", o);
    fuzz::check_encoding(tok, p);
    FUZZ_CHECK(p.size() == 16, "truncated and padded pair is not 16 tokens");
  } catch (const std::exception& e) {
    fuzz::undocumented("RoFormerTokenizer over a fuzzed vocabulary", e);
  }
  return 0;
}
