#!/usr/bin/env python3
"""Decoding speed side by side: `roformer translate` against transformers' generate() on the same weights.

The checkpoint of `roformer translate-train` is an HF EncoderDecoderModel directory; transformers
loads it as it is. Both decode the same sources (our SentencePiece ids, read back from `translate
--format jsonl --scores`) with the same settings: beam 1 (greedy) or 4, length penalty 0.6, the same
length limit (ours: a·len + b new tokens; HF: max_length = that + 1), the same batch size and the same
number of threads. Ours runs in its own process (`translate --timing`: decoding time, the model
already loaded); theirs in this one (torch.set_num_threads, inference_mode, after one warm-up batch).
Reported: generated tokens/s (tokens of the best hypotheses, eos included) and the ratio, and whether
the outputs are the same tokens (they must be, up to float ties; the count of differing sources is
printed).

    build/hf-venv/bin/python bench/peers/translate_hf.py --roformer build/release/tools/roformer \
        --model runs/mt/rope-s1/step-001200 --input data/bible-en-es/test.tsv --sentences 128 --threads 2
"""
import argparse
import json
import subprocess
import sys
import time

import torch
from transformers import EncoderDecoderModel
from transformers.utils import logging


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--model", required=True, help="translate-train checkpoint directory")
    ap.add_argument("--input", required=True, help="text lines, or a TSV whose first column is the source")
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--max-len-a", type=float, default=0.0)
    ap.add_argument("--max-len-b", type=int, default=64)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    sources = [line.split("\t")[0].rstrip("\n") for line in open(a.input, encoding="utf-8")][: a.sentences]
    model = EncoderDecoderModel.from_pretrained(a.model).eval()
    cfg = model.config
    rows = []
    for beam in [int(b) for b in a.beams.split(",")]:
        for batch in [int(b) for b in a.batches.split(",")]:
            n = min(len(sources), max(batch * 4, 16)) if batch == 1 else len(sources)
            opts = ["--beam", str(beam), "--length-penalty", "0.6", "--max-len-a", str(a.max_len_a), "--max-len-b",
                    str(a.max_len_b), "--batch", str(batch), "--threads", str(a.threads)]
            r = subprocess.run([a.roformer, "translate", "--model", a.model, "--format", "jsonl", "--scores", "--timing",
                                *opts], input="".join(json.dumps({"source": s}) + "\n" for s in sources[:n]),
                               capture_output=True, text=True, check=True)
            ours = [json.loads(line) for line in r.stdout.splitlines()]
            timing = json.loads(r.stderr.strip().splitlines()[-1])
            # Theirs: the same sources in the same batches (ours sorts by length; so do we here).
            order = sorted(range(n), key=lambda i: len(ours[i]["source_tokens"]))
            hf_tokens, generated = {}, 0
            with torch.inference_mode():
                def run_batch(idx):
                    src = [ours[i]["source_tokens"] + [cfg.eos_token_id] for i in idx]
                    width = max(map(len, src))
                    ids = torch.tensor([s + [cfg.pad_token_id] * (width - len(s)) for s in src])
                    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in src])
                    limit = max(int(a.max_len_a * len(s)) + a.max_len_b for s in src)
                    return model.generate(input_ids=ids, attention_mask=mask, num_beams=beam, length_penalty=0.6,
                                          max_length=limit + 1, do_sample=False, early_stopping=False,
                                          decoder_start_token_id=cfg.decoder_start_token_id,
                                          eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id)
                run_batch(order[:batch])  # warm-up
                t0 = time.perf_counter()
                for at in range(0, n, batch):
                    idx = order[at:at + batch]
                    out = run_batch(idx)
                    for i, seq in zip(idx, out.tolist()):
                        seq = seq[1:]
                        toks = seq[:seq.index(cfg.eos_token_id)] if cfg.eos_token_id in seq else seq
                        hf_tokens[i] = toks
                        generated += len(toks) + (1 if cfg.eos_token_id in seq else 0)
                hf_s = time.perf_counter() - t0
            differ = sum(ours[i]["nbest"][0]["tokens"] != hf_tokens[i] for i in range(n))
            row = {"beam": beam, "batch": batch, "sentences": n, "threads": a.threads,
                   "ours_tokens_per_s": timing["tokens_per_s"], "hf_tokens_per_s": generated / hf_s,
                   "ratio": timing["tokens_per_s"] / (generated / hf_s), "differing_outputs": differ}
            rows.append(row)
            print(f"beam {beam}, batch {batch:2d}, {n} sentences, {a.threads} threads: ours {row['ours_tokens_per_s']:8.1f} "
                  f"tok/s, transformers {row['hf_tokens_per_s']:8.1f} tok/s, ratio {row['ratio']:.2f}x, "
                  f"{differ} outputs differ", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
