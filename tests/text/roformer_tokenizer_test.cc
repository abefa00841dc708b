// The HF RoFormerTokenizer port (src/text): every case of the roformer-hf fixture's
// tokenizer/cases.json (RoFormerTokenizer tokens, ids and jieba words; BertTokenizer tokens and ids),
// then unit tests of each stage: WordPiece greedy matching and the 100-character limit, accents,
// CJK splitting, punctuation, control characters, jieba's DAG segmentation on a small dictionary,
// special tokens, pairs with truncation and padding, the errors for bad vocab, config and
// dictionary files, and each token's offsets in the original text (HfOffsets). Needs jieba's
// dict.txt (Debian python3-jieba, or $ROFORMER_JIEBA_DICT).
#include <gtest/gtest.h>

#include "temp_files.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "io/safetensors.h"  // io::Error
#include "text/basic_tokenizer.h"
#include "text/jieba.h"
#include "text/roformer_tokenizer.h"
#include "text/wordpiece.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Strings = std::vector<std::string>;
using Ids = std::vector<int32_t>;
using namespace text;

const std::string kDir = std::string(ROFORMER_FIXTURES) + "/tokenizer";

const RoFormerTokenizer& roformer() {
  static const RoFormerTokenizer t = RoFormerTokenizer::load(kDir);
  return t;
}
const RoFormerTokenizer& bert() {
  static const RoFormerTokenizer t = RoFormerTokenizer::load(kDir, LoadOptions{"", false});
  return t;
}

using test_files::temp_dir;
using test_files::write;

template <class F>
void expect_io_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no io::Error (expected '" << fragments.front() << "')";
  } catch (const io::Error& e) {
    for (const std::string& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
  }
}

// ---- the fixture cases ----

TEST(HfTokenizerCases, EveryCaseMatchesRoFormerAndBertTokenizer) {
  std::ifstream in(kDir + "/cases.json");
  ASSERT_TRUE(in) << kDir;
  const json cases = json::parse(in);
  ASSERT_EQ(cases.size(), 31u);
  int passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string text = c["text"];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + text);
    const Strings tokens = c["tokens"].get<Strings>();
    const Ids ids = c["input_ids"].get<Ids>();
    EXPECT_EQ(roformer().jieba_words(text), c["jieba_words"].get<Strings>());
    EXPECT_EQ(roformer().tokenize(text), tokens);
    const Encoding e = roformer().encode(text);
    EXPECT_EQ(e.input_ids, ids);
    Strings with_specials = {"[CLS]"};
    with_specials.insert(with_specials.end(), tokens.begin(), tokens.end());
    with_specials.push_back("[SEP]");
    EXPECT_EQ(e.tokens, with_specials);
    EXPECT_EQ(e.attention_mask, Ids(ids.size(), 1));
    EXPECT_EQ(e.token_type_ids, Ids(ids.size(), 0));
    EXPECT_EQ(bert().tokenize(text), c["bert_tokens"].get<Strings>());
    EXPECT_EQ(bert().encode(text).input_ids, c["bert_input_ids"].get<Ids>());
    passed += !::testing::Test::HasFailure();
  }
  EXPECT_EQ(passed, 31);
}

TEST(HfTokenizerCases, ConfigAndSpecialTokensLoad) {
  const RoFormerTokenizer& t = roformer();
  EXPECT_TRUE(t.config().use_jieba);
  EXPECT_TRUE(t.config().do_lower_case);
  EXPECT_FALSE(t.config().strip_accents.has_value());
  EXPECT_EQ(t.config().model_max_length, -1);  // 1e30: none
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 1);
  EXPECT_EQ(t.cls_id(), 2);
  EXPECT_EQ(t.sep_id(), 3);
  EXPECT_EQ(t.mask_id(), 4);
  EXPECT_EQ(t.size(), 129);
  EXPECT_EQ(t.vocab().lines(), 129);
  EXPECT_EQ(t.id_to_token(98), "今");
  EXPECT_EQ(t.token_to_id("not in the vocabulary"), 1);
  EXPECT_EQ(roformer().encode("你好").to_json(), R"({"tokens":["[CLS]","你","好","[SEP]"],"input_ids":[2,110,103,3]})");
}

// ---- BasicTokenizer ----

Strings basic(const std::string& text, BasicTokenizerOptions o = {}) { return BasicTokenizer(o).tokenize(text); }

TEST(HfBasicTokenizer, LowerCasesAndStripsAccents) {
  EXPECT_EQ(basic("Café DÉJÀ naïve"), (Strings{"cafe", "deja", "naive"}));
  EXPECT_EQ(basic("cafe\u0301"), (Strings{"cafe"}));  // decomposed input
  BasicTokenizerOptions keep;
  keep.do_lower_case = false;  // strip_accents None follows lower-casing: nothing changes
  EXPECT_EQ(basic("Café", keep), (Strings{"Café"}));
  keep.strip_accents = true;
  EXPECT_EQ(basic("Café", keep), (Strings{"Cafe"}));
  BasicTokenizerOptions lower_only;
  lower_only.strip_accents = false;
  EXPECT_EQ(basic("CAFÉ", lower_only), (Strings{"café"}));
  // Python's full lower-casing: İ → i + U+0307 (then stripped as a mark); Σ → σ per character.
  EXPECT_EQ(py_lower(U"İΣ"), std::u32string(U"i\u0307σ"));
  EXPECT_EQ(basic("İSTANBUL ΟΔΟΣ"), (Strings{"istanbul", "οδοσ"}));
  EXPECT_EQ(basic("한"), (Strings{"\u1112\u1161\u11ab"}));  // NFD splits Hangul into jamo (not marks)
}

