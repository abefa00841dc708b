// Training checkpoints. A run directory holds numbered checkpoints and a `latest` pointer:
//   out/step-000200/config.json           HF RoFormer config (RoFormerFor{MaskedLM,CausalLM})
//   out/step-000200/model.safetensors     the parameters under HF names (+ HF's rotary table)
//   out/step-000200/tokenizer.json        the tokenizer (text::Tokenizer::save; WordPiece: vocab.txt and its configs)
//   out/step-000200/optimizer.safetensors AdamW moments and step, with the trainer state as metadata
//   out/step-000200/elapsed.json          training wall time so far (the one non-deterministic value)
//   out/latest                            "step-000200"
// Each file is written atomically (temp file, fsync, rename), and `latest` is replaced only after
// the whole checkpoint is on disk, so a crash at any point leaves the previous checkpoint intact.
// A checkpoint directory loads with RoFormerForMaskedLM.from_pretrained as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/roformer.h"
#include "text/tokenizer.h"
#include "train/optim.h"

namespace train {

// What the trainer needs, beyond weights and moments, to continue exactly where it stopped.
struct TrainerState {
  int64_t step = 0;           // optimizer steps completed
  int64_t tokens_seen = 0;
  double elapsed_s = 0;       // training wall time so far
  std::string options_json;   // the run's options, so that --resume needs only the directory
  std::string task_json;      // the driver's own state (a JSON object; fine-tuning: best metric, patience), or ""
};

// Writes checkpoint `step` of the run in `out_dir` and points `latest` at it; keeps the newest
// `keep` checkpoints and removes older ones. Returns the checkpoint directory. Throws io::Error.
std::string save_checkpoint(const std::string& out_dir, const model::RoFormer<float>& m, const AdamW& opt,
                            const text::Tokenizer& tok, const TrainerState& state, int keep = 2);
// The same for any trainable model: write_model(dir) writes its inference part (config, weights,
// tokenizer) into the new checkpoint directory.
std::string save_checkpoint(const std::string& out_dir, const model::Trainable<float>& m, const AdamW& opt,
                            const std::function<void(const std::string& dir)>& write_model, const TrainerState& state,
                            int keep = 2);

// Writes config.json, model.safetensors and the tokenizer's files (tok.save) into dir (created if
// needed): the inference part of a checkpoint.
void save_model(const std::string& dir, const model::RoFormer<float>& m, const text::Tokenizer& tok);

// The training step a checkpoint directory was written at (its optimizer.safetensors). Throws io::Error.
int64_t checkpoint_step(const std::string& dir);

// The directory `latest` points at in out_dir, or "" when there is none.
std::string latest_checkpoint(const std::string& out_dir);

// Where `--resume` continues a run directory: its latest checkpoint, the options JSON stored in it,
// and its step and loop bookkeeping (TrainerState's, read again by load_optimizer) (`what` names the
// run kind in the error). Throws io::Error when out has no checkpoint or it holds no options.
struct ResumePoint {
  std::string dir, options_json;
  int64_t step = 0;
  std::string task_json;  // TrainerState::task_json
};
ResumePoint resume_point(const std::string& out_dir, const std::string& what);

// Restores AdamW moments and step, and returns the trainer state of a checkpoint. The optimizer must
// have been built over the same layout. Throws io::Error.
TrainerState load_optimizer(const std::string& dir, const model::Trainable<float>& m, AdamW& opt);

// AdamW over the model's arena: one ParamRef per layout tensor, decay as the layout says. With an
// arena range [begin, end), only the parts of the tensors inside it (a ZeRO-1 shard; end -1: the end).
AdamW make_adamw(model::Trainable<float>& m, const AdamWConfig& cfg, int64_t begin = 0, int64_t end = -1);

}  // namespace train
