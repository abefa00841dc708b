// Inference on Hugging Face RoFormer model directories: load config.json + weights + the tokenizer
// files (load::roformer), encode texts, run the encoder in length-sorted,
// padded batches, and turn the outputs into embeddings (CLS or mean pooling), cosine similarities,
// and sequence-classification labels (HF RoFormerForSequenceClassification's head). Fill-mask is in
// infer/fill_mask.h, the raw forward of a safetensors batch in infer/forward_io.h.
//
//   auto p = infer::Pipeline::load("models/roformer_chinese_base");
//   auto e = p->embed({"今天天气非常好。", "hello"}, {.pooling = infer::Pooling::mean});
//
// Every problem with the model directory is an io::Error naming the file; a problem with one input
// (too long, an id the model does not know, no [MASK]) is a infer::InputError carrying its index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "infer/sentence.h"
#include "load/model_dir.h"
#include "model/config.h"
#include "model/heads/question_answering.h"
#include "model/heads/token_classification.h"
#include "model/roformer.h"
#include "text/roformer_tokenizer.h"

namespace infer {

// A problem with input number `index` (0-based, in the order given); the caller names the line.
class InputError : public std::runtime_error {
 public:
  InputError(size_t index, const std::string& what) : std::runtime_error(what), index(index) {}
  size_t index;
};

// Pooling (cls, mean, pooler, max, ..., automatic) and sentence-transformers folders: infer/sentence.h.

// How a sequence classifier's logits (the model's own head, RoFormerClassificationHead:
// h[CLS] → dense (H, H) → hidden_act → out_proj (labels, H)) become labels and scores.
struct Classifier {
  std::vector<std::string> labels;  // id2label, or LABEL_i
  // What turns logits into scores: softmax, sigmoid or none. By default as transformers'
  // text-classification pipeline (sigmoid for multi-label and for one label, else softmax), except
  // that problem_type "regression" gives the raw score (none), which the pipeline would squash.
  std::string function = "softmax";
  int64_t num_labels() const { return static_cast<int64_t>(labels.size()); }
  std::vector<double> scores(const float* logits) const;  // logits (num_labels) → scores after `function`
};

// The linear layers' options (quantize, gemm) are model::LinearOptions (model/roformer.h), applied
// by model::prepare_for_inference.
struct LoadOptions : model::LinearOptions {
  std::string jieba_dict;  // "" → the tokenizer's default ($ROFORMER_JIEBA_DICT, Debian python3-jieba)
  bool tokenizer = true;   // read vocab.txt + tokenizer files
  bool weights = true;     // read the weights (false: tokenizer and config only)
  // Load the MLM head when the checkpoint has one (fill-mask, forward's logits). Without it the
  // forward stops at the last hidden state, which is all embed, similarity and classify need.
  bool mlm_head = true;
  // RoPE scaling for inputs longer than max_position_embeddings, a spec as config.json's rope_scaling
  // ("linear:F", "ntk:F", "dynamic-ntk:F:ORIG", "yarn:F:ORIG", "llama3:F:ORIG"; "" = the checkpoint's
  // own). Inputs may then be F · max_position_embeddings tokens long.
  std::string rope_scaling;
  // Hold packed weights once (RoFormer::pack's release_arena): the arena's copies of the packed
  // matrices are released, so model().params reads zeros there. The command line sets it.
  bool release_packed_arena = false;
  // The classifier's Classifier::function: "auto" (its problem_type's default), "softmax", "sigmoid"
  // or "none" (HF pipeline's function_to_apply).
  std::string classify_function = "auto";
};

// An input longer than the model: by default an InputError (nothing is silently cut); enabled, it is
// cut to max_length tokens ([CLS]/[SEP] kept; a pair longest-first) from the right or the left, as
// transformers' pipelines with truncation=True and TEI's truncate / truncation_direction.
struct Truncate {
  bool enabled = false;
  int64_t max_length = 0;  // 0: the model's (Pipeline::max_length); larger values are the model's too
  text::Side side = text::Side::Right;
};

// The tokenizer's options for `truncate` on a model that takes `limit` tokens (Pipeline::encode's,
// and the server's for its mixed batches of texts and pairs).
text::EncodeOptions encode_options(const Truncate& truncate, int64_t limit);

struct EmbedOptions {
  // automatic: a sentence-transformers folder's modules (Pooling, Dense, Normalize), else cls. Any
  // other mode overrides the folder's: the encoder's hidden states pooled so, without its Dense and Normalize.
  Pooling pooling = Pooling::automatic;
  bool normalize = false;   // L2-normalise (torch F.normalize, eps 1e-12)
  int64_t batch_size = 16;
  // Per encoding, the tokens at its start left out of the pooling (a prompt's, where the folder's
  // Pooling says include_prompt false; Pipeline::prompt_tokens). Empty: none.
  std::vector<int64_t> skip = {};
};

// One non-zero entry of a sparse vector over the vocabulary.
struct SparseValue {
  int32_t index = 0;
  float value = 0;
};

struct Classification {
  int64_t label_id = 0;
  std::string label;
  double score = 0;
  std::vector<double> scores;  // per label id, after `function`
  bool probabilities = true;   // scores are probabilities (softmax, sigmoid), not values (function none)
  std::vector<double> logits;  // per label id, the head's raw output (TEI's raw_scores)
};

// The question-answering pipeline's options: model::QaPipelineOptions and its windows, as
// transformers' defaults: max_seq_len min(384, the tokenizer's model_max_length), doc_stride
// min(max_seq_len / 2, 128); 0 = that default. Windows longer than the model are the model's length.
struct QaOptions : model::QaPipelineOptions {
  int64_t max_seq_len = 0;
  int64_t doc_stride = 0;
};

// A question and the context to answer it from.
struct Question {
  std::string question, context;
};

// Batches of indices into `lengths`: sorted by length (stable), at most batch_size each, and a batch
// is closed early when the next sequence would make padding more than max_padding of its padded
// tokens (1: never; a server's mixed lengths waste less compute at 0.1 with forwards still large).
std::vector<std::vector<size_t>> plan_batches(const std::vector<size_t>& lengths, int64_t batch_size,
                                              double max_padding = 1);

// Cosine similarity (torch.cosine_similarity: dot / max(|a|·|b|, 1e-8)).
double cosine(const std::vector<float>& a, const std::vector<float>& b);

class Pipeline {
 public:
  // Loads DIR through load::roformer: config.json, the weights and, per options, the WordPiece
  // tokenizer (vocab.txt, tokenizer_config.json, special_tokens_map.json) and the classifier head
  // when the weights hold classifier.* tensors. Throws io::Error naming what is missing or wrong.
  static std::unique_ptr<Pipeline> load(const std::string& dir, const LoadOptions& options = {});

