// The training loop (see trainer.h). Shapes: B batch rows, T tokens per row, V vocabulary.
#include "trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/corpus.h"
#include "data/mlm.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "model/generate.h"
#include "model/roformer.h"
#include "ops/random.h"
#include "plot/plot.h"
#include "train/checkpoint.h"

namespace train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Restores the previous SIGINT/SIGTERM handlers when the run ends.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Seeds of the independent random streams of one step.
uint64_t stream_seed(uint64_t seed, uint64_t purpose, int64_t index) {
  return ops::mix64(ops::mix64(seed ^ purpose) + static_cast<uint64_t>(index));
}
constexpr uint64_t kDropoutStream = 0xd0d0, kMaskStream = 0x3a5c, kEvalMaskStream = 0xe7a1, kSampleStream = 0x5a3e;

// Model inputs of a token batch (B, T+1): next-token targets for the causal LM; BERT masking of the
// first T tokens for the masked LM.
struct StepInputs {
  std::vector<int64_t> ids, targets;  // (B, T)
  int64_t B = 0, T = 0;
  model::Inputs view() const { return {.ids = ids.data(), .targets = targets.data(), .B = B, .T = T}; }
};

StepInputs make_inputs(const data::Batch& b, const TrainOptions& o, int64_t V, uint64_t mask_seed) {
  StepInputs in;
  in.B = b.B;
  in.T = b.T;
  in.ids.resize(b.B * b.T);
  in.targets.resize(b.B * b.T);
  for (int64_t r = 0; r < b.B; ++r) {
    for (int64_t t = 0; t < b.T; ++t) {
      in.ids[r * b.T + t] = b.at(r, t);
      in.targets[r * b.T + t] = b.at(r, t + 1);
    }
  }
  if (o.task == "mlm") {
    std::vector<uint8_t> maskable(in.ids.size());
    for (size_t i = 0; i < in.ids.size(); ++i) maskable[i] = in.ids[i] >= data::Tokenizer::kNumSpecial;
    data::MlmMaskConfig mc;
    mc.mask_prob = o.mask_prob;
    mc.mask_token_id = data::Tokenizer::kMask;
    mc.vocab_size = V;
    mc.ignore_index = model::kIgnoreIndex;
    data::mlm_mask(in.ids.data(), in.targets.data(), maskable.data(), b.B * b.T, mc, mask_seed);
  }
  return in;
}

// One line of the metrics log; val_loss is NaN on steps without evaluation.
struct Record {
  int64_t step;
  double loss, lr, grad_norm, tokens_per_s, elapsed_s, val_loss;
};

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

std::string format_duration(double s) {
  const int64_t t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  }
  return buf;
}

// metrics.csv and loss.png from the whole history, both replaced atomically.
void write_reports(const std::string& out, const std::vector<Record>& history, double baseline, const TrainOptions& o) {
  std::ostringstream csv;
  csv << "step,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss\n";
  plot::Series train{"train loss", {}, {}}, val{"validation loss", {}, {}};
  val.markers = true;
  double smoothed = NAN;
  for (const Record& r : history) {
    csv << r.step << ',' << r.loss << ',' << r.lr << ',' << r.grad_norm << ',' << r.tokens_per_s << ',' << r.elapsed_s
        << ',';
    if (std::isfinite(r.val_loss)) {
      csv << r.val_loss;
      val.x.push_back(static_cast<double>(r.step));
      val.y.push_back(r.val_loss);
    }
    csv << '\n';
    smoothed = std::isfinite(smoothed) ? 0.9 * smoothed + 0.1 * r.loss : r.loss;  // EMA for a readable curve
    train.x.push_back(static_cast<double>(r.step));
    train.y.push_back(smoothed);
  }
  io::write_file_atomic(out + "/metrics.csv", csv.str());
  if (train.x.empty()) return;
  plot::Chart chart;
  chart.title = "RoFormer " + o.task + " (" + model::position_encoding_name(o.model.position_encoding) + ", " +
                std::to_string(o.model.num_hidden_layers) + "×" + std::to_string(o.model.hidden_size) + ") on " +
                fs::path(o.data).filename().string();
  chart.x_label = "step";
  chart.y_label = "cross-entropy (nats/token)";
  chart.series.push_back(train);
  if (!val.x.empty()) chart.series.push_back(val);
  if (std::isfinite(baseline)) chart.hlines.push_back({"unigram baseline", baseline});
  io::write_file_atomic(out + "/loss.png", plot::render_png(chart));
}

