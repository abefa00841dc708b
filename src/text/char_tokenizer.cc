// Byte- and character-level tokenizers (see char_tokenizer.h).
#include "char_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/error.h"
#include "base/utf8.h"
#include "io/atomic_file.h"

namespace text {
namespace {

using base::kReplacementChar;
using base::utf8_append;
using base::utf8_next;
constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr int kFormatVersion = 1;

bool is_scalar_value(char32_t cp) { return cp <= kMaxCodePoint && (cp < 0xD800 || cp > 0xDFFF); }

// Code-point histogram, dense over all of Unicode (8.9 MB): counting stays one increment per code
// point however large the corpus.
struct CodePointCounts {
  std::vector<uint64_t> n = std::vector<uint64_t>(kMaxCodePoint + 1, 0);
  uint64_t total = 0;

  // Counts a prefix of [p, p + len) and returns the bytes used (see utf8_next for at_end).
  size_t add(const uint8_t* p, size_t len, bool at_end) {
    size_t i = 0;
    while (i < len) {
      char32_t cp;
      const int used = utf8_next(p + i, len - i, at_end, &cp);
      if (used == 0) break;
      ++n[cp];
      ++total;
      i += static_cast<size_t>(used);
    }
    return i;
  }
};

std::vector<char32_t> choose_vocab(const CodePointCounts& counts, int64_t max_vocab) {
  if (max_vocab != 0 && max_vocab <= CharTokenizer::kNumSpecial) {
    throw std::invalid_argument("max_vocab must be 0 (keep every code point) or at least 6 (5 specials + 1), got " +
                                std::to_string(max_vocab));
  }
  std::vector<char32_t> seen;
  for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (counts.n[cp] != 0) seen.push_back(cp);
  }
  const auto keep = static_cast<size_t>(max_vocab - CharTokenizer::kNumSpecial);
  if (max_vocab != 0 && seen.size() > keep) {
    // Most frequent first; stable on the code-point order, so ties go to the smaller code point.
    std::stable_sort(seen.begin(), seen.end(), [&](char32_t a, char32_t b) { return counts.n[a] > counts.n[b]; });
    seen.resize(keep);
    std::sort(seen.begin(), seen.end());
  }
  return seen;
}

}  // namespace

CharTokenizer CharTokenizer::byte_level() { return CharTokenizer(); }

CharTokenizer CharTokenizer::char_level_from_code_points(const std::vector<char32_t>& code_points) {
  if (code_points.empty()) throw std::invalid_argument("a char tokenizer needs at least one code point");
  CharTokenizer t;
  t.level_ = Level::Char;
  t.code_points_ = code_points;
  t.bmp_ids_.assign(0x10000, kUnk);
  for (size_t i = 0; i < code_points.size(); ++i) {
    const char32_t cp = code_points[i];
    if (!is_scalar_value(cp)) {
      throw std::invalid_argument("code point " + std::to_string(cp) + " is not a Unicode scalar value");
    }
    const auto id = static_cast<int32_t>(kNumSpecial + i);
    if (cp < 0x10000 ? t.bmp_ids_[cp] != kUnk : t.astral_ids_.count(cp) != 0) {
      throw std::invalid_argument("code point " + std::to_string(cp) + " appears twice in the vocabulary");
    }
    if (cp < 0x10000) {
      t.bmp_ids_[cp] = id;
    } else {
      t.astral_ids_[cp] = id;
    }
  }
  return t;
}

CharTokenizer CharTokenizer::char_level_from_text(std::string_view text, int64_t max_vocab) {
  auto counts = std::make_unique<CodePointCounts>();
  counts->add(reinterpret_cast<const uint8_t*>(text.data()), text.size(), true);
  if (counts->total == 0) throw std::invalid_argument("cannot build a char vocabulary from empty text");
  return char_level_from_code_points(choose_vocab(*counts, max_vocab));
}

CharTokenizer CharTokenizer::char_level_from_file(const std::string& path, int64_t max_vocab, size_t chunk_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  auto counts = std::make_unique<CodePointCounts>();
  // buf holds the unfinished tail of the previous chunk (< 4 bytes) followed by the next chunk.
  std::vector<uint8_t> buf(chunk_bytes + 4);
  size_t carry = 0;
  for (;;) {
    in.read(reinterpret_cast<char*>(buf.data() + carry), static_cast<std::streamsize>(chunk_bytes));
    const auto got = static_cast<size_t>(in.gcount());
    if (in.bad()) throw base::Error(path + ": read error");
    const bool at_end = got < chunk_bytes;  // a short read on an ifstream means end of file
    const size_t len = carry + got;
    const size_t used = counts->add(buf.data(), len, at_end);
    if (at_end) break;
    carry = len - used;
    std::copy(buf.begin() + static_cast<std::ptrdiff_t>(used), buf.begin() + static_cast<std::ptrdiff_t>(len),
              buf.begin());
  }
  if (counts->total == 0) throw base::Error(path + ": empty file, no characters for a vocabulary");
  return char_level_from_code_points(choose_vocab(*counts, max_vocab));
}

