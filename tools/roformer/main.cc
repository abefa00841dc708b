// roformer: the command line of roformer.cpp.
//   roformer rope check        accuracy of librope against a __float128 oracle
//   roformer bench rope        speed of librope against this machine's memory floor
//   roformer bench train|infer|attention|gemm   engine speed (PyTorch peers in bench/peers/)
//   roformer decay             RoPE's long-term decay bound (paper Fig. 2) as PNG/CSV
//   roformer train             train a RoFormer causal or masked LM on a text file
//   roformer eval              validation loss and perplexity of a checkpoint
//   roformer generate          sample from a causal-LM checkpoint
//   roformer finetune          fine-tune a RoFormer into a sequence classifier or regressor
//   roformer translate-train | translate | average
//                              train the encoder-decoder, translate with beam search, average checkpoints
//   roformer bleu              corpus BLEU as sacreBLEU computes it
//   roformer vocab             learn a BERT WordPiece vocabulary
//   roformer spm-train | spm-encode | spm-decode   SentencePiece subwords (translation)
//   roformer quantize          write an int8 copy of a model directory
//   roformer tokenize | fill-mask | embed | similarity | classify | forward
//                              inference on Hugging Face RoFormer model directories
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>

#include "commands.h"
#include "thread_option.h"
#include "plot/plot.h"
#include "rope/rope.h"

namespace {

// OpenMP workers that wait for the next parallel region spin (libgomp: 300,000 turns, about a
// millisecond) before they sleep. On a machine whose cores are all ours that is fastest, but when another
// process holds a core the spinning workers take the time slices the working ones need, and 2 threads
// ran slower than 1 (docs/perf.md, "Threads that share the machine"). A short spin keeps most of the
// fast hand-off of small regions (librope's decode calls) and sleeps before it starves anyone.
// libgomp reads its environment when it is loaded, before main, so the default is set by executing
// the program once more with it; OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment win.
constexpr const char* kDefaultSpinCount = "1000";

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then the runtime's own default stays
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP reads OMP_NUM_THREADS itself and would crash on a huge count at its first parallel region.
  if (const std::string problem = roformer::omp_num_threads_problem(); !problem.empty()) {
    fmt::print(stderr, "roformer: {}\n", problem);
    return 2;
  }
  apply_default_wait_policy(argv);
  CLI::App app{"roformer: RoFormer and rotary position embedding (RoPE) in C++"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("roformer ") + rope_version());

  CLI::App* rope = app.add_subcommand("rope", "RoPE kernel tools")->require_subcommand(1);
  roformer::RopeCheckOptions check;
  CLI::App* check_cmd = rope->add_subcommand("check", "Max error of cos/sin and rotated outputs vs an exact oracle");
  check_cmd->add_option("--samples", check.samples, "Positions sampled per band")->check(CLI::Range(1, 1000000));
  check_cmd->add_flag("--json", check.json, "Print JSON instead of a table");

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks")->require_subcommand(1);
  roformer::BenchRopeOptions bench_rope;
  CLI::App* bench_cmd = bench->add_subcommand("rope", "RoPE prefill/decode speed vs the memory floor");
  bench_cmd->add_flag("--json", bench_rope.json, "Print JSON (for bench/peers/rope_torch.py --ours)");
  bench_cmd->add_option("--min-time", bench_rope.min_time, "Seconds per benchmark")->check(CLI::Range(0.001, 60.0));
  bench_cmd->add_option("--repetitions", bench_rope.repetitions, "Repetitions (fastest kept)")->check(CLI::Range(1, 100));
  bench_cmd->add_option("--filter", bench_rope.filter, "Only benchmarks whose name contains this");
  bench_cmd->add_flag("--quick", bench_rope.quick, "Small shapes and short runs (smoke test)");
  bench_cmd->add_option("--simd-target", bench_rope.simd_target,
                        "Cap the SIMD dispatch at this Highway target (e.g. AVX2 on an AVX-512 CPU)");

