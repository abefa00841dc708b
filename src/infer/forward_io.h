// `roformer forward`: one batch in, every intermediate out, in the layout of the roformer-hf
// fixtures' io.safetensors (so outputs compare directly with transformers' output_hidden_states /
// output_attentions):
//   in:  input_ids (B, T) I64; attention_mask, token_type_ids (B, T) I64 (optional: all 1 / all 0)
//   out: the three inputs, then embedding_output (B, T, E), hidden_states (L+1, B, T, H),
//        attentions (L, B, n, T, T) (softmax attention only), last_hidden_state (B, T, H),
//        logits (B, T, V) (only with an MLM head), head_logits (a task head's, model/head.h:
//        (B, labels), (B, T, labels), (B, T, 2) start/end, (B, 1) per choice row); all F32,
//        metadata {"format": "pt"}.
#pragma once

#include <string>

#include "io/weights.h"
#include "model/roformer.h"

namespace infer {

// Runs `model` on the batch held by `inputs` and returns the safetensors image described above.
// Throws io::Error naming inputs.path() for a missing input, a wrong dtype or shape, an id, type or
// mask value out of range, or T above max_position_embeddings.
std::string forward_safetensors(model::RoFormer<float>& model, const io::WeightStore& inputs);

// Loads the model of model_dir (config.json + weights) with its linear layers as `linears` asks
// (model::prepare_for_inference), runs inputs_path and writes out_path atomically (io::write_file_atomic).
void forward_file(const std::string& model_dir, const std::string& inputs_path, const std::string& out_path,
                  const model::LinearOptions& linears = {});

}  // namespace infer
