// The step API (Trainer), the training options, and evaluation entry points (see trainer.h). The
// training run's driver is in run.cc.
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "base/memory.h"
#include "data/corpus.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "load/model_dir.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"
#include "train/lm_text.h"

namespace train {

using nlohmann::json;

namespace {

// ZeRO-1's shards: the arena split into `ranks` contiguous ranges (a single range without ZeRO-1).
std::vector<std::pair<int64_t, int64_t>> zero1_shards(int64_t total, int ranks, bool zero1) {
  if (!zero1 || ranks == 1) return {{0, total}};
  std::vector<std::pair<int64_t, int64_t>> shards;
  for (int r = 0; r < ranks; ++r) shards.emplace_back(total * r / ranks, total * (r + 1) / ranks);
  return shards;
}

// This rank's range of the arena (all of it without ZeRO-1).
std::pair<int64_t, int64_t> own_shard(const std::vector<std::pair<int64_t, int64_t>>& shards, int rank) {
  return shards.size() > 1 ? shards[static_cast<size_t>(rank)] : shards[0];
}

}  // namespace

Trainer::Trainer(Trainable& m, Task& task, const TrainerConfig& c)
    : m_(m), task_(task), c_(c), comm_(c.comm ? *c.comm : world()),
      shards_(zero1_shards(static_cast<int64_t>(m.params.size()), comm_.size(), c.zero1)),
      opt_(make_adamw(m, c.adamw, own_shard(shards_, comm_.rank()).first, own_shard(shards_, comm_.rank()).second)) {
  if (c_.grad_accum < 1) throw std::invalid_argument("--grad-accum must be at least 1");
  // Buckets follow the backward: from the top of the arena (head, last layer) down to the embeddings,
  // layers merged until a bucket holds bucket_mb MiB. Every rank makes the same list from the layout.
  const int64_t total = static_cast<int64_t>(m_.params.size());
  const int64_t min_size = c_.bucket_mb > 0 ? static_cast<int64_t>(c_.bucket_mb * 1048576.0 / sizeof(float)) : total;
  int64_t end = total;
  const std::vector<int64_t>& layers = m_.layer_offsets();
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (end - *it >= min_size) {
      buckets_.emplace_back(*it, end);
      end = *it;
    }
  }
  if (end > 0) buckets_.emplace_back(0, end);
}

void Trainer::start_buckets(int64_t ready_from) {
  for (; started_ < buckets_.size() && buckets_[started_].first >= ready_from; ++started_) {
    const auto [begin, end] = buckets_[started_];
    comm_.start_allreduce_sum(m_.grads.data() + begin, end - begin);
  }
}

StepStats Trainer::step(int64_t step) {
  const Batch batch = task_.train_batch(step);
  return this->step(batch, step, task_.loss_count(batch));
}

StepStats Trainer::step(const Batch& batch, int64_t step, int64_t normaliser) {
  const int64_t ranks = comm_.size(), rank = comm_.rank();
  StepStats s;
  s.tokens = batch.tokens();
  s.lr = learning_rate(c_.schedule, step);
  gathered_.reset();
  m_.zero_grad();
  const uint64_t dropout_seed = stream_seed(c_.seed, kDropoutStream, step);
  const int64_t lo = batch.B * rank / ranks, hi = batch.B * (rank + 1) / ranks;
  // A short batch (an epoch's last) may leave a rank fewer rows than micro-batches, or none.
  const int64_t K = std::min(c_.grad_accum, hi - lo);
  double totals[2] = {0, 0};  // this rank's Σ micro-batch losses (each already / normaliser), counted targets
  const bool parallel = ranks > 1;
  started_ = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t r0 = lo + (hi - lo) * k / K, r1 = lo + (hi - lo) * (k + 1) / K;
    const bool whole = r0 == 0 && r1 == batch.B;
    // The last micro-batch's backward finishes each gradient: reduce as it goes.
    if (parallel && k == K - 1) m_.on_grads_final = [this](int64_t offset) { start_buckets(offset); };
    const LossStats l = task_.loss_and_grad(m_, whole ? batch : batch.rows(r0, r1), dropout_seed, normaliser);
    m_.on_grads_final = nullptr;
    totals[0] += l.loss;
    totals[1] += static_cast<double>(l.count);
  }
  if (parallel) {
    // Whatever the backward did not start (all of it when this rank's loss was not finite and it
    // skipped the backward): every rank starts the same buckets in the same order.
    const auto t0 = std::chrono::steady_clock::now();
    start_buckets(0);
    comm_.wait_all();
    s.comm_wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  comm_.allreduce_sum(totals, 2);
  s.loss = totals[0];
  s.counted = static_cast<int64_t>(totals[1]);
  if (!std::isfinite(s.loss)) return s;
  s.grad_norm = clip_grad_norm({m_.grads.data()}, {static_cast<int64_t>(m_.grads.size())},
                               c_.clip > 0 ? c_.clip : INFINITY);
  if (!std::isfinite(s.grad_norm)) return s;
  opt_.step(s.lr);
  // ZeRO-1: each rank updated its own shard; every rank gets every shard.
  if (sharded()) {
    for (size_t r = 0; r < shards_.size(); ++r) {
      comm_.broadcast(m_.params.data() + shards_[r].first, shards_[r].second - shards_[r].first, static_cast<int>(r));
    }
  }
  return s;
}

