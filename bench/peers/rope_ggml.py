#!/usr/bin/env python3
"""ggml peer benchmark for RoPE: ggml_rope_ext beside librope, in one process, interleaved.

ggml is not part of this project: build it yourself, outside the repository, and point this script
at its source (headers) and build (shared libraries) directories:

    cmake -S GGML_SRC -B GGML_BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \\
          -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_OPENMP=ON   # the SIMD target to compare
    ninja -C GGML_BUILD ggml ggml-cpu ggml-base
    cmake --build build/release --target rope          # librope.so
    python3 bench/peers/rope_ggml.py --ggml-src GGML_SRC --ggml-build GGML_BUILD --simd-target AVX2

The script writes a small C++ harness to a temporary directory, compiles it against ggml and
librope, and runs it. The harness times, on the shapes of `roformer bench rope`,
  prefill  q and k, each [1, 4096, 32, 128] (ggml: ne = [128, 32, 4096]), positions 0..4095
  decode   q and k, each [1,   16, 32, 128], positions 4000..4015
fp32 only (ggml's CPU RoPE has no bf16), forward, interleaved (ggml GGML_ROPE_TYPE_NORMAL) and half
(GGML_ROPE_TYPE_NEOX), in place (ggml_rope_ext_inplace) and out of place (ggml_rope_ext), 1 and 2
threads. ggml runs one graph of two rope nodes (q, k) through ggml_graph_compute with a plan made
once; librope runs rope_apply_qk in table mode and on the fly, the config of `roformer bench rope`.
Each repetition times every case for ggml and for librope in turn, each for at least --min-time
seconds, so this machine's noise falls on both; the fastest repetition is kept. ratio = ggml time /
librope time (> 1: librope is faster). --simd-target caps librope's Highway dispatch (build ggml
with the matching flags). Before timing, each case checks that ggml and librope agree (ggml's
fp32 angles leave ~1e-3 relative differences at position 4000).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HARNESS = r"""
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "hwy/targets.h"
#include "rope/rope.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call: calls repeated until min_time has passed.
double time_calls(const std::function<void()>& call, double min_time) {
  call();  // warm-up
  long n = 0;
  const double t0 = now();
  double t = t0;
  do {
    call();
    ++n;
    t = now();
  } while (t - t0 < min_time);
  return (t - t0) / n;
}

