// Sentence vectors: the ways a sequence's hidden states become one vector (Pooling), and the modules of
// a sentence-transformers folder that follow the encoder (modules.json: Pooling, Dense, Normalize;
// config_sentence_transformers.json's prompts; sentence_bert_config.json's max_seq_length), read
// once at load and applied by infer::Pipeline::embed_encoded, as SentenceTransformer.encode does.
//
//   folder/modules.json              [{"type": "sentence_transformers.models.Transformer", "path": ""},
//                                     {"type": "...Pooling", "path": "1_Pooling"}, {"type": "...Dense",
//                                     "path": "2_Dense"}, {"type": "...Normalize", "path": "3_Normalize"}]
//   folder/1_Pooling/config.json     word_embedding_dimension, pooling_mode_cls_token, _mean_tokens,
//                                    _max_tokens, _mean_sqrt_len_tokens, _weightedmean_tokens, _lasttoken,
//                                    include_prompt
//   folder/2_Dense/config.json       in_features, out_features, bias, activation_function; the weights
//                                    (linear.weight, linear.bias) in model.safetensors or pytorch_model.bin
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infer {

// How a sequence becomes one vector (over the tokens its attention mask keeps):
//   cls            the first token's hidden state
//   mean           the mean of the hidden states
//   pooler         the model's pooler (RoFormer-Sim: dense (+ tanh) on the [CLS] state; an io::Error
//                  for a checkpoint without one)
//   max            the element-wise max (sentence-transformers' max_tokens)
//   mean_sqrt_len  the sum over sqrt(tokens)
//   weightedmean   the mean weighted by position 1, 2, ... (SGPT's weighted mean)
//   lasttoken      the last kept token's hidden state
//   automatic      a sentence-transformers folder's own modules (its Pooling, Dense and Normalize),
//                  else cls ("auto" on the command line)
enum class Pooling { cls, mean, pooler, max, mean_sqrt_len, weightedmean, lasttoken, automatic };
const char* pooling_name(Pooling p);
Pooling parse_pooling(const std::string& name);  // the names above ("auto"); std::invalid_argument otherwise
// The names parse_pooling takes, for help texts and CLI11's IsMember.
std::vector<std::string> pooling_names();

// One Dense module: y = activation(W x + b), W (out, in).
struct DenseLayer {
  int64_t in = 0, out = 0;
  std::vector<float> weight;  // (out, in)
  std::vector<float> bias;    // (out), or empty
  std::string activation;     // Identity, Tanh, ReLU, Sigmoid, GELU, SiLU (torch.nn's class names)
  std::vector<double> apply(const std::vector<double>& x) const;
};

// A sentence-transformers folder's modules after its Transformer.
struct SentenceModules {
  std::vector<Pooling> pooling;  // concatenated in sentence-transformers' order: cls, max, mean,
                                 // mean_sqrt_len, weightedmean, lasttoken
  bool include_prompt = true;    // false: the prompt's tokens (and [CLS]) are left out of the pooling
  std::vector<DenseLayer> dense;
  bool normalize = false;
  int64_t max_seq_length = 0;    // sentence_bert_config.json's (0: none)
  std::map<std::string, std::string> prompts;  // config_sentence_transformers.json
  std::string default_prompt_name;             // "" when none
  int64_t dimension(int64_t hidden) const;     // the vector's size
  std::string pooling_name() const;            // "mean", "cls+max", ... (sentence-transformers' mode string)
};

// The modules of `dir` when it holds modules.json; nullopt otherwise. `hidden` is the encoder's width.
// Throws io::Error naming the file (and field) of a module it cannot run: a first module other than
// the Transformer at the folder's root, an unknown module type, a Pooling without a mode or of
// another width, a Dense whose sizes do not chain, an unknown activation, missing weights.
std::optional<SentenceModules> read_sentence_modules(const std::string& dir, int64_t hidden);

// The vector of one sequence by `mode`: h (T, H) its padded hidden states, keep[t] whether token t
// counts (its attention mask, the prompt left out where include_prompt is false), pooled the
// model's pooler output of this row (H) or null. Appends H values to `out`.
void pool_tokens(Pooling mode, const float* h, int64_t T, int64_t H, const std::vector<char>& keep,
                 const float* pooled, std::vector<double>& out);

}  // namespace infer
