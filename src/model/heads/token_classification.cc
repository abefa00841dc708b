// RoFormerForTokenClassification (named entities, part-of-speech tags): one label per token,
//   h (B, T, H) → dropout (hidden_dropout_prob) → classifier (L, H) → logits (B, T, L),
// and HF's loss: softmax cross-entropy averaged over the tokens whose target is not -100 (padding,
// special tokens and, as transformers' run_ner, every sub-token but a word's first unless
// label_all_tokens). Tensors: classifier.*.
//
// Metrics are seqeval 1.2.2's over the words' tags (the counted tokens): entity precision, recall
// and F1, overall (micro) and per type (TYPE_precision, TYPE_recall, TYPE_f1, TYPE_number), in
// seqeval's default mode (conlleval's chunking: an I- after O starts an entity, sentences joined by O)
// and, when every tag is O, B-X or I-X, in its strict IOB2 mode (strict_precision, strict_recall,
// strict_f1: an entity is B-X followed by I-X only); accuracy is the fraction of words tagged right.
#include "model/heads/token_classification.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include "base/utf8.h"
#include "model/head.h"

namespace model {
namespace {

template <typename T>
class TokenClassification : public HeadModule<T> {
 public:
  void bind(const RoFormerConfig& c, const std::vector<T*>& p, const std::vector<T*>& g) override {
    H_ = c.hidden_size, L_ = c.num_labels();
    p_ = head_dense(p, 0), g_ = head_dense(g, 0);
  }
  void forward(T* logits, const HeadCall<T>& call) override {
    const int64_t N = call.B * call.S;
    grow_to(x_, N * H_);
    std::copy_n(call.h, N * H_, x_.data());
    head_dropout_forward(x_.data(), N * H_, call.dropout, 0, call.dropout.first(H_));
    dense_forward(logits, x_.data(), p_, N, H_, L_);  // (N, L)
  }
  void backward(T* dh, const T* dlogits, const HeadCall<T>& call) override {
    const int64_t N = call.B * call.S;
    grow_to(dx_, N * H_);
    dense_backward(dx_.data(), g_, dlogits, x_.data(), p_, N, H_, L_);
    head_dropout_backward(dx_.data(), dx_.data(), N * H_, call.dropout, 0, call.dropout.first(H_));
    for (int64_t i = 0; i < N * H_; ++i) dh[i] += dx_[i];
  }
  std::vector<HeadDense<T>> dense_layers() override { return {{&p_, L_, H_}}; }

 private:
  LinearParams<T> p_, g_;  // (L, H)
  int64_t H_ = 0, L_ = 0;
  std::vector<T> x_, dx_;  // (N, H): the hidden states after dropout; their gradient
};

class TokenClassificationHead : public HeadDef {
 public:
  const char* architecture() const override { return "RoFormerForTokenClassification"; }
  HeadTask task() const override { return HeadTask::token_classification; }
  std::vector<HeadTensor> tensors(const RoFormerConfig& c) const override {
    return {{"classifier.weight", {c.num_labels(), c.hidden_size}, true}, {"classifier.bias", {c.num_labels()}, false}};
  }
  std::vector<int64_t> logits_shape(const RoFormerConfig& c, int64_t B, int64_t T) const override {
    return {B, T, c.num_labels()};
  }
  std::unique_ptr<HeadModule<float>> make_f32() const override { return HeadModules<TokenClassification>::f32(); }
  std::unique_ptr<HeadModule<double>> make_f64() const override { return HeadModules<TokenClassification>::f64(); }
  HeadLoss loss(const RoFormerConfig& c, const float* z, int64_t B, int64_t T, const HeadTargets& t, int64_t,
                int64_t normaliser, float* dlogits) const override {
    return softmax_cross_entropy(z, B * T, c.num_labels(), t.ids, kIgnoreIndex, normaliser, dlogits);
  }
  // A word's label on its first sub-token; the others -100, or (label_all_tokens) the word's label
  // with B-X turned into I-X where the label set has I-X, as run_ner's b_to_i_label.
  std::vector<int64_t> targets(const RoFormerConfig& c, const HeadExample& e) const override {
    std::vector<int64_t> out(e.word_ids.size(), kIgnoreIndex);
    int64_t previous = -1;
    for (size_t t = 0; t < e.word_ids.size(); ++t) {
      const int64_t w = e.word_ids[t];
      if (w < 0) continue;
      if (w != previous) {
        out[t] = e.labels.at(static_cast<size_t>(w));
      } else if (e.label_all_tokens) {
        out[t] = inside_of(c, e.labels.at(static_cast<size_t>(w)));
      }
      previous = w;
    }
    return out;
  }
  std::map<std::string, double> metrics(const RoFormerConfig& c, const std::vector<HeadOutputs>& batches,
                                        int64_t) const override {
    const int64_t L = c.num_labels();
    std::vector<std::vector<std::string>> truth, predicted;  // one tag sequence per row
    for (const HeadOutputs& b : batches) {
      for (int64_t r = 0; r < b.B; ++r) {
        truth.emplace_back(), predicted.emplace_back();
        for (int64_t t = 0; t < b.T; ++t) {
          const int64_t y = b.ids[r * b.T + t];
          if (y == kIgnoreIndex) continue;
          const float* z = b.logits.data() + (r * b.T + t) * L;
          truth.back().push_back(c.labels.at(static_cast<size_t>(y)));
          predicted.back().push_back(c.labels[std::max_element(z, z + L) - z]);
        }
      }
    }
    return seqeval(truth, predicted, iob2_tags(c));
  }
  std::string default_metric(const RoFormerConfig&) const override { return "f1"; }