const AdamW& Trainer::gather_optimizer() {
  if (!sharded()) return opt_;
  const int64_t total = static_cast<int64_t>(m_.params.size());
  std::vector<float> m(static_cast<size_t>(total)), v(static_cast<size_t>(total));
  int64_t at = shards_[static_cast<size_t>(comm_.rank())].first;  // this rank's pieces, in arena order
  for (size_t k = 0; k < opt_.first_moments().size(); ++k) {
    std::copy(opt_.first_moments()[k].begin(), opt_.first_moments()[k].end(), m.begin() + at);
    std::copy(opt_.second_moments()[k].begin(), opt_.second_moments()[k].end(), v.begin() + at);
    at += static_cast<int64_t>(opt_.first_moments()[k].size());
  }
  for (size_t r = 0; r < shards_.size(); ++r) {
    const auto [begin, end] = shards_[r];
    comm_.broadcast(m.data() + begin, end - begin, static_cast<int>(r));
    comm_.broadcast(v.data() + begin, end - begin, static_cast<int>(r));
  }
  gathered_ = std::make_unique<AdamW>(make_adamw(m_, c_.adamw));
  const auto& layout = m_.layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    gathered_->first_moments()[i].assign(m.begin() + layout[i].offset, m.begin() + layout[i].offset + layout[i].size);
    gathered_->second_moments()[i].assign(v.begin() + layout[i].offset, v.begin() + layout[i].offset + layout[i].size);
  }
  gathered_->set_steps(opt_.steps());
  return *gathered_;
}

void Trainer::set_optimizer(const AdamW& whole) {
  const int64_t total = static_cast<int64_t>(m_.params.size());
  std::vector<float> m(static_cast<size_t>(total)), v(static_cast<size_t>(total));  // as flat arenas
  const auto& layout = m_.layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    std::copy(whole.first_moments()[i].begin(), whole.first_moments()[i].end(), m.begin() + layout[i].offset);
    std::copy(whole.second_moments()[i].begin(), whole.second_moments()[i].end(), v.begin() + layout[i].offset);
  }
  int64_t at = own_shard(shards_, comm_.rank()).first;
  for (size_t k = 0; k < opt_.first_moments().size(); ++k) {
    const int64_t n = static_cast<int64_t>(opt_.first_moments()[k].size());
    opt_.first_moments()[k].assign(m.begin() + at, m.begin() + at + n);
    opt_.second_moments()[k].assign(v.begin() + at, v.begin() + at + n);
    at += n;
  }
  opt_.set_steps(whole.steps());
}

EvalStats Trainer::evaluate() { return train::evaluate(task_, m_, &comm_); }

LmTaskConfig lm_task_config(const TrainOptions& o, int64_t vocab_size, const text::Tokenizer& tok) {
  LmTaskConfig c;
  c.mask_token_id = tok.specials().mask;
  c.special_ids = tok.special_ids();
  c.whole_word_mask = o.whole_word_mask;
  c.causal = o.task == LmObjective::clm;
  c.seed = o.seed;
  c.batch = o.batch;
  c.seq = o.seq;
  c.mask_prob = o.mask_prob;
  c.vocab_size = vocab_size;
  return c;
}

