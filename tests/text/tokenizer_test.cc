// The tokenizer interface (src/text/tokenizer.cc): every kind (byte, char, WordPiece from a bare
// vocab.txt and from a directory, SentencePiece) through text::Tokenizer alone: specials, the ids
// never masked or sampled, decoding, and save → load_tokenizer giving the same ids and the same
// files; load_tokenizer's errors name the path. WordPiece needs jieba's dict.txt.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/mapped_file.h"
#include "temp_files.h"
#include "text/char_tokenizer.h"
#include "text/sentencepiece.h"

namespace {

namespace fs = std::filesystem;
using test_files::temp_dir;
using test_files::write;

const std::string kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nrot\n##ary\n##s\nposition\n,\n.\n中\n文\n";
const std::string kText = "The rotary positions, 中文!";

std::string fresh_dir(const std::string& name) {
  const std::string dir = temp_dir() + name;
  fs::create_directories(dir);
  return dir;
}

// Saves tok into a fresh directory and loads it back through load_tokenizer; the files must read
// back the same ids for `text`, and saving the loaded tokenizer must write the same files.
std::shared_ptr<const text::Tokenizer> round_trip(const text::Tokenizer& tok, const std::string& name,
                                                  const std::vector<std::string>& files, const std::string& text) {
  const std::string dir = fresh_dir(name), again = fresh_dir(name + "_again");
  tok.save(dir);
  std::vector<std::string> written;
  for (const auto& f : fs::directory_iterator(dir)) written.push_back(f.path().filename().string());
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, files) << tok.kind_name();
  auto back = text::load_tokenizer(dir);
  EXPECT_EQ(back->kind(), tok.kind());
  EXPECT_EQ(back->vocab_size(), tok.vocab_size());
  EXPECT_EQ(back->encode_ids(text), tok.encode_ids(text));
  back->save(again);
  for (const auto& f : files) EXPECT_EQ(io::read_file(again + "/" + f), io::read_file(dir + "/" + f)) << f;
  return back;
}

// What every tokenizer promises: ids inside the vocabulary, sorted distinct special ids, specials
// decoding to nothing.
void expect_contract(const text::Tokenizer& tok, const std::string& text) {
  for (const int32_t id : tok.encode_ids(text)) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, tok.vocab_size());
  }
  const std::vector<int32_t> specials = tok.special_ids();
  EXPECT_TRUE(std::is_sorted(specials.begin(), specials.end()));
  EXPECT_EQ(std::adjacent_find(specials.begin(), specials.end()), specials.end());
  const text::SpecialIds s = tok.specials();
  for (const int32_t id : {s.pad, s.cls, s.sep, s.mask}) {
    if (id >= 0) {
      EXPECT_EQ(tok.decode_ids({id}), "") << tok.kind_name() << " id " << id;
    }
  }
}

TEST(Tokenizer, ByteAndCharThroughTheInterface) {
  const std::string text = kText + " \xE4\xB8";  // invalid UTF-8 at the end
  const text::CharTokenizer bytes = text::CharTokenizer::byte_level();
  const text::CharTokenizer chars = text::CharTokenizer::char_level_from_text("The rotary, 中文");
  for (const text::Tokenizer* tok : std::vector<const text::Tokenizer*>{&bytes, &chars}) {
    expect_contract(*tok, text);
    EXPECT_EQ(tok->special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(tok->specials().mask, 4);
    round_trip(*tok, "iface_" + tok->kind_name(), {"tokenizer.json"}, text);
  }
  EXPECT_EQ(bytes.decode_ids(bytes.encode_ids(text)), text);
  EXPECT_EQ(chars.decode_ids(chars.encode_ids("rot!")), "rot\xEF\xBF\xBD") << "unseen characters are [UNK], U+FFFD";
}

TEST(Tokenizer, WordPieceFromABareVocabularyWritesACompleteDirectory) {
  const auto tok = text::load_tokenizer(write("iface_wp/vocab.txt", kVocab));
  EXPECT_EQ(tok->kind(), text::TokenizerKind::wordpiece);
  EXPECT_EQ(tok->vocab_size(), 14);
  const text::SpecialIds s = tok->specials();
  EXPECT_EQ((std::vector<int32_t>{s.pad, s.unk, s.cls, s.sep, s.mask}), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(tok->special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const std::vector<int32_t> ids = tok->encode_ids(kText);
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 6, 7, 9, 8, 10, 12, 13, 1}));
  EXPECT_EQ(tok->decode_ids(ids), "the rotary positions , 中 文");
  EXPECT_EQ(tok->decode_ids({2, 6, 7, 3}), "rotary");
  EXPECT_EQ(tok->decode_ids({6, 99}), "rot [UNK]") << "an id outside the vocabulary reads as the unknown token";
  expect_contract(*tok, kText);
  round_trip(*tok, "iface_wp_out", {"special_tokens_map.json", "tokenizer_config.json", "vocab.txt"}, kText);
  const std::string dir = temp_dir() + "iface_wp_out";
  EXPECT_EQ(io::read_file(dir + "/vocab.txt"), kVocab);
  EXPECT_NE(io::read_file(dir + "/tokenizer_config.json").find("\"do_lower_case\": true"), std::string::npos);
}

