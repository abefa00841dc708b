// The one loader of model directories: a checkpoint `roformer` wrote or a Hugging Face directory.
// config.json, the weights in any format io::open_weights reads (model.safetensors, its sharded
// index, pytorch_model.bin; int8 tensors from `roformer quantize`), the tokenizer (text::load_tokenizer)
// and the heads the caller asks for are read and checked against each other once, before the
// parameter arena is allocated, and the model comes back built, loaded and (for inference) packed.
// Every command that opens a model directory comes through here: the encoder commands and
// infer::Pipeline, eval, generate and extrapolate, fine-tuning, pre-training's --init-from and
// --resume, translation (infer::Translator) and translate-train's --resume.
//
//   load::Request r;
//   r.inference = model::LinearOptions{};          // Keep::outputs, weights packed as --quantize/--gemm say
//   load::Model m = load::roformer(dir, r);
//   m.model->forward(...);  m.tokenizer->encode_ids("...");
//
// Problems with the directory are io::Error naming the file (and the config field to blame).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/roformer.h"
#include "model/seq2seq.h"
#include "text/roformer_tokenizer.h"
#include "text/sentencepiece.h"
#include "text/tokenizer.h"

namespace load {

// What the caller asks of a model directory. The defaults: every head the weights hold, the tokenizer.
struct Request {
  bool weights = true;    // false: config.json (when present) and the tokenizer only; Model::model is null
  bool tokenizer = true;  // false: no tokenizer file is read; Model::tokenizer is null
  text::LoadOptions tokenizer_options;  // WordPiece's jieba dictionary and segmentation

  // The masked/causal LM head (cls.predictions.*, RoFormer-V2's tied head) where stored. false: the
  // forward stops at the last hidden state (embeddings, similarity, classification need no more).
  bool mlm_head = true;
  // The task head config.json's architectures names (model/head.h: sequence or token
  // classification, question answering, multiple choice): loaded into the model's own head
  // (model::RoFormer::head_logits). A config.json that declares no head although the weights hold
  // RoFormerClassificationHead's gets a sequence classifier with num_labels from the stored
  // classifier.out_proj.weight (labels LABEL_i). false: no task head is built or read.
  bool classifier = true;
  // Prefixes of stored tensors the caller does not use (a pooler when pre-training from a checkpoint).
  std::vector<std::string> skip;
  // Prefixes of layout tensors that may be absent from the weights: they keep the values init_seed
  // gave them (fine-tuning's new classifier.* head, pre-training's MLM head over an encoder).
  std::vector<std::string> optional;
  std::optional<uint64_t> init_seed;  // RoFormer::init_weights(seed) before the weights are read

  // Edits of the config before anything is checked or built (fine-tuning's labels and dropout,
  // --rope-scaling). The config is validated after; the callback may throw its own, better-named error.
  std::function<void(model::RoFormerConfig&)> configure;
  // The longest input the caller runs, 0 when it is the config's. Rotary, sinusoidal and absent
  // positions (rope_scaling none) have no table to outgrow: a longer run declares its length as
  // max_position_embeddings once the weights are checked (plain extrapolation; a fine-tuned model
  // then says the length it was trained at). A learned table is not extended: see configure.
  int64_t positions = 0;

  // Inference: the model keeps only its outputs (Keep::outputs) and its linear layers are packed as
  // these options say (model::prepare_for_inference; quantize auto runs an int8 checkpoint in int8).
  std::optional<model::LinearOptions> inference;
  bool release_packed_arena = false;  // RoFormer::pack's release_arena (the command line's inference)
};

struct Model {
  std::string dir;
  model::RoFormerConfig config;                      // as the model was built (after configure and positions)
  std::unique_ptr<model::RoFormer<float>> model;     // null when !Request::weights
  std::shared_ptr<const text::Tokenizer> tokenizer;  // null when !Request::tokenizer
  bool int8_checkpoint = false;                      // `roformer quantize` wrote the weights

  // The tokenizer as WordPiece, for what needs its pairs, token types and special tokens (the encoder
  // commands, fine-tuning); io::Error naming the directory, `who` and the tokenizer it has otherwise.
  const text::RoFormerTokenizer& wordpiece(const std::string& who) const;
};

// Loads the encoder model (masked LM, causal LM, sequence classifier, RoFormer-V2, RoFormer-Sim) of dir.
Model roformer(const std::string& dir, const Request& request = {});

// A WordPiece tokenizer can serve its vocabulary (roformer() checks every directory it loads; a
// training run checks its --vocab before it trains): the special tokens are lines of vocab.txt or
// declared added tokens, and the normalisation (do_lower_case, strip_accents) can produce the pieces.
// Throws io::Error naming `dir` (the directory or vocabulary file) and what to change.
void check_tokenizer_serves(const text::RoFormerTokenizer& tok, const std::string& dir);

struct Seq2Seq {
  std::string dir;
  model::Seq2SeqConfig config;
  std::unique_ptr<model::Seq2Seq<float>> model;          // null when !Request::weights
  std::shared_ptr<const text::SentencePiece> tokenizer;  // spm.model; null when !Request::tokenizer
  bool int8_checkpoint = false;
};

// Whether dir's config.json declares an encoder-decoder (model_type "encoder-decoder", as seq2seq
// reads); false when it is absent or unreadable (the loader then names the problem).
bool is_seq2seq(const std::string& dir);
// Whether dir's config.json says is_decoder: true (a causal LM: `roformer train`'s runs, generation).
bool is_causal_lm(const std::string& dir);

// Loads an encoder-decoder directory (config.json with "encoder" and "decoder", model.safetensors,
// spm.model). Of the Request it reads weights, tokenizer, init_seed and inference (both stacks packed;
// the arena is kept: the stacks share the word embeddings and their owner's arena).
Seq2Seq seq2seq(const std::string& dir, const Request& request = {});

}  // namespace load