TEST(HfBasicTokenizer, SplitsCjkIdeographsOnly) {
  EXPECT_EQ(basic("中文abc"), (Strings{"中", "文", "abc"}));
  EXPECT_EQ(basic("日本語のテキスト"), (Strings{"日", "本", "語", "のテキスト"}));  // kana is not CJK
  // Extension B, and a compatibility ideograph (NFC maps U+F900 to U+8C48).
  EXPECT_EQ(basic("\U00020000x\uF900"), (Strings{"\U00020000", "x", "\u8C48"}));
  BasicTokenizerOptions off;
  off.tokenize_chinese_chars = false;
  EXPECT_EQ(basic("中文abc", off), (Strings{"中文abc"}));
}

TEST(HfBasicTokenizer, SplitsPunctuation) {
  EXPECT_EQ(basic("don't stop-now!"), (Strings{"don", "'", "t", "stop", "-", "now", "!"}));
  EXPECT_EQ(basic("a$b^c`d~e"), (Strings{"a", "$", "b", "^", "c", "`", "d", "~", "e"}));  // ASCII symbols too
  EXPECT_EQ(basic("¿qué?「引用」—x"), (Strings{"¿", "que", "?", "「", "引", "用", "」", "—", "x"}));  // Unicode P*
  EXPECT_EQ(basic("a≈b+c"), (Strings{"a≈b", "+", "c"}));  // Sm: only the ASCII one splits
  BasicTokenizerOptions keep;
  keep.do_split_on_punc = false;
  EXPECT_EQ(basic("don't", keep), (Strings{"don't"}));
  keep.never_split = {"[foo]"};
  keep.do_split_on_punc = true;
  // As HF: the punctuation split checks never_split again after lower-casing, so [Foo] stays whole.
  EXPECT_EQ(basic("x [foo] [Foo] [bar]", keep), (Strings{"x", "[foo]", "[foo]", "[", "bar", "]"}));
}

TEST(HfBasicTokenizer, CleansControlCharactersAndWhitespace) {
  EXPECT_EQ(basic(std::string("a\0b", 3) + "\x01" "c\u200bd\uFFFDe"), (Strings{"abcde"}));
  EXPECT_EQ(basic("a\tb\nc\rd\u00a0e\u3000f"), (Strings{"a", "b", "c", "d", "e", "f"}));
  EXPECT_EQ(basic("a\u2028b"), (Strings{"a", "b"}));  // Zl: kept by cleaning, split by Python's str.split
  EXPECT_EQ(basic("a\xff\xfe" "b\xe4\xb8"), (Strings{"ab"}));  // invalid UTF-8 → U+FFFD → dropped
  EXPECT_EQ(basic(" \t\n"), Strings{});
  EXPECT_EQ(base::utf8_decode("\xe4\xb8\x41\xf0\x9f\x98"), std::u32string(U"\uFFFDA\uFFFD"));  // maximal subparts
}

// ---- WordPiece ----

TEST(HfWordPiece, GreedyLongestMatchFirst) {
  auto v = std::make_shared<const Vocab>(
      Vocab::from_tokens({"[UNK]", "un", "##aff", "##able", "a", "ab", "##bc", "##c", "##b", "é", "##é"}));
  const WordPiece wp(v);
  EXPECT_EQ(wp.tokenize("unaffable"), (Strings{"un", "##aff", "##able"}));
  EXPECT_EQ(wp.tokenize("abc"), (Strings{"ab", "##c"}));        // not a ##bc: the longest first piece wins
  EXPECT_EQ(wp.tokenize("abx un"), (Strings{"[UNK]", "un"}));   // an unmatched rest makes the word [UNK]
  EXPECT_EQ(wp.tokenize("  "), Strings{});
  std::string hundred, hundred_one;
  for (int i = 0; i < 100; ++i) hundred += "é";  // 100 code points, 200 bytes: still split
  hundred_one = hundred + "é";
  const Strings pieces = wp.tokenize(hundred);
  ASSERT_EQ(pieces.size(), 100u);
  EXPECT_EQ(pieces[0], "é");
  EXPECT_EQ(pieces[99], "##é");
  EXPECT_EQ(wp.tokenize(hundred_one), (Strings{"[UNK]"}));
  EXPECT_EQ(WordPiece(v, "[UNK]", 3).tokenize("unaff"), (Strings{"[UNK]"}));
  // The fixture: a 120-letter word is [UNK] through the whole pipeline.
  EXPECT_EQ(roformer().tokenize(std::string(101, 'a')), (Strings{"[UNK]"}));
  EXPECT_EQ(roformer().tokenize(std::string(100, 'a')).size(), 100u);  // a ##a ... (jieba keeps it one word)
}

// ---- vocab.txt ----

TEST(HfVocab, ReadsLinesAsPythonDoes) {
  const Vocab v = Vocab::from_text("\xef\xbb\xbf[PAD]\r\nb\rc\n\n d \nb\ne");
  ASSERT_EQ(v.lines(), 7);
  EXPECT_EQ(v.token(0), "\ufeff[PAD]");  // a BOM stays in the first token, as HF
  EXPECT_EQ(v.find("[PAD]"), -1);
  EXPECT_EQ(v.find("c"), 2);
  EXPECT_EQ(v.find(""), 3);             // an empty line is a token
  EXPECT_EQ(v.find(" d "), 4);          // spaces kept
  EXPECT_EQ(v.find("b"), 5);            // a duplicate: the last line's id
  EXPECT_EQ(v.find("e"), 6);            // no final newline
  EXPECT_EQ(v.size(), 6);
  EXPECT_EQ(Vocab::from_text("a\n").lines(), 1);
  EXPECT_EQ(Vocab::from_text("").lines(), 0);
}