struct Case {
  const char* shape;
  int tokens, start;
  const char* layout;
  bool in_place;
  int threads;
  double ggml = 1e30, table = 1e30, on_the_fly = 1e30, max_rel_diff = 0;
  double bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const double min_time = std::atof(argv[1]);
  const int reps = std::atoi(argv[2]);
  const char* target = argv[3];
  if (target[0] != '\0') {
    bool found = false;
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      if (strcasecmp(hwy::TargetName(t), target) == 0) {
        hwy::DisableTargets(t - 1);  // every better target
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "SIMD target %s not supported here\n", target);
      return 2;
    }
  }
  const int heads = 32, dim = 128;
  std::vector<Case> cases;
  for (auto [shape, tokens, start] : {std::tuple{"prefill", 4096, 0}, std::tuple{"decode", 16, 4000}})
    for (const char* layout : {"interleaved", "half"})
      for (bool in_place : {true, false})
        for (int threads : {1, 2}) cases.push_back({shape, tokens, start, layout, in_place, threads});

  for (int rep = 0; rep < reps; ++rep) {
    for (Case& c : cases) {
      const int64_t n = int64_t{c.tokens} * heads * dim;
      c.bytes = 2.0 * 2 * n * sizeof(float);  // q and k, read and written
      // ggml: tensors in its own context; librope: 64-byte aligned buffers of the same values.
      ggml_init_params params = {static_cast<size_t>(5 * n * sizeof(float)) + (64 << 20), nullptr, false};
      ggml_context* ctx = ggml_init(params);
      ggml_tensor* gq = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, dim, heads, c.tokens);
      ggml_tensor* gk = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, dim, heads, c.tokens);
      ggml_tensor* pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, c.tokens);
      float* q = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
      float* k = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
      float* qo = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
      float* ko = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
      uint64_t s = 4096;
      for (int64_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        const float v = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / (1 << 23);
        q[i] = static_cast<float*>(gq->data)[i] = v;
        k[i] = static_cast<float*>(gk->data)[i] = -v;
      }
      for (int t = 0; t < c.tokens; ++t) static_cast<int32_t*>(pos->data)[t] = c.start + t;
      const bool half = std::strcmp(c.layout, "half") == 0;
      const int mode = half ? GGML_ROPE_TYPE_NEOX : GGML_ROPE_TYPE_NORMAL;
      auto rope = c.in_place ? ggml_rope_ext_inplace : ggml_rope_ext;
      ggml_tensor* rq = rope(ctx, gq, pos, nullptr, dim, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
      ggml_tensor* rk = rope(ctx, gk, pos, nullptr, dim, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
      ggml_cgraph* gf = ggml_new_graph(ctx);
      ggml_build_forward_expand(gf, rq);
      ggml_build_forward_expand(gf, rk);
      ggml_cplan plan = ggml_graph_plan(gf, c.threads, nullptr);
      std::vector<uint8_t> work(plan.work_size + 64);
      plan.work_data = work.data();

      rope_plan* plans[2];
      for (int m = 0; m < 2; ++m) {
        rope_config cfg;
        rope_config_init(&cfg, dim);
        cfg.layout = half ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
        cfg.mode = m == 0 ? ROPE_MODE_TABLE : ROPE_MODE_ON_THE_FLY;
        cfg.table_positions = 4096 + 16;
        if (rope_plan_create(&cfg, &plans[m]) != ROPE_OK) {
          std::fprintf(stderr, "rope_plan_create: %s\n", rope_last_error());
          return 1;
        }
      }
      auto tensor = [&](float* p) {
        return rope_tensor{p, ROPE_DTYPE_F32, 1, c.tokens, heads, int64_t{c.tokens} * heads * dim, heads * dim, dim};
      };
      const rope_tensor tq = tensor(q), tk = tensor(k), tqo = tensor(qo), tko = tensor(ko);
      rope_positions rp{};
      rp.kind = ROPE_POSITIONS_OFFSET;
      rp.start = c.start;
      const rope_exec exec{c.threads, ROPE_BACKEND_AUTO, nullptr};
      auto ours = [&](int m) {
        const rope_status st = rope_apply_qk(plans[m], ROPE_FORWARD, &rp, &tq, c.in_place ? nullptr : &tqo, &tk,
                                             c.in_place ? nullptr : &tko, &exec);
        if (st != ROPE_OK) {
          std::fprintf(stderr, "rope_apply_qk: %s\n", rope_last_error());
          std::exit(1);
        }
      };
      auto theirs = [&] { ggml_graph_compute(gf, &plan); };

      if (rep == 0) {  // one call each on the same input: the same rotation?
        theirs();
        ours(0);
        const float* a = static_cast<const float*>(rq->data);
        const float* b = c.in_place ? q : qo;
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < n; ++i) {
          diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
          norm = std::max(norm, std::fabs(double{b[i]}));
        }
        c.max_rel_diff = diff / norm;
      }
      c.ggml = std::min(c.ggml, time_calls(theirs, min_time));
      c.table = std::min(c.table, time_calls([&] { ours(0); }, min_time));
      c.on_the_fly = std::min(c.on_the_fly, time_calls([&] { ours(1); }, min_time));

      for (rope_plan* p : plans) rope_plan_destroy(p);
      std::free(q), std::free(k), std::free(qo), std::free(ko);
      ggml_free(ctx);
    }
  }
  std::printf("{\"cpu_target\": \"%s\", \"results\": [\n", rope_cpu_target());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::printf("  {\"case\": \"%s\", \"layout\": \"%s\", \"inplace\": %s, \"threads\": %d, \"bytes\": %.0f, "
                "\"ggml_ms\": %.6f, \"ours_table_ms\": %.6f, \"ours_on_the_fly_ms\": %.6f, \"max_rel_diff\": %.3g}%s\n",
                c.shape, c.layout, c.in_place ? "true" : "false", c.threads, c.bytes, c.ggml * 1e3, c.table * 1e3,
                c.on_the_fly * 1e3, c.max_rel_diff, i + 1 < cases.size() ? "," : "");
  }
  std::printf("]}\n");
  return 0;
}
"""


def git_commit(src):
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def build_harness(args, workdir):
    src = pathlib.Path(workdir) / "rope_ggml_harness.cc"
    exe = pathlib.Path(workdir) / "rope_ggml_harness"
    src.write_text(HARNESS)
    ggml_src, ggml_build = pathlib.Path(args.ggml_src), pathlib.Path(args.ggml_build)
    rope_build = pathlib.Path(args.rope_build)
    lib_dirs = [ggml_build / "src", rope_build / "src" / "rope"]
    cmd = [args.cxx, "-O2", "-std=c++17", "-fopenmp", str(src), "-o", str(exe),
           f"-I{ggml_src / 'include'}", f"-I{pathlib.Path(__file__).resolve().parents[2] / 'include'}"]
    for d in lib_dirs:
        cmd += [f"-L{d}", f"-Wl,-rpath,{d}"]
    cmd += ["-lggml", "-lggml-cpu", "-lggml-base", "-lrope", "-lhwy"]
    subprocess.run(cmd, check=True)
    return exe


def print_table(data, ggml_commit):
    print(f"librope (SIMD target {data['cpu_target']}) vs ggml {ggml_commit[:12]} ggml_rope_ext, fp32, "
          "forward; ms per q+k call, fastest repetition; ratio = ggml / ours (> 1: ours faster)\n")
    head = ["case", "layout", "place", "threads", "ggml ms", "ours table", "ours otf", "ggml/table",
            "ggml/otf", "max rel diff"]
    rows = []
    for r in data["results"]:
        rows.append([r["case"], r["layout"], "in" if r["inplace"] else "out", str(r["threads"]),
                     f"{r['ggml_ms']:.4f}", f"{r['ours_table_ms']:.4f}", f"{r['ours_on_the_fly_ms']:.4f}",
                     f"{r['ggml_ms'] / r['ours_table_ms']:.2f}x", f"{r['ggml_ms'] / r['ours_on_the_fly_ms']:.2f}x",
                     f"{r['max_rel_diff']:.1e}"])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    for row in [head, ["-" * w for w in widths]] + rows:
        print("  ".join(x.rjust(w) if i >= 3 else x.ljust(w) for i, (x, w) in enumerate(zip(row, widths))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ggml-src", required=True, help="ggml source directory (its include/)")
    p.add_argument("--ggml-build", required=True, help="ggml build directory (src/libggml*.so)")
    p.add_argument("--rope-build", default="build/release", help="this project's build directory (librope.so)")
    p.add_argument("--simd-target", default="", help="cap librope's Highway dispatch, e.g. AVX2")
    p.add_argument("--min-time", type=float, default=0.2, help="seconds per case and runner per repetition")
    p.add_argument("--repetitions", type=int, default=3, help="fastest kept")
    p.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(args, tmp)
        out = subprocess.run([str(exe), str(args.min_time), str(args.repetitions), args.simd_target],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"harness failed ({out.returncode}): {out.stderr}")
    data = json.loads(out.stdout)
    data["ggml_commit"] = git_commit(args.ggml_src)
    print_table(data, data["ggml_commit"])
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
