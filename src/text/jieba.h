// jieba's dictionary-based Chinese word segmentation, `jieba.cut(text, HMM=False)` of jieba 0.42.1
// (the pre-tokeniser of HF's RoFormerTokenizer), reading jieba's own dict.txt:
//  * the text is split into maximal runs of "word characters" (re_han_default: U+4E00–U+9FD5, ASCII
//    letters and digits, + # & . _ % -) and other runs;
//  * an other run yields each character as a word, except that "\r\n" is one word;
//  * a word-character run is segmented by __cut_DAG_NO_HMM: the DAG of dictionary words starting
//    at each position (prefixes come from the prefix dictionary, words need frequency > 0), the
//    route maximising Σ log(freq or 1) − log(total) by dynamic programming from the right (ties →
//    the longer word), then consecutive single ASCII letters/digits are glued back together.
// dict.txt lines are "word freq [tag]"; freq of a word listed twice is its last value while the
// total counts both, as in jieba's gen_pfdict. The arithmetic is the same double-precision libm
// log, sums and tie-breaks as Python, so the segmentation is identical. (transformers normally calls
// rjieba, the Rust port, which also counts CJK Extension A/B+, U+9FD6–U+9FFF and compatibility
// ideographs as word characters; for text with those, this follows Python jieba.)
//
// The dictionary (5 MB, ~350k words) is read lazily, on the first cut() that meets a word-character
// run, so a tokenizer can be built without it and text without such runs never needs it.
// Thread-safe: cut() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace text {

// The environment variable naming the dictionary, and Debian python3-jieba's dict.txt.
inline constexpr const char* kJiebaDictEnv = "ROFORMER_JIEBA_DICT";
inline constexpr const char* kDebianJiebaDict = "/usr/lib/python3/dist-packages/jieba/dict.txt";
// $ROFORMER_JIEBA_DICT when set and non-empty, else kDebianJiebaDict.
std::string default_jieba_dict_path();

// re_han_default's character class.
bool is_jieba_word_char(char32_t c);

class Jieba {
 public:
  // Remembers the path; nothing is read yet.
  explicit Jieba(std::string dict_path = default_jieba_dict_path());
  Jieba(const Jieba&) = delete;
  Jieba& operator=(const Jieba&) = delete;
  ~Jieba();

  // Reads the dictionary unless already read. Throws base::Error naming the file: missing or
  // unreadable (with a hint to install python3-jieba or set ROFORMER_JIEBA_DICT), or
  // "<path>:<line>: invalid dictionary entry" (jieba's rule: "word freq" separated by one space;
  // we also reject negative or overflowing frequencies, and words over kMaxWordChars characters).
  void load() const;
  // The longest dictionary word taken, in code points: every prefix of a word is an entry, so a word's
  // memory grows with its length squared.
  static constexpr size_t kMaxWordChars = 256;
  bool loaded() const;
  const std::string& dict_path() const { return path_; }

  // jieba.cut(text, HMM=False): the words, in order; their concatenation is the text (invalid UTF-8
  // read as U+FFFD). Loads the dictionary if a word-character run is met (base::Error as load()).
  std::vector<std::string> cut(std::string_view utf8) const;
  std::vector<std::u32string> cut(std::u32string_view text) const;

  // The prefix dictionary: a word's frequency, 0 for a prefix that is not itself a word, -1 when
  // absent; and the total frequency. Both load the dictionary.
  int64_t frequency(std::string_view word) const;
  int64_t total() const;
  // Number of entries (words and prefixes).
  size_t size() const;

 private:
  struct Dict;
  std::shared_ptr<const Dict> dict() const;  // loads on first use
  void cut_block(const Dict& d, std::u32string_view block, std::vector<std::u32string>* out) const;

  std::string path_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Dict> dict_;
};

}  // namespace text