TEST(HfVocab, BadFilesGiveIoErrors) {
  const std::string missing = temp_dir() + "missing/vocab.txt";
  expect_io_error([&] { Vocab::load(missing); }, {missing, "cannot open"});
  expect_io_error([&] { Vocab::load(temp_dir()); }, {temp_dir(), "directory"});
  const std::string bad = write("bad_vocab.txt", "[PAD]\n[UNK]\nok\xff\n");
  expect_io_error([&] { Vocab::load(bad); }, {bad + ":3", "UTF-8"});
  expect_io_error([&] { RoFormerTokenizer::load(temp_dir() + "missing"); }, {"vocab.txt"});
}

// ---- configuration ----

std::string model_dir(const std::string& name, const std::string& vocab, const std::string& config,
                      const std::string& special = "") {
  write(name + "/vocab.txt", vocab);
  if (!config.empty()) write(name + "/tokenizer_config.json", config);
  if (!special.empty()) write(name + "/special_tokens_map.json", special);
  return temp_dir() + name;
}

TEST(HfTokenizerConfig, BadFilesGiveIoErrors) {
  const std::string v = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n";
  std::string d = model_dir("cfg_json", v, "{not json");
  expect_io_error([&] { RoFormerTokenizer::load(d); }, {"tokenizer_config.json", "JSON"});
  d = model_dir("cfg_type", v, R"({"do_lower_case": "yes"})");
  expect_io_error([&] { RoFormerTokenizer::load(d); }, {"tokenizer_config.json", "do_lower_case"});
  d = model_dir("cfg_class", v, R"({"tokenizer_class": "GPT2Tokenizer"})");
  expect_io_error([&] { RoFormerTokenizer::load(d); }, {"GPT2Tokenizer"});
  d = model_dir("cfg_special", v, "{}", R"({"mask_token": 3})");
  expect_io_error([&] { RoFormerTokenizer::load(d); }, {"special_tokens_map.json", "mask_token"});
}

TEST(HfTokenizerConfig, DefaultsOptionsAndMissingSpecialTokens) {
  // No tokenizer_config.json: RoFormerTokenizer defaults. [MASK] is not in vocab.txt: it gets the
  // id len(get_vocab()) = 5 distinct tokens (HF's _add_tokens), which here is also the id of the
  // duplicated "hello" (the last of its two lines): HF's collision, reproduced.
  const std::string d = model_dir("cfg_none", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nhello\n", "");
  const RoFormerTokenizer t = RoFormerTokenizer::load(d, LoadOptions{"", false});
  EXPECT_TRUE(t.config().do_lower_case);
  EXPECT_EQ(t.mask_id(), 5);
  EXPECT_EQ(t.size(), 6);
  EXPECT_EQ(t.token_to_id("hello"), 5);     // the last "hello" line
  EXPECT_EQ(t.id_to_token(4), "[UNK]");      // shadowed by the duplicate
  EXPECT_EQ(t.encode("Hello [MASK]").input_ids, (Ids{2, 5, 5, 3}));
  // No lower-casing, and a never_split word.
  const std::string d2 = model_dir("cfg_case", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nHello\nhello\n[x]\n",
                                   R"({"tokenizer_class": "BertTokenizer", "do_lower_case": false,
                                       "never_split": ["[x]"], "model_max_length": 4})");
  const RoFormerTokenizer t2 = RoFormerTokenizer::load(d2);
  EXPECT_FALSE(t2.config().use_jieba);
  EXPECT_EQ(t2.tokenize("Hello hello [x]"), (Strings{"Hello", "hello", "[x]"}));
  EncodeOptions o;
  o.truncation = Truncation::LongestFirst;  // max_length None → model_max_length 4
  EXPECT_EQ(t2.encode("Hello hello Hello", o).tokens, (Strings{"[CLS]", "Hello", "hello", "[SEP]"}));
}

TEST(HfTokenizerConfig, AddedTokensStripAndStayWhole) {
  const std::string d = model_dir(
      "cfg_added", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n",
      R"({"added_tokens_decoder": {"7": {"content": "<Extra>", "lstrip": true, "rstrip": true,
                                          "normalized": true, "special": false}}})",
      R"({"mask_token": {"content": "[MASK]", "lstrip": true, "rstrip": false, "normalized": false}})");
  const RoFormerTokenizer t = RoFormerTokenizer::load(d, LoadOptions{"", false});
  EXPECT_EQ(t.tokenize("a <Extra> b"), (Strings{"a", "<Extra>", "b"}));
  EXPECT_EQ(t.encode("a<Extra>b").input_ids, (Ids{2, 5, 7, 6, 3}));
  EXPECT_EQ(t.tokenize("A [MASK]"), (Strings{"a", "[MASK]"}));
  EXPECT_EQ(t.tokenize("[mask]"), (Strings{"[UNK]", "[UNK]", "[UNK]"}));  // lower-case: not the token
  EXPECT_EQ(t.id_to_token(7), "<Extra>");
}

// ---- cleaning through the whole pipeline: U+FFFD, NUL, controls, invalid UTF-8 ----
// The expected ids are transformers 4.40.2's slow RoFormerTokenizer (jieba) and BertTokenizer on
// bytes.decode("utf-8", errors="replace") of the same bytes, as tests/hf/tokenizer_diff.py compares.

template <size_t N>
std::string bytes(const char (&s)[N]) {  // a literal with its NULs
  return std::string(s, N - 1);
}