// A live line on a terminal (redrawn every step); otherwise a log line every 2% of the run and at
// every evaluation.
class ProgressLine {
 public:
  explicit ProgressLine(bool live) : live_(live) {}
  void update(int64_t step, int64_t total, double loss, double val, double tok_s, double elapsed, double eta,
              bool evaluated) {
    if (!live_ && !evaluated && step % std::max<int64_t>(1, total / 50) != 0 && step != total) return;
    const int width = 24, filled = static_cast<int>(width * step / std::max<int64_t>(total, 1));
    std::string bar;
    for (int i = 0; i < width; ++i) bar += i < filled ? "█" : "░";
    char buf[256];
    std::snprintf(buf, sizeof(buf), "step %lld/%lld %s %3d%% | loss %.4f | val %s | %.0f tok/s | %s elapsed | ETA %s",
                  static_cast<long long>(step), static_cast<long long>(total), bar.c_str(),
                  static_cast<int>(100 * step / std::max<int64_t>(total, 1)), loss,
                  std::isfinite(val) ? (std::to_string(val).substr(0, 6)).c_str() : "-", tok_s,
                  format_duration(elapsed).c_str(), format_duration(eta).c_str());
    if (live_) {
      std::fprintf(stderr, "\r%s\033[K", buf);
    } else {
      std::fprintf(stderr, "%s\n", buf);
    }
    std::fflush(stderr);
  }
  void finish() {
    if (live_) std::fprintf(stderr, "\n");
  }

 private:
  bool live_;
};

}  // namespace

double validation_loss(model::RoFormer<float>& m, const std::vector<data::Batch>& val, const TrainOptions& o,
                       int64_t* tokens) {
  double sum = 0;
  int64_t count = 0;
  for (size_t i = 0; i < val.size(); ++i) {
    const StepInputs in = make_inputs(val[i], o, m.config().vocab_size, stream_seed(o.seed, kEvalMaskStream, i));
    const double loss = m.forward(in.view());
    sum += loss * m.counted();
    count += m.counted();
  }
  if (tokens) *tokens = count;
  return count ? sum / count : NAN;
}

std::string TrainOptions::to_json() const {
  json j = {{"data", data}, {"task", task}, {"tokenizer", tokenizer}, {"max_vocab", max_vocab},
            {"model", json::parse(model.to_json())}, {"batch", batch}, {"seq", seq}, {"steps", steps},
            {"lr", schedule.peak_lr}, {"min_lr", schedule.min_lr}, {"warmup", schedule.warmup_steps},
            {"decay", schedule.decay == Decay::constant ? "constant" : schedule.decay == Decay::linear ? "linear"
                      : schedule.decay == Decay::cosine ? "cosine" : "inverse_sqrt"},
            {"beta1", adamw.beta1}, {"beta2", adamw.beta2}, {"adam_eps", adamw.eps}, {"weight_decay", adamw.weight_decay},
            {"clip", clip}, {"seed", seed}, {"eval_every", eval_every}, {"eval_batches", eval_batches},
            {"save_every", save_every}, {"val_fraction", val_fraction}, {"mask_prob", mask_prob},
            {"sample_tokens", sample_tokens}, {"sample_prompt", sample_prompt}, {"temperature", temperature},
            {"top_k", top_k}, {"threads", threads}};
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
    o.threads = j.at("threads");
  } catch (const json::exception& e) {
    throw io::Error(std::string("training options: ") + e.what());
  }
  return o;
}

