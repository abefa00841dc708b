// jieba.cut(HMM=False) over jieba's prefix dictionary (see jieba.h).
#include "text/jieba.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "base/error.h"
#include "text/basic_tokenizer.h"

namespace text {

// FREQ as a flat open-addressing table (linear probing, keys in one arena): about 500k short keys,
// looked up several times per character, so lookups should cost one or two cache misses.
struct Jieba::Dict {
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int64_t freq = -1;  // -1: empty slot
  };
  std::string keys;
  std::vector<Slot> slots;
  size_t count = 0;
  int64_t total = 0;

  static uint64_t hash_of(std::string_view s) {  // FNV-1a, then a final mix
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots.size()) rehash(cap);
  }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots);
    slots.assign(cap, Slot{});
    for (const Slot& s : old)
      if (s.freq >= 0) {
        size_t i = s.hash & (cap - 1);
        while (slots[i].freq >= 0) i = (i + 1) & (cap - 1);
        slots[i] = s;
      }
  }
  // The slot of `key`, inserted with `freq` when absent (found: returned as it is).
  Slot& find_or_insert(std::string_view key, int64_t freq) {
    if (2 * (count + 1) > slots.size()) rehash(std::max<size_t>(16, 2 * slots.size()));
    const uint64_t h = hash_of(key);
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.freq < 0) {
        s = Slot{h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(key.size()), freq};
        keys.append(key);
        ++count;
        return s;
      }
      if (s.hash == h && std::string_view(keys).substr(s.offset, s.length) == key) return s;
    }
  }
  // FREQ.get(s): the frequency, or -1 when absent.
  int64_t get(std::string_view key) const {
    if (slots.empty()) return -1;
    const uint64_t h = hash_of(key);
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.freq < 0) return -1;
      if (s.hash == h && s.length == key.size() && std::memcmp(keys.data() + s.offset, key.data(), key.size()) == 0)
        return s.freq;
    }
  }
};

std::string default_jieba_dict_path() {
  const char* env = std::getenv(kJiebaDictEnv);
  return env && *env ? std::string(env) : std::string(kDebianJiebaDict);
}

bool is_jieba_word_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FD5) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '+' || c == '#' || c == '&' || c == '.' || c == '_' || c == '%' || c == '-';
}

Jieba::Jieba(std::string dict_path) : path_(std::move(dict_path)) {}
Jieba::~Jieba() = default;

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's int() on an ASCII string without spaces: optional sign, digits ('_' between digits).
bool parse_frequency(std::string_view s, int64_t* out) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i == s.size()) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && prev_digit && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
      prev_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return false;
    if (v > (INT64_MAX - (c - '0')) / 10) return false;
    v = v * 10 + (c - '0');
    prev_digit = true;
  }
  *out = negative ? -v : v;
  return true;
}

}  // namespace

void Jieba::load() const { (void)dict(); }

bool Jieba::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dict_ != nullptr;
}

std::shared_ptr<const Jieba::Dict> Jieba::dict() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (dict_) return dict_;
  const std::string hint =
      " (RoFormerTokenizer segments text with jieba's dictionary: install Debian's python3-jieba, or set " +
      std::string(kJiebaDictEnv) + " to a jieba dict.txt)";
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw base::Error("jieba dictionary " + path_ + ": is a directory" + hint);
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw base::Error("jieba dictionary " + path_ + ": cannot open: " + std::strerror(errno) + hint);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw base::Error("jieba dictionary " + path_ + ": cannot read: " + std::strerror(errno));

  if (content.size() >= UINT32_MAX) throw base::Error("jieba dictionary " + path_ + ": larger than 4 GiB");
  auto d = std::make_shared<Dict>();
  d->reserve(static_cast<size_t>(std::count(content.begin(), content.end(), '\n')) * 3 / 2);
  d->keys.reserve(content.size());
  size_t pos = 0, lineno = 0;
  while (pos < content.size()) {  // jieba iterates a binary file: lines end at '\n'
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string_view line(content.data() + pos, end - pos);
    pos = end + 1;
    ++lineno;
    while (!line.empty() && is_ascii_space(line.front())) line.remove_prefix(1);  // bytes.strip()
    while (!line.empty() && is_ascii_space(line.back())) line.remove_suffix(1);
    const size_t sp = line.find(' ');
    int64_t f = 0;
    bool ok = sp != std::string_view::npos && base::utf8_valid(line);
    if (ok) {
      const size_t sp2 = line.find(' ', sp + 1);
      const std::string_view fs = line.substr(sp + 1, sp2 == std::string_view::npos ? std::string_view::npos : sp2 - sp - 1);
      ok = parse_frequency(fs, &f) && f >= 0 && d->total <= INT64_MAX - f;
    }
    if (!ok)
      throw base::Error(path_ + ":" + std::to_string(lineno) + ": invalid jieba dictionary entry '" +
                      std::string(line.substr(0, 200)) + "' (expected 'word frequency [tag]')");
    const std::string_view word = line.substr(0, sp);
    // Each code-point prefix becomes an entry: a word of n characters costs O(n²) bytes, so a
    // 20,000-character line would take a gigabyte. jieba's own dictionary's longest word has 16.
    const size_t chars = static_cast<size_t>(std::count_if(
        word.begin(), word.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
    if (chars > kMaxWordChars) {
      throw base::Error(path_ + ":" + std::to_string(lineno) + ": a jieba dictionary word of " +
                        std::to_string(chars) + " characters; at most " + std::to_string(kMaxWordChars) +
                        " are taken (jieba's own dictionary's longest has 16)");
    }
    d->find_or_insert(word, f).freq = f;
    d->total += f;
    // Every code-point prefix of the word gets frequency 0 unless already present.
    for (size_t i = 1; i < word.size(); ++i)
      if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) d->find_or_insert(word.substr(0, i), 0);
  }
  dict_ = std::move(d);
  return dict_;
}

