// HF RoFormerTokenizer: configuration loading, added/special tokens, jieba + BERT tokenisation,
// pairs, truncation and padding (see roformer_tokenizer.h).
#include "text/roformer_tokenizer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "text/wordpiece_trainer.h"

namespace text {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---- configuration files ----

[[noreturn]] void bad_value(const std::string& path, const std::string& key, const std::string& what) {
  throw base::Error(path + ": \"" + key + "\" must be " + what);
}

void read_bool(const json& j, const std::string& path, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_boolean()) bad_value(path, key, "true or false");
  *out = it->get<bool>();
}

// A token given as "text" or as an AddedToken object {"content": ..., "lstrip": ..., ...}.
AddedToken read_token(const json& v, const std::string& path, const std::string& key, bool special) {
  AddedToken t;
  t.special = special;
  if (v.is_string()) {
    t.content = v.get<std::string>();
    return t;
  }
  if (!v.is_object() || !v.contains("content") || !v["content"].is_string())
    bad_value(path, key, "a string or an object with a string \"content\"");
  t.content = v["content"].get<std::string>();
  for (auto [name, field] : {std::pair{"lstrip", &t.lstrip}, std::pair{"rstrip", &t.rstrip},
                             std::pair{"normalized", &t.normalized}, std::pair{"single_word", &t.single_word},
                             std::pair{"special", &t.special}})
    if (v.contains(name) && !v[name].is_null()) {
      if (!v[name].is_boolean()) bad_value(path, key + "." + name, "true or false");
      *field = v[name].get<bool>();
    }
  if (special) t.special = true;
  return t;
}

// Reads the special-token keys of tokenizer_config.json or special_tokens_map.json into *c.
void read_special_tokens(const json& j, const std::string& path, TokenizerConfig* c) {
  for (auto [key, field] : {std::pair{"unk_token", &c->unk_token}, std::pair{"sep_token", &c->sep_token},
                            std::pair{"pad_token", &c->pad_token}, std::pair{"cls_token", &c->cls_token},
                            std::pair{"mask_token", &c->mask_token}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    *field = it->is_null() ? AddedToken{} : read_token(*it, path, key, true);  // null: no such token (id -1)
  }
  if (auto it = j.find("additional_special_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) bad_value(path, "additional_special_tokens", "a list");
    c->additional_special_tokens.clear();
    for (const json& v : *it) c->additional_special_tokens.push_back(read_token(v, path, "additional_special_tokens", true));
  }
}

TokenizerConfig read_config(const std::string& dir) {
  TokenizerConfig c;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path)) {
    const json j = io::read_json_object(config_path);
    if (auto it = j.find("tokenizer_class"); it != j.end() && !it->is_null()) {
      if (!it->is_string()) bad_value(config_path, "tokenizer_class", "a string");
      const std::string cls = it->get<std::string>();
      c.use_jieba = cls.rfind("RoFormerTokenizer", 0) == 0;  // also ...Fast: the same algorithm here
      if (!c.use_jieba && cls.rfind("BertTokenizer", 0) != 0)
        throw base::Error(config_path + ": unsupported tokenizer_class \"" + cls + "\" (RoFormerTokenizer or BertTokenizer)");
    }
    read_bool(j, config_path, "do_lower_case", &c.do_lower_case);
    read_bool(j, config_path, "clean_up_tokenization_spaces", &c.clean_up_tokenization_spaces);
    read_bool(j, config_path, "do_basic_tokenize", &c.do_basic_tokenize);
    read_bool(j, config_path, "tokenize_chinese_chars", &c.tokenize_chinese_chars);
    if (auto it = j.find("strip_accents"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) bad_value(config_path, "strip_accents", "true, false or null");
      c.strip_accents = it->get<bool>();
    }
    if (auto it = j.find("never_split"); it != j.end() && !it->is_null()) {
      if (!it->is_array()) bad_value(config_path, "never_split", "a list of strings or null");
      for (const json& v : *it) {
        if (!v.is_string()) bad_value(config_path, "never_split", "a list of strings or null");
        c.never_split.push_back(v.get<std::string>());
      }
    }
    read_special_tokens(j, config_path, &c);
    if (auto it = j.find("added_tokens_decoder"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) bad_value(config_path, "added_tokens_decoder", "an object {id: token}");
      for (auto& [id_text, v] : it->items()) {
        int64_t id = -1;
        const char* end = id_text.data() + id_text.size();
        const auto parsed = std::from_chars(id_text.data(), end, id);
        if (parsed.ec != std::errc() || parsed.ptr != end || id < 0 || id > INT32_MAX)
          bad_value(config_path, "added_tokens_decoder", "keyed by token ids (\"" + id_text + "\" is not)");
        AddedToken t = read_token(v, config_path, "added_tokens_decoder." + id_text, false);
        t.id = static_cast<int32_t>(id);
        c.added_tokens.push_back(std::move(t));
      }
    }
    if (auto it = j.find("model_max_length"); it != j.end() && !it->is_null()) {
      if (!it->is_number()) bad_value(config_path, "model_max_length", "a number");
      // HF treats anything above 1e20 (the default is 1e30) as "no maximum"; so do we above 1e18.
      if (it->is_number_integer() && it->get<double>() <= 1e18 && it->get<double>() >= 0)
        c.model_max_length = it->get<int64_t>();
    }
    for (auto [key, field] : {std::pair{"padding_side", &c.padding_side}, std::pair{"truncation_side", &c.truncation_side}}) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      if (*it != "right" && *it != "left") bad_value(config_path, key, "\"right\" or \"left\"");
      *field = *it == "left" ? Side::Left : Side::Right;
    }
  }
  const std::string map_path = (fs::path(dir) / "special_tokens_map.json").string();
  if (fs::exists(map_path)) read_special_tokens(io::read_json_object(map_path), map_path, &c);
  return c;
}

