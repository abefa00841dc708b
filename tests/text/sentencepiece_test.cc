// SentencePiece wrapper (src/text/sentencepiece.h): tiny unigram and BPE models trained on a few
// hundred generated English and Spanish sentences; round trips (accents, ¿¡, spacing), the fixed
// special ids, byte-identical retraining, and one clear error for each kind of bad input.
#include "text/sentencepiece.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "temp_files.h"

namespace {

// 405 sentences, alternating English and Spanish, drawn from fixed word lists by a fixed LCG: the
// same text on every run and machine. Every accented character of the round-trip strings occurs.
std::string corpus() {
  const std::vector<std::string> en = {"the", "lord", "said", "unto", "him", "and", "they", "shall", "go",
                                       "into", "the", "land", "where", "is", "my", "house", "light", "water",
                                       "people", "king", "city", "day", "night", "heaven", "earth", "word"};
  const std::vector<std::string> es = {"el", "señor", "dijo", "a", "él", "y", "ellos", "irán", "tierra",
                                       "dónde", "está", "mi", "casa", "luz", "agua", "pueblo", "rey",
                                       "ciudad", "día", "noche", "cielo", "palabra", "mañana", "corazón",
                                       "también", "pingüino", "Ángel", "Éxodo", "Óscar", "Ñandú", "aquí"};
  uint64_t state = 12345;
  auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  std::ostringstream out;
  for (int i = 0; i < 400; ++i) {
    const auto& words = i % 2 == 0 ? en : es;
    const uint64_t n = 4 + next(10);
    std::string s = i % 2 == 0 ? "" : (next(3) == 0 ? "¿" : next(2) == 0 ? "¡" : "");
    for (uint64_t w = 0; w < n; ++w) s += (w ? " " : "") + words[next(words.size())];
    s += i % 2 == 0 ? "." : (s[0] == '\xc2' ? (s[1] == '\xbf' ? "?" : "!") : ".");
    out << s << (i % 7 == 0 ? "\r\n" : "\n");  // some CRLF lines
    if (i % 50 == 0) out << "\n   \n";       // blank lines are skipped
  }
  // Capitals and punctuation for the round-trip strings.
  out << "The king said: go, and the people went.\nEl Señor dijo: ¿dónde está el agua?\n"
      << "¡Ángel! Éxodo, Óscar y Ñandú también.\nThe Lord, the x.\n¿Dónde está el rey?\n";
  return out.str();
}

const std::string& corpus_file() {
  static const std::string path = test_files::write("spm/corpus.txt", corpus());
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

text::SentencePieceTrainOptions options(const std::string& prefix, const std::string& type = "unigram") {
  text::SentencePieceTrainOptions o;
  o.inputs = {corpus_file()};
  o.model_prefix = test_files::temp_dir() + "spm/" + prefix;
  o.vocab_size = 120;
  o.model_type = type;
  return o;
}

// The base::Error message of f(), or "" when it does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const base::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SentencePiece, TrainsWritesAndLoadsWithFixedSpecialIds) {
  for (const std::string type : {"unigram", "bpe"}) {
    const auto o = options("ids_" + type, type);
    const auto result = text::train_sentencepiece(o);
    EXPECT_EQ(result.sentences, 405);
    ASSERT_TRUE(std::filesystem::exists(o.model_prefix + ".model"));
    const auto sp = text::SentencePiece::load(o.model_prefix + ".model");
    EXPECT_EQ(sp.serialized(), read(o.model_prefix + ".model"));
    EXPECT_EQ(sp.serialized(), result.serialized);
    EXPECT_EQ(sp.vocab_size(), 120);
    EXPECT_EQ(sp.pad_id(), 0);
    EXPECT_EQ(sp.unk_id(), 1);
    EXPECT_EQ(sp.bos_id(), 2);
    EXPECT_EQ(sp.eos_id(), 3);
    EXPECT_EQ(sp.piece(0), "<pad>");
    EXPECT_EQ(sp.piece(1), "<unk>");
    EXPECT_EQ(sp.piece(2), "<s>");
    EXPECT_EQ(sp.piece(3), "</s>");
    EXPECT_EQ(sp.piece_to_id("</s>"), 3);
    EXPECT_EQ(sp.piece_to_id("no such piece"), -1);
    // The .vocab file: one "piece<TAB>score" line per id.
    std::istringstream vocab(read(o.model_prefix + ".vocab"));
    int64_t lines = 0;
    for (std::string line; std::getline(vocab, line); ++lines) {
      ASSERT_EQ(line.substr(0, line.find('\t')), sp.piece(lines)) << type << " line " << lines;
    }
    EXPECT_EQ(lines, 120);
  }
}

TEST(SentencePiece, RoundTripsEnglishAndSpanish) {
  for (const std::string type : {"unigram", "bpe"}) {
    const auto o = options("roundtrip_" + type, type);
    text::train_sentencepiece(o);
    const auto sp = text::SentencePiece::load(o.model_prefix + ".model");
    for (const std::string s : {"¿Dónde está?", "The lord said unto him.", "¡El señor dijo: mañana!",
                                "Ángel, Éxodo, Óscar y Ñandú también aquí.", "el pingüino", "x"}) {
      const std::vector<int64_t> ids = sp.encode(s);
      EXPECT_EQ(sp.decode(ids), s) << type;
      const std::vector<std::string> pieces = sp.encode_pieces(s);
      ASSERT_EQ(pieces.size(), ids.size()) << type << ": " << s;
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(sp.piece(ids[i]), pieces[i]);
        EXPECT_NE(ids[i], sp.unk_id()) << type << ": " << s;  // every character was seen
      }
    }
    // nmt_nfkc normalisation: runs of spaces collapse, ends are trimmed; control ids decode to nothing.
    EXPECT_EQ(sp.decode(sp.encode("  the   lord  ")), "the lord");
    std::vector<int64_t> ids = sp.encode("el rey");
    ids.insert(ids.begin(), sp.bos_id());
    ids.push_back(sp.eos_id());
    ids.push_back(sp.pad_id());
    EXPECT_EQ(sp.decode(ids), "el rey");
    EXPECT_TRUE(sp.encode("").empty());
    // A character the model never saw is unk, and decodes as SentencePiece's " ⁇ ".
    const std::vector<int64_t> unseen = sp.encode("el 猫");
    EXPECT_EQ(unseen.back(), sp.unk_id());
    EXPECT_EQ(sp.decode(unseen), "el  ⁇ ");
    // Pieces keep the unseen character's surface.
    EXPECT_EQ(sp.decode_pieces(sp.encode_pieces("el 猫 ¿Dónde?")), "el 猫 ¿Dónde?");
  }
}

