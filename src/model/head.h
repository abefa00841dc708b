// The task heads of Hugging Face's RoFormerFor* classes that sit on the encoder's last hidden state
// besides the language-model head: sequence classification, token classification, extractive
// question answering and multiple choice. A head is one file in model/heads/ that owns, for its
// class: its tensors under HF's names, its forward and backward over the hidden states, its loss,
// how a labelled row becomes its targets, its metrics, and how its logits become a prediction (with
// the prediction's JSON shape). The registry (model/heads/registry.cc, one line a head) finds a head
// by the architecture config.json names; the loader, fine-tuning, prediction, the server and Python
// reach every head through this interface, and RoFormer<T> composes whichever head its config holds.
//
// Shapes: B model rows, T tokens, H hidden size, L labels. A multiple-choice example is C model rows
// (one per choice), so its batch has B = examples · C rows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"

namespace model {

// A target that no loss counts (PyTorch's CrossEntropyLoss ignore_index): padding, unmasked MLM
// positions, special tokens and continuation sub-tokens of token classification.
constexpr int64_t kIgnoreIndex = -100;

// The task of a head, as `roformer finetune --task` names it (head_task_name: "text-classification",
// "token-classification", "question-answering", "multiple-choice"); parse_head_task throws
// std::invalid_argument naming the ones there are.
enum class HeadTask { text_classification, token_classification, question_answering, multiple_choice };
const char* head_task_name(HeadTask t);
HeadTask parse_head_task(const std::string& name);

struct HeadTensor {
  std::string name;            // HF state-dict name (e.g. "classifier.weight")
  std::vector<int64_t> shape;  // PyTorch layout
  bool decay;                  // AdamW weight decay: matrices, not biases
};

// What a head reads in one forward besides its parameters.
template <typename T>
struct HeadCall {
  const RoFormerConfig* config = nullptr;
  const T* h = nullptr;  // (B, T, H) the encoder's last hidden state
  int64_t B = 0, S = 0;  // rows, tokens a row
  // The head's own dropout (hidden_dropout_prob; off at inference): masks keyed by global row,
  // Dropout::tokens = S.
  Dropout dropout;
};

// A dense layer of a head with its (out, in) shape, for bf16 training's weight copies.
template <typename T>
struct HeadDense {
  LinearParams<T>* params;
  int64_t out, in;
};

// One model's instance of a head: parameter views into the model's arenas and the activations its
// backward needs.
template <typename T>
class HeadModule {
 public:
  virtual ~HeadModule() = default;
  // Pointers to the head's tensors in HeadDef::tensors(c) order, in the parameter and the gradient
  // arena (grads empty while the model has none).
  virtual void bind(const RoFormerConfig& c, const std::vector<T*>& params, const std::vector<T*>& grads) = 0;
  // logits (HeadDef::logits_width per row unit, see logits_count) WRITTEN from call.h.
  virtual void forward(T* logits, const HeadCall<T>& call) = 0;
  // dh (B, T, H) ACCUMULATED from dlogits (the forward's shape); parameter gradients accumulated.
  // A module keeps its own backward buffers.
  virtual void backward(T* dh, const T* dlogits, const HeadCall<T>& call) = 0;
  virtual std::vector<HeadDense<T>> dense_layers() = 0;
};

// The targets of one batch in the head's own shape (train::Batch holds them): class ids, token tags
// or answer positions in `ids` (model::kIgnoreIndex entries do not count), real values in `values`.
struct HeadTargets {
  const int64_t* ids = nullptr;
  const float* values = nullptr;
};

struct HeadLoss {
  double sum = 0;     // Σ per-target loss (the caller divides by its normaliser)
  int64_t count = 0;  // targets counted: the batch's share of the normaliser
};

// One evaluated batch as the loss saw it: the logits the forward wrote and the batch's targets.
struct HeadOutputs {
  int64_t B = 0, T = 0;
  std::vector<float> logits;
  std::vector<int64_t> ids;   // as HeadTargets::ids
  std::vector<float> values;  // as HeadTargets::values
};

// A labelled example as the tokenizer laid it out over one model row.
struct HeadExample {
  std::vector<int64_t> word_ids;  // (T) the input word of each token, -1 for [CLS], [SEP] and padding
  std::vector<int64_t> labels;    // label ids: one per example, or one per word (token classification)
  bool label_all_tokens = false;  // token classification: every sub-token of a word gets its label
};

class HeadDef {
 public:
  virtual ~HeadDef() = default;
  virtual const char* architecture() const = 0;  // "RoFormerForTokenClassification"
  virtual HeadTask task() const = 0;             // HeadTask::token_classification
  // Whether id2label / num_labels in config.json size the head (a multiple-choice head has one output).
  virtual bool uses_labels() const { return true; }
  // The head's tensors for config c, appended to the encoder's in the parameter arena.
  virtual std::vector<HeadTensor> tensors(const RoFormerConfig& c) const = 0;
  // The shape of the logits a forward over B rows of T tokens writes: (B, L), (B, T, L), (B, T, 2), (B, 1).
  virtual std::vector<int64_t> logits_shape(const RoFormerConfig& c, int64_t B, int64_t T) const = 0;
  int64_t logits_count(const RoFormerConfig& c, int64_t B, int64_t T) const;
  // Throws std::invalid_argument naming the config field this head cannot work with.
  virtual void validate(const RoFormerConfig& c) const;
  virtual std::unique_ptr<HeadModule<float>> make_f32() const = 0;
  virtual std::unique_ptr<HeadModule<double>> make_f64() const = 0;