const char kMojibake[] = "caf\xc3\x83\xc2\xa9 \xef\xbf\xbd\xef\xbf\xbd \x01\x1b[31mhello\x7f\xc2\x85world";
const char kNulInChinese[] = "\xe4\xbb\x8a\xe5\xa4\xa9\xef\xbf\xbd\xe5\xa4\xa9\xe6\xb0\x94\x00\xe5\xbe\x88\xe5\xa5\xbd";
const char kSurrogateAndSpaces[] = "hello\xed\xa0\x80world \xe3\x80\x80 \xc2\xa0!";  // ED A0 80: three U+FFFD

TEST(HfTokenizerCleaning, ReplacementCharacterNulAndControlsAreDropped) {
  for (const RoFormerTokenizer* t : {&roformer(), &bert()}) {
    EXPECT_EQ(t->encode(bytes("Hello\xef\xbf\xbd world\x00!")).input_ids, (Ids{2, 65, 66, 5, 3}));
    EXPECT_EQ(t->encode(bytes("\xef\xbf\xbd")).input_ids, (Ids{2, 3}));
    EXPECT_EQ(t->encode(bytes("\x00\x01\x02\x1b\x7f\xc2\x85\xc2\x9f\xe2\x80\x8b")).input_ids, (Ids{2, 3}));
    EXPECT_EQ(t->encode(bytes("\xff\xfe\xed\xa0\x80\xf0\x9f\x98")).input_ids, (Ids{2, 3}));  // invalid bytes only
  }
  // RoFormer: jieba cuts words around the dropped characters before the BERT tokenizer sees them.
  EXPECT_EQ(roformer().encode(bytes(kMojibake)).input_ids, (Ids{2, 1, 21, 1, 1, 1, 66, 3}));
  EXPECT_EQ(bert().encode(bytes(kMojibake)).input_ids, (Ids{2, 1, 1, 1, 3}));
  EXPECT_EQ(roformer().encode(bytes(kNulInChinese)).input_ids, (Ids{2, 123, 124, 1, 103, 3}));
  EXPECT_EQ(bert().encode(bytes(kNulInChinese)).input_ids, (Ids{2, 98, 99, 99, 100, 1, 103, 3}));
  EXPECT_EQ(roformer().encode(bytes(kSurrogateAndSpaces)).input_ids, (Ids{2, 65, 66, 5, 3}));
  EXPECT_EQ(bert().encode(bytes(kSurrogateAndSpaces)).input_ids, (Ids{2, 1, 5, 3}));  // "helloworld": [UNK]
}

TEST(HfTokenizerCleaning, JiebaWordsInTheVocabularySkipCleaning) {
  // HF's RoFormerTokenizer._tokenize keeps a jieba word found in vocab.txt as it is, uncleaned: with
  // U+FFFD, " ", U+3000 and NUL in the vocabulary (ids 129-132) they become tokens in RoFormer mode
  // and stay dropped in BERT mode.
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string d = model_dir("clean_vocab", read(kDir + "/vocab.txt") + bytes("\xef\xbf\xbd\n \n\xe3\x80\x80\n\x00\n"),
                                  read(kDir + "/tokenizer_config.json"), read(kDir + "/special_tokens_map.json"));
  const RoFormerTokenizer r = RoFormerTokenizer::load(d), b = RoFormerTokenizer::load(d, LoadOptions{"", false});
  ASSERT_EQ(r.token_to_id("\xef\xbf\xbd"), 129);
  EXPECT_EQ(r.encode(bytes("Hello\xef\xbf\xbd world\x00!")).input_ids, (Ids{2, 65, 129, 130, 66, 132, 5, 3}));
  EXPECT_EQ(b.encode(bytes("Hello\xef\xbf\xbd world\x00!")).input_ids, (Ids{2, 65, 66, 5, 3}));
  EXPECT_EQ(r.encode(bytes(kMojibake)).input_ids, (Ids{2, 1, 21, 1, 130, 129, 129, 130, 1, 1, 66, 3}));
  EXPECT_EQ(r.encode(bytes(kNulInChinese)).input_ids, (Ids{2, 123, 129, 124, 132, 1, 103, 3}));
  // One U+FFFD per maximal invalid subpart, as Python's decoder: ED A0 80 is three.
  EXPECT_EQ(r.encode(bytes(kSurrogateAndSpaces)).input_ids, (Ids{2, 65, 129, 129, 129, 66, 130, 131, 130, 5, 3}));
  EXPECT_EQ(b.encode(bytes(kSurrogateAndSpaces)).input_ids, (Ids{2, 1, 5, 3}));
  EXPECT_EQ(r.encode(bytes("\xef\xbf\xbd")).input_ids, (Ids{2, 129, 3}));
  EXPECT_EQ(r.encode(bytes("\x00\x01\x02")).input_ids, (Ids{2, 132, 3}));
}

// ---- jieba ----

TEST(HfJieba, MaxProbabilityRouteOnASmallDictionary) {
  // total = 1000: 今天 (100) + 天气 (200) + 今天天气 (50) + 非常 (300) + 好 (300) + 天 (50).
  const std::string dict = write("dict_small.txt", "今天 100 t\n天气 200\n今天天气 50 n\n非常 300\n好 300 a\n天 50\n");
  const Jieba j(dict);
  EXPECT_FALSE(j.loaded());
  // 今天|天气 = log(100·200/1000²) < 今天天气 = log(50/1000): the whole word wins.
  EXPECT_EQ(j.cut("今天天气非常好"), (Strings{"今天天气", "非常", "好"}));
  EXPECT_TRUE(j.loaded());
  EXPECT_EQ(j.total(), 1000);
  EXPECT_EQ(j.frequency("今天天"), 0);  // a prefix
  EXPECT_EQ(j.frequency("气"), -1);
  EXPECT_EQ(j.cut("天天气"), (Strings{"天", "天气"}));
  // Non-word characters one by one ("\r\n" whole), ASCII letters/digits glued, . - _ inside a run.
  EXPECT_EQ(j.cut("ab 12\r\n非常!x-1.5好"), (Strings{"ab", " ", "12", "\r\n", "非常", "!", "x", "-", "1", ".", "5", "好"}));
  EXPECT_EQ(j.cut(""), Strings{});
}

