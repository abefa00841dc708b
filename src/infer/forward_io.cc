// The forward subcommand's library layer (see forward_io.h).
#include "infer/forward_io.h"

#include <algorithm>
#include <cstring>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "infer/pipeline.h"

namespace infer {

std::string forward_safetensors(model::RoFormer<float>& m, const io::WeightStore& in) {
  const model::RoFormerConfig& c = m.config();
  const std::string& path = in.path();
  const io::Tensor& ids_t = in.at("input_ids");
  if (ids_t.shape.size() != 2 || ids_t.shape[0] < 1 || ids_t.shape[1] < 1) {
    throw io::Error(path + ": input_ids has shape " + io::shape_str(ids_t.shape) + ", expected (batch, tokens)");
  }
  const int64_t B = ids_t.shape[0], T = ids_t.shape[1];
  if (T > c.max_position_embeddings) {
    throw io::Error(path + ": " + std::to_string(T) + " tokens, more than the model's max_position_embeddings (" +
                    std::to_string(c.max_position_embeddings) + ")");
  }
  const std::vector<int64_t> ids = in.i64("input_ids");
  const std::vector<int64_t> types = in.contains("token_type_ids") ? in.i64("token_type_ids", {B, T})
                                                                    : std::vector<int64_t>(B * T, 0);
  const std::vector<int64_t> mask = in.contains("attention_mask") ? in.i64("attention_mask", {B, T})
                                                                   : std::vector<int64_t>(B * T, 1);
  auto check_range = [&](const char* name, const std::vector<int64_t>& v, int64_t lo, int64_t hi) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < lo || v[i] > hi) {
        throw io::Error(path + ": " + name + "[" + std::to_string(i / T) + ", " + std::to_string(i % T) + "] = " +
                        std::to_string(v[i]) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
    }
  };
  check_range("input_ids", ids, 0, c.vocab_size - 1);
  check_range("token_type_ids", types, 0, c.type_vocab_size - 1);
  check_range("attention_mask", mask, 0, 1);

  m.set_keep(model::Keep::all);  // every layer's hidden states and attention maps are written out
  m.forward({.ids = ids.data(), .token_types = types.data(), .attention_mask = mask.data(), .B = B, .T = T});
  const int64_t L = c.num_hidden_layers, H = c.hidden_size, n = c.num_attention_heads, N = B * T;
  std::vector<float> hidden(static_cast<size_t>((L + 1) * N * H));
  for (int64_t l = 0; l <= L; ++l) std::copy_n(m.hidden_state(l), N * H, hidden.data() + l * N * H);
  std::vector<float> attentions;
  const bool softmax = m.attention(0) != nullptr;
  if (softmax) {
    const int64_t A = B * n * T * T;
    attentions.resize(static_cast<size_t>(L * A));
    for (int64_t l = 0; l < L; ++l) std::copy_n(m.attention(l), A, attentions.data() + l * A);
  }
  std::vector<io::TensorView> out = {
      {"input_ids", io::DType::I64, {B, T}, ids.data()},
      {"attention_mask", io::DType::I64, {B, T}, mask.data()},
      {"token_type_ids", io::DType::I64, {B, T}, types.data()},
      {"embedding_output", io::DType::F32, {B, T, c.embedding_size}, m.embedding_output()},
      {"hidden_states", io::DType::F32, {L + 1, B, T, H}, hidden.data()},
  };
  if (softmax) out.push_back({"attentions", io::DType::F32, {L, B, n, T, T}, attentions.data()});
  out.push_back({"last_hidden_state", io::DType::F32, {B, T, H}, m.hidden_state(L)});
  if (m.logits()) out.push_back({"logits", io::DType::F32, {B, T, c.vocab_size}, m.logits()});
  if (m.head_logits()) out.push_back({"head_logits", io::DType::F32, c.head->logits_shape(c, B, T), m.head_logits()});
  return io::safetensors_bytes(out, {{"format", "pt"}});
}

void forward_file(const std::string& model_dir, const std::string& inputs_path, const std::string& out_path,
                  const model::LinearOptions& linears) {
  LoadOptions lo;
  static_cast<model::LinearOptions&>(lo) = linears;
  lo.tokenizer = false;
  const auto pipeline = Pipeline::load(model_dir, lo);
  const io::SafeTensors inputs(inputs_path);
  io::write_file_atomic(out_path, forward_safetensors(pipeline->model(), inputs));
}

}  // namespace infer