 private:
  using Entity = std::tuple<std::string, int64_t, int64_t, int64_t>;  // type, row, first, last

  static int64_t inside_of(const RoFormerConfig& c, int64_t label) {
    const std::string& name = c.labels.at(static_cast<size_t>(label));
    if (name.rfind("B-", 0) != 0) return label;
    const auto it = std::find(c.labels.begin(), c.labels.end(), "I-" + name.substr(2));
    return it == c.labels.end() ? label : it - c.labels.begin();
  }
  static bool iob2_tags(const RoFormerConfig& c) {
    return std::all_of(c.labels.begin(), c.labels.end(), [](const std::string& l) {
      return l == "O" || ((l.rfind("B-", 0) == 0 || l.rfind("I-", 0) == 0) && l.size() > 2);
    });
  }
  // seqeval's get_entities (conlleval's chunk boundaries) over the rows joined by "O".
  static std::set<Entity> default_entities(const std::vector<std::vector<std::string>>& rows) {
    std::set<Entity> out;
    int64_t i = 0, begin = 0;
    char prev_tag = 'O';
    std::string prev_type;
    auto step = [&](const std::string& chunk) {
      const char tag = chunk.empty() ? 'O' : chunk[0];
      std::string type = chunk.size() > 1 ? chunk.substr(1) : "";
      if (const size_t dash = type.find('-'); dash != std::string::npos) type = type.substr(dash + 1);
      if (type.empty()) type = "_";
      const bool end = prev_tag == 'E' || prev_tag == 'S' ||
                       ((prev_tag == 'B' || prev_tag == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) ||
                       (prev_tag != 'O' && prev_tag != '.' && prev_type != type);
      const bool start = tag == 'B' || tag == 'S' || ((prev_tag == 'E' || prev_tag == 'S' || prev_tag == 'O') &&
                                                      (tag == 'E' || tag == 'I')) ||
                         (tag != 'O' && tag != '.' && prev_type != type);
      if (end) out.insert({prev_type, 0, begin, i - 1});
      if (start) begin = i;
      prev_tag = tag, prev_type = type;
      ++i;
    };
    for (const auto& row : rows) {
      for (const std::string& tag : row) step(tag);
      step("O");
    }
    return out;
  }
  // seqeval's strict IOB2 entities: B-X followed by I-X, within a row.
  static std::set<Entity> strict_entities(const std::vector<std::vector<std::string>>& rows) {
    std::set<Entity> out;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& row = rows[r];
      for (size_t i = 0; i < row.size();) {
        if (row[i].rfind("B-", 0) != 0) {
          ++i;
          continue;
        }
        const std::string type = row[i].substr(2);
        size_t j = i + 1;
        while (j < row.size() && row[j] == "I-" + type) ++j;
        out.insert({type, static_cast<int64_t>(r), static_cast<int64_t>(i), static_cast<int64_t>(j - 1)});
        i = j;
      }
    }
    return out;
  }
  static std::map<std::string, double> seqeval(const std::vector<std::vector<std::string>>& truth,
                                               const std::vector<std::vector<std::string>>& predicted, bool iob2) {
    std::map<std::string, double> m;
    auto score = [&](const std::set<Entity>& t, const std::set<Entity>& p, const std::string& prefix, bool per_type) {
      std::map<std::string, std::array<double, 3>> by_type;  // true, predicted, correct
      for (const Entity& e : t) by_type[std::get<0>(e)][0] += 1;
      for (const Entity& e : p) {
        by_type[std::get<0>(e)][1] += 1;
        by_type[std::get<0>(e)][2] += t.count(e);
      }
      std::array<double, 3> all{};
      auto put = [&](const std::string& name, const std::array<double, 3>& n) {  // zero_division = 0
        const double precision = n[1] > 0 ? n[2] / n[1] : 0, recall = n[0] > 0 ? n[2] / n[0] : 0;
        m[name + "precision"] = precision;
        m[name + "recall"] = recall;
        m[name + "f1"] = precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0;
      };
      for (const auto& [type, n] : by_type) {
        for (int k = 0; k < 3; ++k) all[k] += n[k];
        if (!per_type) continue;
        put(prefix + type + "_", n);
        m[prefix + type + "_number"] = n[0];
      }
      put(prefix, all);
    };
    score(default_entities(truth), default_entities(predicted), "", true);
    if (iob2) score(strict_entities(truth), strict_entities(predicted), "strict_", false);
    double right = 0, words = 0;
    for (size_t r = 0; r < truth.size(); ++r) {
      for (size_t i = 0; i < truth[r].size(); ++i) right += truth[r][i] == predicted[r][i], words += 1;
    }
    m["accuracy"] = words > 0 ? right / words : 0;
    return m;
  }
};

}  // namespace

ROFORMER_DEFINE_HEAD(token_classification, TokenClassificationHead)

Aggregation parse_aggregation(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Aggregation a : {Aggregation::none, Aggregation::simple, Aggregation::first, Aggregation::average,
                              Aggregation::max}) {
    if (lower == aggregation_name(a)) return a;
  }
  throw std::invalid_argument("aggregation strategy '" + name + "' is not one of none, simple, first, average, max");
}

