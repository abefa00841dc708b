// `roformer bench train`: training throughput of the engine on the model shapes of the PyTorch peer
// (bench/peers/roformer_torch.py): random tokens, causal or masked LM, AdamW, clipping, fp32, through
// train::Trainer::step as `roformer train` runs it.
// Reports tokens/s, ms/step, model GFLOP/s (the peer's FLOP formula), this machine's sgemm rate
// at the same thread count, and peak RSS, as a table or as JSON for the peer's --ours. Under mpirun
// the step is data-parallel (--batch stays the global batch) and rank 0 also reports the time per
// step spent waiting for the gradient reduction after the backward (what the buckets did not hide).
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_util.h"
#include "base/random.h"
#include "commands.h"
#include "model/roformer.h"
#include "ops/blas.h"
#include "ops/linear.h"
#include "ops/packed_linear.h"
#include "train/checkpoint.h"
#include "train/lm_task.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace roformer {
namespace {

// The best sgemm rate over square products of a size typical of the model's largest GEMMs.
double sgemm_gflops(int64_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = bench_clock::now();
    ops::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0) * 1e-9);
  }
  return best;
}

// Random tokens (a pure function of the step), as causal or masked LM targets: the trainer's step
// without the corpus.
class RandomTokenTask : public train::TokenTask {
 public:
  RandomTokenTask(bool mlm, int64_t B, int64_t T, int64_t V) : mlm_(mlm), B_(B), T_(T), V_(V) {}
  std::string name() const override { return mlm_ ? "mlm" : "clm"; }
  train::Batch train_batch(int64_t s) override {
    const int64_t N = B_ * T_;
    train::Batch b;
    b.B = B_;
    b.T = T_;
    b.ids.resize(N);
    b.targets.resize(N);
    for (int64_t i = 0; i < N; ++i) {
      b.ids[i] = static_cast<int64_t>(base::mix64(2 * (s * N + i)) % V_);
      b.targets[i] = mlm_ && base::uniform01(s, i) >= 0.15 ? model::kIgnoreIndex
                                                           : static_cast<int64_t>(base::mix64(2 * (s * N + i) + 1) % V_);
    }
    return b;
  }
  const std::vector<train::Batch>& validation_batches() override { return val_; }

 private:
  bool mlm_;
  int64_t B_, T_, V_;
  std::vector<train::Batch> val_;
};

// The --preset's model (as the PyTorch peer builds it: no dropout unless --dropout), for --task and --seq.
model::RoFormerConfig preset_config(const BenchTrainOptions& o) {
  model::RoFormerConfig c;
  const bool large = o.preset == "large", base = o.preset == "base";
  c.hidden_size = c.embedding_size = base ? 768 : large ? 512 : 256;
  c.num_hidden_layers = base ? 12 : large ? 6 : 4;
  c.num_attention_heads = base ? 12 : large ? 8 : 4;
  c.intermediate_size = base ? 3072 : large ? 2048 : 1024;
  c.vocab_size = o.vocab;
  c.max_position_embeddings = std::max<int64_t>(512, o.seq);
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = o.dropout;
  c.is_decoder = o.task == train::LmObjective::clm;
  return c;
}

// Peak RSS, the memory on transparent huge pages now, and the GLIBC_TUNABLES the run started with
// (training asks for huge pages through it: tools/roformer/main.cc).
nlohmann::json memory_report() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return {{"peak_rss_mib", peak_rss_mib()},
          {"huge_pages_mib", huge_pages_mib()},
          {"glibc_tunables", tunables ? tunables : ""}};
}

// The one-line summary of a run's JSON (bench_train without --json).
void print_summary(const nlohmann::json& r) {
  fmt::print("{} {} B={} T={} threads={} {}: {:.0f} tok/s, {:.1f} ms/step (median {:.1f}), {:.1f} GFLOP/s",
             r["preset"].get<std::string>(), r["task"].get<std::string>(), r["batch"].get<int64_t>(),
             r["seq"].get<int64_t>(), r["threads"].get<int>(),
             r["precision"].get<std::string>() + (r["gradient_checkpointing"].get<bool>() ? ", checkpointed" : ""),
             r["tokens_per_s"].get<double>(), r["ms_per_step"].get<double>(), r["ms_per_step_median"].get<double>(),
             r["gflops"].get<double>());
  if (const double sgemm = r["sgemm_gflops"]; sgemm > 0) {
    fmt::print(" = {:.0f}% of sgemm {:.1f} GFLOP/s", 100 * r["sgemm_fraction"].get<double>(), sgemm);
  }
  fmt::print(", peak RSS {:.0f} MiB ({:.0f} MiB on huge pages)", r["peak_rss_mib"].get<double>(),
             r["huge_pages_mib"].get<double>());
  if (r.contains("bf16_gradient_values")) {
    fmt::print("; of {} gradient values rounded to bf16, {} below bf16's normal range (lost), {} below fp16's "
               "smallest subnormal", r["bf16_gradient_values"].get<int64_t>(),
               r["bf16_gradients_below_bf16_normal"].get<int64_t>(),
               r["bf16_gradients_below_fp16_subnormal"].get<int64_t>());
  }
  if (const int processes = r["processes"]; processes > 1) {
    fmt::print("; {} processes, buckets {} MiB: {:.2f} ms/step waiting for the gradient sum (median)", processes,
               r["bucket_mb"].get<double>(), r["comm_wait_ms_median"].get<double>());
  }
  fmt::print("\n");
}

