// The translation training run (see translate_run.h): data and subwords, the encoder-decoder, then
// the loop of Trainer::step with evaluations (loss, BLEU), checkpoints and the metrics log.
#include "translate_run.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/parallel.h"
#include "load/model_dir.h"
#include "model/seq2seq.h"
#include "infer/translator.h"
#include "model/translate.h"
#include "text/bleu.h"
#include "text/sentencepiece.h"
#include "train/agree.h"
#include "train/checkpoint.h"
#include "train/run_loop.h"
#include "train/seq2seq_task.h"
#include "train/trainer.h"

namespace train {
namespace {

using nlohmann::json;

// Both sides of every pair as subword ids; pairs longer than the limits are dropped (counted).
std::vector<TokenizedPair> encode_pairs(const std::vector<data::SentencePair>& pairs, const text::SentencePiece& sp,
                                        int64_t max_source, int64_t max_target, int64_t* dropped) {
  std::vector<TokenizedPair> out;
  *dropped = 0;
  for (const auto& p : pairs) {
    TokenizedPair t{sp.encode(p.source), sp.encode(p.target)};
    if (t.source.empty() || t.target.empty() || static_cast<int64_t>(t.source.size()) > max_source ||
        static_cast<int64_t>(t.target.size()) > max_target) {
      ++*dropped;
      continue;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// One invocation of `roformer translate-train`: the set-up in the constructor, then the loop.
class TranslateRun : public Recipe {
 public:
  TranslateRun(TranslateTrainOptions o, std::string resume_dir)
      : o_(std::move(o)), resume_dir_(std::move(resume_dir)), writer_(comm_.rank() == 0) {
    prepare();
  }
  TranslateTrainResult run(const ReportHook& on_report);

  void evaluate(EvalRecord& rec) override;
  void write_model(const std::string& dir) override {
    model::save_seq2seq(dir, *m_);
    sp_->save(dir);
  }

 private:
  void prepare();
  void subwords(const std::vector<data::SentencePair>& train_pairs);
  double validation_bleu();

  TranslateTrainOptions o_;
  std::string resume_dir_;
  Communicator& comm_ = world();
  bool writer_;
  TranslateTrainResult result_;
  std::unique_ptr<text::SentencePiece> sp_;
  std::unique_ptr<Seq2SeqModel> m_;
  std::unique_ptr<Seq2SeqTask> task_;
  std::unique_ptr<Trainer> trainer_;
  std::string precision_;  // the header's words for the training precision (apply_precision)
  std::vector<data::SentencePair> bleu_pairs_;
  TrainerState state_;
  RunDirectoryLock lock_;  // a new run's (a resumed one is locked by run_translate_training)
};

// The vocabulary: the checkpoint's (resume), the given model, or one trained on both sides of the
// training pairs and written to out/spm.model.
void TranslateRun::subwords(const std::vector<data::SentencePair>& train_pairs) {
  if (!resume_dir_.empty()) {
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(resume_dir_ + "/spm.model"));
    return;
  }
  if (!o_.spm.empty()) {
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(o_.spm));
    return;
  }
  text::SentencePieceTrainOptions so;
  for (const auto& p : train_pairs) {
    so.sentences.push_back(p.source);
    so.sentences.push_back(p.target);
  }
  so.data_name = o_.train;
  so.vocab_size = o_.vocab_size;
  so.model_type = o_.spm_type;
  so.seed = static_cast<uint32_t>(o_.seed);
  const text::SentencePieceTrainResult r = text::train_sentencepiece(so);  // every rank: the same bytes
  sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::from_serialized(r.serialized, o_.out + "/spm.model"));
  if (writer_) sp_->save(o_.out);
}

void TranslateRun::prepare() {
  if (resume_dir_.empty()) lock_ = claim_run_directory(o_.out, writer_, {o_.train, o_.validation, o_.spm});
  const auto train_pairs = data::read_parallel(o_.train, o_.source_key, o_.target_key);
  const auto val_pairs = data::read_parallel(o_.validation, o_.source_key, o_.target_key);
  if (train_pairs.empty()) throw io::Error(o_.train + ": no sentence pairs");
  if (val_pairs.empty()) throw io::Error(o_.validation + ": no sentence pairs");
  subwords(train_pairs);
  if (sp_->pad_id() < 0 || sp_->bos_id() < 0 || sp_->eos_id() < 0) {
    throw io::Error((o_.spm.empty() ? o_.out + "/spm.model" : o_.spm) + ": the SentencePiece model needs pad, bos and eos pieces");
  }
  // Learned positions end at max_position_embeddings (a row carries eos or the decoder start too);
  // the other encodings read on, so validation pairs are then never dropped for length.
  const bool learned = o_.model.position_encoding == model::PositionEncoding::learned;
  const int64_t room = learned ? o_.model.max_position_embeddings - 1 : INT64_MAX;
  int64_t dropped = 0, val_dropped = 0;
  auto train = encode_pairs(train_pairs, *sp_, std::min(room, o_.max_source_length), std::min(room, o_.max_target_length),
                            &dropped);
  const auto val = encode_pairs(val_pairs, *sp_, room, room, &val_dropped);
  if (val.empty()) throw io::Error(o_.validation + ": every pair is longer than the learned positions");
  if (writer_ && val_dropped > 0) {
    std::fprintf(stderr, "%s: skipped %lld of %zu pairs longer than the %lld learned positions\n", o_.validation.c_str(),
                 static_cast<long long>(val_dropped), val_pairs.size(), static_cast<long long>(room + 1));
  }
  if (train.empty()) throw io::Error(o_.train + ": every pair is longer than --max-source-length/--max-target-length");
  if (writer_ && dropped > 0) {
    std::fprintf(stderr, "%s: skipped %lld of %zu pairs longer than %lld/%lld subwords\n", o_.train.c_str(),
                 static_cast<long long>(dropped), train_pairs.size(), static_cast<long long>(o_.max_source_length),
                 static_cast<long long>(o_.max_target_length));
  }
  for (int64_t i = 0; i < std::min<int64_t>(o_.bleu_sentences, static_cast<int64_t>(val_pairs.size())); ++i) {
    bleu_pairs_.push_back(val_pairs[i]);
  }
  model::Seq2SeqConfig cfg;
  if (!resume_dir_.empty()) {
    load::Request r;
    r.tokenizer = false;  // the run's spm.model is read by subwords()
    load::Seq2Seq saved = load::seq2seq(resume_dir_, r);
    cfg = saved.config;
    m_ = std::move(saved.model);
  } else {
    model::RoFormerConfig base = o_.model;
    base.vocab_size = sp_->vocab_size();
    base.pad_token_id = sp_->pad_id();
    cfg = model::Seq2SeqConfig::symmetric(base);
    cfg.shared_embeddings = o_.shared_embeddings;
    cfg.decoder_start_token_id = sp_->bos_id();
    cfg.eos_token_id = sp_->eos_id();
    cfg.pad_token_id = sp_->pad_id();
    m_ = std::make_unique<Seq2SeqModel>(cfg);
    m_->init_weights(o_.seed);
  }
  Seq2SeqTaskConfig tc{o_.max_tokens, o_.label_smoothing, cfg.pad_token_id, cfg.eos_token_id,
                       cfg.decoder_start_token_id, o_.seed};
  task_ = std::make_unique<Seq2SeqTask>(std::move(train), val, tc);
  Schedule sched;
  sched.peak_lr = o_.lr;
  sched.warmup_init_lr = o_.warmup_init_lr;
  sched.warmup_steps = o_.warmup;
  sched.total_steps = o_.steps;
  sched.decay = Decay::inverse_sqrt;
  AdamWConfig adamw;
  adamw.beta1 = o_.beta1, adamw.beta2 = o_.beta2, adamw.weight_decay = o_.weight_decay;
  check_ranks_agree(comm_, run_facts(m_->config().to_json(), *sp_,
                                     {{"training data", o_.train}, {"validation data", o_.validation},
                                      {"resumed checkpoint", resume_dir_.empty() ? "" : resume_dir_ + "/optimizer.safetensors"}},
                                     o_.to_json()));
  TrainerConfig trainer_cfg{sched, adamw, o_.clip, o_.seed, o_.loop.grad_accum, &comm_, o_.loop.bucket_mb, o_.loop.zero1};
  precision_ = apply_loop_settings(*m_, o_.loop);
  trainer_ = std::make_unique<Trainer>(*m_, *task_, trainer_cfg);
  if (!resume_dir_.empty()) state_ = restore_optimizer(resume_dir_, *trainer_, adamw);
  state_.options_json = o_.to_json();
}

// Corpus BLEU of the model's translations of the first bleu_sentences validation pairs.
double TranslateRun::validation_bleu() {
  if (bleu_pairs_.empty()) return NAN;
  model::DecodeOptions d;
  d.beam_size = o_.bleu_beam;
  d.max_len_a = 1.5, d.max_len_b = 10;
  // Decoded as `roformer translate` decodes: the translator's length-sorted batches.
  std::vector<std::vector<int64_t>> sources;
  std::vector<std::string> hyps, refs;
  for (const data::SentencePair& p : bleu_pairs_) {
    sources.push_back(sp_->encode(p.source));
    refs.push_back(p.target);
  }
  for (const auto& nbest : infer::translate_batched(*m_, *sp_, sources, d)) hyps.push_back(nbest[0].text);
  return text::corpus_bleu(hyps, {refs}).score;
}

void TranslateRun::evaluate(EvalRecord& rec) {
  const EvalStats e = trainer_->evaluate();
  rec.val_loss = e.loss;
  rec.metrics["nll"] = e.metrics.at(0);
  rec.metrics["ppl"] = std::exp(e.metrics.at(0));
  rec.metrics["accuracy"] = e.metrics.at(1);
  rec.metrics["bleu"] = validation_bleu();
}

TranslateTrainResult TranslateRun::run(const ReportHook& on_report) {
  const auto& c = m_->config();
  if (writer_) {
    std::fprintf(stderr, "%s a %s encoder-decoder (%lld+%lld layers, hidden %lld, %lld parameters, vocabulary %lld): "
                 "%lld steps of %lld batches per epoch, %lld tokens per batch, lr %.2g, %d threads × %d processes, %s\n",
                 resume_dir_.empty() ? "training" : "resuming", model::position_encoding_name(c.encoder.position_encoding),
                 static_cast<long long>(c.encoder.num_hidden_layers), static_cast<long long>(c.decoder.num_hidden_layers),
                 static_cast<long long>(c.encoder.hidden_size), static_cast<long long>(model::param_count(m_->layout())),
                 static_cast<long long>(c.decoder.vocab_size), static_cast<long long>(o_.steps),
                 static_cast<long long>(task_->steps_per_epoch()), static_cast<long long>(o_.max_tokens), o_.lr,
                 omp_get_max_threads(), comm_.size(), precision_.c_str());
  }
  LoopOptions lo;
  lo.out = o_.out;
  lo.total_steps = o_.steps;
  lo.steps_per_epoch = task_->steps_per_epoch();
  lo.eval_every = o_.loop.eval_every;
  lo.save_every = o_.loop.save_every;
  lo.keep_checkpoints = static_cast<int>(o_.loop.keep_checkpoints);
  lo.metric = "bleu";
  lo.patience = o_.loop.patience;  // on the validation loss (best_metric ""), lower is better
  lo.progress = o_.progress;
  lo.report.title = "translation: loss and validation BLEU";
  lo.report.metric_scale = 0.1;  // BLEU ÷ 10 on the loss's scale
  RunLoop loop(std::move(lo), *trainer_, *this, state_, resume_dir_, on_report);
  static_cast<LoopResult&>(result_) = loop.run();
  if (result_.exit_code == 0 && writer_) {
    std::fprintf(stderr, "%s after %lld steps: validation loss %.4f, BLEU %.2f; last checkpoint %s\n",
                 result_.stopped_early ? "stopped early (--patience: no lower validation loss)" : "done",
                 static_cast<long long>(state_.step), result_.last_eval.val_loss, result_.last_eval.metrics["bleu"],
                 result_.checkpoint.c_str());
  }
  return result_;
}

}  // namespace

std::string TranslateTrainOptions::to_json() const {
  json j = {{"train", train}, {"validation", validation}, {"source_key", source_key}, {"target_key", target_key},
                  {"spm", spm}, {"vocab_size", vocab_size}, {"spm_type", spm_type},
                  {"model", json::parse(model.to_json())}, {"shared_embeddings", shared_embeddings},
                  {"max_tokens", max_tokens}, {"max_source_length", max_source_length},
                  {"max_target_length", max_target_length}, {"steps", steps}, {"warmup", warmup}, {"lr", lr},
                  {"warmup_init_lr", warmup_init_lr}, {"label_smoothing", label_smoothing}, {"beta1", beta1},
                  {"beta2", beta2}, {"weight_decay", weight_decay}, {"clip", clip}, {"seed", seed},
                  {"bleu_sentences", bleu_sentences}, {"bleu_beam", bleu_beam}};
  loop.to_json(j);
  return j.dump(2) + "\n";
}

TranslateTrainOptions TranslateTrainOptions::from_json(const std::string& text) {
  TranslateTrainOptions o;
  try {
    const json j = json::parse(text);
    o.train = j.at("train"), o.validation = j.at("validation"), o.source_key = j.at("source_key");
    o.target_key = j.at("target_key"), o.spm = j.at("spm"), o.vocab_size = j.at("vocab_size");
    o.spm_type = j.at("spm_type");
    o.model = model::RoFormerConfig::from_json_text(j.at("model").dump(), "translation options: model");
    o.shared_embeddings = j.at("shared_embeddings"), o.max_tokens = j.at("max_tokens");
    o.max_source_length = j.at("max_source_length"), o.max_target_length = j.at("max_target_length");
    o.steps = j.at("steps"), o.warmup = j.at("warmup"), o.lr = j.at("lr"), o.warmup_init_lr = j.at("warmup_init_lr");
    o.label_smoothing = j.at("label_smoothing"), o.beta1 = j.at("beta1"), o.beta2 = j.at("beta2");
    o.weight_decay = j.at("weight_decay"), o.clip = j.at("clip"), o.seed = j.at("seed");
    o.bleu_sentences = j.at("bleu_sentences"), o.bleu_beam = j.at("bleu_beam");
    o.loop.from_json(j);  // fields absent in older runs keep their defaults (save_every 0, patience 0)
  } catch (const json::exception& e) {
    throw io::Error(std::string("translation options: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw io::Error(std::string("translation options: ") + e.what());
  }
  return o;
}

void TranslateTrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  need(!train.empty() && !validation.empty(), "--train and --validation are required");
  need(spm_type == "unigram" || spm_type == "bpe", "--spm-type must be unigram or bpe");
  need(!spm.empty() || vocab_size >= 8, "--vocab-size must be at least 8");
  need(max_tokens > 0, "--max-tokens must be positive");
  need(max_source_length > 0 && max_target_length > 0, "--max-source-length and --max-target-length must be positive");
  need(steps > 0 && warmup >= 0, "--steps must be positive and --warmup not negative");
  need(lr > 0 && std::isfinite(lr) && warmup_init_lr >= 0 && std::isfinite(warmup_init_lr),
       "--lr must be positive and --warmup-init-lr not negative");
  need(label_smoothing >= 0 && label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "--beta1 and --beta2 must be in [0, 1)");
  need(weight_decay >= 0 && clip >= 0 && std::isfinite(weight_decay) && std::isfinite(clip),
       "--weight-decay and --clip must be finite and not negative");
  need(bleu_sentences >= 0 && bleu_beam >= 1, "--bleu-sentences must not be negative and --bleu-beam positive");
  loop.validate(0);  // batches of --max-tokens: --grad-accum has no row count to stay under
}

TranslateTrainResult run_translate_training(TranslateTrainOptions o, bool resume, const ReportHook& on_report) {
  const RunDirectoryLock lock = resume ? RunDirectoryLock(o.out, world().rank() == 0) : RunDirectoryLock();
  std::string resume_dir;
  if (resume) {
    const ResumePoint point = resume_options<TranslateTrainOptions>(o, "translation", {});
    resume_dir = point.dir;
    if (finished_early(point, o.loop.patience, o.out, "validation loss")) {
      world().finish();
      TranslateTrainResult done;
      done.checkpoint = resume_dir;
      done.stopped_early = true;
      return done;
    }
  }
  o.validate();
  apply_threads(o.loop.threads, resume_dir);
  o.loop.precision = resolve_precision(o.loop.precision, resume_dir);
  TranslateRun run(std::move(o), resume_dir);
  const TranslateTrainResult r = run.run(on_report);
  world().finish();
  return r;
}

}  // namespace train