  // ---- the task side ----
  // Σ loss over the batch's counted targets and, when dlogits is given, d(Σ loss / normaliser)/d(logits)
  // WRITTEN there. logits as forward wrote them; `group` = choices per example for multiple choice.
  virtual HeadLoss loss(const RoFormerConfig& c, const float* logits, int64_t B, int64_t T, const HeadTargets& t,
                        int64_t group, int64_t normaliser, float* dlogits) const = 0;
  // The targets (HeadTargets::ids) of one model row of a labelled example.
  virtual std::vector<int64_t> targets(const RoFormerConfig& c, const HeadExample& e) const;
  // The validation metrics over every batch's outputs (the caller adds "loss"); `group` as in loss.
  virtual std::map<std::string, double> metrics(const RoFormerConfig& c, const std::vector<HeadOutputs>& batches,
                                                int64_t group) const = 0;
  // The metric that picks the best checkpoint when none is asked for.
  virtual std::string default_metric(const RoFormerConfig& c) const = 0;
};

// The heads the engine knows, in registry order.
const std::vector<const HeadDef*>& head_registry();
// The head of an HF architecture name, or null (RoFormerForMaskedLM, RoFormerForCausalLM and
// RoFormerModel have none: they are the encoder with or without its language-model head).
const HeadDef* find_head(const std::string& architecture);
// The head of a task name ("token-classification", ...) or of an architecture; std::invalid_argument
// naming the ones there are otherwise.
const HeadDef& head_named(const std::string& name);
// The registry's head of a task.
const HeadDef& head_of(HeadTask task);

// HF's cross-entropy over rows of `width` logits with targets (`ignore` entries not counted):
// Σ −log softmax(z)[y] over counted rows; dlogits (rows, width), when given, WRITTEN with
// (softmax − onehot) / normaliser on counted rows, 0 elsewhere (ops/loss.h). A target outside
// [0, width) other than the ignored one is std::out_of_range.
HeadLoss softmax_cross_entropy(const float* logits, int64_t rows, int64_t width, const int64_t* targets,
                               int64_t ignore, int64_t normaliser, float* dlogits);

// A classifier's `n` logits as HF's pipelines turn them into scores (function_to_apply): "softmax"
// (single-label: probabilities that sum to 1), "sigmoid" (multi-label: one probability per label),
// "none" (regression: the values themselves). Every command that prints probabilities uses this.
std::vector<double> apply_class_function(const std::string& function, const float* logits, int64_t n);

// The dense layer whose weight and bias are tensors `at` and at + 1 of a head's views (bind's params
// or grads); null pointers when the views are empty (a model without gradients yet).
template <typename T>
LinearParams<T> head_dense(const std::vector<T*>& views, size_t at) {
  return views.empty() ? LinearParams<T>{} : LinearParams<T>{views[at], views[at + 1]};
}

// The registry's entry of a head: `const HeadDef& NAME_head()`, one instance of class Def.
#define ROFORMER_DEFINE_HEAD(name, Def) \
  const HeadDef& name##_head() {        \
    static const Def head;              \
    return head;                        \
  }

// The module of a head class M templated on the element type: HeadDef::make_f32 / make_f64 in one line.
template <template <typename> class M>
struct HeadModules {
  static std::unique_ptr<HeadModule<float>> f32() { return std::make_unique<M<float>>(); }
  static std::unique_ptr<HeadModule<double>> f64() { return std::make_unique<M<double>>(); }
};

}  // namespace model
