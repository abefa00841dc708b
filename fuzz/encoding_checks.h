// Invariants of a text::Encoding that hold for every input (shared by fuzz_vocab and fuzz_tokenizer).
#pragma once

#include <string>

#include "fuzz_common.h"
#include "text/roformer_tokenizer.h"

namespace fuzz {

// Every field has one entry per token; each id is what the tokenizer's token_to_id gives for its token
// (HF: input_ids = convert_tokens_to_ids(tokens)); id_to_token and to_json never throw.
inline void check_encoding(const text::RoFormerTokenizer& tok, const text::Encoding& e) {
  const size_t n = e.input_ids.size();
  FUZZ_CHECK(e.tokens.size() == n && e.token_type_ids.size() == n && e.attention_mask.size() == n &&
                 e.special_tokens_mask.size() == n,
             "encoding fields differ in length");
  for (size_t i = 0; i < n; ++i) {
    FUZZ_CHECK(e.input_ids[i] == tok.token_to_id(e.tokens[i]),
               "token '" + e.tokens[i] + "' has id " + std::to_string(e.input_ids[i]) + " but token_to_id gives " +
                   std::to_string(tok.token_to_id(e.tokens[i])));
    FUZZ_CHECK(e.attention_mask[i] == 0 || e.attention_mask[i] == 1, "attention_mask");
    FUZZ_CHECK(e.token_type_ids[i] == 0 || e.token_type_ids[i] == 1, "token_type_ids");
    (void)tok.id_to_token(e.input_ids[i]);
  }
  (void)e.to_json(true);
}

}  // namespace fuzz
