// The pre-training recipe (run_training, see trainer.h): options and resume, tokenizer, corpus,
// model and Trainer, then the one training loop (run_loop.h), and the final sample. Data-parallel
// (comm.h): every rank runs this same code on the same options; rank 0 alone writes and prints.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "data/corpus.h"
#include "load/model_dir.h"
#include "model/decoding.h"
#include "text/char_tokenizer.h"
#include "train/agree.h"
#include "train/checkpoint.h"
#include "train/run_loop.h"
#include "train/lm_task.h"
#include "train/lm_text.h"
#include "train/trainer.h"

namespace train {
namespace {

namespace fs = std::filesystem;

// One invocation of `roformer train`: the set-up in the constructor, then the loop.
class TrainingRun : public Recipe {
 public:
  TrainingRun(TrainOptions o, std::string resume_dir)
      : o_(std::move(o)), resume_dir_(std::move(resume_dir)), resume_(!resume_dir_.empty()), writer_(comm_.rank() == 0) {
    load_data();
    build_model();
    print_header();
  }

  TrainResult run(const ReportHook& on_report);

  void evaluate(EvalRecord& rec) override {
    rec.val_loss = trainer_->evaluate().loss;
    rec.metrics["ppl"] = std::exp(rec.val_loss);
  }
  void write_model(const std::string& dir) override { save_model(dir, *m_, *text_); }

 private:
  void load_data();
  void build_model();
  void print_header() const;
  std::string corpus_size() const;  // "N training bytes, M validation bytes" (or tokens)
  void print_sample() const;