TEST(Tokenizer, WordPieceDirectoryKeepsItsFilesAndAdditionalSpecials) {
  const std::string config = R"({"tokenizer_class": "BertTokenizer", "do_lower_case": false,)"
                             R"( "additional_special_tokens": ["[X]"]})";
  write("iface_wp_dir/vocab.txt", kVocab + "[X]\n");
  write("iface_wp_dir/tokenizer_config.json", config);
  const auto tok = text::load_tokenizer(temp_dir() + "iface_wp_dir");
  EXPECT_EQ(tok->special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4, 14})) << "[X] is never masked or sampled";
  EXPECT_EQ(tok->decode_ids({14, 5}), "the");
  round_trip(*tok, "iface_wp_dir_out", {"tokenizer_config.json", "vocab.txt"}, "the [X] The");
  EXPECT_EQ(io::read_file(temp_dir() + "iface_wp_dir_out/tokenizer_config.json"), config) << "byte for byte";
}

TEST(Tokenizer, SentencePieceThroughTheInterface) {
  text::SentencePieceTrainOptions o;
  for (int i = 0; i < 60; ++i) {
    o.sentences.push_back(i % 2 ? "the rotary position of the word" : "a relative position in the sentence");
  }
  o.vocab_size = 24;
  const text::SentencePiece sp = text::SentencePiece::from_serialized(text::train_sentencepiece(o).serialized, "mem");
  const text::Tokenizer& tok = sp;
  EXPECT_EQ(tok.kind(), text::TokenizerKind::sentencepiece);
  const text::SpecialIds s = tok.specials();
  EXPECT_EQ((std::vector<int32_t>{s.pad, s.unk, s.cls, s.sep, s.mask}), (std::vector<int32_t>{0, 1, 2, 3, -1}));
  EXPECT_EQ(tok.special_ids(), (std::vector<int32_t>{0, 1, 2, 3}));
  const std::string text = "the relative word";
  const std::vector<int64_t> wide = sp.encode(text);
  EXPECT_EQ(tok.encode_ids(text), std::vector<int32_t>(wide.begin(), wide.end()));
  EXPECT_EQ(tok.decode_ids(tok.encode_ids(text)), text);
  expect_contract(tok, text);
  round_trip(tok, "iface_spm", {"spm.model"}, text);
  EXPECT_EQ(io::read_file(temp_dir() + "iface_spm/spm.model"), sp.serialized());
}

TEST(Tokenizer, LoadTokenizerErrorsNameThePath) {
  const std::string missing = temp_dir() + "no/such/vocab.txt";
  test_files::expect_error_naming<base::Error>([&] { text::load_tokenizer(missing); }, missing, "no such");
  const std::string empty = fresh_dir("iface_empty");
  test_files::expect_error_naming<base::Error>([&] { text::load_tokenizer(empty); }, empty, "no tokenizer: neither vocab.txt");
}

}  // namespace
