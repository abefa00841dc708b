// `roformer finetune`: flags for the fine-tuning run (src/train/finetune.h); curves.png comes from
// the report hook every training command shares (curves.h).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <memory>

#include "commands.h"
#include "enum_option.h"
#include "model_option.h"
#include "curves.h"
#include "io/atomic_file.h"
#include "plot/plot.h"
#include "train/finetune.h"

namespace roformer {

void add_finetune_command(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<train::FinetuneOptions>();
  auto resume = std::make_shared<bool>(false);
  auto no_progress = std::make_shared<bool>(false);
  CLI::App* ft = app.add_subcommand("finetune", "Fine-tune a RoFormer with a task head: sequence classification or regression, "
                                      "token classification, multiple choice, extractive question answering");
  ft->add_option("--model", o->model, "Hugging Face RoFormer directory to start from (config.json, weights, vocab.txt)")->transform(model_location());
  ft->add_option("--train", o->train, "Training examples: .jsonl, .tsv or .csv");
  ft->add_option("--validation", o->validation, "Validation examples (same format)");
  ft->add_option("--test", o->test, "Test examples to predict with --predict (labels not needed)");
  ft->add_option("--out", o->out, "Run directory: best/, checkpoints, metrics.jsonl/csv, curves.png")->capture_default_str();
  ft->add_flag("--resume", *resume, "Continue the run in --out from its latest checkpoint (options come from it)");
  add_enum_option(ft, "--task", o->task, model::parse_head_task, model::head_task_name,
                  "The head to fine-tune: text-classification (sequence classification and regression), "
                  "token-classification (JSONL words and tags, as transformers' run_ner) or multiple-choice "
                  "(JSONL SWAG rows, as run_swag) or question-answering (SQuAD JSONL, as run_qa)");
  ft->add_option("--context-column", o->choice.context, "multiple-choice: field of the context")->capture_default_str();
  ft->add_option("--header-column", o->choice.header, "multiple-choice: field that begins every ending (\"\": none)")
      ->capture_default_str();
  ft->add_option("--endings-column", o->choice.endings, "multiple-choice: the endings: fields NAME0, NAME1, ... or one "
                 "field holding a list")->capture_default_str();
  ft->add_option("--tokens-column", o->tagged.tokens, "token-classification: field of the words")->capture_default_str();
  ft->add_option("--tags-column", o->tagged.tags, "token-classification: field of the tags (names, or ids into --label-list)")
      ->capture_default_str();
  ft->add_option("--label-list", o->label_list, "token-classification: the tag names in id order (default: the "
                 "training tags sorted)")->delimiter(',');
  ft->add_flag("--label-all-tokens", o->label_all_tokens,
               "token-classification: every sub-token of a word gets its tag (B-X as I-X after the first)");
  ft->add_option("--doc-stride", o->doc_stride, "question-answering: context tokens shared by two windows of a long "
                 "context (default: min(128, max-length / 3); run_qa's 128 at --max-length 384)");
  ft->add_option("--n-best", o->qa.n_best, "question-answering: start and end candidates per window, and answers kept")
      ->capture_default_str();
  ft->add_option("--max-answer-length", o->qa.max_answer_length, "question-answering: longest answer, in tokens")
      ->capture_default_str();
  ft->add_flag("--version-2", o->qa.version_2, "question-answering: SQuAD v2.0, questions may have no answer");
  ft->add_option("--null-threshold", o->qa.null_threshold, "question-answering with --version-2: answer nothing when "
                 "the null score beats the best answer's by more than this")->capture_default_str();
  ft->add_option("--text-column", o->columns.text, "Column of the text")->capture_default_str();
  ft->add_option("--text-pair-column", o->columns.text_pair, "Column of the second text (sentence-pair tasks)");
  ft->add_option("--label-column", o->columns.label, "Column of the label (multiple-choice: the right ending's index)")
      ->capture_default_str();
  ft->add_option("--problem-type", o->problem_type,
                 "single_label_classification, multi_label_classification or regression (default: from the labels)")
      ->check(CLI::IsMember({"single_label_classification", "multi_label_classification", "regression"}));
  ft->add_option("--max-length", o->max_length, "Tokens per example after truncation (longest_first for pairs)")
      ->capture_default_str();
  ft->add_option("--batch", o->batch, "Examples per step, over all processes")->check(CLI::PositiveNumber)->capture_default_str();
  ft->add_option("--epochs", o->epochs, "Passes over the training set")->check(CLI::PositiveNumber)->capture_default_str();
  ft->add_option("--metric", o->metric,
                 "Metric that picks the best checkpoint: accuracy, f1, f1_macro, mcc, f1_micro, pearson, spearman, "
                 "mse or loss (default: accuracy, f1_micro or pearson)");
  ft->add_option("--lr", o->lr, "Peak learning rate")->capture_default_str();
  ft->add_option("--warmup-ratio", o->warmup_ratio, "Share of the steps with linear warmup")->capture_default_str();
  ft->add_option("--weight-decay", o->weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  ft->add_option("--clip", o->clip, "Global gradient-norm clip (0: off)")->capture_default_str();
  ft->add_option("--dropout", o->dropout, "Hidden and attention dropout (default: the model's)");
  ft->add_option("--rope-scaling", o->rope_scaling,
                 "RoPE scaling for inputs beyond the pre-trained length: linear:F, ntk:F, yarn:F:ORIG, ... "
                 "(default: the model's; plain extrapolation)");
  ft->add_option("--seed", o->seed, "Seed of the head's initialisation, data order and dropout")->capture_default_str();
  ft->add_flag("--predict", o->predict, "Write out/predictions.jsonl for --test with the best checkpoint (also "
               "after the run: --resume --test FILE --predict)");
  add_linear_options(ft, o->linears);  // the predictions' linear layers
  add_loop_options(ft, o->loop, "--metric");  // each evaluation also writes a checkpoint; best/ is kept apart
  ft->add_flag("--no-progress", *no_progress, "No live progress line (log lines instead)");
  ft->callback([ft, resume] {
    // The predictions are the invocation's: a finished run predicts a test set with --resume --test F --predict.
    if (*resume) refuse_options_on_resume(ft, {"--quantize", "--gemm", "--test", "--predict"});
  });
  commands.add(ft, [o, resume, no_progress] {
    o->progress = !*no_progress;
    const train::FinetuneResult r = train::run_finetune(*o, *resume, render_curves);
    if (r.exit_code == 0) {
      for (const auto& [name, value] : r.best_metrics) fmt::print("best {}: {:.4f}\n", name, value);
    }
    return r.exit_code;
  });
}

}  // namespace roformer