  TrainOptions o_;
  std::string resume_dir_;
  bool resume_;
  Communicator& comm_ = world();
  bool writer_;  // rank 0: writes the run directory and prints
  TrainResult result_;
  std::shared_ptr<const text::Tokenizer> text_;
  std::unique_ptr<data::WindowSource> corpus_;
  std::unique_ptr<LmTask> task_;
  std::unique_ptr<Model> m_;
  std::unique_ptr<Trainer> trainer_;
  std::string precision_;  // the header's words for the training precision (apply_precision)
  TrainerState state_;
  RunDirectoryLock lock_;  // a new run's (a resumed one is locked by run_training)
};

// Tokenizer (a resumed run reuses the saved one; --init-from takes the directory's), corpus,
// validation windows, the task.
void TrainingRun::load_data() {
  o_.validate_text();
  if (resume_) {
    load::Model saved = load::roformer(resume_dir_);
    text_ = std::move(saved.tokenizer);
    m_ = std::move(saved.model);
  } else if (!o_.init_from.empty()) {
    // The architecture, tokenizer and weights are the directory's; the task decides causal or masked.
    // An MLM head it lacks keeps its initialisation; poolers and classifier heads are not used.
    load::Request r;
    r.classifier = false;
    r.skip = {"roformer.pooler.", "pooler."};
    r.optional = {"cls."};
    r.init_seed = o_.seed;
    const bool causal = o_.model.is_decoder;
    r.configure = [causal](model::RoFormerConfig& c) { c.is_decoder = causal; };
    load::Model init = load::roformer(o_.init_from, r);
    text_ = std::move(init.tokenizer);
    o_.tokenizer = text_->kind();
    o_.model = init.config;
    m_ = std::move(init.model);
  } else if (o_.tokenizer == text::TokenizerKind::wordpiece) {
    text_ = text::load_tokenizer(o_.vocab);
    // Before training, not at the first load of its checkpoints: the vocabulary must fit its tokenizer.
    if (const auto* wp = dynamic_cast<const text::RoFormerTokenizer*>(text_.get())) load::check_tokenizer_serves(*wp, o_.vocab);
  } else if (o_.tokenizer == text::TokenizerKind::byte) {
    text_ = std::make_shared<const text::CharTokenizer>(text::CharTokenizer::byte_level());
  } else {
    text_ = std::make_shared<const text::CharTokenizer>(text::CharTokenizer::char_level_from_file(o_.data, o_.max_vocab));
  }
  if (!resume_ && o_.init_from.empty()) o_.model.vocab_size = text_->vocab_size();
  o_.validate();
  // This process's share of a step's batch (a micro-batch of it with --grad-accum).
  check_batch_fits_in_memory(o_.model, std::ceil(static_cast<double>(o_.batch) / comm_.size() / o_.loop.grad_accum), o_.seq,
                             true, "--batch " + std::to_string(o_.batch) + " with --seq " + std::to_string(o_.seq), false,
                             o_.loop.gradient_checkpointing);
  corpus_ = lm_corpus(*text_, o_.data, o_.val_fraction, o_.model.vocab_size);
  const auto val = corpus_->val_batches(o_.batch, o_.seq, o_.eval_batches);
  if (val.empty()) {
    throw io::Error(o_.data + ": the validation split is shorter than one window of " + std::to_string(o_.seq + 1) +
                    " tokens");
  }
  result_.unigram_baseline =
      data::unigram_cross_entropy(corpus_->train_unigram_counts(), data::target_counts(val, o_.model.vocab_size));
  task_ = std::make_unique<LmTask>(corpus_.get(), lm_task_config(o_, o_.model.vocab_size, *text_), val);
}

// Model, trainer (with its optimiser) and state: fresh, or from the checkpoint being resumed, or from
// --init-from's weights (both loaded with the tokenizer by load_data).
void TrainingRun::build_model() {
  check_ranks_agree(comm_, run_facts(o_.model.to_json(), *text_,
                                     {{"data", o_.data},
                                      {"init-from weights", o_.init_from.empty() ? "" : o_.init_from + "/model.safetensors"},
                                      {"resumed checkpoint", resume_ ? resume_dir_ + "/optimizer.safetensors" : ""}},
                                     o_.to_json()));
  if (!m_) {
    m_ = std::make_unique<Model>(o_.model);
    m_->init_weights(o_.seed);
  }
  precision_ = apply_loop_settings(*m_, o_.loop);
  trainer_ = std::make_unique<Trainer>(
      *m_, *task_,
      TrainerConfig{o_.schedule, o_.adamw, o_.clip, o_.seed, o_.loop.grad_accum, &comm_,
                    o_.loop.bucket_mb, o_.loop.zero1});
  if (resume_) {
    state_ = restore_optimizer(resume_dir_, *trainer_, o_.adamw);
  } else {
    lock_ = claim_run_directory(o_.out, writer_, {o_.data, o_.init_from, o_.vocab});
  }
  state_.options_json = o_.to_json();
}

void TrainingRun::print_header() const {
  if (!writer_) return;
  const TrainOptions& o = o_;
  std::string parallel = std::to_string(omp_get_max_threads()) + " threads";
  if (comm_.size() > 1) parallel = std::to_string(comm_.size()) + " processes (" + comm_.name() + ") × " + parallel;
  if (o.loop.grad_accum > 1) parallel += ", " + std::to_string(o.loop.grad_accum) + " micro-batches";
  if (trainer_->sharded()) parallel += ", AdamW moments sharded (ZeRO-1)";
  parallel += ", " + precision_;
  std::string attention = model::attention_type_name(o.model.attention_type);
  if (o.model.attention_type == model::AttentionType::performer) {
    attention += " (" + std::to_string(o.model.performer_features) + " features)";
  }
  std::fprintf(stderr,
               "%s %s: %lld parameters (%lld layers, hidden %lld, %lld heads, ff %lld, %s attention, %s positions), vocab %lld (%s)\n"
               "data %s: %s; unigram baseline %.4f nats/token\n"
               "batch %lld × seq %lld, %lld steps, lr %.2g, %s%s\n",
               resume_ ? "resuming" : "training", o.task == LmObjective::clm ? "causal LM" : "masked LM",
               static_cast<long long>(param_count(m_->layout())), static_cast<long long>(o.model.num_hidden_layers),
               static_cast<long long>(o.model.hidden_size), static_cast<long long>(o.model.num_attention_heads),
               static_cast<long long>(o.model.intermediate_size), attention.c_str(),
               model::position_encoding_name(o.model.position_encoding),
               static_cast<long long>(o.model.vocab_size), text::tokenizer_kind_name(o.tokenizer), o.data.c_str(), corpus_size().c_str(),
               result_.unigram_baseline, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
               static_cast<long long>(o.steps), o.schedule.peak_lr, parallel.c_str(),
               resume_ ? (" (from step " + std::to_string(state_.step) + ")").c_str() : "");
}

std::string TrainingRun::corpus_size() const {
  if (const auto* c = dynamic_cast<const data::Corpus*>(corpus_.get())) {
    return std::to_string(c->train_bytes()) + " training bytes, " + std::to_string(c->val_bytes()) + " validation bytes";
  }
  const auto* t = dynamic_cast<const data::TokenCorpus*>(corpus_.get());
  return std::to_string(t->train_tokens()) + " training tokens, " + std::to_string(t->val_tokens()) + " validation tokens";
}

TrainResult TrainingRun::run(const ReportHook& on_report) {
  LoopOptions lo;
  lo.out = o_.out;
  lo.total_steps = o_.steps;
  lo.eval_every = o_.loop.eval_every;
  lo.save_every = o_.loop.save_every;
  lo.keep_checkpoints = static_cast<int>(o_.loop.keep_checkpoints);
  lo.save_at_eval = false;  // evaluations rewrite metrics.csv; checkpoints come every save_every steps
  lo.patience = o_.loop.patience;  // on the validation loss (best_metric ""), lower is better
  lo.progress = o_.progress;
  lo.report.title = std::string("RoFormer ") + lm_objective_name(o_.task) + " (" + model::position_encoding_name(o_.model.position_encoding) + ", " +
                    std::to_string(o_.model.num_hidden_layers) + "×" + std::to_string(o_.model.hidden_size) + ") on " +
                    fs::path(o_.data).filename().string();
  lo.report.baseline = result_.unigram_baseline;
  lo.report.baseline_label = "unigram baseline";
  RunLoop loop(std::move(lo), *trainer_, *this, state_, resume_dir_, on_report);
  static_cast<LoopResult&>(result_) = loop.run();
  if (result_.exit_code != 0 || !writer_) return result_;
  const double val_loss = result_.last_eval.val_loss;
  std::fprintf(stderr, "%s: %lld steps, validation loss %.4f (perplexity %.2f) vs unigram baseline %.4f\n"
               "checkpoint %s; metrics %s/metrics.{jsonl,csv}; plot %s/curves.png\n",
               result_.stopped_early ? "stopped early (--patience: no lower validation loss)" : "done",
               static_cast<long long>(state_.step), val_loss, std::exp(val_loss), result_.unigram_baseline,
               result_.checkpoint.c_str(), o_.out.c_str(), o_.out.c_str());
  if (o_.task == LmObjective::clm && o_.sample_tokens > 0) print_sample();
  return result_;
}

void TrainingRun::print_sample() const {
  std::vector<int64_t> prompt;
  for (int32_t id : text_->encode_ids(o_.sample_prompt)) prompt.push_back(id);
  if (prompt.empty()) prompt.push_back(text_->specials().sep);
  // As `roformer generate`: a prompt that fills the context gets no sample, fewer tokens a note.
  const int64_t context = m_->config().max_position_embeddings, prompt_tokens = static_cast<int64_t>(prompt.size());
  if (prompt_tokens >= context) {
    std::fprintf(stderr, "no sample: --sample-prompt is %lld tokens, but the context (--max-positions) is %lld\n",
                 static_cast<long long>(prompt_tokens), static_cast<long long>(context));
    return;
  }
  if (prompt_tokens + o_.sample_tokens > context) {
    std::fprintf(stderr, "sample: %lld tokens, not --sample-tokens %lld: the prompt's %lld tokens and the new ones "
                 "must fit the context (--max-positions) of %lld\n", static_cast<long long>(context - prompt_tokens),
                 static_cast<long long>(o_.sample_tokens), static_cast<long long>(prompt_tokens),
                 static_cast<long long>(context));
  }
  model::DecodeOptions so;
  so.beam_size = 1;
  so.max_len_b = o_.sample_tokens;
  so.sample = o_.temperature > 0;
  so.temperature = o_.temperature;
  so.top_k = o_.top_k;
  so.seed = stream_seed(o_.seed, kSampleStream, 0);
  for (const int32_t s : text_->special_ids()) so.banned.push_back(s);
  const auto ids = model::generate(*m_, prompt, so)[0].tokens;
  std::printf("--- sample (temperature %.2g, top-k %lld) ---\n%s%s\n---\n", o_.temperature,
              static_cast<long long>(o_.top_k), o_.sample_prompt.c_str(),
              text_->decode_ids(std::vector<int32_t>(ids.begin(), ids.end())).c_str());
}

}  // namespace

TrainResult run_training(TrainOptions o, bool resume, const ReportHook& on_report, bool extend) {
  const RunDirectoryLock lock = resume ? RunDirectoryLock(o.out, world().rank() == 0) : RunDirectoryLock();
  std::string resume_dir;
  if (resume) {
    const ResumePoint point = resume_options<TrainOptions>(o, "training", [extend](TrainOptions& run, const TrainOptions& given) {
      if (extend) run.steps = given.steps;
    });
    resume_dir = point.dir;
    if (finished_early(point, o.loop.patience, o.out, "validation loss")) {
      world().finish();
      TrainResult done;
      done.checkpoint = resume_dir;
      done.stopped_early = true;
      return done;
    }
    const int64_t at = checkpoint_step(resume_dir);
    if (extend && o.steps < at) {
      throw std::invalid_argument("--steps " + std::to_string(o.steps) + ": " + o.out + " is at step " +
                                  std::to_string(at) + " already; --steps extends a run, so give more than that");
    }
    if (at >= o.steps) {
      if (world().rank() == 0) {
        std::fprintf(stderr, "%s: finished at step %lld of %lld, nothing to do (--resume --steps N with N > %lld "
                     "extends it; %s holds its last checkpoint)\n", o.out.c_str(), static_cast<long long>(at),
                     static_cast<long long>(o.steps), static_cast<long long>(at), resume_dir.c_str());
      }
      world().finish();
      TrainResult done;
      done.checkpoint = resume_dir;
      return done;
    }
  }
  o.schedule.total_steps = o.steps;
  o.model.is_decoder = o.task == LmObjective::clm;
  apply_threads(o.loop.threads, resume_dir);
  o.loop.precision = resolve_precision(o.loop.precision, resume_dir);
  TrainingRun run(std::move(o), resume_dir);
  const TrainResult r = run.run(on_report);
  world().finish();
  return r;
}

}  // namespace train
