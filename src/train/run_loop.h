// The one training loop of every workload. Pre-training (run.cc), fine-tuning (finetune.cc) and
// translation (translate_run.cc) are recipes: each builds its data, model, task and Trainer, then
// hands the loop a Recipe (its evaluation and how a model directory is written) and LoopOptions. The
// loop owns everything around Trainer::step:
//   - the run log (run_log.h: metrics.jsonl appended as it goes, metrics.csv) and the report hook;
//   - evaluation cadence (every eval_every steps, or at each epoch's end, and at the last step);
//   - checkpoints (every save_every steps and/or at evaluations, at the last step, on a stop and on
//     an early stop; the newest keep_checkpoints kept; with ZeRO-1 the optimiser state is gathered first);
//   - the best evaluation by a metric (with keep_best, its model in out/best, replaced as a whole) and
//     early stopping after `patience` evaluations without improvement, both restored on --resume;
//   - the progress line and its ETA, and the two stops: a non-finite loss or gradient norm (status 3,
//     the last good checkpoint kept) and SIGINT/SIGTERM on any rank (checkpoint, status 130).
// Data-parallel (comm.h): every rank runs the loop on the same options; rank 0 alone writes and
// prints, and every rank evaluates, so that best/early-stopping decisions agree.
// Also here: what --resume and --threads mean for every workload (resume_options, apply_threads,
// restore_optimizer), and the lock that keeps a second process out of a run directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.h"
#include "train/loop_settings.h"
#include "train/run_log.h"
#include "train/trainer.h"

namespace train {

// What a workload plugs into the loop.
class Recipe {
 public:
  virtual ~Recipe() = default;
  // Evaluates the current weights: fills rec.val_loss and rec.metrics. Every rank calls it.
  virtual void evaluate(EvalRecord& rec) = 0;
  // Writes the inference part of a checkpoint (config, weights, tokenizer) into dir.
  virtual void write_model(const std::string& dir) = 0;
};

struct LoopOptions {
  std::string out;
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 0;     // 0: the data has no epochs (records' epoch is NaN)
  int64_t eval_every = 0;          // 0: at each epoch's end (and the last step)
  int64_t save_every = 0;          // > 0: a checkpoint every this many steps
  bool save_at_eval = true;        // a checkpoint at each evaluation
  int keep_checkpoints = 2;
  std::string metric;              // the progress line's and the report's: "": the validation loss; else a key of EvalRecord::metrics
  std::string best_metric;         // what out/best and early stopping follow, as `metric`
  bool higher_is_better = false;   // best_metric's direction
  bool keep_best = false;          // out/best: the best evaluation's model directory
  int64_t patience = 0;            // evaluations without a better best_metric before stopping (0: never)
  bool progress = true;
  RunReport report;                // title, baseline and metric scale for the hook (out, history, metric filled in)
};

class RunLoop {
 public:
  // state: the trainer state (fresh, or load_optimizer's on --resume, when resumed_from names the
  // checkpoint); its task_json carries the best/patience bookkeeping across a resume.
  RunLoop(LoopOptions o, Trainer& trainer, Recipe& recipe, TrainerState& state, std::string resumed_from,
          ReportHook hook);
  ~RunLoop();
  RunLoop(const RunLoop&) = delete;
  RunLoop& operator=(const RunLoop&) = delete;

  LoopResult run();
  const std::vector<EvalRecord>& history() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --resume: the run's options come from its latest checkpoint (`what` names the run kind in errors;
// bad saved options are an io::Error naming the checkpoint's file); take(saved, given) keeps what the
// invocation decides (out, progress, ...). Returns the checkpoint.
template <typename Options>
ResumePoint resume_options(Options& o, const std::string& what, const std::function<void(Options&, const Options&)>& take) {
  const ResumePoint at = resume_point(o.out, what);
  const Options given = o;
  try {
    o = Options::from_json(at.options_json);
  } catch (const std::exception& e) {
    throw io::Error(at.dir + "/optimizer.safetensors: " + e.what());
  }
  o.out = given.out, o.progress = given.progress;
  if (take) take(o, given);
  return at;
}

// The evaluations without improvement of the best metric that a checkpoint's loop bookkeeping
// (TrainerState::task_json) counts; 0 for none. `origin` names the checkpoint in errors.
int64_t evaluations_without_improvement(const std::string& task_json, const std::string& origin);
// --resume of a run that stopped early (`patience` evaluations without a better `metric`): true, after
// rank 0 says that there is nothing to do. Every recipe checks before it loads anything.
bool finished_early(const ResumePoint& at, int64_t patience, const std::string& out, const std::string& metric);

// Checks a run's thread count (0: all cores) and applies it; `origin` names it in the error.
void apply_threads(int threads, const std::string& resumed_from);

// --precision of a training run (loop_settings.h): fp32, bf16 (mixed precision: model::Trainable::set_precision)
// or automatic (bf16 where the CPU multiplies bf16 natively, else fp32), resolved before anything is loaded
// so that a run is refused at once where bf16 is missing, and so that its saved options hold what it
// runs (a resumed run keeps its precision, and is bit-exact only within it). Throws io::Error naming
// --precision, or the resumed run's saved precision.
TrainPrecision resolve_precision(TrainPrecision precision, const std::string& resumed_from);
// Sets m's training precision from a resolved --precision and says what it is for the run's header:
// "fp32" or "bf16 mixed precision (<oneDNN's kernel family>)".
std::string apply_precision(model::Trainable<float>& m, TrainPrecision precision);
// A recipe's model settings from its loop settings: the resolved precision (apply_precision) and
// gradient checkpointing; returns apply_precision's words, plus ", gradient checkpointing" when on.
std::string apply_loop_settings(model::Trainable<float>& m, const LoopSettings& loop);

// An advisory lock on a run directory (flock on the directory itself): while one process trains in
// it, a second one (a new run or a --resume) is refused with an io::Error naming the directory. Rank 0
// (writer) alone takes it: a resumed run at its start (a directory that does not exist is left to
// resume_options to name), a new run when it claims the directory (claim_run_directory), so that a
// run refused before then leaves nothing behind. The kernel drops the lock when the process ends,
// however it ends.
class RunDirectoryLock {
 public:
  RunDirectoryLock() = default;  // none held
  RunDirectoryLock(const std::string& out, bool writer);
  ~RunDirectoryLock();
  RunDirectoryLock(RunDirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;

 private:
  int fd_ = -1;
};

// A new run: rank 0 creates the directory and locks it; a directory that holds a run, or that is or
// holds one of the run's inputs (data files, the model it starts from), is refused (io::check_output_path).
RunDirectoryLock claim_run_directory(const std::string& out, bool writer, const std::vector<std::string>& inputs);

// Restores the checkpoint's optimiser state into the trainer (with ZeRO-1: this rank's shard of it)
// and returns its trainer state.
TrainerState restore_optimizer(const std::string& checkpoint, Trainer& trainer, const AdamWConfig& adamw);

}  // namespace train
