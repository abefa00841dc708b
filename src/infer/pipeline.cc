// infer::Pipeline: model directory loading, length-sorted batching, pooling, similarity and the
// sequence-classification head (see pipeline.h).
#include "infer/pipeline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "io/mapped_file.h"
#include "model/head.h"
#include "rope/rope.hpp"
#include "text/windows.h"

namespace infer {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::vector<std::vector<size_t>> plan_batches(const std::vector<size_t>& lengths, int64_t batch_size,
                                              double max_padding) {
  if (batch_size < 1) throw std::invalid_argument("batch size must be at least 1");
  if (!(max_padding >= 0 && max_padding <= 1)) throw std::invalid_argument("max_padding must be in [0, 1]");
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<size_t>> batches;
  double real = 0;  // tokens of the open batch; its longest is the last added (ascending order)
  for (size_t i : order) {
    const double n = batches.empty() ? 0 : static_cast<double>(batches.back().size());
    const double padded = (n + 1) * static_cast<double>(lengths[i]);
    const bool fits = n > 0 && n < static_cast<double>(batch_size) &&
                      padded - (real + static_cast<double>(lengths[i])) <= max_padding * padded;
    if (!fits) {
      batches.emplace_back();
      real = 0;
    }
    batches.back().push_back(i);
    real += static_cast<double>(lengths[i]);
  }
  return batches;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("cosine: vectors of different sizes");
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return dot / std::max(std::sqrt(na) * std::sqrt(nb), 1e-8);
}

void check_classify_function(const std::string& function) {
  if (function != "auto" && function != "softmax" && function != "sigmoid" && function != "none") {
    throw io::Error("--function " + function + ": expected auto, softmax, sigmoid or none");
  }
}

std::optional<Classifier> make_classifier(const model::RoFormerConfig& config, const std::string& config_path,
                                          const std::string& function) {
  check_classify_function(function);
  if (!config.sequence_classifier()) return std::nullopt;
  Classifier c;
  c.labels = config.labels;
  // transformers' TextClassificationPipeline default function_to_apply reads the problem_type that
  // config.json states (our config's default for one label is regression, the pipeline's is sigmoid),
  // but a regression head's score is its raw output (the pipeline's sigmoid would map every score into (0, 1)).
  std::string problem;
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json j = io::read_json_object(config_path);
    if (j.contains("problem_type") && j["problem_type"].is_string()) problem = j["problem_type"].get<std::string>();
  }
  c.function = problem == "regression"                                               ? "none"
               : problem == "multi_label_classification" || c.num_labels() == 1 ? "sigmoid"
                                                                                    : "softmax";
  if (function != "auto") c.function = function;
  return c;
}

std::vector<double> Classifier::scores(const float* logits) const {
  return model::apply_class_function(function, logits, num_labels());
}

std::unique_ptr<Pipeline> Pipeline::load(const std::string& dir, const LoadOptions& options) {
  check_classify_function(options.classify_function);  // before anything is read
  load::Request r;
  r.weights = options.weights;
  r.tokenizer = options.tokenizer;
  r.tokenizer_options.jieba_dict = options.jieba_dict;
  r.mlm_head = options.mlm_head;
  r.configure = [&](model::RoFormerConfig& c) {
    if (options.rope_scaling.empty()) return;
    if (c.position_encoding != model::PositionEncoding::rope) {
      throw io::Error(dir + "/config.json: --rope-scaling needs a RoPE model; this one has no rotary positions");
    }
    c.rope_scaling = options.rope_scaling;
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      throw io::Error("--rope-scaling " + options.rope_scaling + ": " + e.what());
    }
  };
  // The pipelines read only the last hidden state, logits, pooler and class logits: one layer's activations.
  r.inference = static_cast<const model::LinearOptions&>(options);
  r.release_packed_arena = options.release_packed_arena;
  load::Model m = load::roformer(dir, r);
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->dir_ = dir;
  p->config_ = m.config;
  if (m.tokenizer) {
    p->tokenizer_ = &m.wordpiece("the encoder commands");
    p->tokenizer_holder_ = std::move(m.tokenizer);
  }
  p->model_ = std::move(m.model);
  if (p->model_) p->classifier_ = make_classifier(p->config_, dir + "/config.json", options.classify_function);
  if (p->model_) p->sentence_ = read_sentence_modules(dir, p->config_.hidden_size);
  return p;
}

