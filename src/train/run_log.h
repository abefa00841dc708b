// The metrics log of every training run (run_loop.h), its report hook and the run's outcome: one
// EvalRecord per optimiser step in
// out/metrics.jsonl (appended and flushed as the run goes, so a crash loses at most the line being
// written), rewritten as out/metrics.csv at checkpoints. A resumed run keeps the lines up to its
// checkpoint's step and drops the rest (steps the interrupted run made after its last checkpoint).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace train {

// One optimiser step; a step with an evaluation also has val_loss and metrics (else NaN / empty).
// In the files: the metrics as val_<name>; epoch only where the data has epochs (else NaN, left out).
struct EvalRecord {
  int64_t step = 0;
  double epoch = 0, loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0, val_loss = NAN;
  std::map<std::string, double> metrics;
};

class RunLog {
 public:
  // Opens out/metrics.jsonl. resumed_step >= 0: keeps its records up to that step (a line torn by a
  // crash ends the log); < 0: starts empty. Only a writer (rank 0) touches the files.
  RunLog(const std::string& out, int64_t resumed_step, bool writer);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void append(const EvalRecord& r);  // to the history and the file
  void write_csv() const;            // out/metrics.csv of the whole history (atomic)
  const std::vector<EvalRecord>& history() const { return history_; }

 private:
  std::string out_;
  std::vector<EvalRecord> history_;
  std::FILE* file_ = nullptr;
};

// What the loop hands its report hook after each metrics.csv write: `roformer` draws curves.png.
struct RunReport {
  std::string out;                          // the run directory
  const std::vector<EvalRecord>* history = nullptr;  // every step so far
  std::string metric;                       // the headline validation metric ("": the loss alone)
  double metric_scale = 1;                  // drawn × this beside the loss (BLEU: 0.1)
  std::string title;                        // the run in a few words
  double baseline = NAN;                    // a reference loss to draw (NaN: none)
  std::string baseline_label;
};
using ReportHook = std::function<void(const RunReport&)>;

// How a training run ended (RunLoop::run); each workload's result adds its own fields.
struct LoopResult {
  int exit_code = 0;              // 0 done (or stopped early), 130 interrupted (checkpoint saved), 3 non-finite
  int64_t steps_done = 0;
  bool stopped_early = false;
  std::string checkpoint;         // the last checkpoint written (or resumed from)
  int64_t best_step = 0;          // keep_best: the step of out/best
  double best = NAN;              // its metric
  double train_loss = NAN;        // the last step's
  EvalRecord last_eval;           // the last evaluation (val_loss NaN: none yet)
};

}  // namespace train
