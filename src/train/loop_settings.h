// The options every training recipe (`roformer train`, `finetune`, `translate-train`) shares: the
// loop's cadence (evaluations, checkpoints, early stopping), threads, the training precision and the
// data-parallel fields. One struct, one JSON form (the options a run saves in its checkpoints for
// --resume) and one command-line block (tools/roformer: add_loop_options), so that each option has the
// same name and meaning on every recipe. Each recipe keeps its own defaults where they differ
// (eval_every, save_every, keep_checkpoints) by setting them in its options' initialiser.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace train {

// --precision of a training run: fp32; bf16 (mixed precision: model::Trainable::set_precision); or
// automatic ("auto": bf16 where the CPU multiplies bf16 natively, else fp32), which
// resolve_precision (run_loop.h) turns into one of the other two before the run starts.
enum class TrainPrecision { fp32, bf16, automatic };
// "fp32", "bf16", "auto"; the parser throws std::invalid_argument naming the ones there are.
const char* train_precision_name(TrainPrecision p);
TrainPrecision parse_train_precision(const std::string& name);

struct LoopSettings {
  int64_t eval_every = 0;        // steps between evaluations; 0: at each epoch's end (and the last step)
  int64_t save_every = 0;        // > 0: also a checkpoint every this many steps
  int64_t keep_checkpoints = 2;  // step-NNNNNN checkpoints kept, the newest (finetune's best/ is kept apart)
  int64_t patience = 0;          // evaluations without improvement of the best metric before stopping; 0: never
  int threads = 0;               // OpenMP threads per process; 0: all cores
  TrainPrecision precision = TrainPrecision::fp32;  // the training products
  int64_t grad_accum = 1;        // micro-batches per process and step (the batch of a step stays the same)
  double bucket_mb = 4;          // data-parallel: gradients summed in buckets of this many MiB (0: one allreduce)
  bool zero1 = false;            // data-parallel: AdamW moments sharded over the ranks (ZeRO-1)
  bool gradient_checkpointing = false;  // keep each layer's input only; the backward recomputes the rest
                                        // (model::Trainable::set_gradient_checkpointing)

  // Adds the fields to a recipe's options JSON under their names ("eval_every", ..., "precision": "fp32").
  void to_json(nlohmann::json& j) const;
  // Reads them from a saved run's options; a field that is absent (a run saved before it existed)
  // keeps the value this struct holds, the recipe's default. Throws std::invalid_argument naming the
  // field for a wrong type or an unknown precision.
  void from_json(const nlohmann::json& j);
  // std::invalid_argument naming the option; batch: the recipe's batch of a step (--grad-accum divides
  // it), 0 where batches are not counted in rows (translate-train's --max-tokens).
  void validate(int64_t batch) const;
};

}  // namespace train
