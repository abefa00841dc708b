// The RoFormer encoder models, composed from the blocks of blocks.h: embeddings → L × (self-attention,
// feed-forward) → heads (MLM, RoFormer-Sim's pooler). The masked LM (RoFormerForMaskedLM), the causal
// LM (is_decoder: causal mask, next-token targets), RoFormer-V2 (RMS norms, tied-only head) and
// RoFormer-Sim (UniLM mask, pooler) are the same composition with different configs. llm.c style:
// parameters and gradients are arenas (params.h), activations are kept for the backward.
//
// Templated on float (the engine) and double (whole-model gradient checks). Shapes: B batch,
// T tokens, N = B·T, E embedding size, H hidden size, V vocabulary, L layers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/weights.h"
#include "rope/rope.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/params.h"

namespace model {

// One batch; every array is (B, T) row-major.
struct Inputs {
  const int64_t* ids = nullptr;
  const int64_t* token_types = nullptr;     // null: all type 0
  const int64_t* attention_mask = nullptr;  // 1 real, 0 padding; null: all real
  const int64_t* targets = nullptr;         // null: no loss; kIgnoreIndex entries are not counted
  int64_t B = 0, T = 0;
  // Global index of row 0 in the whole batch (across micro-batches and processes): dropout masks are
  // keyed by global row, so a row trains the same however the batch is split.
  int64_t row0 = 0;
};

constexpr int64_t kIgnoreIndex = -100;

// What a forward keeps. all: every activation, for backward() and the per-layer views
// (hidden_state(l) of every layer, attention(l)). outputs: inference only; the layers share one set
// of scratch buffers, so activation memory does not grow with depth, and only embedding_output(),
// the last hidden state, logits() and pooler_output() remain readable.
enum class Keep { all, outputs };

template <typename T>
class RoFormer {
 public:
  explicit RoFormer(const RoFormerConfig& cfg);  // validates cfg (std::invalid_argument)
  ~RoFormer();
  RoFormer(const RoFormer&) = delete;  // the pointer structs point into this object's arenas
  RoFormer& operator=(const RoFormer&) = delete;

  const RoFormerConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& layout() const { return layout_; }
  std::vector<T> params, grads;  // arenas, param_count(layout()) elements each (grads: once allocated)
  Params<T> p, g;                // pointers into params / grads
  // The gradient arena is allocated on first use (zero_grad, backward) or by this call, for code that
  // keeps pointers into it (the optimizer): an inference-only model never holds it.
  void allocate_grads();

  // HF's initialisation: N(0, initializer_range) for matrices and embeddings (the padding row 0),
  // zero biases, unit LayerNorm weights. A pure function of seed.
  void init_weights(uint64_t seed);
  // Copies every tensor of the layout from an HF state dict (any io::WeightStore: model.safetensors,
  // a sharded index, pytorch_model.bin; F16/BF16 are widened). HF's fixed sinusoidal table and a stored
  // tied decoder weight/bias are accepted; a missing, misshaped or unexpected tensor throws io::Error.
  // RoFormerModel checkpoints (names without "roformer.", no MLM head) load as encoder-only models:
  // forward then stops at the last hidden state and logits() is null. Tensors whose names start with
  // one of other_heads (e.g. "classifier.", "pooler.") are left for the caller. mlm_head false skips
  // the MLM head (cls.predictions.*, and RoFormer-V2's tied one): forward stops at the last hidden state.
  // Tensors of the layout whose names start with one of `optional` may be absent: they keep their
  // values (fine-tuning a pre-trained encoder initialises the new classifier.* head, then loads); an
  // optional prefix covering "cls.predictions." keeps the MLM head even when none of it is stored.
  void load(const io::WeightStore& weights, const std::vector<std::string>& other_heads = {}, bool mlm_head = true,
            const std::vector<std::string>& optional = {});
  bool has_mlm_head() const { return has_mlm_head_; }

  void set_keep(Keep keep);  // takes effect with the next forward
  Keep keep() const { return keep_; }

  // Runs the network on a batch; with targets, returns the mean cross-entropy over counted
  // positions (0 when none count). training turns dropout on, with masks drawn from dropout_seed.
  // Throws std::invalid_argument on bad shapes and std::out_of_range on out-of-range ids.
  double forward(const Inputs& in, bool training = false, uint64_t dropout_seed = 0);
  // Adds d(loss)/d(params) of the last forward (which must have had targets) to grads.
  void backward();
  // Adds the gradients given d(loss)/d(logits) (B, T, V) of the last forward (a task's own loss).
  void backward_from_logits(const T* d_logits);
  // Adds the gradients given d(loss)/d(class_logits()) (B, labels) of a sequence classifier's forward.
  void backward_from_class_logits(const T* d_logits);
  // Adds the gradients given d(loss)/d(last hidden state) (B, T, H) (heads outside the model), plus
  // d(loss)/d(pooler output) (B, H) when d_pooled is given.
  void backward_from_hidden(const T* d_hidden, const T* d_pooled = nullptr);
  void zero_grad();
  // When set, called during the backward with an arena offset: every gradient at or above it is now
  // final (after layer l's backward: layer l's first parameter, the head's and the pooler's lying
  // above it; after the embeddings: 0). Data-parallel training starts reducing those gradients while
  // the backward goes on (train/trainer.cc).
  std::function<void(int64_t offset)> on_grads_final;
  const std::vector<int64_t>& layer_offsets() const { return layer_offsets_; }  // each layer's first parameter

  // Views of the last forward.
  const T* embedding_output() const;      // (B, T, E) after the embedding LayerNorm (before dropout)
  const T* hidden_state(int64_t l) const; // (B, T, H), l = 0 (encoder input) .. L; only l = L with Keep::outputs
  const T* attention(int64_t l) const;    // (B, n, T, T) softmax probabilities of layer l (null for linear
                                          // attention); Keep::all only
  const T* logits() const;                // (B, T, V); null without an MLM head
  const T* pooler_output() const;         // (B, H) with a pooler (RoFormer-Sim), else null
  const T* class_logits() const;          // (B, labels) of a sequence classifier, else null
  int64_t counted() const;                // targets counted by the last loss

 private:
  struct Activations;
  void embed(const Inputs& in, bool training, uint64_t dropout_seed);  // masks, dropout, embeddings → h[0]
  void encode();                                                      // the blocks over h[0]
  void run_heads();
  AttentionContext<T> attention_context(int64_t layer) const;
  RoFormerConfig cfg_;
  std::vector<ParamInfo> layout_;
  std::vector<int64_t> layer_offsets_;  // arena offset of each layer's first parameter
  std::unique_ptr<Activations> act_;
  std::unique_ptr<rope::Plan> rope_;  // RoPE models; dynamic NTK follows the batch length
  bool rope_dynamic_ = false;
  int64_t rope_length_ = -1;             // the length the plan's dynamic-NTK frequencies are for
  std::unique_ptr<Scratch<T>> scratch_;  // backward buffers, made on the first backward
  bool has_mlm_head_ = true;
  Keep keep_ = Keep::all;
  std::vector<std::vector<T>> favor_;  // performer: L × (performer_features, D) random features
};

extern template class RoFormer<float>;
extern template class RoFormer<double>;

}  // namespace model