// The vocabulary's lines, id order (save()'s vocab.txt).
std::vector<std::string> lines_of(const Vocab& vocab) {
  std::vector<std::string> lines;
  for (int64_t i = 0; i < vocab.lines(); ++i) lines.push_back(vocab.token(static_cast<int32_t>(i)));
  return lines;
}

std::u32string_view lstrip(std::u32string_view s) {
  while (!s.empty() && is_py_space(s.front())) s.remove_prefix(1);
  return s;
}
std::u32string_view rstrip(std::u32string_view s) {
  while (!s.empty() && is_py_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

// ---- construction ----

RoFormerTokenizer RoFormerTokenizer::load(const std::string& dir, const LoadOptions& options) {
  auto vocab = std::make_shared<const Vocab>(Vocab::load((fs::path(dir) / "vocab.txt").string()));
  TokenizerConfig c = read_config(dir);
  if (!options.jieba_dict.empty()) c.jieba_dict = options.jieba_dict;
  if (options.use_jieba) c.use_jieba = *options.use_jieba;
  RoFormerTokenizer t(std::move(vocab), std::move(c));
  std::map<std::string, std::string> files;
  for (const char* name : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = (fs::path(dir) / name).string();
    if (fs::exists(path)) files[name] = io::read_file(path);
  }
  // A directory with vocab.txt alone (transformers then takes RoFormerTokenizer's defaults) saves the
  // configuration files those defaults amount to, so that what it writes says how it tokenises. With
  // either file present, the directory's own files are what it saves.
  if (!files.count("tokenizer_config.json") && !files.count("special_tokens_map.json")) {
    for (auto& [name, content] : tokenizer_files(lines_of(t.vocab()), t.config().do_lower_case)) {
      files.emplace(name, std::move(content));  // vocab.txt stays the directory's
    }
  }
  t.files_ = std::make_shared<const std::map<std::string, std::string>>(std::move(files));
  return t;
}

RoFormerTokenizer RoFormerTokenizer::from_vocab_file(const std::string& vocab_txt) {
  RoFormerTokenizer t(std::make_shared<const Vocab>(Vocab::load(vocab_txt)), {});
  std::map<std::string, std::string> files;
  for (auto& [name, content] : tokenizer_files(lines_of(t.vocab()), t.config().do_lower_case)) {
    files[name] = std::move(content);
  }
  files["vocab.txt"] = io::read_file(vocab_txt);  // byte for byte
  t.files_ = std::make_shared<const std::map<std::string, std::string>>(std::move(files));
  return t;
}

RoFormerTokenizer::RoFormerTokenizer(std::shared_ptr<const Vocab> vocab, TokenizerConfig config)
    : vocab_(std::move(vocab)),
      config_(std::move(config)),
      basic_(BasicTokenizerOptions{config_.do_lower_case, config_.tokenize_chinese_chars, config_.strip_accents, true,
                                   config_.never_split}),
      wordpiece_(vocab_, config_.unk_token.content, config_.max_input_chars_per_word) {
  if (config_.use_jieba)
    jieba_ = std::make_shared<Jieba>(config_.jieba_dict.empty() ? default_jieba_dict_path() : config_.jieba_dict);
  auto add = [&](const AddedToken& t) {
    added_ids_[t.content] = t.id;
    added_by_id_[t.id] = t.content;
    auto same = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.content == t.content; });
    if (same != added_.end()) {
      *same = t;
    } else {
      added_.push_back(t);
    }
  };
  for (const AddedToken& t : config_.added_tokens)
    if (!t.content.empty()) add(t);
  // HF's PreTrainedTokenizer.__init__ step 4: special tokens not yet added are added, in the order
  // unk, sep, pad, cls, mask, additional; one in vocab.txt keeps its id, a new one gets the next id
  // after len(get_vocab()) (distinct vocab.txt tokens and added tokens).
  int64_t distinct = vocab_->size();
  for (const auto& [content, id] : added_ids_) distinct += vocab_->contains(content) ? 0 : 1;
  int64_t fresh = 0;
  std::vector<const AddedToken*> specials = {&config_.unk_token, &config_.sep_token, &config_.pad_token,
                                             &config_.cls_token, &config_.mask_token};
  for (const AddedToken& t : config_.additional_special_tokens) specials.push_back(&t);
  for (const AddedToken* s : specials) {
    if (s->content.empty()) continue;
    special_set_.insert(s->content);
    if (added_ids_.count(s->content)) continue;
    AddedToken t = *s;
    t.special = true;
    const int32_t in_vocab = vocab_->find(t.content);
    t.id = in_vocab >= 0 ? in_vocab : static_cast<int32_t>(distinct + fresh++);
    add(t);
  }
  size_ = distinct + fresh;
  for (const AddedToken& t : added_) {
    added_u32_.push_back(base::utf8_decode(t.content));
    added_protected_.push_back(special_set_.count(t.content) != 0 || (!t.special && t.normalized));
    added_by_first_[added_u32_.back().front()].push_back(added_u32_.size() - 1);
  }
  auto id_of = [&](const AddedToken& t) { return t.content.empty() ? -1 : token_to_id(t.content); };
  unk_id_ = id_of(config_.unk_token);
  sep_id_ = id_of(config_.sep_token);
  pad_id_ = id_of(config_.pad_token);
  cls_id_ = id_of(config_.cls_token);
  mask_id_ = id_of(config_.mask_token);
}