TEST(HfJieba, DictionaryErrorsOnlyWhenNeeded) {
  const std::string missing = temp_dir() + "no_such_dict.txt";
  const Jieba j(missing);
  EXPECT_EQ(j.cut("😀 ！"), (Strings{"😀", " ", "！"}));  // no word characters: no dictionary needed
  expect_io_error([&] { j.cut("中文"); }, {missing, "python3-jieba", kJiebaDictEnv});
  const std::string bad = write("dict_bad.txt", "好 3\n坏\n");
  expect_io_error([&] { Jieba(bad).load(); }, {bad + ":2", "invalid jieba dictionary entry"});
  const std::string neg = write("dict_neg.txt", "好 -3\n");
  expect_io_error([&] { Jieba(neg).load(); }, {neg + ":1"});
  // Every prefix of a word is an entry: a 20,000-character word took a gigabyte. 256 characters pass.
  std::string longest, too_long;
  for (size_t i = 0; i < Jieba::kMaxWordChars; ++i) longest += "中";
  for (int i = 0; i < 20000; ++i) too_long += "中";
  EXPECT_EQ(Jieba(write("dict_256.txt", "好 3\n" + longest + " 1\n")).frequency(longest), 1);
  const std::string huge = write("dict_huge.txt", "好 3\n" + too_long + " 5 n\n");
  expect_io_error([&] { Jieba(huge).load(); }, {huge + ":2", "word of 20000 characters; at most 256"});

  // The tokenizer loads without the dictionary and fails only when segmenting word characters;
  // the BERT mode never needs it.
  const RoFormerTokenizer t = RoFormerTokenizer::load(kDir, LoadOptions{missing, std::nullopt});
  EXPECT_EQ(t.encode("😀 !").input_ids, (Ids{2, 1, 5, 3}));
  expect_io_error([&] { t.encode("hello"); }, {missing});
  EXPECT_EQ(RoFormerTokenizer::load(kDir, LoadOptions{missing, false}).encode("hello").input_ids, (Ids{2, 65, 3}));
}

// ---- pairs, truncation, padding ----

