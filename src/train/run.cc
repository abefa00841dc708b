// The training run (run_training, see trainer.h): options and resume, data, model, the metrics log,
// checkpoints, the progress line, signals and the final sample around Trainer::step / evaluate.
// Data-parallel (comm.h): every rank runs this same code on the same options; rank 0 alone writes the
// run directory and prints, and a stop request on any rank stops every rank after the same step.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/threads.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "io/weights.h"
#include "io/atomic_file.h"
#include "model/decoding.h"
#include "train/checkpoint.h"
#include "train/console.h"
#include "train/lm_task.h"
#include "train/trainer.h"

namespace train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json record_json(const Record& r) {
  json j = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
            {"tokens_per_s", r.tokens_per_s}, {"elapsed_s", r.elapsed_s}};
  if (std::isfinite(r.val_loss)) {
    j["val_loss"] = r.val_loss;
    j["val_ppl"] = std::exp(r.val_loss);
  }
  return j;
}

std::vector<Record> read_records(const std::string& path, int64_t up_to_step) {
  std::vector<Record> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const json j = json::parse(line);
      Record r{j.at("step"), j.at("loss"), j.at("lr"), j.at("grad_norm"), j.at("tokens_per_s"), j.at("elapsed_s"),
               j.contains("val_loss") ? j["val_loss"].get<double>() : NAN};
      if (r.step <= up_to_step) out.push_back(r);
    } catch (const json::exception&) {
      break;  // a line torn by a crash ends the log
    }
  }
  return out;
}

// metrics.csv from the whole history, replaced atomically.
void write_metrics_csv(const std::string& out, const std::vector<Record>& history) {
  std::ostringstream csv;
  csv << "step,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss\n";
  for (const Record& r : history) {
    csv << r.step << ',' << r.loss << ',' << r.lr << ',' << r.grad_norm << ',' << r.tokens_per_s << ',' << r.elapsed_s
        << ',';
    if (std::isfinite(r.val_loss)) csv << r.val_loss;
    csv << '\n';
  }
  io::write_file_atomic(out + "/metrics.csv", csv.str());
}

// Reads a resumed run's options from its latest checkpoint, keeping the invocation's `out` and
// `progress`; returns the checkpoint directory.
std::string resume_options(TrainOptions& o) {
  const ResumePoint at = resume_point(o.out, "training");
  const bool progress = o.progress;
  const std::string out = o.out;
  o = TrainOptions::from_json(at.options_json);
  o.progress = progress;
  o.out = out;
  return at.dir;
}

using Clock = std::chrono::steady_clock;

// One invocation of `roformer train`: the setup in the constructor, the loop in run().
class TrainingRun {
 public:
  TrainingRun(TrainOptions o, std::string resume_dir, ReportHook on_report)
      : o_(std::move(o)), resume_dir_(std::move(resume_dir)), on_report_(std::move(on_report)),
        resume_(!resume_dir_.empty()), writer_(comm_.rank() == 0),
        progress_(ProgressLine::choose(o_.progress, writer_)) {
    load_data();
    build_model();
    open_log();
    print_header();
  }
  ~TrainingRun() { close_log(); }
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  TrainResult run();

 private:
  void load_data();
  void build_model();
  void open_log();
  void close_log() {
    if (log_) std::fclose(log_);
    log_ = nullptr;
  }
  void print_header() const;
  std::string corpus_size() const;  // "N training bytes, M validation bytes" (or tokens)
  bool train_step();  // false: the run stops here (result_.exit_code says why)
  void stop_non_finite(const StepStats& s, int64_t step);
  void stop_interrupted();
  void checkpoint();
  void report();  // metrics.csv and the report hook
  void print_sample() const;
  double elapsed() const {
    return elapsed_before_ + std::chrono::duration<double>(Clock::now() - session_start_).count();
  }

  TrainOptions o_;
  std::string resume_dir_;
  ReportHook on_report_;
  bool resume_;
  Communicator& comm_ = world();
  bool writer_;  // rank 0: writes the run directory and prints
  ProgressLine progress_;
  TrainResult result_;
  std::unique_ptr<LmText> text_;
  std::unique_ptr<data::WindowSource> corpus_;
  std::unique_ptr<LmTask> task_;
  std::unique_ptr<Model> m_;
  std::unique_ptr<Trainer> trainer_;
  TrainerState state_;
  std::vector<Record> history_;
  std::FILE* log_ = nullptr;
  Clock::time_point session_start_;
  double elapsed_before_ = 0, last_val_ = NAN, last_loss_ = NAN;
  int64_t first_step_ = 0;
};