// ---- ids ----

int32_t RoFormerTokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  const int32_t id = vocab_->find(token);
  return id >= 0 ? id : unk_id_;
}

std::string RoFormerTokenizer::id_to_token(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second;
  if (id >= 0 && id < vocab_->lines() && vocab_->find(vocab_->token(id)) == id) return vocab_->token(id);
  return config_.unk_token.content;
}

std::vector<int32_t> RoFormerTokenizer::convert_tokens_to_ids(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& t : tokens) ids.push_back(token_to_id(t));
  return ids;
}

// ---- text::Tokenizer ----

std::vector<int32_t> RoFormerTokenizer::special_ids() const {
  std::vector<int32_t> ids = Tokenizer::special_ids();
  for (const auto& a : config_.additional_special_tokens) ids.push_back(token_to_id(a.content));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> RoFormerTokenizer::encode_ids(std::string_view text) const {
  return convert_tokens_to_ids(tokenize(text));
}

std::string RoFormerTokenizer::decode_ids(const std::vector<int32_t>& ids) const {
  const std::vector<int32_t> specials = special_ids();
  std::string out;
  for (const int32_t id : ids) {
    if (std::binary_search(specials.begin(), specials.end(), id)) continue;
    const std::string token = id_to_token(id);
    if (token.rfind("##", 0) == 0) {
      out += token.substr(2);
    } else {
      if (!out.empty()) out += ' ';
      out += token;
    }
  }
  return out;
}

void RoFormerTokenizer::save(const std::string& dir) const {
  if (files_) {
    for (const auto& [name, content] : *files_) io::write_file_atomic(dir + "/" + name, content);
    return;
  }
  for (const auto& [name, content] : tokenizer_files(lines_of(*vocab_), config_.do_lower_case)) {
    io::write_file_atomic(dir + "/" + name, content);
  }
}

// ---- tokenize ----

size_t RoFormerTokenizer::match_added(std::u32string_view text, size_t pos, bool protected_only) const {
  auto it = added_by_first_.find(text[pos]);
  if (it == added_by_first_.end()) return 0;
  size_t best = 0, best_len = 0;
  for (size_t k : it->second) {
    const std::u32string& c = added_u32_[k];
    if ((protected_only && !added_protected_[k]) || c.size() <= best_len) continue;
    if (text.substr(pos, c.size()) == c) best = k + 1, best_len = c.size();
  }
  return best;
}

namespace {
// How many characters next to an lstrip/rstrip added token HF's fast tokenizers count as the token's:
// of s, read from its end (an lstrip token after s) or from its start (an rstrip token before it),
// the characters up to the last whitespace before anything else. Whitespace is Rust's
// char::is_whitespace (Python's isspace without U+001C..U+001F). A normalized token is matched after
// the BertNormalizer: what that removes (NUL, U+FFFD, controls; with strip, nonspacing marks) is
// passed over, and the space it puts around a CJK ideograph (with cjk) counts, taking in the ideograph.
size_t fast_strip_reach(std::u32string_view s, bool from_end, bool normalized, bool cjk, bool strip) {
  size_t reach = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    const char32_t c = from_end ? s[s.size() - 1 - k] : s[k];
    if (normalized && (c == 0 || c == 0xFFFD || is_bert_control(c))) continue;
    if (normalized && strip && c >= 0x300 && strip_accents(std::u32string_view(&c, 1)).empty()) continue;
    if (normalized && cjk && is_cjk_char(c)) return k + 1;
    if (!is_py_space(c) || (c >= 0x1C && c <= 0x1F)) break;
    reach = k + 1;
  }
  return reach;
}
}  // namespace

