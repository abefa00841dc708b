#!/usr/bin/env python3
"""Fine-tuning side by side: `roformer finetune` against Hugging Face transformers' Trainer.

Both fine-tune the same initial checkpoint on the same data with the same recipe (AdamW, weight decay
0.01, linear warmup and decay, batch, epochs, max length, dropout 0.1, length-grouped batches with
dynamic padding) and the same threads, over several seeds, ours and theirs interleaved. Each run is
its own process. Reported per run: training-loop throughput (tokens/s: the training set's real
tokens × epochs over the time of the training steps, evaluation excluded), the validation metric
after the last epoch, and the process's peak RSS (VmHWM, polled from /proc for ours).

The initial checkpoint (made when --model-dir is absent): `roformer vocab` on the training texts, then
one step of `roformer train --tokenizer wordpiece`, which writes a complete HF directory (config.json,
model.safetensors, vocab.txt, tokenizer files) that RoFormerForSequenceClassification.from_pretrained
loads. Its size is the small preset (4 × 256, ff 1024).

    scripts/datasets.sh vader-movies
    build/hf-venv/bin/python bench/peers/finetune_hf.py --roformer build/release/tools/roformer \
        --train data/vader-movies/train.jsonl --validation data/vader-movies/validation.jsonl --threads 2

--precisions fp32,bf16 adds bf16 mixed precision on both sides: ours with `--precision bf16`, theirs
with TrainingArguments(bf16=True) (torch.autocast on the CPU); each precision's runs interleaved by seed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hf"))
from peer_common import peak_rss_mib  # noqa: E402
import rjieba_shim  # noqa: E402,F401  (RoFormerTokenizer needs rjieba; jieba stands in)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roformer", required=True, help="our binary (build/release/tools/roformer)")
    ap.add_argument("--train", required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--text-column", default="sentence")
    ap.add_argument("--label-column", default="label")
    ap.add_argument("--model-dir", default="build/bench/finetune-init", help="initial checkpoint (made if absent)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def make_initial_checkpoint(args):
    if os.path.exists(os.path.join(args.model_dir, "model.safetensors")):
        return
    os.makedirs(args.model_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ft-init-")
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as out:
        for line in open(args.train, encoding="utf-8"):
            out.write(json.loads(line)[args.text_column] + "\n")
    subprocess.run([args.roformer, "vocab", "--data", corpus, "--size", "8000", "--out-dir", work + "/tok"], check=True)
    subprocess.run([args.roformer, "train", "--data", corpus, "--tokenizer", "wordpiece", "--vocab", work + "/tok",
                    "--task", "mlm", "--layers", "4", "--hidden", "256", "--heads", "4", "--ff", "1024", "--seq", "128",
                    "--max-positions", "512", "--batch", "2", "--steps", "1", "--eval-batches", "1", "--seed", "7",
                    "--no-progress", "--out", work + "/run"], check=True, stderr=subprocess.DEVNULL)
    step = open(work + "/run/latest").read().strip()
    for f in os.listdir(f"{work}/run/{step}"):
        if f != "optimizer.safetensors":
            os.replace(f"{work}/run/{step}/{f}", os.path.join(args.model_dir, f))


def real_tokens(args):
    """Σ over the training set of the tokens a row feeds the model (with [CLS]/[SEP], truncated)."""
    from transformers import RoFormerTokenizer
    tok = RoFormerTokenizer.from_pretrained(args.model_dir)
    texts = [json.loads(l)[args.text_column] for l in open(args.train, encoding="utf-8")]
    return sum(len(ids) for ids in tok(texts, truncation=True, max_length=args.max_length)["input_ids"])


def run_ours(args, seed, precision):
    out = tempfile.mkdtemp(prefix="ft-ours-")
    cmd = [args.roformer, "finetune", "--model", args.model_dir, "--train", args.train, "--validation",
           args.validation, "--text-column", args.text_column, "--label-column", args.label_column, "--epochs",
           str(args.epochs), "--batch", str(args.batch), "--lr", str(args.lr), "--warmup-ratio", "0.1",
           "--max-length", str(args.max_length), "--dropout", "0.1", "--seed", str(seed), "--threads",
           str(args.threads), "--precision", precision, "--no-progress", "--out", out + "/run"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    while proc.poll() is None:  # VmHWM of the child itself (ru_maxrss would carry this process's peak)
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024.0)
        except OSError:
            pass
        time.sleep(0.05)
    if proc.returncode != 0:
        sys.exit("roformer finetune failed: " + proc.stderr.read().decode())
    recs = [json.loads(l) for l in open(out + "/run/metrics.jsonl")]
    # The last step also evaluates: the loop's time is the time up to the step before it, scaled.
    n = len(recs)
    train_s = recs[-2]["elapsed_s"] * n / (n - 1)
    metric = next(v for k, v in recs[-1].items() if k in ("val_accuracy", "val_pearson"))
    return {"runner": "ours", "precision": precision, "seed": seed, "train_s": train_s, "metric": metric,
            "val_loss": recs[-1]["val_loss"], "peak_rss_mib": peak, "steps": n}


def child_hf(args):
    import numpy as np
    import torch
    from transformers import (DataCollatorWithPadding, RoFormerForSequenceClassification, RoFormerTokenizer,
                              Trainer, TrainingArguments)
    torch.set_num_threads(args.threads)
    tok = RoFormerTokenizer.from_pretrained(args.model_dir)

    def load(path, labels=None):
        rows = [json.loads(l) for l in open(path, encoding="utf-8")]
        names = labels or sorted({r[args.label_column] for r in rows})
        enc = tok([r[args.text_column] for r in rows], truncation=True, max_length=args.max_length)
        data = [{"input_ids": i, "token_type_ids": t, "attention_mask": a, "labels": names.index(r[args.label_column])}
                for i, t, a, r in zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], rows)]
        return data, names

    train, names = load(args.train)
    val, _ = load(args.validation, names)
    model = RoFormerForSequenceClassification.from_pretrained(args.model_dir, num_labels=len(names),
                                                              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    targs = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="ft-hf-"), per_device_train_batch_size=args.batch,
                              per_device_eval_batch_size=args.batch, num_train_epochs=args.epochs,
                              learning_rate=args.lr, weight_decay=0.01, warmup_ratio=0.1,
                              lr_scheduler_type="linear", group_by_length=True, seed=args.seed, use_cpu=True,
                              evaluation_strategy="no", save_strategy="no", logging_strategy="no", report_to=[],
                              dataloader_num_workers=0, disable_tqdm=True, bf16=args.precision == "bf16")
    trainer = Trainer(model=model, args=targs, train_dataset=train, eval_dataset=val,
                      data_collator=DataCollatorWithPadding(tok),
                      compute_metrics=lambda p: {"accuracy": float(np.mean(p.predictions.argmax(-1) == p.label_ids))})
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    evaluation = trainer.evaluate()
    print(json.dumps({"runner": "hf", "precision": args.precision, "seed": args.seed, "train_s": train_s,
                      "metric": evaluation["eval_accuracy"], "val_loss": evaluation["eval_loss"],
                      "peak_rss_mib": peak_rss_mib(), "steps": trainer.state.global_step}))


def run_hf(args, seed, precision):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--seed", str(seed), "--roformer", args.roformer,
           "--train", args.train, "--validation", args.validation, "--text-column", args.text_column,
           "--label-column", args.label_column, "--model-dir", args.model_dir, "--epochs", str(args.epochs),
           "--batch", str(args.batch), "--lr", str(args.lr), "--max-length", str(args.max_length),
           "--threads", str(args.threads), "--precision", precision]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    args = parse_args()
    if args.child:
        return child_hf(args)
    make_initial_checkpoint(args)
    tokens = real_tokens(args) * args.epochs
    precisions = [p for p in args.precisions.split(",") if p]
    if any(p not in ("fp32", "bf16") for p in precisions):
        sys.exit("--precisions: fp32 and/or bf16")
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for precision in precisions:
            for runner in (run_ours, run_hf):
                r = runner(args, seed, precision)
                r["tokens_per_s"] = tokens / r["train_s"]
                runs.append(r)
                print(f"{r['runner']:5s} {precision} seed {seed}: {r['tokens_per_s']:8.0f} tok/s, {r['train_s']:7.1f} s "
                      f"over {r['steps']} steps, accuracy {r['metric']:.4f}, validation loss {r['val_loss']:.4f}, "
                      f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
    import statistics as st
    summary = {}
    for precision in precisions:
        for name in ("ours", "hf"):
            rs = [r for r in runs if r["runner"] == name and r["precision"] == precision]
            summary[f"{name} {precision}"] = {
                k: (st.mean(r[k] for r in rs), st.stdev(r[k] for r in rs) if len(rs) > 1 else 0.0)
                for k in ("tokens_per_s", "metric", "val_loss", "peak_rss_mib")}
    print(f"\n{args.threads} threads, batch {args.batch}, {args.epochs} epoch(s), max length {args.max_length}\n")
    print("| runner | precision | tokens/s | validation accuracy | validation loss | peak RSS MiB |\n"
          "|---|---|---|---|---|---|")
    for precision in precisions:
        for name, label in (("ours", "roformer finetune"), ("hf", "transformers Trainer")):
            s = summary[f"{name} {precision}"]
            print(f"| {label} | {precision} | {s['tokens_per_s'][0]:.0f} ± {s['tokens_per_s'][1]:.0f} | "
                  f"{s['metric'][0]:.4f} ± {s['metric'][1]:.4f} | {s['val_loss'][0]:.4f} ± {s['val_loss'][1]:.4f} | "
                  f"{s['peak_rss_mib'][0]:.0f} |")
    ratios = {}
    for precision in precisions:
        ours, theirs = summary[f"ours {precision}"], summary[f"hf {precision}"]
        ratios[precision] = ours["tokens_per_s"][0] / theirs["tokens_per_s"][0]
        print(f"\n{precision}: ours / theirs {ratios[precision]:.2f}× tokens/s, "
              f"{ours['peak_rss_mib'][0] / theirs['peak_rss_mib'][0]:.2f}× peak memory")
    if "bf16" in precisions and "fp32" in precisions:
        print(f"ours bf16 / ours fp32: {summary['ours bf16']['tokens_per_s'][0] / summary['ours fp32']['tokens_per_s'][0]:.2f}× "
              f"tokens/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "ratio_tokens_per_s": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