TEST(SentencePiece, TrainingIsDeterministic) {
  for (const std::string type : {"unigram", "bpe"}) {
    auto a = options("det_a_" + type, type), b = options("det_b_" + type, type);
    text::train_sentencepiece(a);
    text::train_sentencepiece(b);
    EXPECT_EQ(read(a.model_prefix + ".model"), read(b.model_prefix + ".model")) << type;
    EXPECT_EQ(read(a.model_prefix + ".vocab"), read(b.model_prefix + ".vocab")) << type;
    // The same sentences from memory give the same model as from the file.
    auto m = options("", type);
    m.model_prefix.clear();  // nothing written
    m.inputs.clear();
    std::istringstream lines(corpus());
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      m.sentences.push_back(line);
    }
    EXPECT_EQ(text::train_sentencepiece(m).serialized, read(a.model_prefix + ".model")) << type;
  }
  // A seeded sample (input_sentence_size) is the same sample again.
  auto s1 = options("sample1"), s2 = options("sample2");
  s1.input_sentence_size = s2.input_sentence_size = 200;
  s1.seed = s2.seed = 7;
  EXPECT_EQ(text::train_sentencepiece(s1).serialized, text::train_sentencepiece(s2).serialized);
}

TEST(SentencePiece, BadTrainingInputIsOneClearError) {
  const std::string dir = test_files::temp_dir() + "spm/";
  auto o = options("bad");
  o.inputs = {dir + "missing.txt"};
  EXPECT_EQ(error_of([&] { text::train_sentencepiece(o); }), dir + "missing.txt: cannot open");

  o.inputs = {corpus_file(), test_files::write("spm/empty.txt", "")};
  EXPECT_EQ(error_of([&] { text::train_sentencepiece(o); }), dir + "empty.txt: no text (empty or only blank lines)");
  o.inputs = {test_files::write("spm/blank.txt", "\n  \r\n\t\n")};
  EXPECT_EQ(error_of([&] { text::train_sentencepiece(o); }), dir + "blank.txt: no text (empty or only blank lines)");
  o.inputs = {dir};
  EXPECT_EQ(error_of([&] { text::train_sentencepiece(o); }), dir + ": is a directory");

  o.inputs = {corpus_file()};
  o.vocab_size = 100000;
  const std::string too_many = error_of([&] { text::train_sentencepiece(o); });
  EXPECT_NE(too_many.find(corpus_file() + ": vocab_size 100000 is more pieces than this text gives (at most "),
            std::string::npos) << too_many;
  o.vocab_size = 10;  // fewer than the corpus's characters
  const std::string too_few = error_of([&] { text::train_sentencepiece(o); });
  EXPECT_NE(too_few.find(corpus_file() + ": SentencePiece training failed: Vocabulary size is smaller than required_chars"),
            std::string::npos) << too_few;

  o.vocab_size = 120;
  o.model_type = "word-salad";
  EXPECT_NE(error_of([&] { text::train_sentencepiece(o); }).find("model_type 'word-salad' must be unigram or bpe"),
            std::string::npos);
  o.model_type = "unigram";
  o.character_coverage = 0;
  EXPECT_NE(error_of([&] { text::train_sentencepiece(o); }).find("character_coverage"), std::string::npos);
  o.character_coverage = 1;
  o.inputs.clear();
  EXPECT_NE(error_of([&] { text::train_sentencepiece(o); }).find("no input files or sentences"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "bad.model"));  // nothing written by a failed run
}