std::vector<RoFormerTokenizer::Piece> RoFormerTokenizer::split_added(std::string_view utf8,
                                                                     std::vector<CharSpan>* spans) const {
  std::u32string text = base::utf8_decode(utf8);
  if (spans) {
    spans->resize(text.size());
    for (size_t i = 0; i < text.size(); ++i) (*spans)[i] = {static_cast<int64_t>(i), static_cast<int64_t>(i + 1)};
  }
  // PreTrainedTokenizer.tokenize: lower-case character by character, special tokens excepted.
  // (RoFormer's do_lower_case attribute exists only with do_basic_tokenize.) A character's
  // lower case (İ: two characters) comes from it.
  if (config_.do_lower_case && config_.do_basic_tokenize) {
    std::u32string lowered;
    lowered.reserve(text.size());
    std::vector<CharSpan> lowered_spans;
    for (size_t i = 0; i < text.size();) {
      if (const size_t k = match_added(text, i, true)) {
        const size_t n = added_u32_[k - 1].size();
        lowered += added_u32_[k - 1];
        if (spans) lowered_spans.insert(lowered_spans.end(), spans->begin() + static_cast<std::ptrdiff_t>(i),
                                        spans->begin() + static_cast<std::ptrdiff_t>(i + n));
        i += n;
      } else {
        lowered += py_lower(std::u32string_view(text).substr(i, 1));
        if (spans) lowered_spans.resize(lowered.size(), (*spans)[i]);
        ++i;
      }
    }
    text = std::move(lowered);
    if (spans) *spans = std::move(lowered_spans);
  }
  // tokens_trie.split: added tokens become pieces of their own; empty pieces are dropped.
  std::vector<Piece> pieces;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    if (const size_t k = match_added(text, i, false)) {
      const size_t n = added_u32_[k - 1].size();
      if (i > start) pieces.push_back({text.substr(start, i - start), -1, start, {}});
      pieces.push_back({added_u32_[k - 1], static_cast<int>(k - 1), i, {}});
      if (spans) pieces.back().span = {(*spans)[i].first, (*spans)[i + n - 1].second};
      i += n;
      start = i;
    } else {
      ++i;
    }
  }
  if (text.size() > start) pieces.push_back({text.substr(start), -1, start, {}});
  // AddedToken.rstrip eats the whitespace on its right, lstrip the whitespace on its left. HF's fast
  // tokenizers count the whitespace they reach (fast_strip_reach) as part of the token, each
  // character once: `open` is what of each piece (in text) no token has taken yet in their eyes.
  std::vector<std::pair<size_t, size_t>> open;
  const bool strip = basic_.strips_accents();
  if (spans)
    for (const Piece& p : pieces) open.emplace_back(p.begin, p.begin + p.text.size());
  auto reach = [&](size_t piece, bool from_end, const AddedToken& t) {
    const auto [a, b] = open[piece];
    return fast_strip_reach(std::u32string_view(text).substr(a, b - a), from_end, t.normalized,
                            config_.tokenize_chinese_chars, strip);
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].added < 0) continue;
    const AddedToken& t = added_[static_cast<size_t>(pieces[i].added)];
    if (t.rstrip && i + 1 < pieces.size()) {
      Piece& next = pieces[i + 1];
      if (spans)
        if (const size_t wide = reach(i + 1, false, t)) {
          open[i + 1].first += wide;
          pieces[i].span.second = (*spans)[open[i + 1].first - 1].second;
        }
      const size_t n = next.text.size() - lstrip(next.text).size();
      next.text.erase(0, n);
      next.begin += n;
    }
    if (t.lstrip && i > 0) {
      Piece& prev = pieces[i - 1];
      if (spans)
        if (const size_t wide = reach(i - 1, true, t)) {
          open[i - 1].second -= wide;
          pieces[i].span.first = (*spans)[open[i - 1].second].first;
        }
      prev.text.resize(rstrip(prev.text).size());
    }
  }
  return pieces;
}

