// Shared by the trainer tests (tests/train/*_test.cc): a tiny RoFormer config that trains in
// milliseconds (2 layers, hidden 16, 2 heads, no dropout).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace train_testing {

inline model::RoFormerConfig tiny_config(int64_t vocab_size, int64_t max_positions) {
  model::RoFormerConfig c;
  c.hidden_size = c.embedding_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.vocab_size = vocab_size;
  c.max_position_embeddings = max_positions;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

}  // namespace train_testing