TEST(SentencePiece, BadModelFilesAndIdsAreOneClearError) {
  const std::string dir = test_files::temp_dir() + "spm/";
  EXPECT_NE(error_of([&] { text::SentencePiece::load(dir + "no.model"); }).find(dir + "no.model: cannot open"),
            std::string::npos);
  const std::string text_file = test_files::write("spm/text.model", "this is not a model\n");
  EXPECT_NE(error_of([&] { text::SentencePiece::load(text_file); }).find(text_file + ": not a SentencePiece model"),
            std::string::npos);
  const std::string empty = test_files::write("spm/empty.model", "");
  EXPECT_NE(error_of([&] { text::SentencePiece::load(empty); }).find(empty + ": not a SentencePiece model"),
            std::string::npos);

  const auto o = options("ids_check");
  text::train_sentencepiece(o);
  const auto sp = text::SentencePiece::load(o.model_prefix + ".model");
  EXPECT_EQ(error_of([&] { sp.decode({5, 120}); }), o.model_prefix + ".model: id 120 is outside the vocabulary [0, 120)");
  EXPECT_EQ(error_of([&] { sp.decode({-1}); }), o.model_prefix + ".model: id -1 is outside the vocabulary [0, 120)");
  EXPECT_NE(error_of([&] { sp.piece(1000); }), "");
  // A model travels as bytes (a checkpoint's copy) and loads from them.
  const auto copy = text::SentencePiece::from_serialized(sp.serialized(), "checkpoint/spm.model");
  EXPECT_EQ(copy.encode("¿Dónde está?"), sp.encode("¿Dónde está?"));
}

}  // namespace