const text::RoFormerTokenizer& Pipeline::tokenizer() const {
  if (!tokenizer_) throw std::logic_error("infer::Pipeline: loaded without a tokenizer");
  return *tokenizer_;
}

model::RoFormer<float>& Pipeline::model() {
  if (!model_) throw std::logic_error("infer::Pipeline: loaded without weights");
  return *model_;
}

text::EncodeOptions encode_options(const Truncate& t, int64_t limit) {
  text::EncodeOptions eo;
  if (!t.enabled) return eo;
  eo.truncation = text::Truncation::LongestFirst;
  eo.max_length = t.max_length > 0 ? std::min(t.max_length, limit) : limit;
  eo.truncation_side = t.side;
  return eo;
}

std::vector<text::Encoding> Pipeline::encode(const std::vector<std::string>& texts, const Truncate& truncate) const {
  const text::EncodeOptions eo = encode_options(truncate, max_length());
  std::vector<text::Encoding> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(tokenizer().encode(t, eo));
  check(out);
  return out;
}

std::vector<text::Encoding> Pipeline::encode_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                   const Truncate& truncate) const {
  const text::EncodeOptions eo = encode_options(truncate, max_length());
  std::vector<text::Encoding> out;
  out.reserve(pairs.size());
  for (const auto& [a, b] : pairs) out.push_back(tokenizer().encode_pair(a, b, eo));
  check(out);
  return out;
}

int64_t Pipeline::max_length() const {
  int64_t limit = config_.max_position_embeddings;
  if (config_.rope_scaling != "none") {
    rope_config rc;
    rope_config_init(&rc, 2);
    rope::apply_scaling_spec(config_.rope_scaling, &rc);
    limit = static_cast<int64_t>(std::floor(rc.scaling.factor * static_cast<double>(config_.max_position_embeddings)));
  }
  if (sentence_ && sentence_->max_seq_length > 0) limit = std::min(limit, sentence_->max_seq_length);
  return limit;
}

int64_t Pipeline::embedding_size(Pooling pooling) const {
  if (pooling == Pooling::automatic && sentence_) return sentence_->dimension(config_.hidden_size);
  return config_.hidden_size;
}

std::string Pipeline::pooling_name(Pooling pooling) const {
  if (pooling != Pooling::automatic) return infer::pooling_name(pooling);
  return sentence_ ? sentence_->pooling_name() : infer::pooling_name(Pooling::cls);
}

std::string Pipeline::prompt(const std::string& name) const {
  const std::string wanted = name.empty() && sentence_ ? sentence_->default_prompt_name : name;
  if (wanted.empty()) return "";
  if (sentence_ && sentence_->prompts.count(wanted)) return sentence_->prompts.at(wanted);
  std::string names;
  if (sentence_) {
    for (const auto& [n, text] : sentence_->prompts) {
      if (!names.empty()) names += ", ";
      names += n;
    }
  }
  throw io::Error("prompt_name '" + wanted + "' is not a prompt of " + dir_ + "/config_sentence_transformers.json" +
                  (names.empty() ? " (it has none)" : " (" + names + ")"));
}

int64_t Pipeline::prompt_tokens(const std::string& prompt) const {
  if (!sentence_ || sentence_->include_prompt || prompt.empty()) return 0;
  return static_cast<int64_t>(tokenizer().encode(prompt).size()) - 1;
}

