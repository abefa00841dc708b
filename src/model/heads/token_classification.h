// Token classification's predictions as transformers' token-classification pipeline makes them
// (TokenClassificationPipeline.postprocess, v4.40) from one text's logits: softmax scores per token,
// then by aggregation_strategy
//   none     one entity per token that is not special: its argmax label, score, token, span;
//   simple   those grouped: consecutive tokens of one type (B-X then I-X..., or the same plain label)
//            form an entity_group, scored by the mean of their scores;
//   first    words first (a word = a token and the sub-tokens after it): a word takes its first
//   average  token's scores, the mean of its tokens' scores, or the scores of its token with the
//   max      highest score; then grouped as simple;
// and entities labelled O (ignore_labels) dropped. Spans are characters (code points) of the text.
// transformers accepts the strategy's name in any case.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace model {

enum class Aggregation { none, simple, first, average, max };
Aggregation parse_aggregation(const std::string& name);  // std::invalid_argument naming the choices
const char* aggregation_name(Aggregation a);

// One token of the encoded text, as the tokenizer gave it.
struct PipelineToken {
  std::string token;                   // its string ("##ing" for a continuation piece)
  std::array<int64_t, 2> offsets{};    // [start, end) code points of the text
  bool special = false;                // [CLS], [SEP], padding: no entity
  bool unknown = false;                // [UNK]: the word is the text's own characters
};

struct TokenEntity {
  std::string label;  // "entity" (none, or a word of first/average/max before grouping) or "entity_group"
  double score = 0;
  std::string word;   // the token, or the tokens joined as WordPiece decodes them
  int64_t start = 0, end = 0;
  int64_t index = -1;  // none: the token's position in the encoding
};

// `text` is the input (UTF-8), logits (tokens.size(), labels.size()) row-major; `join` turns tokens
// into the text a word or group shows (the tokenizer's convert_tokens_to_string); entities whose
// label (or group) is in `ignore` are dropped.
std::vector<TokenEntity> token_entities(const std::string& text, const std::vector<PipelineToken>& tokens,
                                        const float* logits, const std::vector<std::string>& labels,
                                        Aggregation aggregation,
                                        const std::function<std::string(const std::vector<std::string>&)>& join,
                                        const std::vector<std::string>& ignore = {"O"});

}  // namespace model