double validation_loss(model::RoFormer<float>& m, const std::vector<data::Batch>& val, const TrainOptions& o,
                       const text::Tokenizer& tok, int64_t* tokens) {
  LmTask task(nullptr, lm_task_config(o, m.config().vocab_size, tok), val);
  const EvalStats s = evaluate(task, m);
  if (tokens) *tokens = s.count;
  return s.loss;
}

std::string TrainOptions::to_json() const {
  json j = {{"data", data}, {"task", lm_objective_name(task)}, {"tokenizer", text::tokenizer_kind_name(tokenizer)}, {"max_vocab", max_vocab}, {"vocab", vocab},
            {"whole_word_mask", whole_word_mask}, {"init_from", init_from},
            {"model", json::parse(model.to_json())}, {"batch", batch}, {"seq", seq}, {"steps", steps},
            {"lr", schedule.peak_lr}, {"min_lr", schedule.min_lr}, {"warmup", schedule.warmup_steps},
            {"decay", schedule.decay == Decay::constant ? "constant" : schedule.decay == Decay::linear ? "linear"
                      : schedule.decay == Decay::cosine ? "cosine" : "inverse_sqrt"},
            {"beta1", adamw.beta1}, {"beta2", adamw.beta2}, {"adam_eps", adamw.eps}, {"weight_decay", adamw.weight_decay},
            {"clip", clip}, {"seed", seed}, {"eval_batches", eval_batches}, {"val_fraction", val_fraction}, {"mask_prob", mask_prob},
            {"sample_tokens", sample_tokens}, {"sample_prompt", sample_prompt}, {"temperature", temperature},
            {"top_k", top_k}};
  loop.to_json(j);
  return j.dump(2) + "\n";
}

TrainOptions TrainOptions::from_json(const std::string& text) {
  TrainOptions o;
  try {
    const json j = json::parse(text);
    o.data = j.at("data");
    o.task = parse_lm_objective(j.at("task").get<std::string>());
    o.tokenizer = text::parse_tokenizer_kind(j.at("tokenizer").get<std::string>());
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
    o.eval_batches = j.at("eval_batches");
    o.val_fraction = j.at("val_fraction");
    o.mask_prob = j.at("mask_prob");
    o.sample_tokens = j.at("sample_tokens");
    o.sample_prompt = j.at("sample_prompt");
    o.temperature = j.at("temperature");
    o.top_k = j.at("top_k");
    o.loop.from_json(j);  // fields absent in older runs keep their defaults (patience 0: never stop early)
  } catch (const json::exception& e) {
    throw io::Error(std::string("training options: ") + e.what());
  } catch (const std::invalid_argument& e) {  // a name no enum has, a field of the wrong type
    throw io::Error(std::string("training options: ") + e.what());
  }
  return o;
}

void TrainOptions::validate_text() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (tokenizer == text::TokenizerKind::sentencepiece) fail("--tokenizer must be char, byte or wordpiece, got 'sentencepiece'");
  if (tokenizer == text::TokenizerKind::wordpiece && vocab.empty() && init_from.empty()) {
    fail("--tokenizer wordpiece needs --vocab");
  }
  if (whole_word_mask && (task != LmObjective::mlm || tokenizer != text::TokenizerKind::wordpiece)) {
    fail("--whole-word-mask needs --task mlm and a WordPiece vocabulary");
  }
}

