// MLM masking (see mlm.h).
#include "mlm.h"

#include <stdexcept>

#include "base/random.h"

namespace data {

void mlm_mask(int64_t* ids, int64_t* labels, const uint8_t* maskable, int64_t N, const MlmMaskConfig& cfg,
              uint64_t seed, uint64_t first_counter, const uint8_t* word_start) {
  const bool probs_ok = cfg.mask_prob >= 0 && cfg.mask_prob <= 1 && cfg.mask_token_fraction >= 0 &&
                        cfg.random_token_fraction >= 0 && cfg.mask_token_fraction + cfg.random_token_fraction <= 1;
  if (!probs_ok) throw std::invalid_argument("MLM masking probabilities must lie in [0, 1] and sum to at most 1");
  if (cfg.vocab_size <= 0 || cfg.mask_token_id < 0 || cfg.mask_token_id >= cfg.vocab_size) {
    throw std::invalid_argument("MLM masking needs a vocabulary size and a [MASK] id inside it");
  }
  // Three independent streams: selection, kind of replacement, random token.
  const uint64_t s_select = base::mix64(seed), s_kind = base::mix64(seed + 1), s_token = base::mix64(seed + 2);
  uint64_t word = first_counter;  // the selection counter: the token's own, or its word's first token's
  for (int64_t i = 0; i < N; ++i) {
    const uint64_t u = first_counter + static_cast<uint64_t>(i);
    if (!word_start || i == 0 || word_start[i]) word = u;
    if (!maskable[i] || base::uniform01(s_select, word) >= cfg.mask_prob) {
      labels[i] = cfg.ignore_index;
      continue;
    }
    labels[i] = ids[i];
    const double kind = base::uniform01(s_kind, u);
    if (kind < cfg.mask_token_fraction) {
      ids[i] = cfg.mask_token_id;
    } else if (kind < cfg.mask_token_fraction + cfg.random_token_fraction) {
      ids[i] = static_cast<int64_t>(base::uniform01(s_token, u) * static_cast<double>(cfg.vocab_size));
    }
  }
}

}  // namespace data