void Pipeline::check(const std::vector<text::Encoding>& encodings) const {
  const int64_t limit = max_length();
  for (size_t i = 0; i < encodings.size(); ++i) {
    const text::Encoding& e = encodings[i];
    if (static_cast<int64_t>(e.size()) > limit) {
      throw InputError(i, std::to_string(e.size()) + " tokens, more than " +
                              (config_.rope_scaling == "none"
                                   ? "the model's max_position_embeddings (" + std::to_string(limit) +
                                         "); --truncate cuts inputs to it (--rope-scaling extends RoPE models, e.g. "
                                         "--rope-scaling linear:2)"
                                   : std::to_string(limit) + " (max_position_embeddings " +
                                         std::to_string(config_.max_position_embeddings) + " x the factor of " +
                                         config_.rope_scaling + "); --truncate cuts inputs to it"));
    }
    for (size_t t = 0; t < e.size(); ++t) {
      if (e.input_ids[t] < 0 || e.input_ids[t] >= config_.vocab_size) {
        const std::string what = e.tokens[t].empty() ? "token id " + std::to_string(e.input_ids[t])
                                                      : "token '" + e.tokens[t] + "' (id " + std::to_string(e.input_ids[t]) + ")";
        throw InputError(i, what + " at position " + std::to_string(t) + " is outside the model's vocabulary of " +
                                std::to_string(config_.vocab_size));
      }
      if (e.token_type_ids[t] >= config_.type_vocab_size) {
        throw InputError(i, "token type " + std::to_string(e.token_type_ids[t]) + " is outside the model's " +
                                std::to_string(config_.type_vocab_size) + " token types");
      }
    }
  }
}

void Pipeline::run(const std::vector<text::Encoding>& encodings, int64_t batch_size,
                   const std::function<void(const std::vector<size_t>& rows, int64_t T)>& visit, bool logits,
                   const std::vector<std::vector<int64_t>>* logit_positions) {
  model::RoFormer<float>& m = model();
  std::vector<size_t> lengths;
  for (const auto& e : encodings) lengths.push_back(e.size());
  const int64_t pad = tokenizer_ && tokenizer_->pad_id() >= 0 ? tokenizer_->pad_id() : config_.pad_token_id;
  std::vector<std::vector<size_t>> batches;
  if (input_order_) {
    for (size_t at = 0; at < lengths.size(); at += static_cast<size_t>(batch_size)) {
      batches.emplace_back();
      for (size_t i = at; i < std::min(lengths.size(), at + static_cast<size_t>(batch_size)); ++i) batches.back().push_back(i);
    }
  } else {
    batches = plan_batches(lengths, batch_size, max_padding_);
  }
  for (const std::vector<size_t>& rows : batches) {
    const int64_t B = static_cast<int64_t>(rows.size());
    int64_t T = 0;
    for (size_t r : rows) T = std::max<int64_t>(T, static_cast<int64_t>(lengths[r]));
    std::vector<int64_t> ids(B * T, pad), types(B * T, 0), mask(B * T, 0);
    for (int64_t b = 0; b < B; ++b) {
      const text::Encoding& e = encodings[rows[b]];
      for (size_t t = 0; t < e.size(); ++t) {
        ids[b * T + t] = e.input_ids[t];
        types[b * T + t] = e.token_type_ids[t];
        mask[b * T + t] = e.attention_mask[t];
      }
    }
    // A mask of ones masks nothing: without it attention takes its unmasked path (same values).
    const bool masks = std::find(mask.begin(), mask.end(), 0) != mask.end();
    std::vector<int64_t> logit_rows;  // (b, position) → b·T + position, batch row by batch row
    for (int64_t b = 0; logit_positions && b < B; ++b) {
      for (int64_t t : (*logit_positions)[rows[b]]) logit_rows.push_back(b * T + t);
    }
    m.forward({.ids = ids.data(), .token_types = types.data(), .attention_mask = masks ? mask.data() : nullptr,
               .B = B, .T = T, .logits = logits, .logit_rows = logit_positions ? logit_rows.data() : nullptr,
               .logit_row_count = static_cast<int64_t>(logit_rows.size())});
    visit(rows, T);
  }
}

std::vector<std::vector<float>> Pipeline::embed(const std::vector<std::string>& texts, const EmbedOptions& o,
                                                const Truncate& truncate) {
  return embed_encoded(encode(texts, truncate), o);
}