int64_t Jieba::frequency(std::string_view word) const { return dict()->get(word); }
int64_t Jieba::total() const { return dict()->total; }
size_t Jieba::size() const { return dict()->count; }

std::vector<std::string> Jieba::cut(std::string_view utf8) const {
  std::vector<std::string> out;
  for (const std::u32string& w : cut(base::utf8_decode(utf8))) out.push_back(base::utf8_encode(w));
  return out;
}

std::vector<std::u32string> Jieba::cut(std::u32string_view text) const {
  std::vector<std::u32string> out;
  std::shared_ptr<const Dict> d;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (is_jieba_word_char(text[i])) {
      while (j < text.size() && is_jieba_word_char(text[j])) ++j;
      if (!d) d = dict();
      cut_block(*d, text.substr(i, j - i), &out);
    } else {  // re_skip_default.split: "\r\n" or one whitespace; anything else one character at a time
      while (j < text.size() && !is_jieba_word_char(text[j])) ++j;
      for (size_t k = i; k < j; ++k) {
        if (text[k] == U'\r' && k + 1 < j && text[k + 1] == U'\n') {
          out.emplace_back(U"\r\n");
          ++k;
        } else {
          out.emplace_back(1, text[k]);
        }
      }
    }
    i = j;
  }
  return out;
}

// __cut_DAG_NO_HMM(block): get_DAG, calc, then the walk that glues single ASCII alphanumerics.
void Jieba::cut_block(const Dict& d, std::u32string_view block, std::vector<std::u32string>* out) const {
  const size_t n = block.size();
  std::string utf8;  // the block in UTF-8, with each code point's byte offset, for dictionary lookups
  std::vector<size_t> off(n + 1);
  for (size_t i = 0; i < n; ++i) {
    off[i] = utf8.size();
    base::utf8_append(block[i], &utf8);
  }
  off[n] = utf8.size();
  auto frag = [&](size_t a, size_t b) {  // sentence[a:b]
    return std::string_view(utf8).substr(off[a], off[b] - off[a]);
  };

  // get_DAG: dag[k] = ends x (inclusive) of the dictionary words block[k..x] with their
  // frequencies, or just (k, FREQ.get(block[k]) or 0) — kept so calc() need not look them up again.
  std::vector<std::vector<std::pair<size_t, int64_t>>> dag(n);
  for (size_t k = 0; k < n; ++k) {
    int64_t f_k = 0;
    for (size_t i = k; i < n; ++i) {
      const int64_t f = d.get(frag(k, i + 1));
      if (f < 0) break;
      if (i == k) f_k = f;
      if (f > 0) dag[k].emplace_back(i, f);
    }
    if (dag[k].empty()) dag[k].emplace_back(k, f_k);
  }

  // calc: route[idx] = max over x of (log(FREQ.get(word) or 1) − log(total) + route[x+1].value, x).
  std::vector<std::pair<double, size_t>> route(n + 1);
  route[n] = {0.0, 0};
  const double logtotal = std::log(static_cast<double>(d.total));
  for (size_t idx = n; idx-- > 0;) {
    bool first = true;
    std::pair<double, size_t> best{0.0, 0};
    for (const auto& [x, f] : dag[idx]) {
      const double value = std::log(static_cast<double>(f > 0 ? f : 1)) - logtotal + route[x + 1].first;
      const std::pair<double, size_t> cand{value, x};
      if (first || cand > best) best = cand;  // Python's max over (value, x) tuples
      first = false;
    }
    route[idx] = best;
  }

  auto is_eng = [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  std::u32string buf;
  size_t x = 0;
  while (x < n) {
    const size_t y = route[x].second + 1;
    if (y - x == 1 && is_eng(block[x])) {
      buf.push_back(block[x]);
    } else {
      if (!buf.empty()) out->push_back(std::move(buf)), buf.clear();
      out->emplace_back(block.substr(x, y - x));
    }
    x = y;
  }
  if (!buf.empty()) out->push_back(std::move(buf));
}

}  // namespace text