void TrainOptions::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (data.empty()) fail("--data is required");
  validate_text();
  if (batch < 1 || seq < 1 || steps < 1) fail("--batch, --seq and --steps must be at least 1");
  if (seq > model.max_position_embeddings) {
    fail("--seq " + std::to_string(seq) + " exceeds max_position_embeddings " + std::to_string(model.max_position_embeddings) +
         (init_from.empty() ? " (--max-positions sets it)" : " of " + init_from + "/config.json") + ": use --seq " +
         std::to_string(model.max_position_embeddings) + " or less");
  }
  // Every real-valued option is finite: an infinite --lr or a NaN --weight-decay would train to NaN and
  // stop late instead of being refused here; NaN fails each comparison below.
  auto finite = [](double v) { return std::isfinite(v); };
  if (!(finite(schedule.peak_lr) && schedule.peak_lr > 0)) fail("--lr must be a positive number, got " + std::to_string(schedule.peak_lr));
  if (!(finite(schedule.min_lr) && schedule.min_lr >= 0)) fail("--min-lr must be a number >= 0");
  if (schedule.warmup_steps < 0) fail("--warmup must be >= 0");
  if (!(finite(clip) && clip >= 0)) fail("--clip must be a number >= 0 (0: off)");
  if (!(finite(adamw.weight_decay) && adamw.weight_decay >= 0)) fail("--weight-decay must be a number >= 0");
  if (!(finite(temperature) && temperature >= 0)) fail("--temperature must be a number >= 0");
  if (top_k < 0) fail("--top-k must be >= 0 (0: all tokens)");
  if (eval_batches < 1) fail("--eval-batches must be at least 1");
  loop.validate(batch);
  if (!(mask_prob > 0 && mask_prob < 1)) fail("--mask-prob must be in (0, 1)");
  model.validate();
}

void check_batch_fits_in_memory(const model::RoFormerConfig& c, double rows, int64_t seq, bool backward,
                                const std::string& what, bool probabilities, bool gradient_checkpointing) {
  const double T = static_cast<double>(seq), L = static_cast<double>(c.num_hidden_layers);
  const double layer = 4.0 * static_cast<double>(c.hidden_size) + 2.0 * static_cast<double>(c.intermediate_size) +
                       (probabilities ? static_cast<double>(c.num_attention_heads) * T : 0.0);
  const double H = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  // For the backward: three tensors per one the forward keeps (the gradients, the backward's scratch);
  // checkpointed, every layer's input and one layer's set.
  const double layers = !backward ? L * layer : gradient_checkpointing ? L * H + 3.0 * layer : 3.0 * L * layer;
  const double activations = sizeof(float) * rows * T * (layers + (backward ? 3.0 : 1.0) * V);
  base::check_fits_in_memory(activations, what);
}

std::optional<TrainOptions> checkpoint_train_options(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/optimizer.safetensors";
  if (!std::filesystem::exists(path)) return std::nullopt;
  const io::SafeTensors st(path);
  const auto it = st.metadata().find("options");
  if (it == st.metadata().end()) return std::nullopt;
  try {
    return TrainOptions::from_json(it->second);
  } catch (const io::Error&) {  // another recipe's options (finetune, translate-train)
    return std::nullopt;
  }
}

EvalResult evaluate_checkpoint(const std::string& dir, const std::string& data_path, int64_t batch, int64_t seq,
                               int64_t max_batches, double val_fraction, uint64_t seed,
                               const model::LinearOptions& linears) {
  load::Request request;
  request.inference = linears;
  load::Model lm = load::roformer(dir, request);
  if (seq > lm.config.max_position_embeddings) {
    throw std::invalid_argument("--seq " + std::to_string(seq) + " exceeds the model's max_position_embeddings " +
                                std::to_string(lm.config.max_position_embeddings) + ": use --seq " +
                                std::to_string(lm.config.max_position_embeddings) + " or less");
  }
  const auto corpus_ptr = lm_corpus(*lm.tokenizer, data_path, val_fraction, lm.config.vocab_size);
  const data::WindowSource& corpus = *corpus_ptr;
  const auto val = corpus.val_batches(batch, seq, max_batches);
  if (val.empty()) throw io::Error(data_path + ": the validation split is shorter than one window");
  TrainOptions o;
  o.task = lm.config.is_decoder ? LmObjective::clm : LmObjective::mlm;
  o.seed = seed;
  EvalResult r;
  r.loss = validation_loss(*lm.model, val, o, *lm.tokenizer, &r.tokens);
  r.unigram_baseline =
      data::unigram_cross_entropy(corpus.train_unigram_counts(), data::target_counts(val, corpus.vocab_size()));
  return r;
}

}  // namespace train
