// The RoFormer parameters as one arena (llm.c): every tensor lives in a single buffer, described by
// a layout of (HF name, shape, offset, decay) entries and bound to a struct of pointers. Gradients
// and optimiser moments use the same layout, so saving, loading and the optimiser walk one list.
// Names are the ones RoFormerForMaskedLM / RoFormerForCausalLM save, so a checkpoint is a plain
// safetensors file of the arena. The decoder weight is tied to the word embeddings (not stored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace model {

struct ParamInfo {
  std::string name;            // HF state-dict name
  std::vector<int64_t> shape;  // PyTorch layout (Linear weights are (out, in))
  int64_t offset, size;        // elements into the arena
  bool decay;                  // AdamW weight decay: matrices and embeddings, not norms or biases
};

// The arena layout for a config, in a fixed order. Optional tensors appear only when used:
// position_embeddings for learned positions, embeddings_project when embedding_size != hidden_size.
std::vector<ParamInfo> param_layout(const RoFormerConfig& c);
int64_t param_count(const std::vector<ParamInfo>& layout);

// Biases are null without use_bias, norm parameters null with RMS norms, and the head's transform
// and decoder bias null for RoFormer-V2's tied-only head.
template <typename T>
struct LayerParams {
  T *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;  // (H, H), (H)
  T *ao_w, *ao_b, *ln1_w, *ln1_b;        // attention output (H, H), (H); its LayerNorm (H)
  T *ff1_w, *ff1_b, *ff2_w, *ff2_b;      // (I, H), (I), (H, I), (H)
  T *ln2_w, *ln2_b;                      // (H)
};

template <typename T>
struct Params {
  T *word, *token_type, *position;  // (V, E), (type_vocab, E), (max_positions, E) or null
  T *emb_ln_w, *emb_ln_b;           // (E)
  T *proj_w, *proj_b;               // (H, E), (H) or null
  std::vector<LayerParams<T>> layers;
  T *pooler_w, *pooler_b;                      // (H, H), (H) or null (RoFormer-Sim)
  T *head_w, *head_b, *head_ln_w, *head_ln_b;  // (E, H), (E), (E), (E)
  T* decoder_bias;                             // (V); the decoder weight is `word`
};

// Pointers into arena (param_count(layout) elements) for every tensor of the layout.
template <typename T>
Params<T> bind_params(const RoFormerConfig& c, const std::vector<ParamInfo>& layout, T* arena);

}  // namespace model
