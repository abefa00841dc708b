// The data layer: UTF-8 decoding (maximal-subpart U+FFFD), atomic writes, and the corpus
// (deterministic train batches that stay in the training part, the fixed validation tiling, unigram
// counts, errors). Text files are written into a fresh temporary directory.
#include <gtest/gtest.h>

#include "temp_files.h"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/utf8.h"
#include "data/corpus.h"
#include "text/char_tokenizer.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"  // io::Error

namespace {

namespace fs = std::filesystem;
using data::Corpus;
using text::CharTokenizer;

// Mixed scripts: 1-, 2-, 3- and 4-byte characters.
const std::string kText = "Hé said 中文 is fun 😀!\nnaïve café, 日本語 and emoji 🎉🎉 again.\n";

using test_files::temp_dir;
using test_files::write;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

template <class F>
void expect_io_error(F&& f, const std::string& path, const std::string& fragment) {
  test_files::expect_error_naming<io::Error>(f, path, fragment);
}

std::u32string decode_all(const std::string& s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i += static_cast<size_t>(base::utf8_next(p + i, s.size() - i, true, &cp));
    out.push_back(cp);
  }
  return out;
}

// Error messages quote file contents through base::printable: one line, no terminal control.
TEST(Utf8, PrintableEscapesControlsAndInvalidBytesOnly) {
  EXPECT_EQ(base::printable("plain 今天 😀 \xef\xbf\xbd \\ é"), "plain 今天 😀 \xef\xbf\xbd \\ é");
  EXPECT_EQ(base::printable("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(base::printable("\x1b[31mred\x07\x7f"), "\\x1b[31mred\\x07\\x7f");
  EXPECT_EQ(base::printable(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(base::printable("c1 \xc2\x9b"), "c1 \\xc2\\x9b");  // U+009B, the 8-bit CSI
  EXPECT_EQ(base::printable("bad \xff\xc3 end \xe4\xb8"), "bad \\xff\\xc3 end \\xe4\\xb8");
}

TEST(Utf8, MaximalSubpartReplacementLikePython) {
  // Expected values from Python's bytes.decode_ids("utf-8", errors="replace").
  EXPECT_EQ(decode_all("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"), U"aé中😀");
  EXPECT_EQ(decode_all("\xE4\xB8" "a"), U"\uFFFDa");           // truncated 3-byte character
  EXPECT_EQ(decode_all("\xF0\x9F\x98"), U"\uFFFD");            // truncated at the end
  EXPECT_EQ(decode_all("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // a surrogate
  EXPECT_EQ(decode_all("\xC0\xAF"), U"\uFFFD\uFFFD");          // overlong
  EXPECT_EQ(decode_all("\x80\xBF\xFF"), U"\uFFFD\uFFFD\uFFFD");  // stray continuation, invalid byte
  EXPECT_EQ(decode_all("\xF4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  char32_t cp;
  EXPECT_EQ(base::utf8_next(reinterpret_cast<const uint8_t*>("\xF0\x9F"), 2, false, &cp), 0) << "needs more bytes";
}

TEST(AtomicFile, WritesReplacesAndLeavesNoTemporaries) {
  const fs::path dir = fs::path(temp_dir()) / "atomic";
  fs::create_directories(dir);
  const std::string path = (dir / "out.bin").string();
  const std::string bytes("one\0two", 7);
  io::write_file_atomic(path, bytes);
  auto slurp = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(), bytes);
  io::write_file_atomic(path, "replaced");
  EXPECT_EQ(slurp(), "replaced");
  io::write_file_atomic(path, "");
  EXPECT_EQ(slurp(), "");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1) << "no temporary left";
  const std::string bad = (dir / "no_such_dir" / "x.json").string();
  expect_io_error([&] { io::write_file_atomic(bad, "x"); }, bad, "cannot create");
}

// ---- Corpus ----

TEST(Corpus, TrainBatchesArePureFunctionsOfSeedAndStep) {
  const std::string text = repeat(kText, 40);
  const std::string path = write("corpus.txt", text);
  for (const CharTokenizer& tok : {CharTokenizer::byte_level(), CharTokenizer::char_level_from_text(text)}) {
    Corpus corpus(path, tok);
    const std::string train = text.substr(0, static_cast<size_t>(corpus.train_bytes()));
    const int64_t B = 6, T = 24;
    const data::Batch a = corpus.train_batch(7, 3, B, T);
    ASSERT_EQ(a.tokens.size(), static_cast<size_t>(B * (T + 1)));
    EXPECT_EQ(a.B, B);
    EXPECT_EQ(a.T, T);
    EXPECT_EQ(corpus.train_batch(7, 3, B, T).tokens, a.tokens);
    EXPECT_EQ(Corpus(path, tok).train_batch(7, 3, B, T).tokens, a.tokens) << "a resumed run reopens the file";
    EXPECT_NE(corpus.train_batch(7, 4, B, T).tokens, a.tokens) << "steps differ";
    EXPECT_NE(corpus.train_batch(8, 3, B, T).tokens, a.tokens) << "seeds differ";
    const data::Batch wider = corpus.train_batch(7, 3, B + 2, T);
    ASSERT_EQ(wider.tokens.size(), static_cast<size_t>((B + 2) * (T + 1)));
    EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.end(), wider.tokens.begin())) << "row r depends only on r";
    for (int64_t step = 0; step < 50; ++step) {
      const data::Batch b = corpus.train_batch(7, step, B, T);
      for (int64_t r = 0; r < B; ++r) {
        const std::vector<int32_t> row(b.tokens.begin() + r * (T + 1), b.tokens.begin() + (r + 1) * (T + 1));
        for (int32_t id : row) ASSERT_TRUE(id >= 5 && id < tok.vocab_size()) << id;
        const std::string s = tok.decode_ids(row);
        EXPECT_FALSE(base::utf8_is_continuation(static_cast<uint8_t>(s[0]))) << "windows start on a character";
        EXPECT_NE(train.find(s), std::string::npos) << "a window is a piece of the training text: " << s;
      }
    }
    Corpus moved(std::move(corpus));
    EXPECT_EQ(moved.train_batch(7, 3, B, T).tokens, a.tokens);
  }
}

TEST(Corpus, WindowsStayInTheTrainingPartAndReachItsEnd) {
  // 950 bytes of 'a' then 50 of 'b': the 5% validation part is exactly the b's.
  const std::string path = write("ab.txt", std::string(950, 'a') + std::string(50, 'b'));
  const CharTokenizer tok = CharTokenizer::char_level_from_text("ab");
  const Corpus corpus(path, tok);
  EXPECT_EQ(corpus.train_bytes(), 950);
  EXPECT_EQ(corpus.val_bytes(), 50);
  for (int64_t step = 0; step < 200; ++step) {
    for (int32_t id : corpus.train_batch(1, step, 8, 100).tokens) ASSERT_EQ(id, tok.encode_ids("a")[0]);
  }
  for (const auto& b : corpus.val_batches(4, 10, 100)) {
    for (int32_t id : b.tokens) ASSERT_EQ(id, tok.encode_ids("b")[0]);
  }
  // Distinct characters show the offsets drawn: every start from 0 to train_bytes − (T+1) occurs.
  const std::string train = "abcdefghijklmnopqrst";
  const std::string path2 = write("letters.txt", train + "XYZ");
  const Corpus letters(path2, CharTokenizer::byte_level(), 0.15);
  ASSERT_EQ(letters.train_bytes(), 20);
  std::set<char> firsts;
  for (int64_t step = 0; step < 100; ++step) {
    const data::Batch b = letters.train_batch(5, step, 4, 7);
    for (int64_t r = 0; r < 4; ++r) firsts.insert(static_cast<char>(b.at(r, 0) - 5));
  }
  EXPECT_EQ(firsts, std::set<char>(train.begin(), train.begin() + 13));
  EXPECT_EQ(letters.train_batch(5, 0, 3, 19).tokens, CharTokenizer::byte_level().encode_ids(repeat(train, 3)))
      << "a window as long as the training part";
  expect_io_error([&] { letters.train_batch(5, 0, 1, 20); }, path2, "too small for one window");
}

TEST(Corpus, MultiByteTextAndSplitOnACharacter) {
  // 25 three-byte characters: a 5% split (75 → 71 bytes) lands inside one and moves to byte 72.
  const std::string path = write("cjk.txt", repeat("中", 25));
  const CharTokenizer chars = CharTokenizer::char_level_from_text("中");
  const Corpus corpus(path, chars, 0.05);
  EXPECT_EQ(corpus.train_bytes(), 72);
  EXPECT_EQ(corpus.val_bytes(), 3);
  EXPECT_EQ(corpus.val_unigram_counts()[5], 1);
  EXPECT_EQ(corpus.train_unigram_counts()[5], 24);
  EXPECT_EQ(corpus.train_batch(0, 0, 2, 23).tokens, std::vector<int32_t>(48, 5)) << "24 characters fit";
  expect_io_error([&] { corpus.train_batch(0, 0, 1, 24); }, path, "too small");
  const Corpus bytes(path, CharTokenizer::byte_level(), 0.05);
  for (int64_t step = 0; step < 30; ++step) {
    const data::Batch b = bytes.train_batch(0, step, 4, 8);
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(b.at(r, 0), 5 + 0xE4) << "byte windows start on a lead byte";
  }
}

TEST(Corpus, InvalidUtf8StillGivesFullWindows) {
  std::string junk;
  uint64_t x = 12345;
  for (int i = 0; i < 3000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint8_t b = static_cast<uint8_t>(x >> 56);
    junk.push_back(static_cast<char>(i % 3 ? (0x80 | (b & 0x3F)) : b));  // mostly continuation bytes
  }
  const std::string path = write("junk.bin", junk);
  const CharTokenizer tok = CharTokenizer::char_level_from_file(path, 0, 100);
  const Corpus corpus(path, tok, 0.1, 100);
  for (int64_t T : {1, 5, 50, 500}) {
    for (int64_t step = 0; step < 20; ++step) {
      const data::Batch b = corpus.train_batch(3, step, 4, T);
      ASSERT_EQ(b.tokens.size(), static_cast<size_t>(4 * (T + 1)));
      for (int32_t id : b.tokens) ASSERT_TRUE(id >= 1 && id < tok.vocab_size());
    }
  }
}

TEST(Corpus, ValidationBatchesTileTheValidationPart) {
  const std::string text = repeat(kText, 30);
  const std::string path = write("val.txt", text);
  const CharTokenizer tok = CharTokenizer::char_level_from_text(text);
  const Corpus corpus(path, tok, 0.2, 16);  // tiny chunks: characters split across reads
  const std::vector<int32_t> val = tok.encode_ids(text.substr(static_cast<size_t>(corpus.train_bytes())));
  const int64_t B = 3, T = 10;
  const std::vector<data::Batch> all = corpus.val_batches(B, T, 1 << 20);
  const auto windows = static_cast<int64_t>((val.size() - 1) / T);
  EXPECT_EQ(static_cast<int64_t>(all.size()), (windows + B - 1) / B);
  EXPECT_EQ(corpus.val_batches(B, T, 1 << 20).size(), all.size());
  std::vector<int32_t> seen{all[0].at(0, 0)};  // the first token, then every window's targets
  for (size_t i = 0; i < all.size(); ++i) {
    const data::Batch& b = all[i];
    EXPECT_EQ(b.B, i + 1 < all.size() ? B : windows - B * static_cast<int64_t>(all.size() - 1));
    EXPECT_EQ(corpus.val_batches(B, T, 1 << 20)[i].tokens, b.tokens) << "deterministic";
    for (int64_t r = 0; r < b.B; ++r) {
      EXPECT_EQ(b.at(r, 0), seen.back()) << "windows share only their boundary token";
      for (int64_t t = 1; t <= T; ++t) seen.push_back(b.at(r, t));
    }
  }
  EXPECT_EQ(seen, std::vector<int32_t>(val.begin(), val.begin() + static_cast<std::ptrdiff_t>(seen.size())));
  EXPECT_LT(val.size() - seen.size(), static_cast<size_t>(T)) << "only a remainder shorter than a window is left";
  const auto two = corpus.val_batches(B, T, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].tokens, all[1].tokens);
  EXPECT_TRUE(corpus.val_batches(B, T, 0).empty());
  EXPECT_TRUE(corpus.val_batches(B, static_cast<int64_t>(val.size()), 10).empty()) << "no full window";
  EXPECT_EQ(data::target_counts(all, tok.vocab_size()).size(), static_cast<size_t>(tok.vocab_size()));
  double targets = 0;
  for (double c : data::target_counts(all, tok.vocab_size())) targets += c;
  EXPECT_EQ(targets, static_cast<double>(seen.size() - 1));
  EXPECT_TRUE(Corpus(path, tok, 0.0).val_batches(B, T, 5).empty()) << "val_fraction 0: no validation part";
}

TEST(Corpus, ChunkedScansMatchTheWholeText) {
  const std::string text = repeat(kText, 50) + "ä¸";  // ends in a truncated character
  const std::string path = write("big.txt", text);
  for (const CharTokenizer& tok : {CharTokenizer::byte_level(), CharTokenizer::char_level_from_file(path, 0, 5)}) {
    const Corpus small(path, tok, 0.05, 5), large(path, tok, 0.05);
    ASSERT_GT(small.train_bytes(), 1000) << "many chunks";
    std::vector<double> expect(static_cast<size_t>(tok.vocab_size()), 0.0);
    for (int32_t id : tok.encode_ids(text.substr(0, static_cast<size_t>(small.train_bytes())))) ++expect[id];
    EXPECT_EQ(small.train_unigram_counts(), expect);
    EXPECT_EQ(large.train_unigram_counts(), expect);
    EXPECT_EQ(small.val_unigram_counts(), large.val_unigram_counts());
    const auto a = small.val_batches(2, 7, 100), b = large.val_batches(2, 7, 100);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(small.train_batch(9, 9, 4, 32).tokens, large.train_batch(9, 9, 4, 32).tokens);
  }
}

TEST(Corpus, Errors) {
  const CharTokenizer tok = CharTokenizer::byte_level();
  const std::string missing = temp_dir() + "no_corpus.txt";
  expect_io_error([&] { Corpus c(missing, tok); }, missing, "cannot open");
  const std::string empty = write("empty.txt", "");
  expect_io_error([&] { Corpus c(empty, tok); }, empty, "empty file");
  const std::string tiny = write("tiny.txt", "abc");
  expect_io_error([&] { Corpus c(tiny, tok, 0.05); }, tiny, "validation part is empty");
  expect_io_error([&] { Corpus c(tiny, tok, 0.9); }, tiny, "training part is empty");
  expect_io_error([&] { Corpus c(temp_dir(), tok, 0.05); }, temp_dir(), "not a regular file");
  EXPECT_THROW(Corpus(tiny, tok, 1.0), std::invalid_argument);
  EXPECT_THROW(Corpus(tiny, tok, -0.1), std::invalid_argument);
  const Corpus c(tiny, tok, 0.0);
  EXPECT_EQ(c.train_bytes(), 3);
  EXPECT_THROW(c.train_batch(0, 0, 0, 2), std::invalid_argument);
  EXPECT_THROW(c.train_batch(0, 0, 1, 0), std::invalid_argument);
  EXPECT_THROW(c.val_batches(1, 1, -1), std::invalid_argument);
  expect_io_error([&] { c.train_batch(0, 0, 1, 3); }, tiny, "too small for one window");
}

TEST(Corpus, UnigramCrossEntropy) {
  // Add-one smoothing over V = 3: p = (3+1, 1+1, 0+1) / 7.
  const double h = data::unigram_cross_entropy({3, 1, 0}, {1, 1, 2});
  EXPECT_NEAR(h, -(std::log(4.0 / 7) + std::log(2.0 / 7) + 2 * std::log(1.0 / 7)) / 4, 1e-12);
  EXPECT_NEAR(data::unigram_cross_entropy({0, 0, 0, 0}, {1, 2, 3, 4}), std::log(4.0), 1e-12);
  EXPECT_THROW(data::unigram_cross_entropy({1, 2}, {1}), std::invalid_argument);
  EXPECT_THROW(data::unigram_cross_entropy({1, 2}, {0, 0}), std::invalid_argument);
  EXPECT_THROW(data::unigram_cross_entropy({-1, 2}, {1, 0}), std::invalid_argument);
  // On a real corpus: the baseline lies between 0 and log(V).
  const std::string path = write("ce.txt", repeat(kText, 20));
  const Corpus corpus(path, CharTokenizer::byte_level(), 0.1);
  const double ce = data::unigram_cross_entropy(corpus.train_unigram_counts(), corpus.val_unigram_counts());
  EXPECT_GT(ce, 1.0);
  EXPECT_LT(ce, std::log(261.0));
}

// TokenCorpus: pre-tokenised ids split by tokens, windows keyed by (seed, step) inside the training
// part with their word starts, validation tiling as Corpus's, and its errors.
TEST(TokenCorpus, WindowsSplitAndWordStarts) {
  std::vector<int32_t> ids(1000);
  std::vector<uint8_t> starts(1000);
  for (int i = 0; i < 1000; ++i) {
    ids[i] = 5 + i % 50;
    starts[i] = i % 3 == 0;
  }
  const data::TokenCorpus c(ids, starts, 55, 0.1, "toy");
  EXPECT_EQ(c.train_tokens(), 900);
  EXPECT_EQ(c.val_tokens(), 100);
  const auto b = c.train_batch(1, 3, 8, 16);
  ASSERT_EQ(b.word_start.size(), b.tokens.size());
  for (int64_t r = 0; r < 8; ++r) {
    // Recover the start from the first id (ids cycle with period 50) and check the whole row.
    const auto first = std::find(ids.begin(), ids.end(), b.at(r, 0)) - ids.begin();
    bool found = false;
    for (int64_t s0 = first; s0 + 17 <= 900 && !found; s0 += 50) {
      found = std::equal(b.tokens.begin() + r * 17, b.tokens.begin() + (r + 1) * 17, ids.begin() + s0) &&
              std::equal(b.word_start.begin() + r * 17, b.word_start.begin() + (r + 1) * 17, starts.begin() + s0);
    }
    EXPECT_TRUE(found) << "row " << r;
  }
  EXPECT_EQ(c.train_batch(1, 3, 8, 16).tokens, b.tokens);
  EXPECT_NE(c.train_batch(1, 4, 8, 16).tokens, b.tokens);
  const auto val = c.val_batches(4, 16, 100);
  ASSERT_EQ(val.size(), 2u);  // (100 - 1) / 16 = 6 windows: 4 + 2
  EXPECT_EQ(val[1].B, 2);
  EXPECT_EQ(val[0].at(1, 0), ids[900 + 16]);
  EXPECT_EQ(c.val_batches(4, 16, 1).size(), 1u);
  const auto counts = c.train_unigram_counts();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0.0), 900.0);
  EXPECT_THROW(data::TokenCorpus({5, 99}, {}, 55, 0, "bad"), std::invalid_argument);
  EXPECT_THROW(data::TokenCorpus({5, 6}, {1}, 55, 0, "bad"), std::invalid_argument);
  EXPECT_THROW(data::TokenCorpus({5, 6}, {}, 55, 0.1, "short"), base::Error);
  EXPECT_THROW(data::TokenCorpus({5, 6}, {}, 55, 0, "short").train_batch(1, 0, 1, 4), base::Error);
}

}  // namespace
