// The RoFormer model configuration, with Hugging Face's config.json field names and defaults, plus
// this engine's own fields: the position encoding (rope / sinusoidal / learned / none) and the RoPE
// base and layout. One config describes both models built from the same blocks: the masked LM
// (RoFormerForMaskedLM) and the causal LM (is_decoder: causal mask, same head, next-token targets).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace model {

class HeadDef;  // model/head.h

enum class PositionEncoding { rope, sinusoidal, learned, none };
// config.json's string fields, parsed once (config.cc) so that blocks compare enums, not strings.
enum class Activation { gelu, relu };                     // hidden_act
enum class NormType { layer_norm, rms_norm };             // norm_type
enum class AttentionType { softmax, linear, performer };  // attention_type
enum class PoolerActivation { none, linear, tanh };       // pooler_activation (absent: none)
// problem_type, HF's, of sequence classification: softmax cross-entropy, sigmoid BCE or MSE; none for
// the other heads and models.
enum class ProblemType { none, single_label_classification, multi_label_classification, regression };

struct RoFormerConfig {
  int64_t vocab_size = 50000, embedding_size = 768, hidden_size = 768, num_hidden_layers = 12,
          num_attention_heads = 12, intermediate_size = 3072, max_position_embeddings = 1536,
          type_vocab_size = 2, pad_token_id = 0;
  Activation hidden_act = Activation::gelu;  // gelu (exact erf) or relu
  // RoFormer-V2 (junnyu's roformer package names): "rms_norm" = parameter-free RMS norms and an MLM
  // head that is the tied matmul only; use_bias false = no biases in any linear layer.
  NormType norm_type = NormType::layer_norm;
  bool use_bias = true;
  // RoFormer-Sim (junnyu's roformer package): a pooler on the [CLS] state, linear or tanh (none: no
  // pooler); with is_decoder, attention follows UniLM's seq2seq mask built from token_type_ids
  // (bert4keras UniLM_Mask): key j is visible from query i iff cumsum(tt)[j] <= cumsum(tt)[i].
  PoolerActivation pooler_activation = PoolerActivation::none;
  bool unilm_mask() const { return is_decoder && pooler_activation != PoolerActivation::none; }
  double hidden_dropout_prob = 0.1, attention_probs_dropout_prob = 0.1, initializer_range = 0.02,
         layer_norm_eps = 1e-12;
  bool rotary_value = false;
  bool is_decoder = false;  // causal LM: causal attention mask
  // The decoder of an encoder-decoder (HF RoFormerForCausalLM inside an EncoderDecoderModel): each
  // layer has a cross-attention sub-layer (crossattention.*) between self-attention and the
  // feed-forward, over the encoder's output (RoFormer::set_memory). Softmax attention only.
  bool add_cross_attention = false;
  // Engine field: rotate cross-attention queries (0..T−1) and keys (0..Tk−1) too. Off by default, as
  // in HF RoFormer, which rotates self-attention only: two sequences' positions are not comparable.
  bool rotate_cross_attention = false;
  // Not in HF RoFormer (which always uses interleaved RoPE, base 10000): written to config.json
  // under these names, which transformers keeps as plain attributes and otherwise ignores.
  PositionEncoding position_encoding = PositionEncoding::rope;
  double rope_theta = 10000.0;
  bool rope_half_layout = false;  // pairs (i, i + D/2) instead of (2i, 2i + 1)
  // Context extension for inference beyond the trained length (rope::apply_scaling_spec): "none",
  // "linear:F", "ntk:F", "dynamic-ntk:F:ORIG", "yarn:F:ORIG", "llama3:F:ORIG".
  std::string rope_scaling = "none";
  // Attention (RoFormer §3.3): "softmax"; "linear" (φ = elu + 1) or "performer" (FAVOR+ positive
  // random features, performer_features of them per head, fixed per layer from a seed), both with
  // RoPE on the feature maps in the numerator only (eq. 19) when position_encoding is rope, with the
  // same librope settings (rope_theta, rope_half_layout, rope_scaling) as softmax attention.
  AttentionType attention_type = AttentionType::softmax;
  int64_t performer_features = 64;
  // The task head on the encoder's last hidden state (model/head.h: sequence or token classification,
  // question answering, multiple choice), from config.json's architectures; null for the masked and
  // causal LMs and RoFormerModel, which end in the language-model head or in the hidden states.
  // labels is id2label in id order for a head that uses labels (one entry, "LABEL_0", for
  // regression); problem_type is HF's, for sequence classification (none for the other heads).
  const HeadDef* head = nullptr;
  std::vector<std::string> labels;
  ProblemType problem_type = ProblemType::none;
  // The head of an architecture name or task name (model::head_named), labels and problem_type left as they are.
  void set_head(const std::string& name);
  bool has_head(const char* architecture) const;
  bool sequence_classifier() const { return has_head("RoFormerForSequenceClassification"); }
  int64_t num_labels() const { return static_cast<int64_t>(labels.size()); }

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  bool rms_norm() const { return norm_type == NormType::rms_norm; }

  // Checks sizes and ranges; throws std::invalid_argument naming the field.
  void validate() const;
  // HF config.json: known HF and engine fields are read, the generic PretrainedConfig fields
  // (architectures, torch_dtype, ...) are accepted, and any other field is an error, as are bad
  // JSON, wrong types and out-of-range values. Throws io::Error naming the file and the field.
  static RoFormerConfig from_json_file(const std::string& path);
  static RoFormerConfig from_json_text(const std::string& text, const std::string& origin);
  // config.json text that RoFormerForMaskedLM / RoFormerForCausalLM (or, with labels,
  // RoFormerForSequenceClassification).from_pretrained loads.
  std::string to_json() const;
};

const char* position_encoding_name(PositionEncoding pe);
// "rope", "sinusoidal", "learned" or "none"; throws std::invalid_argument otherwise.
PositionEncoding parse_position_encoding(const std::string& name);
// config.json's names ("gelu", "layer_norm", "softmax", ...); the parsers throw std::invalid_argument
// naming the field and the names it takes.
const char* activation_name(Activation a);
Activation parse_activation(const std::string& name);
const char* norm_type_name(NormType n);
NormType parse_norm_type(const std::string& name);
const char* attention_type_name(AttentionType a);
AttentionType parse_attention_type(const std::string& name);
const char* pooler_activation_name(PoolerActivation a);  // "linear", "tanh"; "" for none
PoolerActivation parse_pooler_activation(const std::string& name);
// HF's names ("single_label_classification", ...; "" for none).
const char* problem_type_name(ProblemType p);
ProblemType parse_problem_type(const std::string& name);

}  // namespace model