namespace {
// The origin of characters [a, b), a < b, of a text whose characters came from spans[0..): from the
// first character's start to the last one's end (NFC may reorder marks: the smallest and largest).
CharSpan span_of(const CharSpan* spans, size_t a, size_t b) {
  CharSpan out = spans[a];
  for (size_t i = a + 1; i < b; ++i) out = {std::min(out.first, spans[i].first), std::max(out.second, spans[i].second)};
  return out;
}
}  // namespace

void RoFormerTokenizer::bert_tokenize(std::u32string_view text, const CharSpan* spans, std::vector<std::string>* out,
                                      Track* track) const {
  auto word = [&](std::u32string_view w, const CharSpan* w_spans) {  // w's WordPiece tokens
    if (!track) return wordpiece_.tokenize_word(w, out);
    track->pieces.clear();
    wordpiece_.tokenize_word(w, out, &track->pieces);
    for (const auto& [a, b] : track->pieces)
      track->offsets->push_back(span_of(w_spans, static_cast<size_t>(a), static_cast<size_t>(b)));
  };
  if (!config_.do_basic_tokenize) {
    size_t pos = 0;
    for (const std::u32string& w : py_split(text)) {
      pos = text.find(w, pos);  // the next run of non-space characters
      word(w, track ? spans + pos : nullptr);
      pos += w.size();
    }
    return;
  }
  if (track) track->origins.in = spans;
  size_t pos = 0;  // into track->origins.out
  for (const std::u32string& w : basic_.tokenize(text, &special_set_, track ? &track->origins : nullptr)) {
    const CharSpan* w_spans = track ? track->origins.out.data() + pos : nullptr;
    pos += w.size();
    if (!config_.never_split.empty()) {
      std::string u = base::utf8_encode(w);
      if (basic_.in_never_split(u)) {
        out->push_back(std::move(u));
        if (track) track->offsets->push_back(span_of(w_spans, 0, w.size()));
        continue;
      }
    }
    word(w, w_spans);
  }
}