  const std::string& dir() const { return dir_; }
  const model::RoFormerConfig& config() const { return config_; }
  // The longest input accepted: max_position_embeddings, times the RoPE scaling factor if any; a
  // sentence-transformers folder's max_seq_length when smaller (sentence_bert_config.json).
  int64_t max_length() const;
  const text::RoFormerTokenizer& tokenizer() const;
  model::RoFormer<float>& model();
  bool has_mlm_head() const { return model_ && model_->has_mlm_head(); }
  const Classifier* classifier() const { return classifier_ ? &*classifier_ : nullptr; }
  // The sentence-transformers modules of the directory (modules.json), or null.
  const SentenceModules* sentence() const { return sentence_ ? &*sentence_ : nullptr; }
  // The size of embed's vectors with `pooling` (a folder's Dense may change it) and its name
  // ("mean", "cls+max": automatic resolved).
  int64_t embedding_size(Pooling pooling) const;
  std::string pooling_name(Pooling pooling) const;
  // The text of the folder's prompt `name` (config_sentence_transformers.json; "": its
  // default_prompt_name, or no prompt), to put before each text; io::Error naming the prompts there are.
  std::string prompt(const std::string& name) const;
  // The tokens embed leaves out of the pooling for texts that start with `prompt` (sentence-transformers:
  // the prompt's own encoding less its [SEP]), 0 where the folder's Pooling includes the prompt.
  int64_t prompt_tokens(const std::string& prompt) const;
  // tokenizer_config.json's clean_up_tokenization_spaces (HF default true), for decoding.
  bool clean_up_tokenization_spaces() const { return tokenizer().config().clean_up_tokenization_spaces; }

