// The step API (Trainer), the training options, and evaluation entry points (see trainer.h). The
// training run's driver is in run.cc.
#include "trainer.h"

#include <cmath>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "io/atomic_file.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"

namespace train {

using nlohmann::json;

Trainer::Trainer(Model& m, Task& task, const TrainerConfig& c)
    : m_(m), task_(task), c_(c), comm_(c.comm ? *c.comm : world()), opt_(make_adamw(m, c.adamw)) {
  if (c_.grad_accum < 1) throw std::invalid_argument("--grad-accum must be at least 1");
}

StepStats Trainer::step(int64_t step) {
  const Batch batch = task_.train_batch(step);
  return this->step(batch, step, task_.loss_count(batch));
}

StepStats Trainer::step(const Batch& batch, int64_t step, int64_t normaliser) {
  const int64_t ranks = comm_.size(), rank = comm_.rank(), K = c_.grad_accum;
  if (batch.B < ranks * K) {
    throw std::invalid_argument("a batch of " + std::to_string(batch.B) + " rows cannot feed " + std::to_string(ranks) +
                                " processes × " + std::to_string(K) + " micro-batches");
  }
  StepStats s;
  s.tokens = batch.tokens();
  s.lr = learning_rate(c_.schedule, step);
  m_.zero_grad();
  const uint64_t dropout_seed = stream_seed(c_.seed, kDropoutStream, step);
  const int64_t lo = batch.B * rank / ranks, hi = batch.B * (rank + 1) / ranks;
  double totals[2] = {0, 0};  // this rank's Σ micro-batch losses (each already / normaliser), counted targets
  for (int64_t k = 0; k < K; ++k) {
    const int64_t r0 = lo + (hi - lo) * k / K, r1 = lo + (hi - lo) * (k + 1) / K;
    const bool whole = r0 == 0 && r1 == batch.B;
    const LossStats l = task_.loss_and_grad(m_, whole ? batch : batch.rows(r0, r1), dropout_seed, normaliser);
    totals[0] += l.loss;
    totals[1] += static_cast<double>(l.count);
  }
  comm_.allreduce_sum(totals, 2);
  s.loss = totals[0];
  s.counted = static_cast<int64_t>(totals[1]);
  if (!std::isfinite(s.loss)) return s;
  comm_.allreduce_sum(m_.grads.data(), static_cast<int64_t>(m_.grads.size()));
  s.grad_norm = clip_grad_norm({m_.grads.data()}, {static_cast<int64_t>(m_.grads.size())},
                               c_.clip > 0 ? c_.clip : INFINITY);
  if (std::isfinite(s.grad_norm)) opt_.step(s.lr);
  return s;
}

EvalStats Trainer::evaluate() { return train::evaluate(task_, m_, &comm_); }

LmTaskConfig lm_task_config(const TrainOptions& o, int64_t vocab_size, const LmText& text) {
  LmTaskConfig c;
  c.mask_token_id = text.mask_id();
  c.special_ids = text.special_ids();
  c.whole_word_mask = o.whole_word_mask;
  c.causal = o.task == "clm";
  c.seed = o.seed;
  c.batch = o.batch;
  c.seq = o.seq;
  c.mask_prob = o.mask_prob;
  c.vocab_size = vocab_size;
  return c;
}

double validation_loss(model::RoFormer<float>& m, const std::vector<data::Batch>& val, const TrainOptions& o,
                       const LmText& text, int64_t* tokens) {
  LmTask task(nullptr, lm_task_config(o, m.config().vocab_size, text), val);
  const EvalStats s = evaluate(task, m);
  if (tokens) *tokens = s.count;
  return s.loss;
}

std::string TrainOptions::to_json() const {
  json j = {{"data", data}, {"task", task}, {"tokenizer", tokenizer}, {"max_vocab", max_vocab}, {"vocab", vocab},
            {"whole_word_mask", whole_word_mask}, {"init_from", init_from},
            {"model", json::parse(model.to_json())}, {"batch", batch}, {"seq", seq}, {"steps", steps},
            {"lr", schedule.peak_lr}, {"min_lr", schedule.min_lr}, {"warmup", schedule.warmup_steps},
            {"decay", schedule.decay == Decay::constant ? "constant" : schedule.decay == Decay::linear ? "linear"
                      : schedule.decay == Decay::cosine ? "cosine" : "inverse_sqrt"},
            {"beta1", adamw.beta1}, {"beta2", adamw.beta2}, {"adam_eps", adamw.eps}, {"weight_decay", adamw.weight_decay},
            {"clip", clip}, {"seed", seed}, {"eval_every", eval_every}, {"eval_batches", eval_batches},
            {"save_every", save_every}, {"val_fraction", val_fraction}, {"mask_prob", mask_prob},
            {"sample_tokens", sample_tokens}, {"sample_prompt", sample_prompt}, {"temperature", temperature},
            {"top_k", top_k}, {"grad_accum", grad_accum}, {"threads", threads}};
  return j.dump(2) + "\n";
}

TrainOptions TrainOptions::from_json(const std::string& text) {
  TrainOptions o;
  try {
    const json j = json::parse(text);
    o.data = j.at("data");
    o.task = j.at("task");
    o.tokenizer = j.at("tokenizer");
    o.max_vocab = j.at("max_vocab");
    o.vocab = j.value("vocab", "");  // absent in runs from before WordPiece
    o.whole_word_mask = j.value("whole_word_mask", false);
    o.init_from = j.value("init_from", "");
    o.model = model::RoFormerConfig::from_json_text(j.at("model").dump(), "options.model");
    o.batch = j.at("batch");
    o.seq = j.at("seq");
    o.steps = j.at("steps");
    o.schedule.peak_lr = j.at("lr");
    o.schedule.min_lr = j.at("min_lr");
    o.schedule.warmup_steps = j.at("warmup");
    o.schedule.decay = Schedule::parse_decay(j.at("decay"));
    o.adamw = {j.at("beta1"), j.at("beta2"), j.at("adam_eps"), j.at("weight_decay")};
    o.clip = j.at("clip");
    o.seed = j.at("seed");
    o.eval_every = j.at("eval_every");
    o.eval_batches = j.at("eval_batches");
    o.save_every = j.at("save_every");
    o.val_fraction = j.at("val_fraction");
    o.mask_prob = j.at("mask_prob");
    o.sample_tokens = j.at("sample_tokens");
    o.sample_prompt = j.at("sample_prompt");
    o.temperature = j.at("temperature");
    o.top_k = j.at("top_k");
    o.grad_accum = j.value("grad_accum", int64_t{1});  // absent in runs from before data parallelism
    o.threads = j.at("threads");
  } catch (const json::exception& e) {
    throw io::Error(std::string("training options: ") + e.what());
  }
  return o;
}

void TrainOptions::validate_text() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (tokenizer != "char" && tokenizer != "byte" && tokenizer != "wordpiece") {
    fail("--tokenizer must be char, byte or wordpiece, got '" + tokenizer + "'");
  }
  if (tokenizer == "wordpiece" && vocab.empty() && init_from.empty()) fail("--tokenizer wordpiece needs --vocab");
  if (whole_word_mask && (task != "mlm" || tokenizer != "wordpiece")) {
    fail("--whole-word-mask needs --task mlm and a WordPiece vocabulary");
  }
}

