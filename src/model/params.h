// The RoFormer parameters as one arena (llm.c): every tensor lives in a single buffer, described by
// a layout of (HF name, shape, offset, decay) entries and bound to a struct of pointers. Gradients
// and optimiser moments use the same layout, so saving, loading and the optimiser walk one list.
// Names are the ones RoFormerForMaskedLM / RoFormerForCausalLM save, so a checkpoint is a plain
// safetensors file of the arena. The decoder weight is tied to the word embeddings (not stored).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"

namespace io {
class WeightStore;
}

namespace model {

struct ParamInfo {
  std::string name;            // HF state-dict name
  std::vector<int64_t> shape;  // PyTorch layout (Linear weights are (out, in))
  int64_t offset, size;        // elements into the arena
  bool decay;                  // AdamW weight decay: matrices and embeddings, not norms or biases
};

// The arena layout for a config, in a fixed order. Optional tensors appear only when used:
// position_embeddings for learned positions, embeddings_project when embedding_size != hidden_size,
// and a task head's tensors (config.head) in place of the MLM head.
std::vector<ParamInfo> param_layout(const RoFormerConfig& c);
int64_t param_count(const std::vector<ParamInfo>& layout);

// RoFormerModel checkpoints store the encoder without the "roformer." prefix: whether w is one (its
// tensors under `prefix`, e.g. "encoder." in an encoder-decoder), and the name a layout tensor has in it.
bool stores_bare_encoder(const io::WeightStore& w, const std::string& prefix = "");
std::string stored_name(const std::string& layout_name, bool bare_encoder);

// Before a model is allocated from a config.json, so that a wrong or hostile size fails with its
// field's name instead of in an allocation: the checkpoint (its tensors under `prefix`, under their
// layout names or without "roformer." for a RoFormerModel checkpoint) must hold num_hidden_layers
// layers, every tensor of c's layout with the layout's shape, and, where stored with RoPE, HF's
// rotary table of (max_position_embeddings, head_dim). Heads (cls., classifier., roformer.pooler.)
// and layout names starting with one of `optional` may be absent (the loader decides about those).
// Throws io::Error naming config_path, the config field behind the mismatch (when one field's value
// explains it), the tensor and its stored shape.
void check_config_against_weights(const RoFormerConfig& c, const io::WeightStore& weights,
                                  const std::string& config_path, const std::string& prefix = "",
                                  const std::vector<std::string>& optional = {});

// What an optimiser trains (train::Trainer, AdamW, checkpoints): one parameter arena, its gradients
// and its layout. Models (RoFormer, Seq2Seq) derive from it and bind their pointer structs to the
// arenas. The layout's entries may leave gaps (a shared tensor's unused slot); param_count spans them.
template <typename T>
class Trainable {
 public:
  virtual ~Trainable() = default;
  std::vector<T> params, grads;  // arenas (grads: once allocated)
  const std::vector<ParamInfo>& layout() const { return layout_; }
  // The arena offset of each layer's first parameter, in arena order (gradient buckets follow them).
  const std::vector<int64_t>& layer_offsets() const { return layer_offsets_; }
  // When set, called during the backward with an arena offset: every gradient at or above it is now
  // final. Data-parallel training starts reducing those gradients while the backward goes on.
  std::function<void(int64_t offset)> on_grads_final;
  // The gradient arena is allocated on first use (zero_grad, backward) or by this call, for code that
  // keeps pointers into it (the optimizer): an inference-only model never holds it.
  virtual void allocate_grads() = 0;
  // The precision of training forwards and their backward: f32, or bf16 mixed precision
  // (RoFormer::set_precision). Throws std::invalid_argument naming the CPU where it lacks native bf16.
  virtual void set_precision(ops::Precision precision) = 0;
  // Gradient checkpointing (RoFormer's Keep::inputs): the training forward keeps each layer's input
  // only, and the backward recomputes the rest layer by layer; the same gradients, less memory.
  virtual void set_gradient_checkpointing(bool on) = 0;
  void zero_grad() {
    allocate_grads();
    std::fill(grads.begin(), grads.end(), T(0));
  }

 protected:
  std::vector<ParamInfo> layout_;
  std::vector<int64_t> layer_offsets_;
};

// The whole model's parameters, one block params struct each (blocks.h). Biases are null without
// use_bias, norm parameters null with RMS norms, and the head's transform and decoder bias null for
// RoFormer-V2's tied-only head. The MLM decoder weight is the word embeddings (tied).
template <typename T>
struct Params {
  EmbeddingParams<T> emb;
  std::vector<LayerParams<T>> layers;
  PoolerParams<T> pooler;  // null with no pooler (RoFormer-Sim has one)
  MlmHeadParams<T> head;  // null with a task head
  std::vector<T*> task;   // the task head's tensors (model/head.h), in HeadDef::tensors order; empty without one
};

// HF's initialisation of an arena: N(0, initializer_range²) for matrices and embeddings, zero
// biases, unit LayerNorm weights; tensor t of the layout draws from stream (seed, t), so the values
// are a pure function of the seed and the layout.
template <typename T>
void init_params(const std::vector<ParamInfo>& layout, T* arena, double initializer_range, uint64_t seed);

// Pointers into arena (param_count(layout) elements) for every tensor of the layout.
template <typename T>
Params<T> bind_params(const RoFormerConfig& c, const std::vector<ParamInfo>& layout, T* arena);

}  // namespace model
