// WordPiece vocabulary learning (see wordpiece_trainer.h). The merge loop keeps, per symbol pair, its
// weighted count and the words it occurs in, and a max-heap of (count, pair) entries that are checked
// against the current count when popped (stale entries are skipped); a merge rewrites only the words
// holding the pair, so the cost follows the words touched, not the corpus.
#include "wordpiece_trainer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/utf8.h"
#include "text/basic_tokenizer.h"

namespace text {
namespace {

using Pair = uint64_t;  // (left symbol id << 32) | right symbol id
Pair pair_of(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

struct Entry {
  int64_t count;
  Pair pair;
  // The heap's top: the largest count; among equal counts the smallest pair.
  bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

class Merger {
 public:
  Merger(std::vector<std::string> vocab, std::vector<std::vector<int32_t>> words, std::vector<int64_t> counts)
      : vocab_(std::move(vocab)), words_(std::move(words)), counts_(std::move(counts)) {
    for (size_t i = 0; i < vocab_.size(); ++i) ids_[vocab_[i]] = static_cast<int32_t>(i);
    for (size_t w = 0; w < words_.size(); ++w) add_pairs(static_cast<int32_t>(w), +1);
    for (const auto& [p, c] : pair_counts_) heap_.push({c, p});
  }

  std::vector<std::string> run(int64_t vocab_size, int64_t min_frequency) {
    while (static_cast<int64_t>(vocab_.size()) < vocab_size && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      const auto it = pair_counts_.find(top.pair);
      const int64_t now = it == pair_counts_.end() ? 0 : it->second;
      if (now != top.count) {  // stale: requeue with the current count
        if (now > 0) heap_.push({now, top.pair});
        continue;
      }
      if (top.count < min_frequency) break;
      merge(top.pair);
    }
    return vocab_;
  }

 private:
  void add_pairs(int32_t w, int sign) {
    const auto& s = words_[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p = pair_of(s[i], s[i + 1]);
      pair_counts_[p] += sign * counts_[w];
      if (sign > 0) where_[p].insert(w);
      touched_.insert(p);
    }
  }

  void merge(Pair p) {
    const int32_t a = static_cast<int32_t>(p >> 32), b = static_cast<int32_t>(p & 0xffffffffu);
    const std::string& right = vocab_[b];
    std::string token = vocab_[a] + (right.rfind("##", 0) == 0 ? right.substr(2) : right);
    int32_t id;
    if (const auto found = ids_.find(token); found != ids_.end()) {
      id = found->second;
    } else {
      id = static_cast<int32_t>(vocab_.size());
      ids_[token] = id;
      vocab_.push_back(std::move(token));
    }
    const std::vector<int32_t> holders(where_[p].begin(), where_[p].end());
    touched_.clear();
    for (const int32_t w : holders) {
      add_pairs(w, -1);
      std::vector<int32_t>& s = words_[w];
      std::vector<int32_t> merged;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s.swap(merged);
      add_pairs(w, +1);
    }
    for (const Pair t : touched_) {
      const int64_t c = pair_counts_[t];
      if (c > 0) heap_.push({c, t});
    }
  }

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> counts_;
  std::unordered_map<Pair, int64_t> pair_counts_;
  std::unordered_map<Pair, std::set<int32_t>> where_;  // words holding the pair (a superset: entries are not removed)
  std::unordered_set<Pair> touched_;
  std::priority_queue<Entry> heap_;
};

}  // namespace

namespace {

BasicTokenizerOptions basic_options(bool lowercase) {
  BasicTokenizerOptions o;
  o.do_lower_case = lowercase;
  return o;
}

}  // namespace

WordPieceTrainer::WordPieceTrainer(WordPieceTrainerOptions options)
    : options_(std::move(options)), basic_(basic_options(options_.lowercase)) {
  if (options_.chinese_words > 0) {
    jieba_ = std::make_unique<Jieba>(options_.jieba_dict.empty() ? default_jieba_dict_path() : options_.jieba_dict);
    jieba_->load();
  }
}

void WordPieceTrainer::add_line(std::string_view line) {
  const std::u32string text = base::utf8_decode(line);
  for (auto& w : basic_.tokenize(text)) {
    if (static_cast<int64_t>(w.size()) <= options_.max_word_chars) ++counts_[std::move(w)];
  }
  if (!jieba_) return;
  for (auto& w : jieba_->cut(std::u32string_view(text))) {
    if (w.size() >= 2 && static_cast<int64_t>(w.size()) <= options_.max_word_chars &&
        std::all_of(w.begin(), w.end(), is_cjk_char)) {
      ++chinese_counts_[std::move(w)];
    }
  }
}

void WordPieceTrainer::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  for (std::string line; std::getline(in, line);) add_line(line);
  if (in.bad()) throw base::Error(path + ": read error");
}

std::vector<std::string> WordPieceTrainer::train() const {
  // Words in a fixed order (by text), so ids and ties do not depend on hashing.
  std::vector<std::pair<std::u32string, int64_t>> words(counts_.begin(), counts_.end());
  std::sort(words.begin(), words.end());
  std::set<char32_t> first, later;
  for (const auto& [w, c] : words) {
    first.insert(w[0]);
    for (size_t i = 1; i < w.size(); ++i) later.insert(w[i]);
  }
  std::vector<std::string> vocab = options_.special_tokens;
  for (const char32_t ch : first) vocab.push_back(base::utf8_encode(std::u32string(1, ch)));
  for (const char32_t ch : later) {
    if (!first.count(ch)) vocab.push_back(base::utf8_encode(std::u32string(1, ch)));
  }
  for (const char32_t ch : later) vocab.push_back("##" + base::utf8_encode(std::u32string(1, ch)));
  if (options_.chinese_words > 0) {
    std::vector<std::pair<int64_t, std::u32string>> ranked;  // (-count, word): most frequent first
    for (const auto& [w, c] : chinese_counts_) {
      if (c >= options_.min_frequency) ranked.emplace_back(-c, w);
    }
    std::sort(ranked.begin(), ranked.end());
    if (static_cast<int64_t>(ranked.size()) > options_.chinese_words) ranked.resize(options_.chinese_words);
    for (const auto& [c, w] : ranked) vocab.push_back(base::utf8_encode(w));
  }
  const int64_t base_size = static_cast<int64_t>(vocab.size());
  if (options_.vocab_size < base_size) {
    throw base::Error("vocabulary size " + std::to_string(options_.vocab_size) + " is smaller than the " +
                      std::to_string(base_size) + " special tokens, characters and Chinese words of the text");
  }
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < vocab.size(); ++i) ids[vocab[i]] = static_cast<int32_t>(i);
  std::vector<std::vector<int32_t>> symbols;
  std::vector<int64_t> weights;
  for (const auto& [w, c] : words) {
    std::vector<int32_t> s;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string ch = base::utf8_encode(std::u32string(1, w[i]));
      s.push_back(ids.at(i == 0 ? ch : "##" + ch));
    }
    symbols.push_back(std::move(s));
    weights.push_back(c);
  }
  return Merger(std::move(vocab), std::move(symbols), std::move(weights)).run(options_.vocab_size, options_.min_frequency);
}

std::vector<std::pair<std::string, std::string>> tokenizer_files(const std::vector<std::string>& vocab, bool lowercase) {
  std::string text;
  for (const auto& t : vocab) text += t + "\n";
  const nlohmann::json specials = {{"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"},
                                   {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}};
  nlohmann::json config = specials;
  config["tokenizer_class"] = "RoFormerTokenizer";
  config["do_lower_case"] = lowercase;
  return {{"vocab.txt", text},
          {"tokenizer_config.json", config.dump(2) + "\n"},
          {"special_tokens_map.json", specials.dump(2) + "\n"}};
}

}  // namespace text