void RoFormerTokenizer::tokenize_into(std::string_view text, std::vector<std::string>* out,
                                      std::vector<CharSpan>* offsets) const {
  std::vector<CharSpan> spans;  // with offsets: the origin of each character split_added's pieces come from
  std::optional<Track> track;
  if (offsets) track.emplace(Track{offsets, {}, {}});
  Track* t = track ? &*track : nullptr;
  for (const Piece& p : split_added(text, offsets ? &spans : nullptr)) {
    if (p.text.empty()) continue;
    const CharSpan* p_spans = offsets ? spans.data() + p.begin : nullptr;
    if (p.added >= 0 && p.text == added_u32_[static_cast<size_t>(p.added)]) {
      out->push_back(added_[static_cast<size_t>(p.added)].content);
      if (offsets) offsets->push_back(p.span);
    } else if (jieba_) {
      // RoFormerTokenizer._tokenize: a jieba word found in vocab.txt is one token.
      size_t pos = 0;
      for (const std::u32string& w : jieba_->cut(std::u32string_view(p.text))) {
        std::string u = base::utf8_encode(w);
        if (vocab_->contains(u)) {
          out->push_back(std::move(u));
          if (offsets) offsets->push_back(span_of(p_spans, pos, pos + w.size()));
        } else {
          bert_tokenize(w, offsets ? p_spans + pos : nullptr, out, t);
        }
        pos += w.size();
      }
    } else {
      bert_tokenize(p.text, p_spans, out, t);
    }
  }
}

std::vector<std::string> RoFormerTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  tokenize_into(text, &out, nullptr);
  return out;
}

std::vector<std::string> RoFormerTokenizer::jieba_words(std::string_view text) const {
  std::vector<std::string> out;
  if (!jieba_) return out;
  for (const Piece& p : split_added(text))
    if (p.added < 0 && !p.text.empty())
      for (const std::u32string& w : jieba_->cut(std::u32string_view(p.text))) out.push_back(base::utf8_encode(w));
  return out;
}

// ---- encode ----

RoFormerTokenizer::Seq RoFormerTokenizer::to_seq(std::string_view text) const {
  Seq s;
  tokenize_into(text, &s.tokens, &s.offsets);
  s.ids = convert_tokens_to_ids(s.tokens);
  return s;
}

namespace {
// Python's seq[:-n] (Right) or seq[n:] (Left), n >= 0, clamped.
template <class T>
void cut(std::vector<T>* v, int64_t n, Side side) {
  const size_t k = static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(v->size())));
  if (side == Side::Right) {
    v->resize(v->size() - k);
  } else {
    v->erase(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(k));
  }
}
}  // namespace

