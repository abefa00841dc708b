// `roformer bench rope|train|comm|infer|attention|gemm`: the flags of the benchmarks (each runs in its
// own file: bench_rope.cc, bench_train.cc, ...). Peer scripts for side-by-side runs are in bench/peers/.
#include <CLI/CLI.hpp>

#include <memory>

#include "commands.h"
#include "enum_option.h"
#include "model_option.h"
#include "thread_option.h"

namespace roformer {

namespace {

// `roformer bench train`: the trainer's step on the PyTorch peer's model shapes.
void add_bench_train_command(CLI::App& bench, CommandTable& commands) {
  auto bench_train = std::make_shared<BenchTrainOptions>();
  CLI::App* bench_train_cmd = bench.add_subcommand("train", "Training tokens/s on the PyTorch peer's model shapes");
  bench_train_cmd->add_option("--preset", bench_train->preset, "small, large or base (RoFormer-base: 12 × 768)")
      ->check(CLI::IsMember({"small", "large", "base"}));
  add_enum_option(bench_train_cmd, "--task", bench_train->task, train::parse_lm_objective, train::lm_objective_name, "clm or mlm");
  bench_train_cmd->add_option("--batch", bench_train->batch, "Sequences per step")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--seq", bench_train->seq, "Tokens per sequence")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--vocab", bench_train->vocab, "Vocabulary")->check(CLI::Range(2, 1000000));
  bench_train_cmd->add_option("--steps", bench_train->steps, "Timed steps")->check(CLI::PositiveNumber);
  bench_train_cmd->add_option("--warmup", bench_train->warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  bench_train_cmd->add_option("--threads", bench_train->threads, "OpenMP threads (0: all)")->check(thread_count());
  add_off_flag(bench_train_cmd, "--no-sgemm", bench_train->sgemm, "Skip the sgemm rate probe");
  bench_train_cmd->add_option("--attention-memory", bench_train->attention_memory,
                              "auto: as training runs (the (T, T) probabilities up to 12 × head dim keys, row "
                              "statistics beyond); linear: two statistics per row at any length, the backward "
                              "recomputing the probabilities; quadratic: the probabilities at any length")
      ->check(CLI::IsMember({"auto", "linear", "quadratic"}));
  add_precision_option(bench_train_cmd, bench_train->precision);
  bench_train_cmd->add_flag("--gradient-checkpointing", bench_train->gradient_checkpointing,
                            "Keep each layer's input only and recompute the rest in the backward (as train and "
                            "finetune --gradient-checkpointing); GFLOP/s counts the model's products, not the "
                            "recomputation");
  bench_train_cmd->add_option("--dropout", bench_train->dropout,
                              "Hidden and attention dropout (default 0, as bench/peers/roformer_torch.py builds the "
                              "model; HF RoFormer's configs train with 0.1)")
      ->check(CLI::Range(0.0, 0.99));
  bench_train_cmd->add_flag("--json", bench_train->json, "Print JSON (for bench/peers/roformer_torch.py --ours)");
  bench_train_cmd->add_option("--bucket-mb", bench_train->bucket_mb, "Under mpirun: gradient buckets in MiB (0: one "
                              "allreduce after the backward)")->check(CLI::Range(0.0, 65536.0));
  commands.add(bench_train_cmd, [bench_train] { return roformer::bench_train(*bench_train); });
}

// `roformer bench rope`: librope against the memory floor.
void add_bench_rope_command(CLI::App& bench, CommandTable& commands) {
  auto bench_rope = std::make_shared<BenchRopeOptions>();
  CLI::App* bench_cmd = bench.add_subcommand("rope", "RoPE prefill/decode speed vs the memory floor");
  bench_cmd->add_flag("--json", bench_rope->json, "Print JSON (for bench/peers/rope_torch.py --ours)");
  bench_cmd->add_option("--min-time", bench_rope->min_time, "Seconds per benchmark")->check(CLI::Range(0.001, 60.0));
  bench_cmd->add_option("--repetitions", bench_rope->repetitions, "Repetitions (fastest kept)")->check(CLI::Range(1, 100));
  bench_cmd->add_option("--filter", bench_rope->filter, "Only benchmarks whose name contains this");
  bench_cmd->add_flag("--quick", bench_rope->quick, "Small shapes and short runs (smoke test)");
  bench_cmd->add_option("--simd-target", bench_rope->simd_target,
                        "Cap the SIMD dispatch at this Highway target (e.g. AVX2 on an AVX-512 CPU)");
  commands.add(bench_cmd, [bench_rope] { return roformer::bench_rope(*bench_rope); });
}

// `roformer bench comm`: the allreduce by message size.
void add_bench_comm_command(CLI::App& bench, CommandTable& commands) {
  auto bench_comm = std::make_shared<BenchCommOptions>();
  CLI::App* bench_comm_cmd = bench.add_subcommand("comm", "Allreduce time by message size (run it under mpirun)");
  bench_comm_cmd->add_option("--min-bytes", bench_comm->min_bytes, "Smallest message")->check(CLI::Range(4, 1 << 30));
  bench_comm_cmd->add_option("--max-bytes", bench_comm->max_bytes, "Largest message")->check(CLI::Range(4, 1 << 30));
  bench_comm_cmd->add_option("--min-time", bench_comm->min_time, "Seconds per size")->check(CLI::Range(0.001, 60.0));
  bench_comm_cmd->add_flag("--json", bench_comm->json, "Print JSON");
  commands.add(bench_comm_cmd, [bench_comm] { return roformer::bench_comm(*bench_comm); });
}

// `roformer bench infer`: inference tokens/s of a model directory.
void add_bench_infer_command(CLI::App& bench, CommandTable& commands) {
  auto bench_infer = std::make_shared<BenchInferOptions>();
  CLI::App* bench_infer_cmd = bench.add_subcommand("infer", "Inference tokens/s of a Hugging Face model directory");
  bench_infer_cmd->add_option("--model", bench_infer->model, "Model directory (config.json + weights)")->transform(model_location())->required();
  bench_infer_cmd->add_option("--batch", bench_infer->batch, "Sequences per forward")->check(CLI::Range(1, 4096));
  bench_infer_cmd->add_option("--seq", bench_infer->seq, "Tokens per sequence")->check(CLI::Range(1, 1 << 20));
  bench_infer_cmd->add_option("--head", bench_infer->head, "none (last hidden state) or mlm (+ logits)")
      ->check(CLI::IsMember({"none", "mlm"}));
  bench_infer_cmd->add_option("--keep", bench_infer->keep, "outputs (inference) or all (every activation)")
      ->check(CLI::IsMember({"outputs", "all"}));
  add_linear_options(bench_infer_cmd, bench_infer->linears);
  bench_infer_cmd->add_option("--warmup", bench_infer->warmup, "Untimed forwards first")->check(CLI::Range(0, 1000));
  bench_infer_cmd->add_option("--min-reps", bench_infer->min_reps, "Timed forwards, at least")->check(CLI::Range(1, 100000));
  bench_infer_cmd->add_option("--min-time", bench_infer->min_time, "Seconds of timed forwards, at least")
      ->check(CLI::Range(0.0, 3600.0));
  bench_infer_cmd->add_option("--threads", bench_infer->threads, "OpenMP threads (0: all)")->check(thread_count());
  bench_infer_cmd->add_option("--simd-target", bench_infer->simd_target,
                              "Cap our kernels' SIMD dispatch at this Highway target (e.g. AVX2 on an AVX-512 CPU; "
                              "oneDNN and OpenBLAS take ONEDNN_MAX_CPU_ISA and OPENBLAS_CORETYPE)");
  bench_infer_cmd->add_flag("--json", bench_infer->json, "Print JSON (for bench/peers/roformer_infer_hf.py)");
  commands.add(bench_infer_cmd, [bench_infer] { return roformer::bench_infer(*bench_infer); });
}

// `roformer bench attention`: attention alone, by length.
void add_bench_attention_command(CLI::App& bench, CommandTable& commands) {
  auto bench_att = std::make_shared<BenchAttentionOptions>();
  CLI::App* bench_att_cmd = bench.add_subcommand("attention", "Softmax vs linear attention: time per token vs length");
  bench_att_cmd->add_option("--lengths", bench_att->lengths, "Sequence lengths")->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  bench_att_cmd->add_option("--heads", bench_att->heads, "Heads")->check(CLI::PositiveNumber);
  bench_att_cmd->add_option("--head-dim", bench_att->head_dim, "Head dimension (even)")->check(CLI::PositiveNumber);
  bench_att_cmd->add_option("--performer-features", bench_att->performer_features, "FAVOR+ features (even)");
  bench_att_cmd->add_option("--repetitions", bench_att->repetitions, "Best of")->check(CLI::Range(1, 100));
  bench_att_cmd->add_option("--max-softmax-gb", bench_att->max_softmax_gb,
                            "Skip softmax attention where its (heads, T, T) probabilities need more GB than this")
      ->check(CLI::PositiveNumber)->capture_default_str();
  bench_att_cmd->add_option("--threads", bench_att->threads, "OpenMP threads (0: all)")->check(thread_count());
  bench_att_cmd->add_flag("--softmax-only", bench_att->softmax_only,
                          "Softmax attention alone: forward (inference) and forward + backward keeping two statistics "
                          "per row (memory linear in T, as a flash kernel): the rows of bench/peers/attention_sdpa.py");
  bench_att_cmd->add_option("--decode", bench_att->decode_rows,
                            "Decoding steps instead: this many rows, each one query over --lengths keys of its own "
                            "cache row, over an fp32 and a bf16 key/value cache (ops::attention_decode_forward)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  bench_att_cmd->add_option("--mask", bench_att->mask, "causal or full (no mask)")
      ->check(CLI::IsMember({"causal", "full"}))->capture_default_str();
  bench_att_cmd->add_option("--precision", bench_att->precision,
                            "Softmax attention's products: fp32, or bf16 operands with fp32 accumulation (CPUs with "
                            "AVX512-BF16 or AMX)")
      ->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  bench_att_cmd->add_flag("--fused", bench_att->fused,
                          "The fp32 inference forward: the per-block products and softmax "
                          "(attention_forward_blocks) against the fused flash_attention_forward, side by side "
                          "(Google Benchmark), at each of --batches, --lengths and --thread-counts; with --precision "
                          "bf16, the bf16-product forward both ways (flash_attention_forward_bf16: AVX512-BF16, or AMX "
                          "tiles where the CPU has them and ROFORMER_AMX_ATTENTION=1)");
  bench_att_cmd->add_option("--batches", bench_att->batches, "Batch sizes (--fused)")->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  bench_att_cmd->add_option("--thread-counts", bench_att->thread_counts, "OpenMP thread counts (--fused)")
      ->delimiter(',')->check(CLI::Range(1, 1024));
  bench_att_cmd->add_option("--past", bench_att->past,
                            "Keys already in a cache before the queries (--fused): Tk = past + length, queries at "
                            "key positions past.. (a cache's prefill or a chunk of decoding)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  bench_att_cmd->add_option("--min-time", bench_att->min_time, "Seconds per benchmark (--fused, --decode)")
      ->check(CLI::Range(0.001, 60.0));
  bench_att_cmd->add_option("--simd-target", bench_att->simd_target,
                            "Cap the SIMD dispatch at this Highway target (e.g. AVX2 on an AVX-512 CPU)");
  commands.add(bench_att_cmd, [bench_att] { return roformer::bench_attention(*bench_att); });
}

// `roformer bench generate`: step-level batched generation, in process.
void add_bench_generate_command(CLI::App& bench, CommandTable& commands) {
  auto bench_gen = std::make_shared<BenchGenerateOptions>();
  CLI::App* bench_gen_cmd = bench.add_subcommand(
      "generate", "A causal LM's generation with the server's step-level batching, in process (no HTTP)");
  bench_gen_cmd->add_option("--model", bench_gen->model, "Causal LM directory (roformer train's step-NNNNNN)")
      ->transform(model_location())->required();
  bench_gen_cmd->add_option("--rows", bench_gen->rows, "Sequences decoded together (the server's --slots)")
      ->check(CLI::Range(1, 4096));
  bench_gen_cmd->add_option("--prompt", bench_gen->prompt, "Prompt tokens per row")->check(CLI::Range(1, 1 << 20));
  bench_gen_cmd->add_option("--tokens", bench_gen->tokens, "New tokens per row")->check(CLI::Range(1, 1 << 20));
  bench_gen_cmd->add_option("--prefill-chunk", bench_gen->prefill_chunk, "Prompt tokens fed per step (serve's --prefill-chunk)")
      ->check(CLI::Range(1, 1 << 20));
  bench_gen_cmd->add_option("--rounds", bench_gen->rounds, "Timed loads (median)")->check(CLI::Range(1, 1000));
  add_linear_options(bench_gen_cmd, bench_gen->linears);
  add_kv_cache_option(bench_gen_cmd, bench_gen->linears);
  bench_gen_cmd->add_option("--threads", bench_gen->threads, "OpenMP threads (0: all)")->check(thread_count());
  bench_gen_cmd->add_flag("--json", bench_gen->json, "Print JSON");
  commands.add(bench_gen_cmd, [bench_gen] { return roformer::bench_generate(*bench_gen); });
}

// `roformer bench gemm`: the linear layers' products by library.
void add_bench_gemm_command(CLI::App& bench, CommandTable& commands) {
  auto bench_gemm = std::make_shared<BenchGemmOptions>();
  CLI::App* bench_gemm_cmd = bench.add_subcommand("gemm", "RoFormer-base's linear layers (sgemm, oneDNN packed fp32, int8) and training's products (OpenBLAS vs oneDNN's sgemm)");
  bench_gemm_cmd->add_option("--rows", bench_gemm->rows, "Row counts M (tokens per call)")->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bench_gemm_cmd->add_option("--repetitions", bench_gemm->repetitions, "Best of")->check(CLI::Range(1, 100));
  bench_gemm_cmd->add_option("--min-time", bench_gemm->min_time, "Seconds per timing")->check(CLI::Range(0.001, 60.0));
  bench_gemm_cmd->add_option("--threads", bench_gemm->threads, "OpenMP threads (0: all)")->check(thread_count());
  commands.add(bench_gemm_cmd, [bench_gemm] { return roformer::bench_gemm(*bench_gemm); });
}

}  // namespace

void add_bench_commands(CLI::App& app, CommandTable& commands) {
  // In this order: the help lists them so, and the command-line fuzzer's inputs pick commands by index.
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks")->require_subcommand(1);
  add_bench_rope_command(*bench, commands);
  add_bench_train_command(*bench, commands);
  add_bench_comm_command(*bench, commands);
  add_bench_infer_command(*bench, commands);
  add_bench_attention_command(*bench, commands);
  add_bench_generate_command(*bench, commands);
  add_bench_gemm_command(*bench, commands);
}

}  // namespace roformer