std::vector<std::vector<float>> Pipeline::embed_encoded(const std::vector<text::Encoding>& encodings,
                                                        const EmbedOptions& o) {
  // The folder's modules (automatic), or one mode alone over the hidden states.
  const SentenceModules* st = o.pooling == Pooling::automatic ? sentence() : nullptr;
  const std::vector<Pooling> modes = st                                 ? st->pooling
                                     : o.pooling == Pooling::automatic ? std::vector<Pooling>{Pooling::cls}
                                                                       : std::vector<Pooling>{o.pooling};
  const bool pooler = std::find(modes.begin(), modes.end(), Pooling::pooler) != modes.end();
  if (pooler && config_.pooler_activation == model::PoolerActivation::none) {
    throw io::Error(dir_ + "/config.json: --pooling pooler needs a checkpoint with a pooler (RoFormer-Sim's "
                    "\"pooler_activation\" and roformer.pooler.dense.*); this one has none: use cls or mean");
  }
  if (!o.skip.empty() && o.skip.size() != encodings.size()) {
    throw std::invalid_argument("infer::Pipeline::embed_encoded: skip must give one count per encoding");
  }
  const bool normalize = o.normalize || (st && st->normalize);
  const int64_t H = config_.hidden_size, L = config_.num_hidden_layers;
  std::vector<std::vector<float>> out(encodings.size());
  run(encodings, o.batch_size, [&](const std::vector<size_t>& rows, int64_t T) {
    const float* h = model().hidden_state(L);  // (B, T, H)
    const float* pooled = model().pooler_output();  // (B, H) or null
    std::vector<char> keep(static_cast<size_t>(T));
    for (size_t b = 0; b < rows.size(); ++b) {
      const text::Encoding& e = encodings[rows[b]];
      const int64_t skip = o.skip.empty() ? 0 : o.skip[rows[b]];
      for (int64_t t = 0; t < T; ++t) {
        keep[t] = t >= skip && static_cast<size_t>(t) < e.size() && e.attention_mask[t] != 0;
      }
      std::vector<double> v;
      for (Pooling mode : modes) {
        pool_tokens(mode, h + static_cast<int64_t>(b) * T * H, T, H, keep,
                    pooled ? pooled + static_cast<int64_t>(b) * H : nullptr, v);
      }
      if (st) {
        for (const DenseLayer& d : st->dense) v = d.apply(v);
      }
      double norm = 0;
      for (double x : v) norm += x * x;
      norm = normalize ? std::max(std::sqrt(norm), 1e-12) : 1.0;
      std::vector<float>& dst = out[rows[b]];
      dst.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) dst[i] = static_cast<float>(v[i] / norm);
    }
  });
  return out;
}

std::vector<double> Pipeline::similarity(const std::vector<std::pair<std::string, std::string>>& pairs,
                                         const EmbedOptions& options, const Truncate& truncate) {
  std::vector<std::string> texts;
  texts.reserve(2 * pairs.size());
  for (const auto& [a, b] : pairs) {
    texts.push_back(a);
    texts.push_back(b);
  }
  std::vector<std::vector<float>> e;
  try {
    e = embed(texts, options, truncate);
  } catch (const InputError& err) {
    throw InputError(err.index / 2, std::string(err.index % 2 ? "text b: " : "text a: ") + err.what());
  }
  std::vector<double> out;
  for (size_t i = 0; i < pairs.size(); ++i) out.push_back(cosine(e[2 * i], e[2 * i + 1]));
  return out;
}

std::vector<Classification> Pipeline::classify(const std::vector<std::string>& texts, int64_t batch_size,
                                               const Truncate& truncate) {
  return classify_encoded(encode(texts, truncate), batch_size);
}

std::vector<Classification> Pipeline::classify_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                     int64_t batch_size, const Truncate& truncate) {
  return classify_encoded(encode_pairs(pairs, truncate), batch_size);
}