// Tokenizer (a resumed run reuses the saved one; --init-from takes the directory's), corpus,
// validation windows, the task.
void TrainingRun::load_data() {
  o_.validate_text();
  if (resume_) {
    text_ = std::make_unique<LmText>(LmText::load(resume_dir_));
  } else if (!o_.init_from.empty()) {
    text_ = std::make_unique<LmText>(LmText::load(o_.init_from));
    o_.tokenizer = text_->kind();
    // The architecture is the directory's; the task decides causal or masked.
    const bool causal = o_.model.is_decoder;
    o_.model = model::RoFormerConfig::from_json_file(o_.init_from + "/config.json");
    o_.model.is_decoder = causal;
  } else if (o_.tokenizer == "wordpiece") {
    text_ = std::make_unique<LmText>(LmText::load(o_.vocab));
  } else {
    text_ = std::make_unique<LmText>(o_.tokenizer == "byte" ? data::Tokenizer::byte_level()
                                                            : data::Tokenizer::char_level_from_file(o_.data, o_.max_vocab));
  }
  if (!resume_ && o_.init_from.empty()) o_.model.vocab_size = text_->vocab_size();
  o_.validate();
  corpus_ = text_->corpus(o_.data, o_.val_fraction, o_.model.vocab_size);
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
// --init-from's weights (an MLM head it lacks keeps its initialisation; poolers are not used).
void TrainingRun::build_model() {
  std::unique_ptr<io::WeightStore> init;
  if (!resume_ && !o_.init_from.empty()) {
    init = io::open_weights(o_.init_from);
    model::check_config_against_weights(o_.model, *init, o_.init_from + "/config.json");
  }
  m_ = std::make_unique<Model>(o_.model);
  trainer_ = std::make_unique<Trainer>(
      *m_, *task_,
      TrainerConfig{o_.schedule, o_.adamw, o_.clip, o_.seed, o_.grad_accum, &comm_,
                    o_.bucket_mb, o_.zero1});
  state_.options_json = o_.to_json();
  if (resume_) {
    m_->load(io::SafeTensors(resume_dir_ + "/model.safetensors"));
    if (trainer_->sharded()) {  // the checkpoint holds every moment; this rank keeps its shard
      AdamW whole = make_adamw(*m_, o_.adamw);
      state_ = load_optimizer(resume_dir_, *m_, whole);
      trainer_->set_optimizer(whole);
    } else {
      state_ = load_optimizer(resume_dir_, *m_, trainer_->optimizer());
    }
    state_.options_json = o_.to_json();
    result_.checkpoint = resume_dir_;
  } else {
    if (!latest_checkpoint(o_.out).empty()) {
      throw io::Error(o_.out + " already holds a run; continue it with --resume or choose another --out");
    }
    m_->init_weights(o_.seed);
    if (!o_.init_from.empty()) {
      m_->load(*init, {"roformer.pooler.", "pooler.", "classifier."}, true, {"cls."});
    }
    if (writer_) fs::create_directories(o_.out);
  }
}

// metrics.jsonl: a resumed log drops what came after the checkpoint; then opened for appending.
void TrainingRun::open_log() {
  const std::string log_path = o_.out + "/metrics.jsonl";
  if (resume_) history_ = read_records(log_path, state_.step);
  if (!writer_) return;
  std::string text;
  for (const Record& r : history_) text += record_json(r).dump() + "\n";
  io::write_file_atomic(log_path, text);
  log_ = std::fopen(log_path.c_str(), "a");
  if (!log_) throw io::Error(log_path + ": cannot open for appending");
}

void TrainingRun::print_header() const {
  if (!writer_) return;
  const TrainOptions& o = o_;
  std::string parallel = std::to_string(omp_get_max_threads()) + " threads";
  if (comm_.size() > 1) parallel = std::to_string(comm_.size()) + " processes (" + comm_.name() + ") × " + parallel;
  if (o.grad_accum > 1) parallel += ", " + std::to_string(o.grad_accum) + " micro-batches";
  if (trainer_->sharded()) parallel += ", AdamW moments sharded (ZeRO-1)";
  std::fprintf(stderr,
               "%s %s: %lld parameters (%lld layers, hidden %lld, %lld heads, ff %lld, %s positions), vocab %lld (%s)\n"
               "data %s: %s; unigram baseline %.4f nats/token\n"
               "batch %lld × seq %lld, %lld steps, lr %.2g, %s%s\n",
               resume_ ? "resuming" : "training", o.task == "clm" ? "causal LM" : "masked LM",
               static_cast<long long>(param_count(m_->layout())), static_cast<long long>(o.model.num_hidden_layers),
               static_cast<long long>(o.model.hidden_size), static_cast<long long>(o.model.num_attention_heads),
               static_cast<long long>(o.model.intermediate_size), model::position_encoding_name(o.model.position_encoding),
               static_cast<long long>(o.model.vocab_size), o.tokenizer.c_str(), o.data.c_str(), corpus_size().c_str(),
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

TrainResult TrainingRun::run() {
  StopSignals signals;
  session_start_ = Clock::now();
  elapsed_before_ = state_.elapsed_s;
  first_step_ = state_.step;
  for (const Record& r : history_) {
    if (std::isfinite(r.val_loss)) last_val_ = r.val_loss;
  }
  while (state_.step < o_.steps) {
    if (!train_step()) return result_;
  }
  progress_.finish();
  close_log();
  result_.steps_done = state_.step;
  result_.train_loss = last_loss_;
  result_.val_loss = last_val_;
  if (!writer_) return result_;
  std::fprintf(stderr, "done: %lld steps, validation loss %.4f (perplexity %.2f) vs unigram baseline %.4f\n"
               "checkpoint %s; metrics %s/metrics.{jsonl,csv}; plot %s/loss.png\n",
               static_cast<long long>(state_.step), last_val_, std::exp(last_val_), result_.unigram_baseline,
               result_.checkpoint.c_str(), o_.out.c_str(), o_.out.c_str());
  if (o_.task == "clm" && o_.sample_tokens > 0) print_sample();
  return result_;
}

// One optimiser step and what follows it: the log line, evaluation, checkpoint, progress, signals.
bool TrainingRun::train_step() {
  const int64_t step = state_.step;
  const auto t0 = Clock::now();
  const StepStats s = trainer_->step(step);
  if (!s.finite()) {
    stop_non_finite(s, step);
    return false;
  }
  state_.step = step + 1;
  state_.tokens_seen += s.tokens;
  last_loss_ = s.loss;
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double session_tok_s = (state_.tokens_seen - first_step_ * o_.batch * o_.seq) /
                               std::chrono::duration<double>(Clock::now() - session_start_).count();
  Record rec{state_.step, s.loss, s.lr, s.grad_norm, s.tokens / step_s, elapsed(), NAN};
  const bool last = state_.step == o_.steps;
  if ((o_.eval_every > 0 && state_.step % o_.eval_every == 0) || last) {
    rec.val_loss = last_val_ = trainer_->evaluate().loss;
  }
  history_.push_back(rec);
  if (log_) {
    std::fprintf(log_, "%s\n", record_json(rec).dump().c_str());
    std::fflush(log_);
  }
  const double eta = (o_.steps - state_.step) * (elapsed() - elapsed_before_) / (state_.step - first_step_);
  progress_.update(state_.step, o_.steps, s.loss, last_val_, session_tok_s, elapsed(), eta, std::isfinite(rec.val_loss));
  const bool stop = stop_requested(comm_);
  if ((o_.save_every > 0 && state_.step % o_.save_every == 0) || last || stop) {
    checkpoint();
  } else if (std::isfinite(rec.val_loss)) {
    report();
  }
  if (stop && !last) {
    stop_interrupted();
    return false;
  }
  return true;
}

void TrainingRun::stop_non_finite(const StepStats& s, int64_t step) {
  progress_.finish();
  const bool loss_ok = std::isfinite(s.loss);
  if (writer_) std::fprintf(stderr, "error: %s became %s at step %lld; stopping. The last good checkpoint is %s\n",
               loss_ok ? "the gradient norm" : "the loss", std::isnan(loss_ok ? s.grad_norm : s.loss) ? "NaN" : "infinite",
               static_cast<long long>(step + 1), result_.checkpoint.empty() ? "(none yet)" : result_.checkpoint.c_str());
  close_log();
  result_.exit_code = 3;
  result_.steps_done = step;
}

void TrainingRun::stop_interrupted() {
  progress_.finish();
  if (writer_) std::fprintf(stderr, "interrupted at step %lld: checkpoint saved to %s; continue with --resume --out %s\n",
               static_cast<long long>(state_.step), result_.checkpoint.c_str(), o_.out.c_str());
  close_log();
  result_.exit_code = 130;
  result_.steps_done = state_.step;
}

void TrainingRun::checkpoint() {
  const AdamW& optimizer = trainer_->gather_optimizer();  // every rank: with ZeRO-1 a collective
  if (!writer_) return;
  state_.elapsed_s = elapsed();
  result_.checkpoint = save_checkpoint(o_.out, *m_, optimizer, text_->writer(), state_);
  report();
}

void TrainingRun::report() {
  if (!writer_) return;
  write_metrics_csv(o_.out, history_);
  if (on_report_) on_report_(o_.out, history_, result_.unigram_baseline, o_);
}

void TrainingRun::print_sample() const {
  std::vector<int64_t> prompt;
  for (int32_t id : text_->encode(o_.sample_prompt)) prompt.push_back(id);
  if (prompt.empty()) prompt.push_back(text_->sep_id());
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
              text_->decode(std::vector<int32_t>(ids.begin(), ids.end())).c_str());
}

}  // namespace

TrainResult run_training(TrainOptions o, bool resume, const ReportHook& on_report) {
  std::string resume_dir;
  if (resume) resume_dir = resume_options(o);
  o.schedule.total_steps = o.steps;
  o.model.is_decoder = o.task == "clm";
  base::check_thread_count(o.threads, resume ? resume_dir + ": the run's saved threads" : "threads");
  if (o.threads > 0) omp_set_num_threads(o.threads);
  TrainingRun run(std::move(o), resume_dir, on_report);
  const TrainResult r = run.run();
  world().finish();
  return r;
}

}  // namespace train
