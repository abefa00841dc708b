// BERT-style masked-LM corruption (Devlin et al. 2019), as RoFormer pre-training uses it: each
// maskable token is selected with probability mask_prob; a selected token becomes [MASK] with
// probability 0.8, a uniformly random token with 0.1, and stays itself with 0.1. Labels hold the
// original id at selected positions and ignore_index elsewhere. Draws are counter-based on
// (seed, position), so a batch is reproduced exactly from its seed (for bit-identical resume).
#pragma once

#include <cstdint>

namespace data {

struct MlmMaskConfig {
  double mask_prob = 0.15;
  double mask_token_fraction = 0.8;    // of the selected: → [MASK]
  double random_token_fraction = 0.1;  // of the selected: → a random id; the rest stay unchanged
  int64_t mask_token_id = 0;
  int64_t vocab_size = 0;
  int64_t ignore_index = -100;
};

// ids (N) are corrupted in place, labels (N) written. maskable (N): 0 for special tokens and padding,
// which are never selected. Element i draws from counter first_counter + i of the seed's streams, so
// a slice of a larger array masked with its offset as first_counter gets exactly the larger array's
// masks. Throws std::invalid_argument on probabilities outside [0, 1] or a bad vocabulary / mask id.
//
// Whole-word masking (word_start (N) given; Cui et al., BERT-wwm): a word is selected or not as a
// whole, by the selection draw of its first token's counter (element 0 counts as a word start); each
// selected token then takes its own [MASK] / random / keep draw, as HF's
// DataCollatorForWholeWordMask. Non-maskable tokens are never selected.
void mlm_mask(int64_t* ids, int64_t* labels, const uint8_t* maskable, int64_t N, const MlmMaskConfig& cfg,
              uint64_t seed, uint64_t first_counter = 0, const uint8_t* word_start = nullptr);

}  // namespace data