Encoding RoFormerTokenizer::build(Seq a, const Seq* b_in, const EncodeOptions& o, int64_t max_length,
                                  Truncation t) const {
  std::optional<Seq> b;
  if (b_in) b = *b_in;
  const Side side = o.truncation_side.value_or(config_.truncation_side);
  const int64_t la = static_cast<int64_t>(a.ids.size()), lb = b ? static_cast<int64_t>(b->ids.size()) : 0;
  const int64_t total = la + lb + (o.add_special_tokens ? (b ? 3 : 2) : 0);
  // HF truncate_sequences; where HF only logs an error (a sequence too short to remove enough
  // tokens from), the sequences are left as they are, as in HF.
  if (t != Truncation::None && max_length > 0 && total > max_length) {
    const int64_t remove = total - max_length;
    auto both = [&](Seq* s, int64_t n) {
      cut(&s->ids, n, side);
      cut(&s->tokens, n, side);
      cut(&s->offsets, n, side);
    };
    if (t == Truncation::OnlyFirst || (t == Truncation::LongestFirst && !b)) {
      if (la > remove) both(&a, remove);
    } else if (t == Truncation::LongestFirst) {
      const int64_t first_remove = std::min(std::abs(lb - la), remove);
      const int64_t second_remove = remove - first_remove;
      int64_t a_move, b_move;
      if (la > lb) {
        a_move = first_remove + second_remove / 2;
        b_move = second_remove - second_remove / 2;
      } else {
        a_move = second_remove / 2;
        b_move = first_remove + second_remove - second_remove / 2;
      }
      both(&a, a_move);
      both(&*b, b_move);
    } else if (t == Truncation::OnlySecond && b) {
      if (lb > remove) both(&*b, remove);
    }
  }
  Encoding e;
  auto push = [&](const std::string& token, int32_t id, int32_t type, int32_t special, CharSpan offsets = {0, 0}) {
    e.tokens.push_back(token);
    e.offsets.push_back(offsets);
    e.input_ids.push_back(id);
    e.token_type_ids.push_back(type);
    e.attention_mask.push_back(1);
    e.special_tokens_mask.push_back(special);
  };
  auto push_seq = [&](const Seq& s, int32_t type) {
    for (size_t i = 0; i < s.ids.size(); ++i) push(s.tokens[i], s.ids[i], type, 0, s.offsets[i]);
  };
  if (o.add_special_tokens) {
    if (cls_id_ < 0 || sep_id_ < 0)
      throw std::invalid_argument("add_special_tokens needs a cls_token and a sep_token");
    push(config_.cls_token.content, cls_id_, 0, 1);
    push_seq(a, 0);
    push(config_.sep_token.content, sep_id_, 0, 1);
    if (b) {
      push_seq(*b, 1);
      push(config_.sep_token.content, sep_id_, 1, 1);
    }
  } else {
    push_seq(a, 0);
    if (b) push_seq(*b, 0);
  }
  return e;
}

void RoFormerTokenizer::pad(std::vector<Encoding>* batch, const EncodeOptions& o) const {
  // o.padding and o.max_length are already resolved (see encode_many).
  if (o.padding == Padding::None || batch->empty()) return;
  if (pad_id_ < 0) throw std::invalid_argument("padding needs a pad_token");
  int64_t target = o.max_length;
  if (o.padding == Padding::Longest) {
    target = 0;
    for (const Encoding& e : *batch) target = std::max<int64_t>(target, static_cast<int64_t>(e.size()));
  }
  const int64_t m = o.pad_to_multiple_of;
  if (m > 0 && target % m != 0) target = (target / m + 1) * m;
  const Side side = o.padding_side.value_or(config_.padding_side);
  for (Encoding& e : *batch) {
    const int64_t diff = target - static_cast<int64_t>(e.size());
    if (diff <= 0) continue;
    const size_t n = static_cast<size_t>(diff);
    auto extend = [&](auto& v, const auto& value) {
      if (side == Side::Right) {
        v.insert(v.end(), n, value);
      } else {
        v.insert(v.begin(), n, value);
      }
    };
    extend(e.tokens, config_.pad_token.content);
    extend(e.input_ids, pad_id_);
    extend(e.token_type_ids, 0);
    extend(e.attention_mask, 0);
    extend(e.special_tokens_mask, 1);
    extend(e.offsets, CharSpan{0, 0});
  }
}