  roformer::BenchTrainOptions bench_train;
  CLI::App* bench_train_cmd = bench->add_subcommand("train", "Training tokens/s on the PyTorch peer's model shapes");
  bench_train_cmd->add_option("--preset", bench_train.preset, "small, large or base (RoFormer-base: 12 × 768)")
      ->check(CLI::IsMember({"small", "large", "base"}));
  bench_train_cmd->add_option("--task", bench_train.task, "clm or mlm")->check(CLI::IsMember({"clm", "mlm"}));
  bench_train_cmd->add_option("--batch", bench_train.batch, "Sequences per step")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--seq", bench_train.seq, "Tokens per sequence")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--vocab", bench_train.vocab, "Vocabulary")->check(CLI::Range(2, 1000000));
  bench_train_cmd->add_option("--steps", bench_train.steps, "Timed steps")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--warmup", bench_train.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  bench_train_cmd->add_option("--threads", bench_train.threads, "OpenMP threads (0: all)")->check(roformer::thread_count());
  bench_train_cmd->add_flag("!--no-sgemm", bench_train.sgemm, "Skip the sgemm rate probe");
  bench_train_cmd->add_flag("--json", bench_train.json, "Print JSON (for bench/peers/roformer_torch.py --ours)");
  bench_train_cmd->add_option("--bucket-mb", bench_train.bucket_mb, "Under mpirun: gradient buckets in MiB (0: one "
                              "allreduce after the backward)")->check(CLI::Range(0.0, 65536.0));

  roformer::BenchCommOptions bench_comm;
  CLI::App* bench_comm_cmd = bench->add_subcommand("comm", "Allreduce time by message size (run it under mpirun)");
  bench_comm_cmd->add_option("--min-bytes", bench_comm.min_bytes, "Smallest message")->check(CLI::Range(4, 1 << 30));
  bench_comm_cmd->add_option("--max-bytes", bench_comm.max_bytes, "Largest message")->check(CLI::Range(4, 1 << 30));
  bench_comm_cmd->add_option("--min-time", bench_comm.min_time, "Seconds per size")->check(CLI::Range(0.001, 60.0));
  bench_comm_cmd->add_flag("--json", bench_comm.json, "Print JSON");

  roformer::DecayOptions decay;
  CLI::App* decay_cmd = app.add_subcommand("decay", "RoPE's long-term decay bound vs relative distance (paper Fig. 2)");
  decay_cmd->add_option("--dim", decay.dim, "Rotary dimension d")->capture_default_str();
  decay_cmd->add_option("--base", decay.bases, "One or more bases (one curve each)")->capture_default_str();
  decay_cmd->add_option("--scaling", decay.scaling,
                        "Scaling specs: none, linear:F, ntk:F, dynamic-ntk:F:ORIG, yarn:F:ORIG, llama3:F:ORIG");
  decay_cmd->add_option("--max-distance", decay.max_distance, "Largest relative distance")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  decay_cmd->add_option("--png", decay.png, "Write the plot here");
  decay_cmd->add_option("--csv", decay.csv, "Write the values here");
  decay_cmd->add_flag("--log-x", decay.log_x, "Logarithmic distance axis");

  CLI::App* plot = app.add_subcommand("plot", "Plots")->require_subcommand(1);
  roformer::PlotRunsOptions plot_runs;
  CLI::App* plot_runs_cmd = plot->add_subcommand("runs", "Compare training runs' metrics in one PNG, with a Markdown table");
  plot_runs_cmd->add_option("--runs", plot_runs.runs, "Run directories (holding metrics.jsonl)")->required();
  plot_runs_cmd->add_option("--labels", plot_runs.labels, "Legend labels, one per run");
  plot_runs_cmd->add_option("--metric", plot_runs.metric, "val_loss, loss or val_bleu (translate-train)")
      ->check(CLI::IsMember({"val_loss", "loss", "val_bleu"}));
  plot_runs_cmd->add_option("--out", plot_runs.out, "PNG file")->capture_default_str();
  plot_runs_cmd->add_option("--table", plot_runs.table, "Also write the Markdown table here");
  plot_runs_cmd->add_option("--title", plot_runs.title, "Chart title");
  plot_runs_cmd->add_option("--baseline", plot_runs.baseline, "Dashed unigram-baseline line at this loss");

  roformer::BenchInferOptions bench_infer;
  CLI::App* bench_infer_cmd = bench->add_subcommand("infer", "Inference tokens/s of a Hugging Face model directory");
  bench_infer_cmd->add_option("--model", bench_infer.model, "Model directory (config.json + weights)")->required();
  bench_infer_cmd->add_option("--batch", bench_infer.batch, "Sequences per forward")->check(CLI::Range(1, 4096));
  bench_infer_cmd->add_option("--seq", bench_infer.seq, "Tokens per sequence")->check(CLI::Range(1, 1 << 20));
  bench_infer_cmd->add_option("--head", bench_infer.head, "none (last hidden state) or mlm (+ logits)")
      ->check(CLI::IsMember({"none", "mlm"}));
  bench_infer_cmd->add_option("--keep", bench_infer.keep, "outputs (inference) or all (every activation)")
      ->check(CLI::IsMember({"outputs", "all"}));
  roformer::add_linear_options(bench_infer_cmd, bench_infer.quantize, bench_infer.gemm);
  bench_infer_cmd->add_option("--warmup", bench_infer.warmup, "Untimed forwards first")->check(CLI::Range(0, 1000));
  bench_infer_cmd->add_option("--min-reps", bench_infer.min_reps, "Timed forwards, at least")->check(CLI::Range(1, 100000));
  bench_infer_cmd->add_option("--min-time", bench_infer.min_time, "Seconds of timed forwards, at least")
      ->check(CLI::Range(0.0, 3600.0));
  bench_infer_cmd->add_option("--threads", bench_infer.threads, "OpenMP threads (0: all)")->check(roformer::thread_count());
  bench_infer_cmd->add_flag("--json", bench_infer.json, "Print JSON (for bench/peers/roformer_infer_hf.py)");

  roformer::BenchAttentionOptions bench_att;
  CLI::App* bench_att_cmd = bench->add_subcommand("attention", "Softmax vs linear attention: time per token vs length");
  bench_att_cmd->add_option("--lengths", bench_att.lengths, "Sequence lengths")->delimiter(',');
  bench_att_cmd->add_option("--heads", bench_att.heads, "Heads")->check(CLI::PositiveNumber);
  bench_att_cmd->add_option("--head-dim", bench_att.head_dim, "Head dimension (even)")->check(CLI::PositiveNumber);
  bench_att_cmd->add_option("--performer-features", bench_att.performer_features, "FAVOR+ features (even)");
  bench_att_cmd->add_option("--repetitions", bench_att.repetitions, "Best of")->check(CLI::Range(1, 100));
  bench_att_cmd->add_option("--threads", bench_att.threads, "OpenMP threads (0: all)")->check(roformer::thread_count());

  roformer::BenchGemmOptions bench_gemm;
  CLI::App* bench_gemm_cmd = bench->add_subcommand("gemm", "RoFormer-base's linear layers (sgemm, oneDNN packed fp32, int8) and training's products (OpenBLAS vs oneDNN's sgemm)");
  bench_gemm_cmd->add_option("--rows", bench_gemm.rows, "Row counts M (tokens per call)")->delimiter(',');
  bench_gemm_cmd->add_option("--repetitions", bench_gemm.repetitions, "Best of")->check(CLI::Range(1, 100));
  bench_gemm_cmd->add_option("--min-time", bench_gemm.min_time, "Seconds per timing")->check(CLI::Range(0.001, 60.0));
  bench_gemm_cmd->add_option("--threads", bench_gemm.threads, "OpenMP threads (0: all)")->check(roformer::thread_count());

  const auto run_model_command = roformer::add_model_commands(app);
  const auto run_infer_command = roformer::add_infer_commands(app);
  const auto run_finetune_command = roformer::add_finetune_command(app);
  const auto run_bleu_command = roformer::add_bleu_command(app);
  const auto run_translate_command = roformer::add_translate_commands(app);
  const auto run_vocab_command = roformer::add_vocab_command(app);
  const auto run_spm_command = roformer::add_spm_commands(app);
  const auto run_quantize_command = roformer::add_quantize_command(app);

  CLI11_PARSE(app, argc, argv);
  auto run = [&]() -> int {
    if (const int status = run_model_command(); status >= 0) return status;
    if (const int status = run_infer_command(); status >= 0) return status;
    if (const int status = run_finetune_command(); status >= 0) return status;
    if (const int status = run_bleu_command(); status >= 0) return status;
    if (const int status = run_translate_command(); status >= 0) return status;
    if (const int status = run_vocab_command(); status >= 0) return status;
    if (const int status = run_spm_command(); status >= 0) return status;
    if (const int status = run_quantize_command(); status >= 0) return status;
    if (check_cmd->parsed()) return roformer::rope_check(check);
    if (bench_cmd->parsed()) return roformer::bench_rope(bench_rope);
    if (decay_cmd->parsed()) return roformer::rope_decay(decay);
    if (plot_runs_cmd->parsed()) return roformer::plot_runs(plot_runs);
    if (bench_att_cmd->parsed()) return roformer::bench_attention(bench_att);
    if (bench_gemm_cmd->parsed()) return roformer::bench_gemm(bench_gemm);
    if (bench_train_cmd->parsed()) return roformer::bench_train(bench_train);
    if (bench_comm_cmd->parsed()) return roformer::bench_comm(bench_comm);
    if (bench_infer_cmd->parsed()) return roformer::bench_infer(bench_infer);
    return 0;
  };
  int status = 1;
  try {
    status = run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "roformer: error: {}\n", e.what());
  }
  // cairo and fontconfig keep font caches for the life of the process; free them so that the
  // sanitizer build's leak check sees a clean exit after a plot.
  plot::release_font_caches();
  return status;
}
