// A sentence pair whose second text is longer than the model takes, as overlapping windows: the
// tokenizers library's encode with truncation="only_second", stride and return_overflowing_tokens,
// which transformers' run_qa and question-answering pipeline use for a question and a long context.
// Window k is [CLS] first [SEP] second[k·(W − stride), k·(W − stride) + W) [SEP], W = max_length −
// |first| − 3, up to the window that reaches the second text's end; token types 0 then 1, offsets as
// Encoding::offsets (each text's own code points; (0, 0) for the specials).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/roformer_tokenizer.h"

namespace text {

// Throws std::invalid_argument when the first text leaves no room (W <= 0), or when the second text
// needs several windows and none can hold more than `stride` of its tokens (W <= stride: the
// tokenizers library refuses that too), naming the first text's token count; or when the tokenizer
// has no [CLS] or [SEP].
std::vector<Encoding> encode_windows(const RoFormerTokenizer& tok, std::string_view first, std::string_view second,
                                     int64_t max_length, int64_t stride);

// For a window of encode_windows: whether token t is part of the second text (type 1, not [SEP]).
inline bool in_second(const Encoding& e, size_t t) { return e.token_type_ids[t] == 1 && !e.special_tokens_mask[t]; }

// Where a window's tokens sit in the second text: per token its offsets ({-1, -1} outside the second
// text) and its word, numbered from 0 in the window (a token and the "##" pieces after it; -1
// outside), which the question-answering pipeline's align_to_words widens an answer to.
struct SecondSpans {
  std::vector<std::array<int64_t, 2>> offsets;
  std::vector<int64_t> words;
};
SecondSpans second_spans(const Encoding& window);

}  // namespace text
