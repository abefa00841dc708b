// Fill-mask as transformers' FillMaskPipeline (v4.40) does it: for every [MASK] of a text, the top-k
// vocabulary entries by softmax probability of the MLM logits, each with the text decoded with that
// prediction in place. decode() is the slow tokenizer's decode (RoFormerTokenizer/BertTokenizer:
// tokens joined by spaces, " ##" removed, clean_up_tokenization's spacing fixes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/pipeline.h"

namespace infer {

struct Prediction {
  double score = 0;        // softmax probability at the mask position
  int32_t token = 0;       // the predicted id
  std::string token_str;   // decode([token])
  std::string sequence;    // the text with this prediction at the mask, decoded
};
using MaskPredictions = std::vector<Prediction>;  // top-k, best first (ties: lower id first)

// HF PreTrainedTokenizer.decode(ids, skip_special_tokens, clean_up_tokenization_spaces).
std::string decode(const text::RoFormerTokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special_tokens,
                   bool clean_up_tokenization_spaces);

// Per text, per [MASK] (in order), the top_k predictions. As in HF, "sequence" skips special tokens
// when the text has one mask and keeps them (other masks included) when it has several; padding ids
// are dropped. Throws io::Error without an MLM head (or for a causal LM) and InputError for a text
// without a mask token.
std::vector<std::vector<MaskPredictions>> fill_mask(Pipeline& pipeline, const std::vector<std::string>& texts,
                                                    int64_t top_k = 5, int64_t batch_size = 16, const Truncate& truncate = {});
// The same over encodings already made by Pipeline::encode (the server tokenizes on its own threads).
std::vector<std::vector<MaskPredictions>> fill_mask_encoded(Pipeline& pipeline,
                                                            const std::vector<text::Encoding>& encodings,
                                                            int64_t top_k = 5, int64_t batch_size = 16);
// Throws io::Error unless the model can fill masks: an MLM head, not a causal LM, a mask token.
void check_fill_mask(const Pipeline& pipeline);
// Per encoding, the positions of its mask tokens; InputError for one without any.
std::vector<std::vector<int64_t>> mask_positions(const Pipeline& pipeline,
                                                 const std::vector<text::Encoding>& encodings);

// One line of JSON in HF's output shape: [{"score", "token", "token_str", "sequence"}, ...] for one
// mask, a list of such lists (one per mask) for several.
std::string fill_mask_json(const std::vector<MaskPredictions>& masks);

}  // namespace infer