const char* aggregation_name(Aggregation a) {
  switch (a) {
    case Aggregation::none: return "none";
    case Aggregation::simple: return "simple";
    case Aggregation::first: return "first";
    case Aggregation::average: return "average";
    case Aggregation::max: return "max";
  }
  return "?";
}

namespace {

// A token (or word) before grouping: its scores over the labels and where it came from.
struct Scored {
  std::vector<float> scores;
  std::string word;
  int64_t start = 0, end = 0, index = 0;
  bool subword = false;
};

// The pipeline's get_tag: ("B", X) for B-X, ("I", X) for I-X, ("I", label) otherwise.
std::pair<char, std::string> tag_of(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

// group_entities: runs of one tag whose later members are not B- become one entity_group (the label
// after the first '-', the mean score, the words joined, the first start and the last end).
std::vector<TokenEntity> group(const std::vector<TokenEntity>& entities,
                               const std::function<std::string(const std::vector<std::string>&)>& join_pieces) {
  std::vector<TokenEntity> out;
  std::vector<const TokenEntity*> run;
  auto close = [&] {
    if (run.empty()) return;
    TokenEntity g;
    const std::string& first = run[0]->label;
    const size_t dash = first.find('-');
    g.label = dash == std::string::npos ? first : first.substr(dash + 1);
    std::vector<std::string> words;
    double sum = 0;
    for (const TokenEntity* e : run) sum += e->score, words.push_back(e->word);
    g.score = sum / static_cast<double>(run.size());
    g.word = join_pieces(words);
    g.start = run.front()->start, g.end = run.back()->end;
    out.push_back(std::move(g));
    run.clear();
  };
  for (const TokenEntity& e : entities) {
    if (!run.empty()) {
      const auto [bi, tag] = tag_of(e.label);
      if (tag != tag_of(run.back()->label).second || bi == 'B') close();
    }
    run.push_back(&e);
  }
  close();
  return out;
}

}  // namespace

std::vector<TokenEntity> token_entities(const std::string& text, const std::vector<PipelineToken>& tokens,
                                        const float* logits, const std::vector<std::string>& labels,
                                        Aggregation aggregation,
                                        const std::function<std::string(const std::vector<std::string>&)>& join_pieces,
                                        const std::vector<std::string>& ignore) {
  const size_t L = labels.size();
  const std::u32string chars = base::utf8_decode(text);
  // gather_pre_entities: softmax scores (float32, as numpy), the token or, for [UNK], the text's
  // characters; a sub-token is one whose string is longer than its span (the "##" prefix).
  std::vector<Scored> pre;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const PipelineToken& tok = tokens[t];
    if (tok.special) continue;
    Scored s;
    const float* z = logits + t * L;
    const float top = *std::max_element(z, z + L);
    float sum = 0;
    s.scores.resize(L);
    for (size_t k = 0; k < L; ++k) sum += s.scores[k] = std::exp(z[k] - top);
    for (float& v : s.scores) v /= sum;
    s.start = tok.offsets[0], s.end = tok.offsets[1], s.index = static_cast<int64_t>(t);
    const int64_t a = std::clamp<int64_t>(s.start, 0, static_cast<int64_t>(chars.size()));
    const int64_t b = std::clamp<int64_t>(s.end, a, static_cast<int64_t>(chars.size()));
    const std::string ref(base::utf8_slice(text, a, b));
    if (tok.unknown) {
      s.word = ref;
    } else {
      s.word = tok.token;
      s.subword = base::utf8_decode(tok.token).size() != static_cast<size_t>(b - a);
    }
    pre.push_back(std::move(s));
  }
  auto best = [&](const std::vector<float>& scores) { return std::max_element(scores.begin(), scores.end()) - scores.begin(); };
  std::vector<TokenEntity> entities;
  if (aggregation == Aggregation::none || aggregation == Aggregation::simple) {
    for (const Scored& s : pre) {
      const auto k = best(s.scores);
      entities.push_back({labels[k], s.scores[k], s.word, s.start, s.end, s.index});
    }
  } else {
    // aggregate_words: a word is a token and the sub-tokens that follow it.
    for (size_t i = 0; i < pre.size();) {
      size_t j = i + 1;
      while (j < pre.size() && pre[j].subword) ++j;
      std::vector<float> scores = pre[i].scores;
      if (aggregation == Aggregation::max) {
        size_t top = i;
        for (size_t k = i + 1; k < j; ++k) {
          if (*std::max_element(pre[k].scores.begin(), pre[k].scores.end()) >
              *std::max_element(pre[top].scores.begin(), pre[top].scores.end())) {
            top = k;
          }
        }
        scores = pre[top].scores;
      } else if (aggregation == Aggregation::average) {
        for (size_t l = 0; l < L; ++l) {
          double sum = 0;
          for (size_t k = i; k < j; ++k) sum += pre[k].scores[l];
          scores[l] = static_cast<float>(sum / static_cast<double>(j - i));
        }
      }
      std::vector<std::string> words;
      for (size_t k = i; k < j; ++k) words.push_back(pre[k].word);
      const auto k = best(scores);
      entities.push_back({labels[k], scores[k], join_pieces(words), pre[i].start, pre[j - 1].end, -1});
      i = j;
    }
  }
  if (aggregation != Aggregation::none) entities = group(entities, join_pieces);
  std::vector<TokenEntity> kept;
  for (TokenEntity& e : entities) {
    if (std::find(ignore.begin(), ignore.end(), e.label) == ignore.end()) kept.push_back(std::move(e));
  }
  return kept;
}

}  // namespace model
