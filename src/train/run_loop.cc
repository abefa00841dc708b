// The training loop of every workload (see run_loop.h).
#include "run_loop.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/threads.h"
#include "ops/packed_linear.h"
#include "io/output_path.h"
#include "train/console.h"

namespace train {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct RunLoop::Impl {
  LoopOptions o;
  Trainer& trainer;
  Recipe& recipe;
  TrainerState& state;
  ReportHook hook;
  Communicator& comm;
  bool writer;  // rank 0: writes the run directory and prints
  ProgressLine progress;
  RunLog log;
  LoopResult result;
  int64_t bad_evals = 0, first_step = 0, first_tokens = 0;
  double elapsed_before = 0, last_metric = NAN;
  Clock::time_point session_start;

  Impl(LoopOptions opts, Trainer& t, Recipe& r, TrainerState& s, const std::string& resumed_from, ReportHook h)
      : o(std::move(opts)), trainer(t), recipe(r), state(s), hook(std::move(h)), comm(t.comm()),
        writer(comm.rank() == 0), progress(ProgressLine::choose(o.progress, writer)),
        log(o.out, resumed_from.empty() ? -1 : s.step, writer) {
    result.checkpoint = resumed_from;
    if (tracks_best() && !state.task_json.empty()) {  // the bookkeeping of the run being resumed
      try {
        const json t = json::parse(state.task_json);
        // null before the first evaluation (no best yet): JSON has no NaN
        const json best = t.value("best", json());
        result.best = best.is_number() ? best.get<double>() : NAN;
        result.best_step = t.value("best_step", int64_t{0});
        bad_evals = t.value("bad_evals", int64_t{0});
      } catch (const json::exception& e) {
        throw io::Error(resumed_from + "/optimizer.safetensors: bad trainer state (task): " + e.what());
      }
    }
    for (const EvalRecord& r : log.history()) {
      if (std::isfinite(r.val_loss)) last_metric = metric_of(r);
    }
  }

  // The best evaluation is followed for out/best and for early stopping.
  bool tracks_best() const { return o.keep_best || o.patience > 0; }
  double elapsed() const {
    return elapsed_before + std::chrono::duration<double>(Clock::now() - session_start).count();
  }
  static double value_of(const EvalRecord& r, const std::string& metric) {
    if (metric.empty()) return r.val_loss;
    const auto it = r.metrics.find(metric);
    return it == r.metrics.end() ? NAN : it->second;
  }
  double metric_of(const EvalRecord& r) const { return value_of(r, o.metric); }
  bool evaluation_due(bool last) const {
    if (last) return true;
    if (o.eval_every > 0) return state.step % o.eval_every == 0;
    return o.steps_per_epoch > 0 && state.step % o.steps_per_epoch == 0;
  }

  void report() {
    if (!writer) return;
    log.write_csv();
    if (!hook) return;
    RunReport r = o.report;
    r.out = o.out, r.history = &log.history(), r.metric = o.metric;
    hook(r);
  }

  void checkpoint() {
    const AdamW& optimizer = trainer.gather_optimizer();  // every rank: with ZeRO-1 a collective
    if (!writer) return;
    state.elapsed_s = elapsed();
    if (tracks_best()) {
      state.task_json = json{{"best", std::isnan(result.best) ? json(nullptr) : json(result.best)},
                             {"best_step", result.best_step}, {"bad_evals", bad_evals}}.dump();
    }
    result.checkpoint = save_checkpoint(
        o.out, trainer.model(), optimizer, [&](const std::string& dir) { recipe.write_model(dir); }, state,
        o.keep_checkpoints);
    report();
  }

  // out/best replaced as a whole: written beside it, then swapped in.
  void save_best() {
    if (!writer) return;
    const std::string dir = o.out + "/best", fresh = dir + ".new", old = dir + ".old";
    fs::remove_all(fresh);
    fs::create_directories(fresh);
    recipe.write_model(fresh);
    fs::remove_all(old);
    if (fs::exists(dir)) fs::rename(dir, old);
    fs::rename(fresh, dir);
    fs::remove_all(old);
  }