void TrainOptions::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (data.empty()) fail("--data is required");
  if (task != "clm" && task != "mlm") fail("--task must be clm or mlm, got '" + task + "'");
  if (tokenizer != "char" && tokenizer != "byte") fail("--tokenizer must be char or byte, got '" + tokenizer + "'");
  if (batch < 1 || seq < 1 || steps < 1) fail("--batch, --seq and --steps must be at least 1");
  if (seq > model.max_position_embeddings) {
    fail("--seq " + std::to_string(seq) + " exceeds max_position_embeddings " + std::to_string(model.max_position_embeddings));
  }
  if (!(schedule.peak_lr > 0) || schedule.min_lr < 0 || schedule.warmup_steps < 0) fail("bad learning-rate schedule");
  if (clip < 0) fail("--clip must be >= 0");
  if (eval_every < 0 || save_every < 0 || eval_batches < 1) fail("bad --eval-every / --save-every / --eval-batches");
  if (!(mask_prob > 0 && mask_prob < 1)) fail("--mask-prob must be in (0, 1)");
  if (threads < 0) fail("--threads must be >= 0");
  model.validate();
}

TrainResult run_training(TrainOptions o, bool resume) {
  TrainResult result;
  std::string resume_dir;
  if (resume) {
    resume_dir = latest_checkpoint(o.out);
    if (resume_dir.empty()) throw io::Error(o.out + ": no checkpoint to resume from (no 'latest')");
    const io::SafeTensors opt_file(resume_dir + "/optimizer.safetensors");
    if (!opt_file.metadata().count("options")) throw io::Error(resume_dir + ": no training options in the checkpoint");
    const bool progress = o.progress;
    const std::string out = o.out;
    o = TrainOptions::from_json(opt_file.metadata().at("options"));
    o.progress = progress;
    o.out = out;
  }
  o.schedule.total_steps = o.steps;
  o.model.is_decoder = o.task == "clm";
  if (o.threads > 0) omp_set_num_threads(o.threads);

  // Data and tokenizer (a resumed run reuses the saved tokenizer).
  const data::Tokenizer tok = resume ? data::Tokenizer::load(resume_dir + "/tokenizer.json")
                              : o.tokenizer == "byte" ? data::Tokenizer::byte_level()
                                                      : data::Tokenizer::char_level_from_file(o.data, o.max_vocab);
  o.model.vocab_size = tok.vocab_size();
  o.validate();
  const data::Corpus corpus(o.data, tok, o.val_fraction);
  const auto val = corpus.val_batches(o.batch, o.seq, o.eval_batches);
  if (val.empty()) throw io::Error(o.data + ": the validation split is shorter than one window of " + std::to_string(o.seq + 1) + " tokens");
  result.unigram_baseline =
      data::unigram_cross_entropy(corpus.train_unigram_counts(), data::target_counts(val, tok.vocab_size()));

  // Model, optimiser, state.
  model::RoFormer<float> m(o.model);
  AdamW opt = make_adamw(m, o.adamw);
  TrainerState state;
  state.options_json = o.to_json();
  if (resume) {
    m.load(io::SafeTensors(resume_dir + "/model.safetensors"));
    state = load_optimizer(resume_dir, m, opt);
    state.options_json = o.to_json();
    result.checkpoint = resume_dir;
  } else {
    if (!latest_checkpoint(o.out).empty()) {
      throw io::Error(o.out + " already holds a run; continue it with --resume or choose another --out");
    }
    m.init_weights(o.seed);
    fs::create_directories(o.out);
  }
  const std::string log_path = o.out + "/metrics.jsonl";
  std::vector<Record> history = resume ? read_records(log_path, state.step) : std::vector<Record>{};
  {
    std::string text;
    for (const Record& r : history) text += record_json(r).dump() + "\n";
    io::write_file_atomic(log_path, text);  // a resumed log drops what came after the checkpoint
  }
  std::FILE* log = std::fopen(log_path.c_str(), "a");
  if (!log) throw io::Error(log_path + ": cannot open for appending");

  const int64_t params = param_count(m.layout());
  std::fprintf(stderr,
               "%s %s: %lld parameters (%lld layers, hidden %lld, %lld heads, ff %lld, %s positions), vocab %lld (%s)\n"
               "data %s: %lld training bytes, %lld validation bytes; unigram baseline %.4f nats/token\n"
               "batch %lld × seq %lld, %lld steps, lr %.2g, %d threads%s\n",
               resume ? "resuming" : "training", o.task == "clm" ? "causal LM" : "masked LM",
               static_cast<long long>(params), static_cast<long long>(o.model.num_hidden_layers),
               static_cast<long long>(o.model.hidden_size), static_cast<long long>(o.model.num_attention_heads),
               static_cast<long long>(o.model.intermediate_size), model::position_encoding_name(o.model.position_encoding),
               static_cast<long long>(tok.vocab_size()), o.tokenizer.c_str(), o.data.c_str(),
               static_cast<long long>(corpus.train_bytes()), static_cast<long long>(corpus.val_bytes()),
               result.unigram_baseline, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
               static_cast<long long>(o.steps), o.schedule.peak_lr, omp_get_max_threads(),
               resume ? (" (from step " + std::to_string(state.step) + ")").c_str() : "");

  StopSignals signals;
  ProgressLine progress(o.progress && isatty(STDERR_FILENO));
  using clock = std::chrono::steady_clock;
  const auto session_start = clock::now();
  const double elapsed_before = state.elapsed_s;
  const int64_t first_step = state.step;
  double last_val = NAN, last_loss = NAN;
  for (const Record& r : history) {
    if (std::isfinite(r.val_loss)) last_val = r.val_loss;
  }
  auto elapsed = [&] { return elapsed_before + std::chrono::duration<double>(clock::now() - session_start).count(); };
  auto checkpoint = [&] {
    state.elapsed_s = elapsed();
    result.checkpoint = save_checkpoint(o.out, m, opt, tok, state);
    write_reports(o.out, history, result.unigram_baseline, o);
  };

  while (state.step < o.steps) {
    const int64_t step = state.step;
    const auto t0 = clock::now();
    const data::Batch batch = corpus.train_batch(o.seed, step, o.batch, o.seq);
    const StepInputs in = make_inputs(batch, o, tok.vocab_size(), stream_seed(o.seed, kMaskStream, step));
    m.zero_grad();
    const double loss = m.forward(in.view(), true, stream_seed(o.seed, kDropoutStream, step));
    double norm = NAN;
    if (std::isfinite(loss)) {
      m.backward();
      norm = clip_grad_norm({m.grads.data()}, {static_cast<int64_t>(m.grads.size())},
                            o.clip > 0 ? o.clip : INFINITY);
    }
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      progress.finish();
      std::fprintf(stderr, "error: %s became %s at step %lld; stopping. The last good checkpoint is %s\n",
                   std::isfinite(loss) ? "the gradient norm" : "the loss", std::isnan(std::isfinite(loss) ? norm : loss) ? "NaN" : "infinite",
                   static_cast<long long>(step + 1), result.checkpoint.empty() ? "(none yet)" : result.checkpoint.c_str());
      std::fclose(log);
      result.exit_code = 3;
      result.steps_done = step;
      return result;
    }
    const double lr = learning_rate(o.schedule, step);
    opt.step(lr);
    state.step = step + 1;
    state.tokens_seen += o.batch * o.seq;
    last_loss = loss;
    const double step_s = std::chrono::duration<double>(clock::now() - t0).count();
    const double session_tok_s = (state.tokens_seen - first_step * o.batch * o.seq) /
                                 std::chrono::duration<double>(clock::now() - session_start).count();
    Record rec{state.step, loss, lr, norm, o.batch * o.seq / step_s, elapsed(), NAN};
    const bool last = state.step == o.steps;
    if ((o.eval_every > 0 && state.step % o.eval_every == 0) || last) {
      rec.val_loss = last_val = validation_loss(m, val, o);
    }
    history.push_back(rec);
    std::fprintf(log, "%s\n", record_json(rec).dump().c_str());
    std::fflush(log);
    const double eta = (o.steps - state.step) * (elapsed() - elapsed_before) / (state.step - first_step);
    progress.update(state.step, o.steps, loss, last_val, session_tok_s, elapsed(), eta, std::isfinite(rec.val_loss));
    if ((o.save_every > 0 && state.step % o.save_every == 0) || last || g_stop_signal) checkpoint();
    else if (std::isfinite(rec.val_loss)) write_reports(o.out, history, result.unigram_baseline, o);
    if (g_stop_signal && !last) {
      progress.finish();
      std::fprintf(stderr, "interrupted at step %lld: checkpoint saved to %s; continue with --resume --out %s\n",
                   static_cast<long long>(state.step), result.checkpoint.c_str(), o.out.c_str());
      std::fclose(log);
      result.exit_code = 130;
      result.steps_done = state.step;
      return result;
    }
  }
  progress.finish();
  std::fclose(log);
  result.steps_done = state.step;
  result.train_loss = last_loss;
  result.val_loss = last_val;
  std::fprintf(stderr, "done: %lld steps, validation loss %.4f (perplexity %.2f) vs unigram baseline %.4f\n"
               "checkpoint %s; metrics %s/metrics.{jsonl,csv}; plot %s/loss.png\n",
               static_cast<long long>(state.step), last_val, std::exp(last_val), result.unigram_baseline,
               result.checkpoint.c_str(), o.out.c_str(), o.out.c_str());
  if (o.task == "clm" && o.sample_tokens > 0) {
    std::vector<int64_t> prompt;
    for (int32_t id : tok.encode(o.sample_prompt)) prompt.push_back(id);
    if (prompt.empty()) prompt.push_back(data::Tokenizer::kSep);
    model::SampleOptions so;
    so.max_new_tokens = o.sample_tokens;
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.seed = stream_seed(o.seed, kSampleStream, 0);
    for (int32_t s = 0; s < data::Tokenizer::kNumSpecial; ++s) so.banned.push_back(s);
    const auto ids = model::generate(m, prompt, so);
    std::printf("--- sample (temperature %.2g, top-k %lld) ---\n%s%s\n---\n", o.temperature,
                static_cast<long long>(o.top_k), o.sample_prompt.c_str(),
                tok.decode(std::vector<int32_t>(ids.begin(), ids.end())).c_str());
  }
  return result;
}

EvalResult evaluate_checkpoint(const std::string& dir, const std::string& data_path, int64_t batch, int64_t seq,
                               int64_t max_batches, double val_fraction, uint64_t seed) {
  LoadedModel lm = load_model(dir);
  if (seq > lm.config.max_position_embeddings) {
    throw std::invalid_argument("--seq exceeds the model's max_position_embeddings " +
                                std::to_string(lm.config.max_position_embeddings));
  }
  const data::Corpus corpus(data_path, lm.tokenizer, val_fraction);
  const auto val = corpus.val_batches(batch, seq, max_batches);
  if (val.empty()) throw io::Error(data_path + ": the validation split is shorter than one window");
  TrainOptions o;
  o.task = lm.config.is_decoder ? "clm" : "mlm";
  o.seed = seed;
  EvalResult r;
  r.loss = validation_loss(*lm.model, val, o, &r.tokens);
  r.unigram_baseline =
      data::unigram_cross_entropy(corpus.train_unigram_counts(), data::target_counts(val, lm.tokenizer.vocab_size()));
  return r;
}

}  // namespace train
