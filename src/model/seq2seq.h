// The RoFormer encoder-decoder for translation, composed of two RoFormer stacks over one arena:
// the encoder (a RoFormerModel, no head) and the decoder (a causal RoFormerForCausalLM whose layers
// add cross-attention over the encoder's output, then its LM head). It is Hugging Face's
// EncoderDecoderModel with a RoFormer encoder and decoder: the arena's tensor names are that model's
// state-dict names ("encoder.embeddings.…", "decoder.roformer.encoder.layer.0.crossattention.…",
// "decoder.cls.predictions.…"), so a checkpoint loads there as it is.
//
// Shapes: B sentence pairs, S source tokens, T target tokens, H hidden size, V vocabulary.
// Teacher forcing: the decoder reads the target shifted right behind decoder_start_token_id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/weights.h"
#include "model/config.h"
#include "model/params.h"
#include "model/roformer.h"

namespace model {

struct Seq2SeqConfig {
  RoFormerConfig encoder, decoder;  // decoder: is_decoder and add_cross_attention (set by validate's caller)
  // One word-embedding table for source and target (a joint vocabulary), which is also the decoder's
  // output matrix (always tied to the decoder's embeddings, as in HF). Needs equal vocab and E.
  bool shared_embeddings = true;
  int64_t decoder_start_token_id = 2, eos_token_id = 3, pad_token_id = 0;

  // Checks both stacks and their agreement; throws std::invalid_argument naming the field.
  void validate() const;
  // HF EncoderDecoderConfig's config.json (architectures EncoderDecoderModel, model_type
  // encoder-decoder, the two RoFormer configs under "encoder" and "decoder") plus shared_embeddings.
  std::string to_json() const;
  static Seq2SeqConfig from_json_text(const std::string& text, const std::string& origin);
  static Seq2SeqConfig from_json_file(const std::string& path);
  // A small translation model: both stacks from one RoFormer config (sizes, positions, dropout).
  static Seq2SeqConfig symmetric(const RoFormerConfig& base);
};

// One batch of sentence pairs; arrays row-major.
struct Seq2SeqInputs {
  const int64_t* source = nullptr;       // (B, S)
  const int64_t* source_mask = nullptr;  // (B, S) 1 real / 0 padding; null: all real
  const int64_t* decoder_input = nullptr;  // (B, T) decoder_start_token_id, then the target shifted right
  const int64_t* decoder_mask = nullptr;   // (B, T) or null (causal attention never sees padding after a row's end)
  int64_t B = 0, S = 0, T = 0;
  int64_t row0 = 0;  // global index of row 0, for dropout masks
};

template <typename T>
class Seq2Seq : public Trainable<T> {
 public:
  using Trainable<T>::params;
  using Trainable<T>::grads;
  using Trainable<T>::on_grads_final;

  explicit Seq2Seq(const Seq2SeqConfig& cfg);  // validates cfg (std::invalid_argument)
  Seq2Seq(const Seq2Seq&) = delete;
  Seq2Seq& operator=(const Seq2Seq&) = delete;

  const Seq2SeqConfig& config() const { return cfg_; }
  RoFormer<T>& encoder() { return *encoder_; }
  RoFormer<T>& decoder() { return *decoder_; }
  const RoFormer<T>& encoder() const { return *encoder_; }
  const RoFormer<T>& decoder() const { return *decoder_; }
  void allocate_grads() override;
  void set_precision(ops::Precision precision) override;  // the encoder's and the decoder's (RoFormer::set_precision)
  void set_gradient_checkpointing(bool on) override {  // the encoder's and the decoder's
    encoder_->set_gradient_checkpointing(on);
    decoder_->set_gradient_checkpointing(on);
  }

  void init_weights(uint64_t seed);  // HF's initialisation (RoFormer::init_weights), a pure function of seed
  // Loads an HF EncoderDecoderModel state dict (our checkpoints, or transformers' save_pretrained).
  // With shared embeddings the decoder's stored copy must equal the encoder's. Throws io::Error.
  void load(const io::WeightStore& weights);
  // Encoder, then decoder over its output: logits() (B, T, V). training turns dropout on.
  void forward(const Seq2SeqInputs& in, bool training = false, uint64_t dropout_seed = 0);
  const T* logits() const { return decoder_->logits(); }
  // Adds d(loss)/d(params) given d(loss)/d(logits) (B, T, V) of the last forward.
  void backward_from_logits(const T* d_logits);

 private:
  using Trainable<T>::layout_;
  using Trainable<T>::layer_offsets_;
  Seq2SeqConfig cfg_;
  int64_t decoder_base_ = 0;  // arena offset of the decoder's tensors
  std::vector<int64_t> source_mask_;  // (B, S) of the last forward
  std::unique_ptr<RoFormer<T>> encoder_, decoder_;
  void bind();  // (re)binds the two views to params / grads
};

// An HF EncoderDecoderModel directory: config.json and model.safetensors (the arena under its names,
// plus what HF's state dict holds besides: the decoder's copy of shared embeddings and each stack's
// rotary table), written atomically. transformers' EncoderDecoderModel.from_pretrained loads it.
void save_seq2seq(const std::string& dir, const Seq2Seq<float>& m);
// Each stack's sizes against its tensors (check_config_against_weights), before an arena is
// allocated; a decoder that shares the encoder's word embeddings stores none of its own. Throws
// io::Error naming config_path, the stack and the field. load::seq2seq loads such directories.
void check_seq2seq_against_weights(const Seq2SeqConfig& c, const io::WeightStore& weights, const std::string& config_path);

extern template class Seq2Seq<float>;
extern template class Seq2Seq<double>;

}  // namespace model