  // Encodes each text with [CLS]/[SEP] (pairs: [CLS] a [SEP] b [SEP]), cut as `truncate` says; throws
  // InputError for one longer than max_length() or holding an id outside the model's vocabulary.
  std::vector<text::Encoding> encode(const std::vector<std::string>& texts, const Truncate& truncate = {}) const;
  std::vector<text::Encoding> encode_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                           const Truncate& truncate = {}) const;
  void check(const std::vector<text::Encoding>& encodings) const;

  // Runs the encoder over the encodings in plan_batches order, right-padded to each batch's longest;
  // after each forward calls visit(rows, T): rows[b] is the index of batch row b, and model()'s views
  // hold the batch's outputs (B = rows.size(), T tokens). logits: run the MLM head too (fill-mask,
  // forward); without it the forward stops at the hidden states, pooler and classifier. With
  // logit_positions (per encoding, token positions; fill-mask's masks) the head runs on those tokens
  // only, and logits() holds them one after another, batch row by batch row: a long document's few
  // masks cost (masks, V) logits instead of (B·T, V).
  void run(const std::vector<text::Encoding>& encodings, int64_t batch_size,
           const std::function<void(const std::vector<size_t>& rows, int64_t T)>& visit, bool logits = false,
           const std::vector<std::vector<int64_t>>* logit_positions = nullptr);
  // The padding bound of run's batches (plan_batches' max_padding; 1, no bound, by default).
  void set_max_padding(double fraction) { max_padding_ = fraction; }
  // Batches of batch_size encodings in input order instead, padded to each batch's longest: for a
  // head that reads a padded position (multiple choice scores the last one, as HF's SequenceSummary
  // does), whose logits then equal HF's on batches its data collator padded the same way.
  void set_input_order(bool on) { input_order_ = on; }

  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts, const EmbedOptions& options,
                                        const Truncate& truncate = {});
  // embed and classify over encodings already made (and checked) by encode/encode_pairs: the HTTP
  // server tokenizes on its request threads and runs only the forward on its one model thread.
  std::vector<std::vector<float>> embed_encoded(const std::vector<text::Encoding>& encodings, const EmbedOptions& options);
  std::vector<Classification> classify_encoded(const std::vector<text::Encoding>& encodings, int64_t batch_size);
  // Every token's last hidden state, unpooled (TEI's /embed_all): per encoding, (its tokens, H) row-major.
  std::vector<std::vector<float>> token_embeddings_encoded(const std::vector<text::Encoding>& encodings,
                                                           int64_t batch_size);
  // SPLADE vectors over the vocabulary (TEI's /embed_sparse): per encoding, the entries v where
  // max over its tokens t of log(1 + relu(MLM logit[t][v])) is non-zero, ascending v. Throws io::Error
  // without a masked-LM head.
  std::vector<std::vector<SparseValue>> sparse_encoded(const std::vector<text::Encoding>& encodings, int64_t batch_size);
  // Whether the checkpoint has a masked-LM head (RoFormerForMaskedLM's; not a causal LM's), which
  // fill-mask and sparse_encoded need.
  bool has_masked_lm_head() const { return has_mlm_head() && !config_.is_decoder; }
  // Cosine similarity of the embeddings of each pair.
  std::vector<double> similarity(const std::vector<std::pair<std::string, std::string>>& pairs,
                                 const EmbedOptions& options, const Truncate& truncate = {});
  // Throws io::Error when the checkpoint has no classifier head.
  std::vector<Classification> classify(const std::vector<std::string>& texts, int64_t batch_size = 16,
                                       const Truncate& truncate = {});
  // Token classification (RoFormerForTokenClassification): each text's entities as transformers'
  // token-classification pipeline gives them (model/heads/token_classification.h), spans in code
  // points of the text. Throws io::Error when the checkpoint has another head.
  std::vector<std::vector<model::TokenEntity>> token_classify(const std::vector<std::string>& texts,
                                                              model::Aggregation aggregation, int64_t batch_size = 16,
                                                              const Truncate& truncate = {});
  // Extractive QA (RoFormerForQuestionAnswering): each question's answers (best first, top_k of them)
  // as transformers' question-answering pipeline gives them, from the windows of its context
  // (text::encode_windows). A question too long for a window is an InputError.
  std::vector<std::vector<model::PipelineAnswer>> answer(const std::vector<Question>& questions,
                                                         const QaOptions& options, int64_t batch_size = 16);

  // The steps of token_classify and answer, for a server that encodes and post-processes on its
  // request threads and runs only head_logits_encoded on its model thread.
  // Throws io::Error unless the checkpoint's head is `architecture`.
  void need_head(const char* architecture) const;
  // The task head's logits of each encoding: per token (size(), width), width its labels or 2 (QA's
  // start and end), or per sequence (width): a classifier's labels, a multiple-choice row's score.
  // Throws io::Error for a checkpoint without a task head.
  std::vector<std::vector<float>> head_logits_encoded(const std::vector<text::Encoding>& encodings, int64_t batch_size);
  // The entities of one text from its encoding and head_logits_encoded's logits, those labelled as
  // `ignore` says dropped (transformers' ignore_labels).
  std::vector<model::TokenEntity> entities(const std::string& text, const text::Encoding& encoding,
                                           const std::vector<float>& logits, model::Aggregation aggregation,
                                           const std::vector<std::string>& ignore = {"O"}) const;
  // The windows of each question (checked: an InputError names its question), their question in `owner`.
  struct Windows {
    std::vector<text::Encoding> encodings;
    std::vector<size_t> owner;
  };
  Windows question_windows(const std::vector<Question>& questions, const QaOptions& options) const;
  // Each question's answers from its windows' head_logits_encoded logits.
  std::vector<std::vector<model::PipelineAnswer>> answers(size_t questions, const Windows& windows,
                                                          const std::vector<std::vector<float>>& logits,
                                                          const QaOptions& options) const;
  // Sentence pairs, encoded [CLS] a [SEP] b [SEP] with token types 0 then 1, as the head was fine-tuned.
  std::vector<Classification> classify_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                             int64_t batch_size = 16, const Truncate& truncate = {});

 private:
  Pipeline() = default;
  std::string dir_;
  model::RoFormerConfig config_;
  std::shared_ptr<const text::Tokenizer> tokenizer_holder_;
  const text::RoFormerTokenizer* tokenizer_ = nullptr;  // tokenizer_holder_ as WordPiece
  std::unique_ptr<model::RoFormer<float>> model_;
  std::optional<Classifier> classifier_;
  std::optional<SentenceModules> sentence_;
  double max_padding_ = 1;
  bool input_order_ = false;
};

// Throws io::Error unless `function` is one LoadOptions::classify_function takes.
void check_classify_function(const std::string& function);

// The classification of a model directory's config.json (labels, problem_type) for `function`
// (LoadOptions::classify_function); nullopt when the model has no classifier head.
std::optional<Classifier> make_classifier(const model::RoFormerConfig& config, const std::string& config_path,
                                          const std::string& function = "auto");

}  // namespace infer