  void evaluate(EvalRecord& rec) {
    recipe.evaluate(rec);
    last_metric = metric_of(rec);
    if (!tracks_best()) return;
    const double v = value_of(rec, o.best_metric);
    const bool better = std::isnan(result.best) || (o.higher_is_better ? v > result.best : v < result.best);
    if (better) {
      result.best = v;
      result.best_step = rec.step;
      bad_evals = 0;
      if (o.keep_best) save_best();
    } else {
      ++bad_evals;
    }
  }

  void stop_non_finite(const StepStats& s, int64_t step) {
    progress.finish();
    const bool loss_ok = std::isfinite(s.loss);
    if (writer) {
      std::fprintf(stderr, "error: %s became %s at step %lld; stopping. The last good checkpoint is %s\n",
                   loss_ok ? "the gradient norm" : "the loss", std::isnan(loss_ok ? s.grad_norm : s.loss) ? "NaN" : "infinite",
                   static_cast<long long>(step + 1), result.checkpoint.empty() ? "(none yet)" : result.checkpoint.c_str());
    }
    result.exit_code = 3;
  }

  void stop_interrupted() {
    progress.finish();
    if (writer) {
      std::fprintf(stderr, "interrupted at step %lld: checkpoint saved to %s; continue with --resume --out %s\n",
                   static_cast<long long>(state.step), result.checkpoint.c_str(), o.out.c_str());
    }
    result.exit_code = 130;
  }

