// The byte- and character-level tokenizers (src/text/char_tokenizer.cc): round trips and specials,
// streaming = in-memory vocabulary, truncation to max_vocab, save/load and every corrupt file.
#include "text/char_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/utf8.h"
#include "temp_files.h"

namespace {

using text::CharTokenizer;
using test_files::expect_error_naming;
using test_files::temp_dir;
using test_files::write;

// Mixed scripts: 1-, 2-, 3- and 4-byte characters.
const std::string kMixedText = "Hé said 中文 is fun 😀!\nnaïve café, 日本語 and emoji 🎉🎉 again.\n";

TEST(CharTokenizer, ByteLevelRoundTripAndSpecials) {
  const CharTokenizer tok = CharTokenizer::byte_level();
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.level(), CharTokenizer::Level::Byte);
  EXPECT_EQ(tok.kind(), text::TokenizerKind::byte);
  const text::SpecialIds s = tok.specials();
  EXPECT_EQ(s.pad, 0);
  EXPECT_EQ(s.unk, 1);
  EXPECT_EQ(s.cls, 2);
  EXPECT_EQ(s.sep, 3);
  EXPECT_EQ(s.mask, 4);
  EXPECT_EQ(tok.special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(tok.is_special(4));
  EXPECT_FALSE(tok.is_special(5));
  const std::vector<int32_t> ids = tok.encode_ids(kMixedText);
  ASSERT_EQ(ids.size(), kMixedText.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], 5 + static_cast<uint8_t>(kMixedText[i]));
  EXPECT_EQ(tok.decode_ids(ids), kMixedText);
  EXPECT_EQ(tok.decode_ids({0, 2, 3, 4, 5 + 'x', 1}), "x\xEF\xBF\xBD");  // specials vanish, [UNK] → U+FFFD
  try {
    tok.decode_ids({5, 261});
    ADD_FAILURE() << "id 261 decoded";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("261"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.decode_ids({-1}), std::out_of_range);
}

TEST(CharTokenizer, CharLevelRoundTrip) {
  const CharTokenizer tok = CharTokenizer::char_level_from_text(kMixedText);
  EXPECT_EQ(tok.level(), CharTokenizer::Level::Char);
  EXPECT_EQ(tok.kind(), text::TokenizerKind::character);
  const std::u32string cps = base::utf8_decode(kMixedText);
  const std::set<char32_t> distinct(cps.begin(), cps.end());
  EXPECT_EQ(tok.vocab_size(), 5 + static_cast<int64_t>(distinct.size()));
  EXPECT_EQ(tok.code_points(), std::vector<char32_t>(distinct.begin(), distinct.end())) << "sorted by code point";
  const std::vector<int32_t> ids = tok.encode_ids(kMixedText);
  ASSERT_EQ(ids.size(), cps.size()) << "one token per code point";
  for (int32_t id : ids) EXPECT_GE(id, 5);
  EXPECT_EQ(tok.decode_ids(ids), kMixedText);
  EXPECT_EQ(tok.encode_ids("Z"), std::vector<int32_t>{CharTokenizer::kUnk}) << "unseen characters are [UNK]";
  EXPECT_EQ(tok.decode_ids(tok.encode_ids("aZ")), "a\xEF\xBF\xBD");
  EXPECT_THROW(tok.decode_ids({static_cast<int32_t>(tok.vocab_size())}), std::out_of_range);
}

TEST(CharTokenizer, StreamingVocabularyEqualsInMemory) {
  // Invalid bytes included: they count as U+FFFD whichever chunk they fall in.
  const std::string text = kMixedText + kMixedText + kMixedText + "bad \xE4\xB8 tail \xF0\x9F\x98";
  const std::string path = write("vocab.txt", text);
  for (int64_t max_vocab : {0, 12}) {
    const CharTokenizer whole = CharTokenizer::char_level_from_text(text, max_vocab);
    for (size_t chunk : {1, 2, 3, 5, 7, 64, 1 << 20}) {
      EXPECT_EQ(CharTokenizer::char_level_from_file(path, max_vocab, chunk), whole) << "chunk " << chunk;
    }
  }
  const CharTokenizer tok = CharTokenizer::char_level_from_text(text);
  EXPECT_EQ(tok.code_points().back(), U'😀') << "U+1F600 is the largest code point";
  EXPECT_NE(std::find(tok.code_points().begin(), tok.code_points().end(), U'\uFFFD'), tok.code_points().end());
  EXPECT_EQ(tok.decode_ids(tok.encode_ids("\xE4\xB8")), "\xEF\xBF\xBD");
}

TEST(CharTokenizer, MaxVocabKeepsMostFrequentTiesBySmallerCodePoint) {
  const std::string text = "ccccbbbbaaa中中中 😀";  // c, b: 4; a, 中: 3; ' ', 😀: 1
  const CharTokenizer tok = CharTokenizer::char_level_from_text(text, 5 + 3);
  EXPECT_EQ(tok.code_points(), (std::vector<char32_t>{U'a', U'b', U'c'})) << "a beats 中 on the tie";
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.encode_ids("ab中c😀"), (std::vector<int32_t>{5, 6, 1, 7, 1}));
  EXPECT_EQ(CharTokenizer::char_level_from_text(text, 100).vocab_size(), 5 + 6) << "a large max_vocab keeps all";
  EXPECT_THROW(CharTokenizer::char_level_from_text(text, 5), std::invalid_argument);
  EXPECT_THROW(CharTokenizer::char_level_from_text(""), std::invalid_argument);
  EXPECT_THROW(CharTokenizer::char_level_from_code_points({U'a', U'a'}), std::invalid_argument);
  EXPECT_THROW(CharTokenizer::char_level_from_code_points({0xD800}), std::invalid_argument);
  const std::string nope = temp_dir() + "nope.txt";
  expect_error_naming<base::Error>([&] { CharTokenizer::char_level_from_file(nope); }, nope, "cannot open");
  const std::string empty = write("empty_vocab.txt", "");
  expect_error_naming<base::Error>([&] { CharTokenizer::char_level_from_file(empty); }, empty, "empty");
}

