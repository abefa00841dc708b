// The RoFormer network, built from the ops layer and librope, for training and inference:
// embeddings (word + token type [+ learned or sinusoidal positions]) → LayerNorm → dropout →
// optional E→H projection → post-LN blocks (self-attention with RoPE on q and k, and on v with
// rotary_value; feed-forward) → MLM head (dense → activation → LayerNorm → decoder tied to the word
// embeddings). The masked LM (RoFormerForMaskedLM) and the causal LM (is_decoder: causal mask,
// next-token targets) are the same graph. llm.c style: parameters and gradients are arenas
// (params.h), activations are kept for the backward, forward/backward are explicit.
//
// Templated on float (the engine) and double (whole-model gradient checks). Shapes: B batch,
// T tokens, N = B·T, E embedding size, H hidden size, I intermediate size, V vocabulary,
// n heads of D = H / n, L layers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/weights.h"
#include "rope/rope.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/linear_attention.h"

namespace model {

// One batch; every array is (B, T) row-major.
struct Inputs {
  const int64_t* ids = nullptr;
  const int64_t* token_types = nullptr;     // null: all type 0
  const int64_t* attention_mask = nullptr;  // 1 real, 0 padding; null: all real
  const int64_t* targets = nullptr;         // null: no loss; kIgnoreIndex entries are not counted
  int64_t B = 0, T = 0;
  int64_t row0 = 0;  // global index of row 0 of this batch (a shard of a larger batch), for per-row random streams
};

constexpr int64_t kIgnoreIndex = -100;

// The model's normalisation: HF LayerNorm (weight, bias; mean and rstd kept) or, with norm_type
// rms_norm, RoFormer-V2's parameter-free RMS norm (rstd holds 1/rms, mean is unused).
template <typename T>
void norm_forward(const RoFormerConfig& c, T* out, T* mean, T* rstd, const T* in, const T* w, const T* b, int64_t N,
                  int64_t C);

// Additive sinusoidal positions start .. start + count − 1, (count, E): the paper's eq. 4 table
// scaled by 1/√E. Vaswani et al. multiply the embeddings by √d_model before adding the table; with
// the embedding LayerNorm that follows, scaling the table by 1/√E is the same network, and keeps the
// positions from drowning token embeddings initialised at N(0, 0.02²).
std::vector<float> sinusoidal_positions(const RoFormerConfig& c, int64_t start, int64_t count);

// The librope configuration of a model's RoPE: head_dim wide, base rope_theta, its layout.
rope_config rope_settings(const RoFormerConfig& c);

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
  void load(const io::WeightStore& weights, const std::vector<std::string>& other_heads = {}, bool mlm_head = true);
  bool has_mlm_head() const { return has_mlm_head_; }

  void set_keep(Keep keep);  // takes effect with the next forward
  Keep keep() const { return keep_; }

  // Runs the network on a batch; with targets, returns the mean cross-entropy over counted
  // positions (0 when none count). training turns dropout on, with masks drawn from dropout_seed.
  // Throws std::invalid_argument on bad shapes and std::out_of_range on out-of-range ids.
  double forward(const Inputs& in, bool training = false, uint64_t dropout_seed = 0);
  // Adds d(loss)/d(params) of the last forward (which must have had targets) to grads.
  void backward();
  // Adds d(loss)/d(params) to grads for a loss computed outside the model from logits(): d_logits
  // (B, T, V) is d(loss)/d(logits) of the last forward (which needs no targets; Keep::all).
  void backward_from_logits(const T* d_logits);
  void zero_grad();

  // Views of the last forward.
  const T* embedding_output() const;      // (B, T, E) after the embedding LayerNorm (before dropout)
  const T* hidden_state(int64_t l) const; // (B, T, H), l = 0 (encoder input) .. L; only l = L with Keep::outputs
  const T* attention(int64_t l) const;    // (B, n, T, T) softmax probabilities of layer l (null for linear
                                          // attention); Keep::all only
  const T* logits() const;                // (B, T, V); null without an MLM head
  const T* pooler_output() const;         // (B, H) with a pooler (RoFormer-Sim), else null
  int64_t counted() const;                // targets counted by the last loss

 private:
  struct Activations;
  struct Rope;
  void ensure_activations(int64_t B, int64_t S);
  void ensure_gradient_scratch();  // allocated on the first backward, so inference never pays for it
  RoFormerConfig cfg_;
  std::vector<ParamInfo> layout_;
  std::unique_ptr<Activations> act_;
  std::unique_ptr<Rope> rope_;
  bool has_mlm_head_ = true;
  Keep keep_ = Keep::all;
  std::vector<std::vector<T>> favor_;  // performer: L × (performer_features, D) random features
};

// The linear-attention shape of a model for (B, T) (attention_type linear or performer).
ops::LinearAttentionShape linear_attention_shape(const RoFormerConfig& c, int64_t B, int64_t T, int64_t start);
// The fixed FAVOR+ features of layer l, (performer_features, head_dim).
template <typename T>
std::vector<T> performer_features(const RoFormerConfig& c, int64_t layer);

extern template class RoFormer<float>;
extern template class RoFormer<double>;

}  // namespace model
