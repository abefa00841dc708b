#!/usr/bin/env python3
"""Training speed side by side: `roformer translate-train` against the same model in PyTorch.

The model is transformers' EncoderDecoderModel built from a checkpoint of `roformer translate-train`
(the same config and weights; `--init` makes a 1-step run for it). Both train on the same pairs
(our SentencePiece ids, from `roformer spm-encode` with the checkpoint's spm.model) in batches of at
most --max-tokens padded tokens per side over length-sorted pairs, with label-smoothed cross-entropy
(PyTorch's label_smoothing, as ours), AdamW (0.9, 0.98), dropout 0.1, the same threads. Ours runs as its
own process (`translate-train --steps N`, tokens/s from its metrics.jsonl); theirs in this process
(after 2 warm-up steps). Tokens counted: both sides' padded tokens of each batch, B·(S + T), as ours
report. Peak RSS of each process (VmHWM) is printed too.

    build/hf-venv/bin/python bench/peers/translate_train_hf.py --roformer build/release/tools/roformer \
        --train data/bible-en-es/train.tsv --validation data/bible-en-es/valid.tsv --steps 30 --threads 2
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
from transformers import EncoderDecoderModel
from transformers.utils import logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import peak_rss_mib  # noqa: E402

MODEL = ["--vocab-size", "4000", "--layers", "3", "--hidden", "256", "--heads", "4", "--ff", "1024"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    work = tempfile.mkdtemp(prefix="mt-bench-")
    common = ["--train", a.train, "--validation", a.validation, *MODEL, "--max-tokens", str(a.max_tokens),
              "--warmup", "10", "--lr", "1e-3", "--bleu-sentences", "0", "--threads", str(a.threads), "--no-progress"]
    # Ours: a run of --steps steps; the first two are warm-up, as for theirs.
    r = subprocess.run([a.roformer, "translate-train", *common, "--steps", str(a.steps), "--eval-every", str(a.steps),
                        "--out", work + "/ours"], capture_output=True, text=True, check=True)
    recs = [json.loads(l) for l in open(work + "/ours/metrics.jsonl")]
    ckpt = work + "/ours/" + open(work + "/ours/latest").read().strip()
    # Theirs: the same model (the checkpoint's config; fresh weights do not change the speed).
    model = EncoderDecoderModel.from_pretrained(ckpt)
    model.train()
    cfg = model.config
    src = subprocess.run([a.roformer, "spm-encode", "--model", ckpt + "/spm.model"], capture_output=True, text=True,
                         check=True, input="".join(l.split("\t")[0] + "\n" for l in open(a.train, encoding="utf-8")))
    tgt = subprocess.run([a.roformer, "spm-encode", "--model", ckpt + "/spm.model"], capture_output=True, text=True,
                         check=True, input="".join(l.rstrip("\n").split("\t")[1] + "\n" for l in open(a.train, encoding="utf-8")))
    pairs = [(list(map(int, s.split())), list(map(int, t.split())))
             for s, t in zip(src.stdout.splitlines(), tgt.stdout.splitlines()) if s.strip() and t.strip()]
    pairs = [p for p in pairs if len(p[0]) <= 256 and len(p[1]) <= 256]
    pairs.sort(key=lambda p: (len(p[0]), len(p[1])))
    batches, cur, longest = [], [], 0
    for p in pairs:
        n = max(len(p[0]), len(p[1])) + 1
        if cur and max(longest, n) * (len(cur) + 1) > a.max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(p)
        longest = max(longest, n)
    batches.append(cur)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.0)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(len(batches), generator=g).tolist()
    hf_tokens = hf_time = 0.0
    for step in range(a.steps):
        b = batches[order[step % len(batches)]]
        S = max(len(s) for s, _ in b) + 1
        T = max(len(t) for _, t in b) + 1
        ids = torch.tensor([s + [cfg.eos_token_id] + [cfg.pad_token_id] * (S - len(s) - 1) for s, _ in b])
        mask = (torch.arange(S)[None, :] < torch.tensor([len(s) + 1 for s, _ in b])[:, None]).long()
        dec = torch.tensor([[cfg.decoder_start_token_id] + t + [cfg.pad_token_id] * (T - len(t) - 1) for _, t in b])
        labels = torch.tensor([t + [cfg.eos_token_id] + [-100] * (T - len(t) - 1) for _, t in b])
        t0 = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= 2:
            hf_tokens += len(b) * (S + T)
            hf_time += dt
    # Ours: each step's tokens/s times its duration (elapsed_s differences) gives its tokens; steps 3 ..
    # N − 1 (the last one also evaluates and saves).
    tokens = seconds = 0.0
    for prev, x in zip(recs[1:-2], recs[2:-1]):
        dt = x["elapsed_s"] - prev["elapsed_s"]
        tokens += x["tokens_per_s"] * dt
        seconds += dt
    ours = tokens / seconds
    theirs = hf_tokens / hf_time
    result = {"threads": a.threads, "steps": a.steps, "max_tokens": a.max_tokens, "ours_tokens_per_s": ours,
              "hf_tokens_per_s": theirs, "ratio": ours / theirs, "hf_peak_rss_mib": peak_rss_mib(), "torch": torch.__version__}
    print(json.dumps(result))
    if a.json:
        json.dump(result, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
