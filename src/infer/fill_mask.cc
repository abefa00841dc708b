// Fill-mask and HF-style decoding (see fill_mask.h).
#include "infer/fill_mask.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_set>

#include "io/weights.h"

namespace infer {
namespace {

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s->find(from, pos)) != std::string::npos; pos += to.size()) {
    s->replace(pos, from.size(), to);
  }
}

// RoFormerTokenizer/BertTokenizer.convert_tokens_to_string: " ".join(tokens).replace(" ##", "").strip().
std::string tokens_to_string(const std::vector<std::string>& tokens) {
  std::string s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) s += ' ';
    s += tokens[i];
  }
  replace_all(&s, " ##", "");
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::string decode(const text::RoFormerTokenizer& tok, const std::vector<int32_t>& ids, bool skip_special_tokens,
                   bool clean_up_tokenization_spaces) {
  const text::TokenizerConfig& c = tok.config();
  std::unordered_set<std::string> special;  // all_special_tokens
  for (const text::AddedToken* t : {&c.unk_token, &c.sep_token, &c.pad_token, &c.cls_token, &c.mask_token}) {
    if (!t->content.empty()) special.insert(t->content);
  }
  for (const auto& t : c.additional_special_tokens) special.insert(t.content);
  std::unordered_set<int32_t> special_ids;
  for (const std::string& s : special) special_ids.insert(tok.token_to_id(s));
  std::unordered_set<std::string> legacy;  // added tokens that are not special: decoded on their own
  for (const auto& t : c.added_tokens) {
    if (!special.count(t.content)) legacy.insert(t.content);
  }

  std::vector<std::string> sub_texts, current;
  auto flush = [&] {
    if (current.empty()) return;
    std::string s = tokens_to_string(current);
    if (!s.empty()) sub_texts.push_back(std::move(s));
    current.clear();
  };
  for (int32_t id : ids) {
    if (skip_special_tokens && special_ids.count(id)) continue;
    std::string token = tok.id_to_token(id);
    if (legacy.count(token)) {
      flush();
      sub_texts.push_back(std::move(token));
    } else {
      current.push_back(std::move(token));
    }
  }
  flush();
  std::string text;
  for (size_t i = 0; i < sub_texts.size(); ++i) {
    if (i) text += ' ';
    text += sub_texts[i];
  }
  if (clean_up_tokenization_spaces) {  // PreTrainedTokenizerBase.clean_up_tokenization
    for (const auto& [from, to] : std::initializer_list<std::pair<std::string_view, std::string_view>>{
             {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
             {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}) {
      replace_all(&text, from, to);
    }
  }
  return text;
}

void check_fill_mask(const Pipeline& p) {
  if (!p.has_mlm_head()) {
    throw io::Error(p.dir() + ": the checkpoint has no masked-LM head (cls.predictions.*); fill-mask needs a "
                    "RoFormerForMaskedLM checkpoint");
  }
  if (p.config().is_decoder) {
    throw io::Error(p.dir() + ": the checkpoint is a causal LM (is_decoder); fill-mask needs a masked LM");
  }
  if (p.tokenizer().mask_id() < 0) throw io::Error(p.dir() + ": the tokenizer has no mask token");
}

std::vector<std::vector<int64_t>> mask_positions(const Pipeline& p, const std::vector<text::Encoding>& encodings) {
  const int32_t mask_id = p.tokenizer().mask_id();
  std::vector<std::vector<int64_t>> positions(encodings.size());
  for (size_t i = 0; i < encodings.size(); ++i) {
    for (size_t t = 0; t < encodings[i].size(); ++t) {
      if (encodings[i].input_ids[t] == mask_id) positions[i].push_back(static_cast<int64_t>(t));
    }
    if (positions[i].empty()) {
      throw InputError(i, "no " + p.tokenizer().config().mask_token.content +
                              " token in the text (fill-mask needs at least one)");
    }
  }
  return positions;
}

std::vector<std::vector<MaskPredictions>> fill_mask(Pipeline& p, const std::vector<std::string>& texts, int64_t top_k,
                                                    int64_t batch_size, const Truncate& truncate) {
  check_fill_mask(p);
  return fill_mask_encoded(p, p.encode(texts, truncate), top_k, batch_size);
}

std::vector<std::vector<MaskPredictions>> fill_mask_encoded(Pipeline& p, const std::vector<text::Encoding>& encodings,
                                                            int64_t top_k, int64_t batch_size) {
  if (top_k < 1) throw std::invalid_argument("top-k must be at least 1");
  check_fill_mask(p);
  const text::RoFormerTokenizer& tok = p.tokenizer();
  const std::vector<std::vector<int64_t>> positions = mask_positions(p, encodings);
  const int64_t V = p.config().vocab_size, k = std::min(top_k, V);
  const int32_t pad = tok.pad_id();
  const bool clean = p.clean_up_tokenization_spaces();
  std::vector<std::vector<MaskPredictions>> out(encodings.size());
  std::vector<double> prob(static_cast<size_t>(V));
  std::vector<int32_t> order(static_cast<size_t>(V));
  p.run(encodings, batch_size, [&](const std::vector<size_t>& rows, int64_t) {
    const float* z = p.model().logits();  // (masks of the batch, V), batch row by batch row
    for (size_t b = 0; b < rows.size(); ++b) {
      const size_t i = rows[b];
      const bool single = positions[i].size() == 1;
      for (int64_t m : positions[i]) {
        const double mx = *std::max_element(z, z + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += (prob[v] = std::exp(double(z[v]) - mx));
        for (double& x : prob) x /= sum;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t c) { return prob[a] > prob[c] || (prob[a] == prob[c] && a < c); });
        MaskPredictions preds;
        for (int64_t j = 0; j < k; ++j) {
          Prediction pr;
          pr.token = order[j];
          pr.score = prob[pr.token];
          std::vector<int32_t> ids;
          for (size_t t = 0; t < encodings[i].size(); ++t) {
            const int32_t id = static_cast<int64_t>(t) == m ? pr.token : encodings[i].input_ids[t];
            if (id != pad) ids.push_back(id);
          }
          pr.sequence = decode(tok, ids, single, clean);
          pr.token_str = decode(tok, {pr.token}, false, clean);
          preds.push_back(std::move(pr));
        }
        out[i].push_back(std::move(preds));
        z += V;
      }
    }
  }, /*logits=*/true, &positions);
  return out;
}

std::string fill_mask_json(const std::vector<MaskPredictions>& masks) {
  auto list = [](const MaskPredictions& preds) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const Prediction& p : preds) {
      nlohmann::ordered_json o;
      o["score"] = p.score;
      o["token"] = p.token;
      o["token_str"] = p.token_str;
      o["sequence"] = p.sequence;
      a.push_back(std::move(o));
    }
    return a;
  };
  nlohmann::ordered_json j;
  if (masks.size() == 1) {
    j = list(masks[0]);
  } else {
    j = nlohmann::ordered_json::array();
    for (const auto& m : masks) j.push_back(list(m));
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace infer
