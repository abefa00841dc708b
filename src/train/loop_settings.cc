// The options every training recipe shares (see loop_settings.h): names, JSON and checks.
#include "loop_settings.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/enum_names.h"

namespace train {

using nlohmann::json;

constexpr base::EnumName<TrainPrecision> kTrainPrecisionNames[] = {
    {TrainPrecision::fp32, "fp32"}, {TrainPrecision::bf16, "bf16"}, {TrainPrecision::automatic, "auto"}};

const char* train_precision_name(TrainPrecision p) { return base::enum_name(kTrainPrecisionNames, p); }

TrainPrecision parse_train_precision(const std::string& name) {
  return base::parse_enum(kTrainPrecisionNames, name, "precision");
}

void LoopSettings::to_json(json& j) const {
  j["eval_every"] = eval_every, j["save_every"] = save_every, j["keep_checkpoints"] = keep_checkpoints;
  j["patience"] = patience, j["threads"] = threads, j["precision"] = train_precision_name(precision);
  j["grad_accum"] = grad_accum, j["bucket_mb"] = bucket_mb, j["zero1"] = zero1;
  j["gradient_checkpointing"] = gradient_checkpointing;
}

void LoopSettings::from_json(const json& j) {
  // Each field as it was saved, or (absent in a run saved before it existed) the value held here.
  auto read = [&j](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const json::exception& e) {
      throw std::invalid_argument(std::string("'") + key + "': " + e.what());
    }
  };
  read("eval_every", eval_every), read("save_every", save_every), read("keep_checkpoints", keep_checkpoints);
  read("patience", patience), read("threads", threads);
  read("grad_accum", grad_accum), read("bucket_mb", bucket_mb), read("zero1", zero1);
  read("gradient_checkpointing", gradient_checkpointing);
  std::string name = train_precision_name(precision);
  read("precision", name);
  try {
    precision = parse_train_precision(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("'precision': ") + e.what());
  }
}

void LoopSettings::validate(int64_t batch) const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  need(eval_every >= 0, "--eval-every must not be negative (0: at each epoch's end)");
  need(save_every >= 0, "--save-every must not be negative (0: no checkpoints between evaluations)");
  need(keep_checkpoints >= 1 && keep_checkpoints <= 1000000, "--keep-checkpoints must be in [1, 1000000]");
  need(patience >= 0, "--patience must not be negative (0: never stop early)");
  need(threads >= 0, "--threads must be >= 0");
  need(grad_accum >= 1 && (batch == 0 || grad_accum <= batch),
       batch == 0 ? "--grad-accum must be at least 1" : "--grad-accum must be in [1, --batch]");
  need(bucket_mb >= 0 && bucket_mb <= 65536, "--bucket-mb must be in [0, 65536]");
}

}  // namespace train