TEST(CharTokenizer, SaveLoadRoundTrip) {
  const std::string text = kMixedText + std::string("\"\\\t\x01", 4) + std::string(1, '\0');  // escapes and NUL
  for (const CharTokenizer& tok : {CharTokenizer::byte_level(), CharTokenizer::char_level_from_text(text)}) {
    const std::string path = temp_dir() + "tokenizer.json";
    tok.save(temp_dir());
    const CharTokenizer back = CharTokenizer::load(path);
    EXPECT_EQ(back, tok);
    EXPECT_EQ(back.encode_ids(text), tok.encode_ids(text));
    tok.save(temp_dir());  // replacing an existing file
    EXPECT_EQ(CharTokenizer::load(path), tok);
  }
  EXPECT_EQ(CharTokenizer::load(write("order.json", R"({"version": 1, "kind": "char", "tokens": ["b", "a"]})"))
                .encode_ids("ab"),
            (std::vector<int32_t>{6, 5}))
      << "ids follow the file's order";
}

TEST(CharTokenizer, LoadRejectsCorruptFiles) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"version": 1, "kind": "char", "tokens": ["a", "b")", "not valid JSON"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"version": 1, "kind": "char", "tokens": ["a"]} x)", "not valid JSON"},
      {R"({"version": 1, "kind": "word", "tokens": []})", "unknown kind \"word\""},
      {R"({"version": 1, "kind": 3, "tokens": []})", "'kind'"},
      {R"({"version": 1, "kind": "char", "tokens": ["a", "é", "a"]})", "duplicate token \"a\""},
      {R"({"version": 1, "kind": "char", "tokens": ["a", "ab"]})", "token 1 (id 6) \"ab\" is not a single code point"},
      {R"({"version": 1, "kind": "char", "tokens": [""]})", "not a single code point"},
      {R"({"version": 1, "kind": "char", "tokens": ["e\u0301"]})", "not a single code point"},
      {R"({"version": 1, "kind": "char", "tokens": [7]})", "is not a string"},
      {R"({"version": 1, "kind": "char", "tokens": "abc"})", "array of strings"},
      {R"({"version": 1, "kind": "char", "tokens": []})", "at least one token"},
      {R"({"version": 1, "kind": "byte", "tokens": ["a"]})", "byte tokenizer has no char tokens"},
      {R"({"version": 1, "tokens": []})", "missing field 'kind'"},
      {R"({"version": 1, "kind": "byte"})", "missing field 'tokens'"},
      {R"({"kind": "byte", "tokens": []})", "missing field 'version'"},
      {R"({"version": 2, "kind": "byte", "tokens": []})", "unsupported version 2"},
      {R"({"version": 1, "kind": "byte", "tokens": [], "merges": []})", "unknown field 'merges'"},
      {"", "not valid JSON"},
  };
  int i = 0;
  for (const auto& [json, fragment] : cases) {
    const std::string path = write("corrupt" + std::to_string(i++) + ".json", json);
    expect_error_naming<base::Error>([&] { CharTokenizer::load(path); }, path, fragment);
  }
  const std::string missing = temp_dir() + "missing.json";
  expect_error_naming<base::Error>([&] { CharTokenizer::load(missing); }, missing, "cannot open");
}

}  // namespace
