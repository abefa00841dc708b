// `roformer translate-train`: trains the RoFormer encoder-decoder (model/seq2seq.h) on parallel text
// around Trainer::step and Seq2SeqTask (seq2seq_task.h), with the recipe of the paper's WMT run
// (fairseq's transformer): a joint SentencePiece vocabulary (trained on both sides of the training
// pairs unless one is given), batches of --max-tokens, label-smoothed cross-entropy, Adam with
// betas (0.9, 0.98), and an inverse-square-root schedule after a linear warm-up from warmup_init_lr.
//   - validation loss (and token accuracy, perplexity) on the whole validation set, and corpus BLEU
//     (text/bleu.h, sacreBLEU's defaults) of greedy or beam translations of its first bleu_sentences
//     pairs against their raw references, every eval_every steps;
//   - a checkpoint at each evaluation (the last keep_checkpoints kept, for `roformer average`): an HF
//     EncoderDecoderModel directory (model/seq2seq.h save_seq2seq) with spm.model beside it;
//   - everything of the pre-training trainer: metrics.jsonl/metrics.csv, the report hook (the command
//     line draws curves.png), a progress line, SIGINT/SIGTERM save and stop, bit-exact --resume, a
//     non-finite loss stops with the last good checkpoint kept; data-parallel under mpirun.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "train/loop_settings.h"
#include "train/run_log.h"

namespace train {

struct TranslateTrainOptions {
  std::string train, validation;  // parallel files (data/parallel.h)
  std::string source_key = "source", target_key = "target";  // JSONL fields
  std::string out = "runs/translate";
  std::string spm;                    // a SentencePiece .model to use; "" = train one (vocab_size, spm_type)
  int64_t vocab_size = 8000;
  std::string spm_type = "unigram";   // or "bpe"
  model::RoFormerConfig model;        // both stacks: sizes, position encoding, dropout, max positions
  bool shared_embeddings = true;
  int64_t max_tokens = 4096;          // padded tokens per batch and side
  int64_t max_source_length = 256, max_target_length = 256;  // longer training pairs (in subwords) are skipped
  int64_t steps = 10000, warmup = 4000;
  double lr = 5e-4, warmup_init_lr = 1e-7, label_smoothing = 0.1;
  double beta1 = 0.9, beta2 = 0.98, weight_decay = 0.0, clip = 0.0;
  uint64_t seed = 1;
  int64_t bleu_sentences = 200, bleu_beam = 1;  // 0 sentences: no BLEU during training
  // Evaluations (each with a checkpoint), checkpoints, early stopping (on the validation loss: the run
  // keeps no best checkpoint, and BLEU covers only the first bleu_sentences pairs), threads,
  // precision, data-parallel.
  LoopSettings loop = {.eval_every = 500, .keep_checkpoints = 5};
  bool progress = true;

  std::string to_json() const;  // everything but `out` and `progress`
  static TranslateTrainOptions from_json(const std::string& text);
  void validate() const;        // std::invalid_argument naming the option
};

struct TranslateTrainResult : LoopResult {};  // last_eval holds the validation loss and BLEU

// Runs (or with resume, continues from out/latest: the options then come from the checkpoint) a
// translation training run. on_report gets the history with "bleu" as the metric.
TranslateTrainResult run_translate_training(TranslateTrainOptions o, bool resume, const ReportHook& on_report = {});

}  // namespace train