std::string CharTokenizer::to_json() const {
  nlohmann::json j;
  j["version"] = kFormatVersion;
  j["kind"] = level_ == Level::Byte ? "byte" : "char";
  j["tokens"] = nlohmann::json::array();
  for (char32_t cp : code_points_) {
    std::string s;
    utf8_append(cp, &s);
    j["tokens"].push_back(s);
  }
  return j.dump(1) + "\n";
}

void CharTokenizer::save(const std::string& dir) const { io::write_file_atomic(dir + "/tokenizer.json", to_json()); }

CharTokenizer CharTokenizer::load(const std::string& path) {
  auto fail = [&](const std::string& what) { return base::Error(path + ": tokenizer file: " + what); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw fail("not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "version" && key != "kind" && key != "tokens") throw fail("unknown field '" + key + "'");
  }
  for (const char* key : {"version", "kind", "tokens"}) {
    if (!j.contains(key)) throw fail(std::string("missing field '") + key + "'");
  }
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != kFormatVersion) {
    throw fail("unsupported version " + j["version"].dump() + " (this build reads version 1)");
  }
  if (!j["kind"].is_string()) throw fail("'kind' must be \"byte\" or \"char\", got " + j["kind"].dump());
  const std::string kind = j["kind"].get<std::string>();
  if (kind != "byte" && kind != "char") throw fail("unknown kind \"" + kind + "\" (expected \"byte\" or \"char\")");
  const nlohmann::json& tokens = j["tokens"];
  if (!tokens.is_array()) throw fail("'tokens' must be an array of strings");
  if (kind == "byte") {
    if (!tokens.empty()) throw fail("a byte tokenizer has no char tokens, but 'tokens' holds " +
                                    std::to_string(tokens.size()));
    return byte_level();
  }
  if (tokens.empty()) throw fail("a char tokenizer needs at least one token");
  std::vector<char32_t> cps;
  cps.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string where = "token " + std::to_string(i) + " (id " + std::to_string(kNumSpecial + i) + ")";
    if (!tokens[i].is_string()) throw fail(where + " is not a string: " + tokens[i].dump());
    const std::string s = tokens[i].get<std::string>();
    char32_t cp = 0;
    const int used = s.empty() ? 0 : utf8_next(reinterpret_cast<const uint8_t*>(s.data()), s.size(), true, &cp);
    std::string again;
    if (used > 0) utf8_append(cp, &again);
    // Re-encoding must give back the same bytes: rules out "", several characters and invalid UTF-8.
    if (s.empty() || used != static_cast<int>(s.size()) || again != s) {
      throw fail(where + " " + tokens[i].dump() + " is not a single code point");
    }
    cps.push_back(cp);
  }
  std::vector<char32_t> sorted = cps;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    std::string s;
    utf8_append(*dup, &s);
    throw fail("duplicate token " + nlohmann::json(s).dump());
  }
  return char_level_from_code_points(cps);
}

int32_t CharTokenizer::char_id(char32_t cp) const {
  if (cp < 0x10000) return bmp_ids_[cp];
  const auto it = astral_ids_.find(cp);
  return it == astral_ids_.end() ? kUnk : it->second;
}

size_t CharTokenizer::encode_some(std::string_view bytes, bool at_end, size_t max_tokens,
                              std::vector<int32_t>* out) const {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (level_ == Level::Byte) {
    const size_t n = std::min(bytes.size(), max_tokens);
    for (size_t i = 0; i < n; ++i) out->push_back(kNumSpecial + p[i]);
    return n;
  }
  size_t i = 0;
  for (size_t t = 0; t < max_tokens && i < bytes.size(); ++t) {
    char32_t cp;
    const int used = utf8_next(p + i, bytes.size() - i, at_end, &cp);
    if (used == 0) break;
    out->push_back(char_id(cp));
    i += static_cast<size_t>(used);
  }
  return i;
}

std::vector<int32_t> CharTokenizer::encode_ids(std::string_view utf8) const {
  std::vector<int32_t> ids;
  ids.reserve(utf8.size());
  encode_some(utf8, true, utf8.size(), &ids);
  return ids;
}

std::string CharTokenizer::decode_ids(const std::vector<int32_t>& ids) const {
  const int64_t V = vocab_size();
  std::string s;
  for (int32_t id : ids) {
    if (id < 0 || id >= V) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(V) + ")");
    }
    if (id == kUnk) {
      utf8_append(kReplacementChar, &s);
    } else if (id >= kNumSpecial) {
      if (level_ == Level::Byte) {
        s.push_back(static_cast<char>(id - kNumSpecial));
      } else {
        utf8_append(code_points_[static_cast<size_t>(id - kNumSpecial)], &s);
      }
    }
  }
  return s;
}

int64_t CharTokenizer::vocab_size() const {
  return kNumSpecial + (level_ == Level::Byte ? 256 : static_cast<int64_t>(code_points_.size()));
}

}  // namespace text
