// `roformer finetune`: fine-tunes a Hugging Face RoFormer directory (any RoFormerFor* checkpoint, or
// one of our pre-training checkpoints with an HF tokenizer) into RoFormerForSequenceClassification
// on labelled text files (data/labeled.h), around Trainer::step and ClassifyTask:
//   - labels: sorted class names (numerically when all are integers) for single-label and
//     multi-label tasks, one score for regression; the problem type is given or inferred (several
//     labels on a row → multi-label; any non-integer number → regression; else single-label);
//   - tokenisation with the model directory's HF tokenizer (jieba included), pairs truncated
//     longest_first to max_length; batches grouped by length with dynamic padding;
//   - AdamW with linear warmup (warmup_ratio of the steps) and linear decay over epochs;
//   - evaluation every eval_every steps or at each epoch's end (loss and metrics.h's metrics), the
//     best checkpoint by a chosen metric kept in out/best (a complete HF directory with id2label,
//     label2id, problem_type and the tokenizer files), early stopping after `patience` evaluations
//     without improvement;
//   - out/metrics.jsonl and metrics.csv, the report hook (the command line draws curves.png),
//     checkpoints at each evaluation for --resume (bit-exact, as pre-training), SIGINT/SIGTERM save
//     and stop, a non-finite loss stops with the last good checkpoint kept;
//   - test-set predictions as JSONL (label and scores, or the regression score).
// Inputs longer than the pre-trained max_position_embeddings work with RoPE: positions past the
// trained ones are extrapolated as they are, or through rope_scaling when it is set.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/labeled.h"
#include "model/head.h"
#include "model/heads/question_answering.h"
#include "model/roformer.h"
#include "train/loop_settings.h"
#include "train/run_log.h"

namespace train {

struct FinetuneOptions {
  std::string model;                 // HF RoFormer directory to start from
  std::string train, validation, test;  // labelled files (.jsonl, .tsv, .csv); test is optional
  std::string out = "runs/finetune";
  model::HeadTask task = model::HeadTask::text_classification;  // the head to fine-tune (the head registry's tasks)
  data::LabeledColumns columns;      // text-classification's columns (label: also multiple-choice's)
  data::ChoiceColumns choice;        // multiple-choice's JSONL fields (its label is columns.label)
  // question-answering (SQuAD JSONL): windows of the context, and run_qa's post-processing
  int64_t doc_stride = -1;           // context tokens two windows share; -1: min(128, max_length / 3), run_qa's 128 at 384
  model::QaPostprocess qa;           // n-best, longest answer, SQuAD v2.0 null answers and their threshold
  data::TaggedColumns tagged;        // token-classification's JSONL fields
  std::vector<std::string> label_list;  // token-classification: the tag names in id order ("" = sorted training tags)
  bool label_all_tokens = false;     // token-classification: every sub-token of a word gets its tag
  std::string problem_type;          // "" = inferred from the training labels
  int64_t max_length = 128, batch = 32, epochs = 3;
  // Evaluations (each with a checkpoint), checkpoints, early stopping (on `metric`), threads, precision,
  // data-parallel.
  LoopSettings loop;
  std::string metric;                // the best checkpoint's metric; "" = accuracy, pearson or f1_micro by problem type
  double lr = 2e-5, warmup_ratio = 0.1, weight_decay = 0.01, clip = 1.0;
  double dropout = -1;               // hidden and attention dropout; < 0 = the model's own
  std::string rope_scaling;          // "" = the model's own; e.g. "linear:2" for inputs past the trained length
  uint64_t seed = 42;
  bool predict = false;              // write out/predictions.jsonl for the test file with the best model
  model::LinearOptions linears;      // the predictions' linear layers (--quantize, --gemm)
  bool progress = true;

  // Everything but `out`, `progress` and `linears`, which a resumed run takes from its command line.
  std::string to_json() const;
  static FinetuneOptions from_json(const std::string& text);
  void validate() const;        // std::invalid_argument naming the option
};


struct FinetuneResult : LoopResult {
  std::string best_dir;    // out/best
  std::map<std::string, double> best_metrics;  // the validation metrics of the best checkpoint
};

// Runs (or with resume, continues from out's latest checkpoint) a fine-tuning run. Throws io::Error
// naming the file and line for bad data, std::invalid_argument for bad options.
FinetuneResult run_finetune(FinetuneOptions o, bool resume, const ReportHook& on_report = {});

}  // namespace train
