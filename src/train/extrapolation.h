// Length extrapolation of a causal LM: validation perplexity on windows longer than the trained
// length, with each RoPE context-extension method scaled to the window (`roformer eval --lengths`).
// For a window of L tokens and a trained length L0, the methods run with factor s = L / L0
// (none below L0): linear (position interpolation), NTK, YaRN and Llama 3 with original context L0,
// and dynamic NTK with factor 1 (its frequencies follow the window length by themselves).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/roformer.h"

namespace train {

// The longest window --lengths takes (the attention of one window holds heads × length² scores).
inline constexpr int64_t kMaxExtrapolationLength = int64_t{1} << 20;

struct ExtrapolationOptions {
  std::string checkpoint, data;
  std::vector<int64_t> lengths = {256, 512, 1024, 2048, 4096};
  std::vector<std::string> methods = {"none", "linear", "ntk", "dynamic-ntk", "yarn", "llama3"};
  int64_t train_length = 0;      // 0: the `seq` the checkpoint was trained with
  int64_t tokens = 16384;        // validation targets per (method, length), at least one window
  double val_fraction = 0.05;
  std::string png, csv;          // optional outputs (png: rendered by the caller, render_extrapolation in the CLI)
  model::LinearOptions linears;  // each window's model runs packed as these ask (model::prepare_for_inference)
};

struct ExtrapolationResult {
  int64_t train_length = 0;
  std::vector<std::string> methods;
  std::vector<int64_t> lengths;
  std::vector<std::vector<double>> loss;  // [method][length], nats/token; NaN where not applicable
};

// The scaling spec of `method` for windows of `length` tokens after training at train_length.
std::string extrapolation_spec(const std::string& method, int64_t length, int64_t train_length);

// Throws io::Error / std::invalid_argument on bad inputs (not a causal LM, unknown method, ...).
ExtrapolationResult evaluate_extrapolation(const ExtrapolationOptions& o);

}  // namespace train