TEST(HfEncode, PairsHaveTokenTypes) {
  const Encoding e = roformer().encode_pair("hello world", "the quick fox");
  EXPECT_EQ(e.tokens, (Strings{"[CLS]", "hello", "world", "[SEP]", "the", "quick", "fox", "[SEP]"}));
  EXPECT_EQ(e.input_ids, (Ids{2, 65, 66, 3, 57, 58, 60, 3}));
  EXPECT_EQ(e.token_type_ids, (Ids{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(e.special_tokens_mask, (Ids{1, 0, 0, 1, 0, 0, 0, 1}));
  EncodeOptions raw;
  raw.add_special_tokens = false;
  EXPECT_EQ(roformer().encode_pair("hello", "world", raw).input_ids, (Ids{65, 66}));
  EXPECT_EQ(roformer().encode_pair("hello", "world", raw).token_type_ids, (Ids{0, 0}));
}

TEST(HfEncode, TruncationStrategiesFollowHf) {
  const std::string a = "hello world", b = "the quick brown fox";  // 2 and 4 tokens
  EncodeOptions o;
  o.truncation = Truncation::LongestFirst;
  o.max_length = 7;  // remove 2, both from the longer second text
  EXPECT_EQ(roformer().encode_pair(a, b, o).tokens, (Strings{"[CLS]", "hello", "world", "[SEP]", "the", "quick", "[SEP]"}));
  o.max_length = 5;  // remove 4: 2 make them equal, then 1 each
  EXPECT_EQ(roformer().encode_pair(a, b, o).tokens, (Strings{"[CLS]", "hello", "[SEP]", "the", "[SEP]"}));
  o.max_length = 6;  // remove 3: 2 from the second, then 3 // 2 ... second_remove 1 → the second again
  EXPECT_EQ(roformer().encode_pair(a, b, o).tokens, (Strings{"[CLS]", "hello", "world", "[SEP]", "the", "[SEP]"}));
  o.truncation = Truncation::OnlyFirst;
  o.max_length = 8;
  EXPECT_EQ(roformer().encode_pair(a, b, o).tokens,
            (Strings{"[CLS]", "hello", "[SEP]", "the", "quick", "brown", "fox", "[SEP]"}));
  o.max_length = 5;  // would empty the first text: HF logs an error and leaves both as they are
  EXPECT_EQ(roformer().encode_pair(a, b, o).size(), 9u);
  o.truncation = Truncation::OnlySecond;
  o.max_length = 6;
  EXPECT_EQ(roformer().encode_pair(a, b, o).tokens, (Strings{"[CLS]", "hello", "world", "[SEP]", "the", "[SEP]"}));
  o.max_length = 5;  // all 4 tokens of the second text would go: HF leaves it untouched
  EXPECT_EQ(roformer().encode_pair(a, b, o).size(), 9u);
  // A single text, from the right and from the left; max_length 0 means no truncation (HF).
  o.truncation = Truncation::LongestFirst;
  o.max_length = 4;
  EXPECT_EQ(roformer().encode(b, o).tokens, (Strings{"[CLS]", "the", "quick", "[SEP]"}));
  o.truncation_side = Side::Left;
  EXPECT_EQ(roformer().encode(b, o).tokens, (Strings{"[CLS]", "brown", "fox", "[SEP]"}));
  o.max_length = 0;
  EXPECT_EQ(roformer().encode(b, o).size(), 6u);
  o.max_length = -1;  // None, and the fixture has no model_max_length: no truncation
  EXPECT_EQ(roformer().encode(b, o).size(), 6u);
}

TEST(HfEncode, PaddingAndBatches) {
  EncodeOptions o;
  o.padding = Padding::Longest;
  const std::vector<Encoding> batch = roformer().encode_batch({"hello world", "你好", ""}, o);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].tokens, (Strings{"[CLS]", "hello", "world", "[SEP]"}));
  EXPECT_EQ(batch[1].input_ids, (Ids{2, 110, 103, 3}));
  EXPECT_EQ(batch[2].tokens, (Strings{"[CLS]", "[SEP]", "[PAD]", "[PAD]"}));
  EXPECT_EQ(batch[2].input_ids, (Ids{2, 3, 0, 0}));
  EXPECT_EQ(batch[2].attention_mask, (Ids{1, 1, 0, 0}));
  EXPECT_EQ(batch[2].special_tokens_mask, (Ids{1, 1, 1, 1}));
  const BatchArrays arr = to_arrays(batch);
  EXPECT_EQ(arr.B, 3);
  EXPECT_EQ(arr.T, 4);
  EXPECT_EQ(arr.input_ids, (std::vector<int64_t>{2, 65, 66, 3, 2, 110, 103, 3, 2, 3, 0, 0}));
  EXPECT_EQ(arr.attention_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_THROW(to_arrays(roformer().encode_batch({"hello", ""})), std::invalid_argument);

  o.padding = Padding::MaxLength;
  o.max_length = 6;
  o.padding_side = Side::Left;
  const Encoding left = roformer().encode_pair("hello", "world", o);
  EXPECT_EQ(left.input_ids, (Ids{0, 2, 65, 3, 66, 3}));
  EXPECT_EQ(left.token_type_ids, (Ids{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(left.attention_mask, (Ids{0, 1, 1, 1, 1, 1}));
  o.padding_side.reset();
  EXPECT_EQ(roformer().encode("the quick brown fox jumps", o).size(), 8u);  // longer: neither cut nor padded
  o.padding = Padding::Longest;
  o.pad_to_multiple_of = 8;
  EXPECT_EQ(roformer().encode("hello", o).input_ids, (Ids{2, 65, 3, 0, 0, 0, 0, 0}));
  o.truncation = Truncation::LongestFirst;  // HF: max_length must be a multiple then
  EXPECT_THROW(roformer().encode("hello", o), std::invalid_argument);
  o.padding = Padding::MaxLength;
  o.max_length = -1;  // no model_max_length: HF switches padding off
  o.truncation = Truncation::None;
  EXPECT_EQ(roformer().encode("hello", o).size(), 3u);
  EncodeOptions pair_batch;
  pair_batch.padding = Padding::Longest;
  const auto pairs = roformer().encode_pair_batch({{"hello", "world"}, {"你好", "the quick brown fox"}}, pair_batch);
  EXPECT_EQ(pairs[0].size(), pairs[1].size());
  EXPECT_EQ(pairs[0].token_type_ids, (Ids{0, 0, 0, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(pairs[1].token_type_ids, (Ids{0, 0, 0, 0, 1, 1, 1, 1, 1}));
}

// ---- offsets (Encoding::offsets): the expected values are transformers 4.40.2's BertTokenizerFast
// return_offsets_mapping on the same files where its tokens equal ours (tests/hf/offsets_vs_fast.py
// compares thousands of texts) ----

using Spans = std::vector<std::pair<int64_t, int64_t>>;

// The offsets of encode(text), [CLS] and [SEP] included.
Spans offsets(const RoFormerTokenizer& t, const std::string& text) {
  const Encoding e = t.encode(text);
  EXPECT_EQ(e.offsets.size(), e.size());
  return e.offsets;
}

// A BERT-mode tokenizer over a small vocabulary (uncased unless config says otherwise).
RoFormerTokenizer small(const std::string& name, const std::string& config = R"({"tokenizer_class": "BertTokenizer"})") {
  return RoFormerTokenizer::load(
      model_dir(name, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\ncaf\n##é\ne\n##x\ni\nhello\n##s\nworld\n", config));
}

TEST(HfOffsets, AsciiPunctuationAndUpperCase) {
  for (const RoFormerTokenizer* t : {&roformer(), &bert()}) {
    EXPECT_EQ(offsets(*t, "Hello, world!"), (Spans{{0, 0}, {0, 5}, {5, 6}, {7, 12}, {12, 13}, {0, 0}}));
    EXPECT_EQ(offsets(*t, "HELLO World hElLo"), (Spans{{0, 0}, {0, 5}, {6, 11}, {12, 17}, {0, 0}}));
    EXPECT_EQ(offsets(*t, "  he said:\t\"yes\"  "),
              (Spans{{0, 0}, {2, 4}, {5, 9}, {9, 10}, {11, 12}, {12, 15}, {15, 16}, {0, 0}}));
  }
  // WordPiece pieces of one word: run ##n ##ing, jump ##ed; the [CLS]/[SEP] pair is (0, 0).
  EXPECT_EQ(bert().encode("running jumped").tokens, (Strings{"[CLS]", "run", "##n", "##ing", "jump", "##ed", "[SEP]"}));
  EXPECT_EQ(offsets(bert(), "running jumped"), (Spans{{0, 0}, {0, 3}, {3, 4}, {4, 7}, {8, 12}, {12, 14}, {0, 0}}));
}

TEST(HfOffsets, AccentsAndCaseMappings) {
  // é → e spans its one character; "cafe" + U+0301: the stripped mark ends no token (HF's fast
  // BertNormalizer drops it after the e it follows, which keeps its own span).
  EXPECT_EQ(offsets(bert(), "Café"), (Spans{{0, 0}, {0, 4}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), "cafe\u0301"), (Spans{{0, 0}, {0, 4}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), "Café déjà vu"), (Spans{{0, 0}, {0, 4}, {5, 9}, {10, 12}, {0, 0}}));  // cafe [UNK] [UNK]
  const RoFormerTokenizer uncased = small("off_uncased");
  // e + U+0301 then x: e spans the e, ##x the x; É decomposed: e; İ lower-cases to i + U+0307, both from İ.
  EXPECT_EQ(uncased.encode("e\u0301x E\u0301 \u0130x").tokens, (Strings{"[CLS]", "e", "##x", "e", "i", "##x", "[SEP]"}));
  EXPECT_EQ(offsets(uncased, "e\u0301x E\u0301 \u0130x"), (Spans{{0, 0}, {0, 1}, {2, 3}, {4, 5}, {7, 8}, {8, 9}, {0, 0}}));
  // Cased: NFC composes e + U+0301 into é, which spans both (the fast tokenizer has no NFC: [UNK] there).
  const RoFormerTokenizer cased = small("off_cased", R"({"tokenizer_class": "BertTokenizer", "do_lower_case": false})");
  EXPECT_EQ(cased.encode("caf\u00e9 cafe\u0301").tokens, (Strings{"[CLS]", "caf", "##é", "caf", "##é", "[SEP]"}));
  EXPECT_EQ(offsets(cased, "caf\u00e9 cafe\u0301"), (Spans{{0, 0}, {0, 3}, {3, 4}, {5, 8}, {8, 10}, {0, 0}}));
}

TEST(HfOffsets, CjkJiebaWordsAndControls) {
  // RoFormer: jieba's word 非常 is a token, 今天天气 (not in vocab.txt) one ideograph each; BERT: all one each.
  EXPECT_EQ(offsets(roformer(), "今天天气非常好。"),
            (Spans{{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 6}, {6, 7}, {7, 8}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), "今天天气非常好。"),
            (Spans{{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), "I love 中国 and 学生们"),
            (Spans{{0, 0}, {0, 1}, {2, 6}, {7, 8}, {8, 9}, {10, 13}, {14, 15}, {15, 16}, {16, 17}, {0, 0}}));
  // Dropped characters (NUL, ZWSP, BEL) inside a word: the [UNK] word spans them; at its ends: not.
  EXPECT_EQ(offsets(bert(), bytes("\x00hello\xe2\x80\x8bworld")), (Spans{{0, 0}, {1, 12}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), bytes("hello\x00 world\x07!")), (Spans{{0, 0}, {0, 5}, {7, 12}, {13, 14}, {0, 0}}));
  // Invalid UTF-8 counts as Python's errors="replace" does: each maximal invalid subpart is one code point.
  EXPECT_EQ(offsets(bert(), "\xed\xa0\x80 hello \xff world"), (Spans{{0, 0}, {4, 9}, {12, 17}, {0, 0}}));
}

TEST(HfOffsets, UnknownWordsSpanTheWholeWord) {
  EXPECT_EQ(bert().encode("unbelievable xyzzy").tokens, (Strings{"[CLS]", "[UNK]", "[UNK]", "[SEP]"}));
  EXPECT_EQ(offsets(bert(), "unbelievable xyzzy"), (Spans{{0, 0}, {0, 12}, {13, 18}, {0, 0}}));
  EXPECT_EQ(offsets(bert(), " " + std::string(101, 'a')), (Spans{{0, 0}, {1, 102}, {0, 0}}));  // over 100 characters
}

TEST(HfOffsets, AddedAndSpecialTokens) {
  EXPECT_EQ(offsets(roformer(), "hello [MASK] world[SEP]ok"),
            (Spans{{0, 0}, {0, 5}, {6, 12}, {13, 18}, {18, 23}, {23, 25}, {0, 0}}));
  // An lstrip/rstrip token covers the whitespace it eats, as in HF's fast tokenizers.
  const std::string d = model_dir(
      "off_added", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n",
      R"({"tokenizer_class": "BertTokenizer", "added_tokens_decoder": {"7": {"content": "<Extra>", "lstrip": true,
          "rstrip": true, "normalized": true, "special": false}}})");
  const RoFormerTokenizer t = RoFormerTokenizer::load(d);
  EXPECT_EQ(offsets(t, "a <Extra> b"), (Spans{{0, 0}, {0, 1}, {1, 10}, {10, 11}, {0, 0}}));
  EXPECT_EQ(offsets(t, "a<Extra>b"), (Spans{{0, 0}, {0, 1}, {1, 8}, {8, 9}, {0, 0}}));
}

TEST(HfOffsets, PairsTruncationAndPadding) {
  const std::string a = "hello world", b = "the quick brown fox";
  EncodeOptions o;
  o.truncation = Truncation::OnlySecond;
  o.max_length = 6;  // a pair's second text indexes into itself
  Encoding e = roformer().encode_pair(a, b, o);
  EXPECT_EQ(e.tokens, (Strings{"[CLS]", "hello", "world", "[SEP]", "the", "[SEP]"}));
  EXPECT_EQ(e.offsets, (Spans{{0, 0}, {0, 5}, {6, 11}, {0, 0}, {0, 3}, {0, 0}}));
  o.truncation = Truncation::LongestFirst;
  o.max_length = 5;
  EXPECT_EQ(roformer().encode_pair(a, b, o).offsets, (Spans{{0, 0}, {0, 5}, {0, 0}, {0, 3}, {0, 0}}));
  o.max_length = 4;
  o.truncation_side = Side::Left;  // the kept tokens keep their offsets
  e = roformer().encode(b, o);
  EXPECT_EQ(e.tokens, (Strings{"[CLS]", "brown", "fox", "[SEP]"}));
  EXPECT_EQ(e.offsets, (Spans{{0, 0}, {10, 15}, {16, 19}, {0, 0}}));
  EncodeOptions pad;
  pad.padding = Padding::MaxLength;
  pad.max_length = 7;
  pad.padding_side = Side::Left;
  EXPECT_EQ(roformer().encode_pair("hello", "world", pad).offsets,
            (Spans{{0, 0}, {0, 0}, {0, 0}, {0, 5}, {0, 0}, {0, 5}, {0, 0}}));
  pad.padding = Padding::Longest;
  pad.padding_side = Side::Right;
  const std::vector<Encoding> batch = roformer().encode_batch({"hello world", "", "the quick brown fox"}, pad);
  EXPECT_EQ(batch[0].offsets, (Spans{{0, 0}, {0, 5}, {6, 11}, {0, 0}, {0, 0}, {0, 0}}));
  EXPECT_EQ(batch[1].offsets, Spans(6, {0, 0}));
  EXPECT_EQ(batch[2].offsets, (Spans{{0, 0}, {0, 3}, {4, 9}, {10, 15}, {16, 19}, {0, 0}}));
  EncodeOptions raw;
  raw.add_special_tokens = false;
  EXPECT_EQ(roformer().encode_pair("hello", "world", raw).offsets, (Spans{{0, 5}, {0, 5}}));
}

TEST(HfOffsets, JsonOnlyWhenAskedAndBytesSliceTheText) {
  const Encoding e = roformer().encode("你好 hello");
  EXPECT_EQ(e.to_json(), R"({"tokens":["[CLS]","你","好","hello","[SEP]"],"input_ids":[2,110,103,65,3]})");
  EXPECT_EQ(e.to_json(false, true),
            R"({"tokens":["[CLS]","你","好","hello","[SEP]"],"input_ids":[2,110,103,65,3],"offsets":[[0,0],[0,1],[1,2],[3,8],[0,0]]})");
  // Code points to bytes: each token's text in the original UTF-8 (invalid bytes one code point each).
  const std::string text = "Ça \xff 天气 CAFÉ";
  const std::vector<size_t> at = base::utf8_byte_offsets(text);
  ASSERT_EQ(at.size(), base::utf8_decode(text).size() + 1);
  Strings pieces;
  for (const auto& [start, end] : bert().encode(text).offsets)
    if (end > start) pieces.push_back(text.substr(at[static_cast<size_t>(start)], at[static_cast<size_t>(end)] - at[static_cast<size_t>(start)]));
  EXPECT_EQ(pieces, (Strings{"Ç", "a", "天", "气", "CAFÉ"}));  // c ##a: Ç stripped to c
  EXPECT_EQ(base::utf8_byte_offset(text, 7), at[7]);
  EXPECT_EQ(base::utf8_byte_offset(text, 12), text.size());
  EXPECT_THROW(base::utf8_byte_offset(text, 13), std::out_of_range);
  EXPECT_THROW(base::utf8_byte_offset(text, -1), std::out_of_range);
}

}  // namespace

// A directory with vocab.txt alone (the case1 fixture, as transformers' save_pretrained of a model
// without its tokenizer leaves it) saves tokenizer_config.json and special_tokens_map.json: the
// defaults transformers assumed, so a fine-tuned best/ says how it tokenises. They load back to the
// same tokens.
TEST(RoFormerTokenizerFiles, AVocabularyAloneSavesItsConfiguration) {
  const std::string src = std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic";
  ASSERT_FALSE(fs::exists(src + "/tokenizer_config.json"));
  const RoFormerTokenizer t = RoFormerTokenizer::load(src, LoadOptions{"", false});
  const std::string out = temp_dir() + "saved_vocab_alone";
  fs::create_directories(out);
  t.save(out);
  for (const char* name : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_TRUE(fs::exists(out + "/" + name)) << name;
  }
  const json config = json::parse(std::ifstream(out + "/tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "RoFormerTokenizer");
  EXPECT_EQ(config["do_lower_case"], true);
  const RoFormerTokenizer back = RoFormerTokenizer::load(out, LoadOptions{"", false});
  for (const char* text : {"Hello World!", "the quick brown fox", "今天天气非常好"}) {
    EXPECT_EQ(back.encode(text).input_ids, t.encode(text).input_ids) << text;
  }
}

// The tokenizers library's WordPiece decoder, as transformers' pipelines show words (its values, from
// tokenizers 0.19.1's decoders.WordPiece(prefix="##").decode).
TEST(WordPieceDecoder, JoinsPiecesAndCleansAsTheFastTokenizers) {
  EXPECT_EQ(wordpiece_decoder_join({"fox", ".", "jumps", ",", "##ing", "!"}), "fox. jumps,ing!");
  EXPECT_EQ(wordpiece_decoder_join({"##ing", "x"}), "##ing x");  // the first token keeps its prefix
  EXPECT_EQ(wordpiece_decoder_join({"i", "do", "not", "know", "'", "s"}), "i do not know ' s");  // per token
  EXPECT_EQ(wordpiece_decoder_join({}), "");
}
