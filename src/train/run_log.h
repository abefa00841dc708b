// The metrics log of the fine-tuning and translation runs: one EvalRecord per optimiser step in
// out/metrics.jsonl (appended and flushed as the run goes, so a crash loses at most the line being
// written), rewritten as out/metrics.csv at checkpoints. A resumed run keeps the lines up to its
// checkpoint's step and drops the rest (steps the interrupted run made after its last checkpoint).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace train {

// One optimiser step; a step with an evaluation also has val_loss and metrics (else NaN / empty).
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

}  // namespace train