// --attention-memory: quadratic keeps the probabilities at any length, linear row statistics only;
// auto leaves the model's own choice.
void keep_attention_memory(model::RoFormer<float>& m, const std::string& memory) {
  if (memory == "quadratic") m.set_keep(model::Keep::all);
  if (memory == "linear") m.set_max_kept_keys(0);
}

// run gets the census of the output gradients the backward rounded to bf16 since `before` (warm-up
// steps included).
void add_gradient_census(nlohmann::json& run, const ops::GradientUnderflow& before) {
  const ops::GradientUnderflow u = ops::bf16_gradient_underflow();
  run["bf16_gradient_values"] = u.values - before.values;
  run["bf16_gradients_below_bf16_normal"] = u.below_bf16 - before.below_bf16;
  run["bf16_gradients_below_fp16_subnormal"] = u.below_fp16 - before.below_fp16;
}

// Refuses, by name, options that do not go together, and a huge --batch or --seq before anything is
// allocated.
void check_bench_train_options(const BenchTrainOptions& o, const model::RoFormerConfig& c) {
  if (o.gradient_checkpointing && o.attention_memory == "quadratic") {
    throw std::invalid_argument("--gradient-checkpointing keeps no layer's probabilities: --attention-memory auto or "
                                "linear");
  }
  train::check_batch_fits_in_memory(c, static_cast<double>(o.batch), o.seq, true,
                                    "--batch " + std::to_string(o.batch) + " with --seq " + std::to_string(o.seq) +
                                        " and --preset " + o.preset,
                                    o.attention_memory == "quadratic",  // auto keeps them only while they are small
                                    o.gradient_checkpointing);
}

}  // namespace

int bench_train(const BenchTrainOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const model::RoFormerConfig c = preset_config(o);
  check_bench_train_options(o, c);
  model::RoFormer<float> m(c);
  m.init_weights(1);
  keep_attention_memory(m, o.attention_memory);
  m.set_gradient_checkpointing(o.gradient_checkpointing);
  const train::TrainPrecision precision = train::resolve_precision(o.precision, "");
  train::apply_precision(m, precision);
  ops::set_bf16_gradient_census(true);  // reported below
  const ops::GradientUnderflow underflow0 = ops::bf16_gradient_underflow();
  const int64_t B = o.batch, T = o.seq, N = B * T;
  RandomTokenTask task(o.task == train::LmObjective::mlm, B, T, c.vocab_size);
  train::TrainerConfig tc;
  tc.schedule = {.peak_lr = 1e-3, .min_lr = 0, .warmup_steps = 0, .total_steps = 1, .decay = train::Decay::constant};
  tc.clip = 1.0;
  tc.bucket_mb = o.bucket_mb;
  train::Trainer trainer(m, task, tc);
  train::Communicator& comm = trainer.comm();
  for (int64_t s = 0; s < o.warmup; ++s) trainer.step(s);
  std::vector<double> times, waits;
  const auto t0 = bench_clock::now();
  for (int64_t s = 0; s < o.steps; ++s) {
    const auto ts = bench_clock::now();
    waits.push_back(trainer.step(o.warmup + s).comm_wait_s);
    times.push_back(seconds_since(ts));
  }
  const double wall = seconds_since(t0);
  const nlohmann::json memory = memory_report();  // before the sgemm probe allocates
  const int64_t H = c.hidden_size, L = c.num_hidden_layers, I = c.intermediate_size, V = c.vocab_size;
  const double matmul_params = L * (4.0 * H * H + 2.0 * H * I) + H * H + H * V;
  const double flops_per_token = 3 * (2 * matmul_params + 4.0 * L * T * H);
  const double tokens_per_s = N * o.steps / wall;
  const double gflops = tokens_per_s * flops_per_token * 1e-9;
  const bool prints = comm.rank() == 0;
  comm.finish();
  if (!prints) return 0;
  const double sgemm = o.sgemm ? sgemm_gflops(o.preset == "small" ? 1024 : 2048) : 0;
  std::sort(times.begin(), times.end());
  std::sort(waits.begin(), waits.end());
  nlohmann::json run = {{"preset", o.preset},
                              {"task", train::lm_objective_name(o.task)},
                              {"threads", omp_get_max_threads()},
                              {"batch", B},
                              {"seq", T},
                              {"vocab", V},
                              {"hidden", H},
                              {"layers", L},
                              {"params", model::param_count(m.layout())},
                              {"flops_per_token", flops_per_token},
                              {"tokens_per_s", tokens_per_s},
                              {"ms_per_step", wall * 1e3 / o.steps},
                              {"ms_per_step_median", times[times.size() / 2] * 1e3},
                              {"gflops", gflops},
                              {"sgemm_gflops", sgemm},
                              {"sgemm_fraction", sgemm > 0 ? gflops / sgemm : 0.0},
                              {"processes", comm.size()},
                              {"bucket_mb", o.bucket_mb},
                              {"attention_memory", o.attention_memory},
                              {"gradient_checkpointing", o.gradient_checkpointing},
                              {"dropout", o.dropout},
                              {"precision", train::train_precision_name(precision)},
                              {"cpu_isa", ops::cpu_isa_name()},
                              {"comm_wait_ms_median", waits[waits.size() / 2] * 1e3}};
  run.update(memory);
  if (precision == train::TrainPrecision::bf16) add_gradient_census(run, underflow0);
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"tool", "roformer bench train"}, {"runs", {run}}}.dump(2));
  } else {
    print_summary(run);
  }
  return 0;
}

}  // namespace roformer
