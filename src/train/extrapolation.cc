// Length extrapolation (see extrapolation.h).
#include "extrapolation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/corpus.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/roformer.h"
#include "load/model_dir.h"
#include "train/checkpoint.h"
#include "train/lm_text.h"
#include "train/trainer.h"

namespace train {

std::string extrapolation_spec(const std::string& method, int64_t length, int64_t train_length) {
  const double s = static_cast<double>(length) / static_cast<double>(train_length);
  char factor[32];
  std::snprintf(factor, sizeof(factor), "%.17g", s);
  const std::string orig = std::to_string(train_length);
  if (method == "none" || (s <= 1 && method != "dynamic-ntk")) return "none";
  if (method == "linear" || method == "ntk") return method + ":" + factor;
  if (method == "dynamic-ntk") return "dynamic-ntk:1:" + orig;
  if (method == "yarn" || method == "llama3") return method + ":" + factor + ":" + orig;
  throw std::invalid_argument("unknown scaling method '" + method + "' (none, linear, ntk, dynamic-ntk, yarn, llama3)");
}

ExtrapolationResult evaluate_extrapolation(const ExtrapolationOptions& o) {
  load::Model lm = load::roformer(o.checkpoint);
  if (!lm.config.is_decoder) throw std::invalid_argument(o.checkpoint + ": extrapolation needs a causal-LM checkpoint");
  ExtrapolationResult r;
  r.train_length = o.train_length;
  if (r.train_length <= 0) {
    const io::SafeTensors opt(o.checkpoint + "/optimizer.safetensors");
    if (!opt.metadata().count("options")) throw io::Error(o.checkpoint + ": no training options; pass --train-length");
    r.train_length = nlohmann::json::parse(opt.metadata().at("options")).at("seq").get<int64_t>();
  }
  for (const auto& method : o.methods) extrapolation_spec(method, 2 * r.train_length, r.train_length);  // validate
  for (int64_t L : o.lengths) {
    if (L < 1 || L > kMaxExtrapolationLength) {
      throw std::invalid_argument("--lengths: a window of " + std::to_string(L) + " tokens; lengths go from 1 to " +
                                  std::to_string(kMaxExtrapolationLength));
    }
  }
  r.methods = o.methods;
  r.lengths = o.lengths;
  const auto corpus = lm_corpus(*lm.tokenizer, o.data, o.val_fraction, lm.config.vocab_size);
  TrainOptions eval;
  eval.task = LmObjective::clm;
  for (const auto& method : o.methods) {
    std::vector<double> row;
    for (int64_t L : o.lengths) {
      const bool learned = lm.config.position_encoding == model::PositionEncoding::learned;
      const bool rope = lm.config.position_encoding == model::PositionEncoding::rope;
      if ((learned && L > lm.config.max_position_embeddings) || (!rope && method != "none")) {
        row.push_back(NAN);  // no positions to extend, or nothing for the method to scale
        continue;
      }
      model::RoFormerConfig cfg = lm.config;
      cfg.rope_scaling = extrapolation_spec(method, L, r.train_length);
      model::RoFormer<float> m(cfg);
      std::copy(lm.model->params.begin(), lm.model->params.end(), m.params.begin());
      model::prepare_for_inference(m, o.linears, lm.int8_checkpoint);
      const int64_t windows = std::max<int64_t>(1, o.tokens / L), B = std::min<int64_t>(windows, 4);
      const auto val = corpus->val_batches(B, L, (windows + B - 1) / B);
      if (val.empty()) throw io::Error(o.data + ": the validation split is shorter than " + std::to_string(L + 1) + " tokens");
      row.push_back(validation_loss(m, val, eval, *lm.tokenizer));
      std::fprintf(stderr, "%-12s length %6lld: loss %.4f, perplexity %.3f\n", method.c_str(), static_cast<long long>(L),
                   row.back(), std::exp(row.back()));
    }
    r.loss.push_back(row);
  }
  if (!o.csv.empty()) {
    std::ostringstream csv;
    csv << "method";
    for (int64_t L : r.lengths) csv << ",ppl_" << L;
    csv << '\n';
    for (size_t i = 0; i < r.methods.size(); ++i) {
      csv << r.methods[i];
      for (double v : r.loss[i]) csv << ',' << (std::isfinite(v) ? std::to_string(std::exp(v)) : "");
      csv << '\n';
    }
    io::write_file_atomic(o.csv, csv.str());
  }
  return r;
}

}  // namespace train
