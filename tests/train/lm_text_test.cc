// The text side of LM runs (src/train/lm_text.cc): a bare vocab.txt becomes a complete tokenizer
// directory, WordPiece decoding joins "##" pieces, special ids, corpus tokenisation ([SEP] after each
// line, word starts, the same for any thread count) and errors naming the path. Needs jieba's dict.txt.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>

#include "base/error.h"
#include "io/mapped_file.h"
#include "temp_files.h"
#include "train/lm_text.h"

namespace {

using test_files::temp_dir;
using test_files::write;
const std::string kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nrot\n##ary\n##s\nposition\n,\n.\n中\n文\n";

TEST(LmText, BareVocabularyWritesACompleteTokenizerDirectory) {
  const train::LmText t = train::LmText::load(write("lm_text/vocab.txt", kVocab));
  EXPECT_EQ(t.kind(), "wordpiece");
  EXPECT_EQ(t.vocab_size(), 14);
  EXPECT_EQ(t.mask_id(), 4);
  EXPECT_EQ(t.special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const std::vector<int32_t> ids = t.encode("The rotary positions, 中文!");
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 6, 7, 9, 8, 10, 12, 13, 1}));
  EXPECT_EQ(t.decode(ids), "the rotary positions , 中 文");
  EXPECT_EQ(t.decode({2, 6, 7, 3}), "rotary");
  const std::string dir = temp_dir() + "lm_text_out";
  std::filesystem::create_directories(dir);
  t.writer()(dir);
  EXPECT_EQ(io::read_file(dir + "/vocab.txt"), kVocab);
  EXPECT_NE(io::read_file(dir + "/tokenizer_config.json").find("\"do_lower_case\": true"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/special_tokens_map.json"));
  // The written directory loads to the same tokenizer.
  EXPECT_EQ(train::LmText::load(dir).encode("The rotary positions, 中文!"), ids);
}

TEST(LmText, CorpusLinesEndWithSepAndKnowWordStarts) {
  const train::LmText t = train::LmText::load(write("lm_text2/vocab.txt", kVocab));
  std::string text;
  for (int i = 0; i < 500; ++i) text += i % 3 ? "the rotary position.\n" : "\n  \nrotarys 中文\n";
  const std::string path = write("lm_text2/corpus.txt", text);
  std::vector<int32_t> ids, ids1;
  std::vector<uint8_t> starts, starts1;
  train::tokenize_lines(path, *t.wordpiece(), &ids, &starts);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  train::tokenize_lines(path, *t.wordpiece(), &ids1, &starts1);
  omp_set_num_threads(saved);
  EXPECT_EQ(ids, ids1);
  EXPECT_EQ(starts, starts1);
  // Line 0: "rotarys 中文" → rot ##ary ##s 中 文 [SEP] (blank lines dropped); line 1: the rot ##ary position . [SEP]
  const std::vector<int32_t> head = {6, 7, 8, 12, 13, 3, 5, 6, 7, 9, 11, 3};
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 12), head);
  EXPECT_EQ(std::vector<uint8_t>(starts.begin(), starts.begin() + 12),
            (std::vector<uint8_t>{1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1}));
  const auto corpus = t.corpus(path, 0.1, 20);
  EXPECT_EQ(corpus->vocab_size(), 20);  // the model's rows
  EXPECT_THROW(t.corpus(path, 0.1, 10), base::Error);  // fewer rows than tokens
}

TEST(LmText, ErrorsNameThePath) {
  const std::string missing = temp_dir() + "no/such/vocab.txt";
  try {
    train::LmText::load(missing);
    FAIL();
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
  const std::string empty_dir = temp_dir() + "lm_text_empty";
  std::filesystem::create_directories(empty_dir);
  EXPECT_THROW(train::LmText::load(empty_dir), base::Error);
  const train::LmText t = train::LmText::load(write("lm_text3/vocab.txt", kVocab));
  EXPECT_THROW(t.corpus(write("lm_text3/blank.txt", "\n \n"), 0.1, 20), base::Error);
}

}  // namespace