  // One optimiser step and what follows it: the log line, evaluation, checkpoint, progress, stops.
  // Returns false when the run ends here.
  bool step() {
    const int64_t step = state.step;
    const auto t0 = Clock::now();
    const StepStats s = trainer.step(step);
    if (!s.finite()) {
      stop_non_finite(s, step);
      return false;
    }
    state.step = step + 1;
    state.tokens_seen += s.tokens;
    result.train_loss = s.loss;
    EvalRecord rec;
    rec.step = state.step;
    rec.epoch = o.steps_per_epoch > 0 ? static_cast<double>(state.step) / static_cast<double>(o.steps_per_epoch) : NAN;
    rec.loss = s.loss, rec.lr = s.lr, rec.grad_norm = s.grad_norm;
    rec.tokens_per_s = static_cast<double>(s.tokens) / std::chrono::duration<double>(Clock::now() - t0).count();
    rec.elapsed_s = elapsed();
    const bool last = state.step == o.total_steps, eval = evaluation_due(last);
    if (eval) evaluate(rec);
    log.append(rec);
    const double session_s = std::chrono::duration<double>(Clock::now() - session_start).count();
    const double tok_s = static_cast<double>(state.tokens_seen - first_tokens) / session_s;
    const double eta = static_cast<double>(o.total_steps - state.step) * (elapsed() - elapsed_before) /
                       static_cast<double>(state.step - first_step);
    progress.update(state.step, o.total_steps, s.loss, last_metric, tok_s, elapsed(), eta, eval);
    const bool early = eval && o.patience > 0 && bad_evals >= o.patience;
    const bool stop = stop_requested(comm);
    // An early stop is checkpointed too: its bookkeeping is what tells a --resume that the run is over.
    if ((o.save_every > 0 && state.step % o.save_every == 0) || (o.save_at_eval && eval) || last || stop || early) {
      checkpoint();
    } else if (eval) {
      report();
    }
    if (early) {
      result.stopped_early = true;
      return false;
    }
    if (stop && !last) {
      stop_interrupted();
      return false;
    }
    return true;
  }
};

RunLoop::RunLoop(LoopOptions o, Trainer& trainer, Recipe& recipe, TrainerState& state, std::string resumed_from,
                 ReportHook hook)
    : impl_(std::make_unique<Impl>(std::move(o), trainer, recipe, state, resumed_from, std::move(hook))) {}

RunLoop::~RunLoop() = default;

const std::vector<EvalRecord>& RunLoop::history() const { return impl_->log.history(); }

LoopResult RunLoop::run() {
  Impl& r = *impl_;
  StopSignals signals;
  r.session_start = Clock::now();
  r.elapsed_before = r.state.elapsed_s;
  r.first_step = r.state.step;
  r.first_tokens = r.state.tokens_seen;
  while (r.state.step < r.o.total_steps) {
    if (!r.step()) break;
  }
  r.progress.finish();
  r.result.steps_done = r.state.step;
  for (const EvalRecord& rec : r.log.history()) {
    if (std::isfinite(rec.val_loss)) r.result.last_eval = rec;
  }
  return r.result;
}

void apply_threads(int threads, const std::string& resumed_from) {
  base::check_thread_count(threads, resumed_from.empty() ? "threads" : resumed_from + ": the run's saved threads");
  if (threads > 0) omp_set_num_threads(threads);
}

TrainPrecision resolve_precision(TrainPrecision precision, const std::string& resumed_from) {
  const std::string origin = resumed_from.empty() ? "--precision" : resumed_from + ": the run's saved precision";
  if (precision == TrainPrecision::automatic) return ops::bf16_is_native() ? TrainPrecision::bf16 : TrainPrecision::fp32;
  if (precision == TrainPrecision::bf16 && !ops::bf16_is_native()) {
    throw io::Error(origin + " bf16: this CPU has no native bf16 dot products (AVX512-BF16 or AMX; oneDNN found " +
                    ops::cpu_isa_name() + "); use fp32");
  }
  return precision;
}

std::string apply_precision(model::Trainable<float>& m, TrainPrecision precision) {
  if (precision == TrainPrecision::automatic) throw std::logic_error("apply_precision: resolve_precision first");
  const bool bf16 = precision == TrainPrecision::bf16;
  m.set_precision(bf16 ? ops::Precision::bf16 : ops::Precision::f32);
  return bf16 ? "bf16 mixed precision (" + ops::cpu_isa_name() + ")" : "fp32";
}

std::string apply_loop_settings(model::Trainable<float>& m, const LoopSettings& loop) {
  const std::string words = apply_precision(m, loop.precision);
  m.set_gradient_checkpointing(loop.gradient_checkpointing);
  return loop.gradient_checkpointing ? words + ", gradient checkpointing" : words;
}

RunDirectoryLock::RunDirectoryLock(const std::string& out, bool writer) {
  if (!writer) return;
  fd_ = ::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;  // no directory: nothing to resume, which resume_options says
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw io::Error(out + ": another process is training in this run directory; wait for it to end or choose "
                          "another --out");
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RunDirectoryLock claim_run_directory(const std::string& out, bool writer, const std::vector<std::string>& inputs) {
  io::check_output_path("--out", out, inputs);
  if (writer) fs::create_directories(out);
  RunDirectoryLock lock(out, writer);
  if (!latest_checkpoint(out).empty()) {
    throw io::Error(out + " already holds a run; continue it with --resume or choose another --out");
  }
  return lock;
}

int64_t evaluations_without_improvement(const std::string& task_json, const std::string& origin) {
  if (task_json.empty()) return 0;
  try {
    return json::parse(task_json).value("bad_evals", int64_t{0});
  } catch (const json::exception& e) {
    throw io::Error(origin + ": bad trainer state (task): " + e.what());
  }
}

bool finished_early(const ResumePoint& at, int64_t patience, const std::string& out, const std::string& metric) {
  if (patience <= 0) return false;
  const int64_t bad = evaluations_without_improvement(at.task_json, at.dir + "/optimizer.safetensors");
  if (bad < patience) return false;
  if (world().rank() == 0) {
    std::fprintf(stderr, "%s: stopped early at step %lld (%lld evaluations without a better %s, --patience %lld), "
                 "nothing to do; %s holds its last checkpoint\n", out.c_str(), static_cast<long long>(at.step),
                 static_cast<long long>(bad), metric.c_str(), static_cast<long long>(patience), at.dir.c_str());
  }
  return true;
}

TrainerState restore_optimizer(const std::string& checkpoint, Trainer& trainer, const AdamWConfig& adamw) {
  if (!trainer.sharded()) return load_optimizer(checkpoint, trainer.model(), trainer.optimizer());
  // The checkpoint holds every moment; this rank keeps its shard.
  AdamW whole = make_adamw(trainer.model(), adamw);
  TrainerState state = load_optimizer(checkpoint, trainer.model(), whole);
  trainer.set_optimizer(whole);
  return state;
}

}  // namespace train