void TrainOptions::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (data.empty()) fail("--data is required");
  if (task != "clm" && task != "mlm") fail("--task must be clm or mlm, got '" + task + "'");
  validate_text();
  if (batch < 1 || seq < 1 || steps < 1) fail("--batch, --seq and --steps must be at least 1");
  if (seq > model.max_position_embeddings) {
    fail("--seq " + std::to_string(seq) + " exceeds max_position_embeddings " + std::to_string(model.max_position_embeddings));
  }
  if (!(schedule.peak_lr > 0) || schedule.min_lr < 0 || schedule.warmup_steps < 0) fail("bad learning-rate schedule");
  if (clip < 0) fail("--clip must be >= 0");
  if (eval_every < 0 || save_every < 0 || eval_batches < 1) fail("bad --eval-every / --save-every / --eval-batches");
  if (!(mask_prob > 0 && mask_prob < 1)) fail("--mask-prob must be in (0, 1)");
  if (threads < 0) fail("--threads must be >= 0");
  if (grad_accum < 1 || grad_accum > batch) fail("--grad-accum must be in [1, --batch]");
  model.validate();
}

EvalResult evaluate_checkpoint(const std::string& dir, const std::string& data_path, int64_t batch, int64_t seq,
                               int64_t max_batches, double val_fraction, uint64_t seed) {
  LoadedModel lm = load_model(dir);
  if (seq > lm.config.max_position_embeddings) {
    throw std::invalid_argument("--seq exceeds the model's max_position_embeddings " +
                                std::to_string(lm.config.max_position_embeddings));
  }
  const auto corpus_ptr = lm.text.corpus(data_path, val_fraction, lm.config.vocab_size);
  const data::WindowSource& corpus = *corpus_ptr;
  const auto val = corpus.val_batches(batch, seq, max_batches);
  if (val.empty()) throw io::Error(data_path + ": the validation split is shorter than one window");
  TrainOptions o;
  o.task = lm.config.is_decoder ? "clm" : "mlm";
  o.seed = seed;
  EvalResult r;
  r.loss = validation_loss(*lm.model, val, o, lm.text, &r.tokens);
  r.unigram_baseline =
      data::unigram_cross_entropy(corpus.train_unigram_counts(), data::target_counts(val, corpus.vocab_size()));
  return r;
}

}  // namespace train
