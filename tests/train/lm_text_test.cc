// The corpus of LM runs (src/train/lm_text.cc): WordPiece corpora end each line with [SEP], know
// their word starts and are the same for any thread count; the model must have a row for every
// token; char/byte tokenizers stream; other kinds and empty files are errors naming the path. Needs
// jieba's dict.txt.
#include <gtest/gtest.h>
#include <omp.h>

#include "base/error.h"
#include "temp_files.h"
#include "text/char_tokenizer.h"
#include "text/roformer_tokenizer.h"
#include "train/lm_text.h"

namespace {

using test_files::write;
const std::string kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nrot\n##ary\n##s\nposition\n,\n.\n中\n文\n";

TEST(LmText, CorpusLinesEndWithSepAndKnowWordStarts) {
  const auto t = text::RoFormerTokenizer::from_vocab_file(write("lm_text2/vocab.txt", kVocab));
  std::string text;
  for (int i = 0; i < 500; ++i) text += i % 3 ? "the rotary position.\n" : "\n  \nrotarys 中文\n";
  const std::string path = write("lm_text2/corpus.txt", text);
  std::vector<int32_t> ids, ids1;
  std::vector<uint8_t> starts, starts1;
  train::tokenize_lines(path, t, &ids, &starts);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  train::tokenize_lines(path, t, &ids1, &starts1);
  omp_set_num_threads(saved);
  EXPECT_EQ(ids, ids1);
  EXPECT_EQ(starts, starts1);
  // Line 0: "rotarys 中文" → rot ##ary ##s 中 文 [SEP] (blank lines dropped); line 1: the rot ##ary position . [SEP]
  const std::vector<int32_t> head = {6, 7, 8, 12, 13, 3, 5, 6, 7, 9, 11, 3};
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 12), head);
  EXPECT_EQ(std::vector<uint8_t>(starts.begin(), starts.begin() + 12),
            (std::vector<uint8_t>{1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1}));
  const auto corpus = train::lm_corpus(t, path, 0.1, 20);
  EXPECT_EQ(corpus->vocab_size(), 20);  // the model's rows
  EXPECT_THROW(train::lm_corpus(t, path, 0.1, 10), base::Error);  // fewer rows than tokens
}

TEST(LmText, CharCorporaStream) {
  const std::string path = write("lm_text4/corpus.txt", std::string(400, 'a') + "中文\n");
  const auto chars = text::CharTokenizer::char_level_from_file(path);
  const auto corpus = train::lm_corpus(chars, path, 0.1, chars.vocab_size());
  EXPECT_NE(dynamic_cast<const data::Corpus*>(corpus.get()), nullptr);
  EXPECT_EQ(corpus->vocab_size(), chars.vocab_size());
}

TEST(LmText, ErrorsNameThePath) {
  const auto t = text::RoFormerTokenizer::from_vocab_file(write("lm_text3/vocab.txt", kVocab));
  const std::string blank = write("lm_text3/blank.txt", "\n \n");
  test_files::expect_error_naming<base::Error>([&] { train::lm_corpus(t, blank, 0.1, 20); }, blank, "no text");
}

}  // namespace