std::vector<Encoding> RoFormerTokenizer::encode_many(
    const std::vector<std::pair<std::string_view, const std::string*>>& items, const EncodeOptions& options,
    bool batch) const {
  if (options.max_length < -1) throw std::invalid_argument("max_length must be -1 (none) or >= 0");
  if (options.pad_to_multiple_of < 0) throw std::invalid_argument("pad_to_multiple_of must be >= 0");
  // HF _get_padding_truncation_strategies with max_length=None.
  EncodeOptions o = options;
  Truncation t = o.truncation;
  if (o.max_length < 0 && (o.padding == Padding::MaxLength || t != Truncation::None)) {
    if (config_.model_max_length >= 0) {
      o.max_length = config_.model_max_length;
    } else {  // no maximum known: HF warns and does neither
      if (o.padding == Padding::MaxLength) o.padding = Padding::None;
      t = Truncation::None;
    }
  }
  if (t != Truncation::None && o.padding != Padding::None && o.pad_to_multiple_of > 0 && o.max_length >= 0 &&
      o.max_length % o.pad_to_multiple_of != 0)
    throw std::invalid_argument("truncation and padding: max_length " + std::to_string(o.max_length) +
                                " is not a multiple of pad_to_multiple_of " + std::to_string(o.pad_to_multiple_of));
  std::vector<Encoding> out;
  out.reserve(items.size());
  for (const auto& [first, second] : items) {
    if (second) {
      const Seq b = to_seq(*second);
      out.push_back(build(to_seq(first), &b, o, o.max_length, t));
    } else {
      out.push_back(build(to_seq(first), nullptr, o, o.max_length, t));
    }
  }
  // HF's pad() returns an empty single encoding unpadded (in a batch it is padded like the others).
  if (batch || out.front().size() != 0) pad(&out, o);
  return out;
}

Encoding RoFormerTokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  return std::move(encode_many({{text, nullptr}}, options, false).front());
}

Encoding RoFormerTokenizer::encode_pair(std::string_view first, std::string_view second,
                                        const EncodeOptions& options) const {
  const std::string s(second);
  return std::move(encode_many({{first, &s}}, options, false).front());
}

std::vector<Encoding> RoFormerTokenizer::encode_batch(const std::vector<std::string>& texts,
                                                      const EncodeOptions& options) const {
  std::vector<std::pair<std::string_view, const std::string*>> items;
  for (const std::string& t : texts) items.emplace_back(t, nullptr);
  return encode_many(items, options, true);
}

std::vector<Encoding> RoFormerTokenizer::encode_pair_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                           const EncodeOptions& options) const {
  std::vector<std::pair<std::string_view, const std::string*>> items;
  for (const auto& [a, b] : pairs) items.emplace_back(a, &b);
  return encode_many(items, options, true);
}

// ---- output ----

std::string Encoding::to_json(bool all_fields, bool with_offsets) const {
  nlohmann::ordered_json j;
  j["tokens"] = tokens;
  j["input_ids"] = input_ids;
  if (all_fields) {
    j["token_type_ids"] = token_type_ids;
    j["attention_mask"] = attention_mask;
  }
  if (with_offsets) j["offsets"] = offsets;  // [[start, end], ...]
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

BatchArrays to_arrays(const std::vector<Encoding>& batch) {
  BatchArrays a;
  a.B = static_cast<int64_t>(batch.size());
  a.T = batch.empty() ? 0 : static_cast<int64_t>(batch.front().size());
  for (const Encoding& e : batch) {
    if (static_cast<int64_t>(e.size()) != a.T)
      throw std::invalid_argument("to_arrays: encodings of different lengths (" + std::to_string(e.size()) + " vs " +
                                  std::to_string(a.T) + "); encode with padding");
    a.input_ids.insert(a.input_ids.end(), e.input_ids.begin(), e.input_ids.end());
    a.token_type_ids.insert(a.token_type_ids.end(), e.token_type_ids.begin(), e.token_type_ids.end());
    a.attention_mask.insert(a.attention_mask.end(), e.attention_mask.begin(), e.attention_mask.end());
  }
  return a;
}

std::string wordpiece_decoder_join(const std::vector<std::string>& tokens) {
  static const std::pair<std::string_view, std::string_view> kCleanup[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
      {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string t = tokens[i];
    if (i != 0) t = t.rfind("##", 0) == 0 ? t.substr(2) : " " + t;
    for (const auto& [from, to] : kCleanup) {  // str::replace, one pattern after another
      std::string cleaned;
      for (size_t pos = 0;;) {
        const size_t at = t.find(from, pos);
        cleaned.append(t, pos, at == std::string::npos ? std::string::npos : at - pos);
        if (at == std::string::npos) break;
        cleaned += to;
        pos = at + from.size();
      }
      t = std::move(cleaned);
    }
    out += t;
  }
  return out;
}

}  // namespace text
