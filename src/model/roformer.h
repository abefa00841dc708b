// The RoFormer encoder (Hugging Face RoFormerForMaskedLM architecture) built from the ops layer and
// librope: embeddings (word + token type) → LayerNorm → optional E→H projection → post-LN blocks
// with interleaved RoPE on q and k (and v with rotary_value) → MLM head tied to the word embeddings.
// This is the inference forward that the HF fixtures check layer by layer; training (backward,
// parameter arena, optimiser) builds on the same blocks next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace model {

struct RoFormerConfig {
  int64_t vocab_size = 50000, embedding_size = 768, hidden_size = 768, num_hidden_layers = 12,
          num_attention_heads = 12, intermediate_size = 3072, max_position_embeddings = 1536,
          type_vocab_size = 2, pad_token_id = 0;
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-12;
  bool rotary_value = false;

  // HF config.json field names and defaults (embedding_size null → hidden_size). Throws io::Error on
  // a missing file, bad JSON, wrong types, non-positive sizes or an unknown activation.
  static RoFormerConfig from_json_file(const std::string& path);
};

struct MlmForward {
  std::vector<float> embedding_output;                // (B, T, E) before the projection
  std::vector<std::vector<float>> hidden_states;      // L+1 × (B, T, H)
  std::vector<std::vector<float>> attentions;         // L × (B, heads, T, T)
  std::vector<float> logits;                          // (B, T, V)
};

// Forward pass of RoFormerForMaskedLM with weights named as HF saves them. ids, token_types,
// attention_mask: (B, T). Throws on missing/misshaped weights and out-of-range ids.
MlmForward roformer_mlm_forward(const RoFormerConfig& cfg, const io::SafeTensors& weights,
                                const std::vector<int64_t>& ids, const std::vector<int64_t>& token_types,
                                const std::vector<int64_t>& attention_mask, int64_t B, int64_t T);

}  // namespace model