std::vector<Classification> Pipeline::classify_encoded(const std::vector<text::Encoding>& encodings, int64_t batch_size) {
  if (!classifier_) {
    throw io::Error(dir_ + ": the checkpoint has no sequence-classification head (the classifier.dense.* and "
                    "classifier.out_proj.* tensors that RoFormerForSequenceClassification saves)");
  }
  const int64_t labels = classifier_->num_labels();
  std::vector<Classification> out(encodings.size());
  run(encodings, batch_size, [&](const std::vector<size_t>& rows, int64_t) {
    const float* logits = model().head_logits();  // (B, labels)
    for (size_t b = 0; b < rows.size(); ++b) {
      Classification& c = out[rows[b]];
      const float* row = logits + static_cast<int64_t>(b) * labels;
      c.scores = classifier_->scores(row);
      c.probabilities = classifier_->function != "none";
      c.logits.assign(row, row + labels);
      c.label_id = std::max_element(c.scores.begin(), c.scores.end()) - c.scores.begin();
      c.label = classifier_->labels[static_cast<size_t>(c.label_id)];
      c.score = c.scores[static_cast<size_t>(c.label_id)];
    }
  });
  return out;
}

std::vector<std::vector<float>> Pipeline::token_embeddings_encoded(const std::vector<text::Encoding>& encodings,
                                                                   int64_t batch_size) {
  const int64_t H = config_.hidden_size, L = config_.num_hidden_layers;
  std::vector<std::vector<float>> out(encodings.size());
  run(encodings, batch_size, [&](const std::vector<size_t>& rows, int64_t T) {
    for (size_t b = 0; b < rows.size(); ++b) {
      const float* h = model().hidden_state(L) + static_cast<int64_t>(b) * T * H;
      out[rows[b]].assign(h, h + static_cast<int64_t>(encodings[rows[b]].size()) * H);
    }
  });
  return out;
}

std::vector<std::vector<SparseValue>> Pipeline::sparse_encoded(const std::vector<text::Encoding>& encodings,
                                                               int64_t batch_size) {
  if (!has_masked_lm_head()) {
    throw io::Error(dir_ + ": the checkpoint has no masked-LM head (cls.predictions.* of RoFormerForMaskedLM), "
                    "which sparse (SPLADE) vectors are read from");
  }
  const int64_t V = config_.vocab_size;
  std::vector<std::vector<SparseValue>> out(encodings.size());
  std::vector<float> best(static_cast<size_t>(V));
  run(encodings, batch_size, [&](const std::vector<size_t>& rows, int64_t T) {
    for (size_t b = 0; b < rows.size(); ++b) {
      const text::Encoding& e = encodings[rows[b]];
      std::fill(best.begin(), best.end(), 0.0f);  // log(1 + relu(x)) >= 0
      for (size_t t = 0; t < e.size(); ++t) {
        if (e.attention_mask[t] == 0) continue;
        const float* z = model().logits() + (static_cast<int64_t>(b) * T + static_cast<int64_t>(t)) * V;
        for (int64_t v = 0; v < V; ++v) {
          if (z[v] > 0) best[v] = std::max(best[v], static_cast<float>(std::log1p(double(z[v]))));
        }
      }
      for (int64_t v = 0; v < V; ++v) {
        if (best[v] != 0) out[rows[b]].push_back({static_cast<int32_t>(v), best[v]});
      }
    }
  }, /*logits=*/true);
  return out;
}

void Pipeline::need_head(const char* architecture) const {
  if (!config_.has_head(architecture)) {
    throw io::Error(dir_ + "/config.json: this command needs a " + architecture + " checkpoint; this one is " +
                    (config_.head ? config_.head->architecture() : config_.is_decoder ? "RoFormerForCausalLM" : "RoFormerForMaskedLM"));
  }
}

std::vector<std::vector<float>> Pipeline::head_logits_encoded(const std::vector<text::Encoding>& encodings,
                                                              int64_t batch_size) {
  if (!config_.head) throw io::Error(dir_ + "/config.json: the checkpoint has no task head (architectures)");
  // (B, T, width) per token, or (B, width) per sequence.
  const std::vector<int64_t> shape = config_.head->logits_shape(config_, 1, 1);
  const bool per_token = shape.size() == 3;
  const int64_t width = shape.back();
  std::vector<std::vector<float>> out(encodings.size());
  run(encodings, batch_size, [&](const std::vector<size_t>& rows, int64_t T) {
    const int64_t row = (per_token ? T : 1) * width;
    for (size_t b = 0; b < rows.size(); ++b) {
      const float* z = model().head_logits() + static_cast<int64_t>(b) * row;
      out[rows[b]].assign(z, z + (per_token ? static_cast<int64_t>(encodings[rows[b]].size()) : 1) * width);
    }
  });
  return out;
}

std::vector<model::TokenEntity> Pipeline::entities(const std::string& text, const text::Encoding& e,
                                                   const std::vector<float>& logits, model::Aggregation aggregation,
                                                   const std::vector<std::string>& ignore) const {
  std::vector<model::PipelineToken> tokens(e.size());
  for (size_t t = 0; t < e.size(); ++t) {
    tokens[t] = {e.tokens[t], {e.offsets[t].first, e.offsets[t].second}, e.special_tokens_mask[t] != 0,
                 e.input_ids[t] == tokenizer().unk_id()};
  }
  return model::token_entities(text, tokens, logits.data(), config_.labels, aggregation, text::wordpiece_decoder_join,
                               ignore);
}

std::vector<std::vector<model::TokenEntity>> Pipeline::token_classify(const std::vector<std::string>& texts,
                                                                      model::Aggregation aggregation, int64_t batch_size,
                                                                      const Truncate& truncate) {
  need_head("RoFormerForTokenClassification");
  const std::vector<text::Encoding> encodings = encode(texts, truncate);
  const std::vector<std::vector<float>> logits = head_logits_encoded(encodings, batch_size);
  std::vector<std::vector<model::TokenEntity>> out;
  for (size_t i = 0; i < texts.size(); ++i) out.push_back(entities(texts[i], encodings[i], logits[i], aggregation));
  return out;
}

Pipeline::Windows Pipeline::question_windows(const std::vector<Question>& questions, const QaOptions& options) const {
  const int64_t model_max = tokenizer().config().model_max_length;
  int64_t seq = options.max_seq_len > 0 ? options.max_seq_len : model_max > 0 ? std::min<int64_t>(model_max, 384) : 384;
  seq = std::min(seq, max_length());
  const int64_t stride = options.doc_stride > 0 ? options.doc_stride : std::min<int64_t>(seq / 2, 128);
  Windows w;
  for (size_t q = 0; q < questions.size(); ++q) {
    // transformers' question-answering argument handler refuses these.
    if (questions[q].question.empty()) throw InputError(q, "`question` cannot be empty");
    if (questions[q].context.empty()) throw InputError(q, "`context` cannot be empty");
    std::vector<text::Encoding> one;
    try {
      one = text::encode_windows(tokenizer(), questions[q].question, questions[q].context, seq, stride);
    } catch (const std::invalid_argument& e) {
      throw InputError(q, e.what());
    }
    for (auto& e : one) w.encodings.push_back(std::move(e)), w.owner.push_back(q);
  }
  try {
    check(w.encodings);
  } catch (const InputError& e) {
    throw InputError(w.owner[e.index], e.what());
  }
  return w;
}

std::vector<std::vector<model::PipelineAnswer>> Pipeline::answers(size_t questions, const Windows& windows,
                                                                  const std::vector<std::vector<float>>& logits,
                                                                  const QaOptions& options) const {
  std::vector<std::vector<model::PipelineAnswer>> out(questions);
  for (size_t q = 0, w = 0; q < questions; ++q) {
    std::vector<model::SpanFeature> spans;
    std::vector<std::vector<float>> z;
    for (; w < windows.encodings.size() && windows.owner[w] == q; ++w) {
      text::SecondSpans s = text::second_spans(windows.encodings[w]);
      spans.push_back({static_cast<int64_t>(q), std::move(s.offsets), std::move(s.words)});
      z.push_back(logits[w]);
    }
    out[q] = model::pipeline_answers(spans, z, options);
  }
  return out;
}

std::vector<std::vector<model::PipelineAnswer>> Pipeline::answer(const std::vector<Question>& questions,
                                                                 const QaOptions& options, int64_t batch_size) {
  need_head("RoFormerForQuestionAnswering");
  const Windows w = question_windows(questions, options);
  return answers(questions.size(), w, head_logits_encoded(w.encodings, batch_size), options);
}

}  // namespace infer
