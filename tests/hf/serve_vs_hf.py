"""The roformer inference subcommands against transformers' own pipelines (run by tests/hf/jieba_py.sh).

Usage: serve_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR

1. fill-mask: transformers' FillMaskPipeline (RoFormerTokenizer, RoFormerForMaskedLM) on the case1
   fixture vs `roformer fill-mask`: the same tokens, token_str and sequence strings, scores within 1e-5.
2. classify: a RoFormerForSequenceClassification (case1's encoder, a seeded random head, 3 labels)
   saved by save_pretrained as model.safetensors and as pytorch_model.bin; TextClassificationPipeline
   (top_k=None) vs `roformer classify`: the same label, every score within 1e-5.
3. embed: RoFormerModel's last hidden state, mean-pooled over the attention mask and at [CLS], vs
   `roformer embed` within 1e-5 + 1e-4·|x|.
RoFormerTokenizer needs rjieba; rjieba_shim.py lets jieba stand in.
"""
import json
import os
import shutil
import subprocess
import sys

import torch

import rjieba_shim  # noqa: F401  (before transformers)

from transformers import (RoFormerForMaskedLM, RoFormerForSequenceClassification, RoFormerModel,
                          RoFormerTokenizer, pipeline)

roformer, fixtures, work = sys.argv[1:4]
TEXTS = ["hello [MASK] world", "[MASK] is a [MASK]", "今天[MASK]气非常好。", "the quick brown [MASK] jumps.",
         "我们是[MASK]国人，你好！", "don't [MASK] believing (yes); ok?"]
PLAIN = ["hello, world!", "今天天气非常好。", "the quick brown fox jumps over the lazy dog.", "ok", "I love 中国 and 学生们"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def cli(args, lines):
    r = subprocess.run([roformer] + args, input="".join(l + "\n" for l in lines), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"roformer {' '.join(args)} failed: {r.stderr}")
    out = [json.loads(l) for l in r.stdout.splitlines()]
    if len(out) != len(lines):
        sys.exit(f"roformer {' '.join(args)}: {len(out)} output lines for {len(lines)} inputs")
    return out


def model_dir(name, case="case1_mlm_basic"):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(fixtures, case, f), d)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixtures, "tokenizer", f), d)
    return d


mlm = model_dir("mlm")
tok = RoFormerTokenizer.from_pretrained(mlm)

# 1. fill-mask
fm = pipeline("fill-mask", model=RoFormerForMaskedLM.from_pretrained(mlm).eval(), tokenizer=tok, top_k=5)
ours = cli(["fill-mask", "--model", mlm, "--top-k", "5", "--batch-size", "4"], TEXTS)
for text, mine in zip(TEXTS, ours):
    hf = fm(text)
    hf_masks, my_masks = (hf, mine) if isinstance(hf[0], list) else ([hf], [mine])
    check(len(hf_masks) == len(my_masks), f"fill-mask {text!r}: {len(my_masks)} masks, HF {len(hf_masks)}")
    for h_list, m_list in zip(hf_masks, my_masks):
        for h, m in zip(h_list, m_list):
            same = all(h[k] == m[k] for k in ("token", "token_str", "sequence"))
            check(same and abs(h["score"] - m["score"]) <= 1e-5, f"fill-mask {text!r}: ours {m}, HF {h}")
print(f"fill-mask: {len(TEXTS)} texts compared")

# 2. classify, from safetensors and from pytorch_model.bin
torch.manual_seed(7)
labels = {0: "negative", 1: "neutral", 2: "positive"}
clf = RoFormerForSequenceClassification.from_pretrained(mlm, num_labels=3, id2label=labels,
                                                        label2id={v: k for k, v in labels.items()}).eval()
with torch.no_grad():
    for p in clf.classifier.parameters():
        p.normal_(0, 0.3)
for fmt, safe in (("safetensors", True), ("bin", False)):
    d = os.path.join(work, "clf_" + fmt)
    clf.save_pretrained(d, safe_serialization=safe)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(mlm, f), d)
    tc = pipeline("text-classification", model=clf, tokenizer=tok, top_k=None)
    ours = cli(["classify", "--model", d, "--batch-size", "2"], PLAIN)
    for text, mine in zip(PLAIN, ours):
        rows = tc(text)
        rows = rows[0] if rows and isinstance(rows[0], list) else rows
        hf = {r["label"]: r["score"] for r in rows}
        best = max(hf, key=hf.get)
        scores_ok = all(abs(hf[labels[i]] - s) <= 1e-5 for i, s in enumerate(mine["probabilities"]))
        check(mine["label"] == best and scores_ok, f"classify ({fmt}) {text!r}: ours {mine}, HF {hf}")
    print(f"classify ({fmt}): {len(PLAIN)} texts compared")

# 3. embed
base = RoFormerModel.from_pretrained(mlm).eval()
for pooling in ("mean", "cls"):
    ours = cli(["embed", "--model", mlm, "--pooling", pooling, "--batch-size", "3"], PLAIN)
    for text, mine in zip(PLAIN, ours):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            h = base(**enc).last_hidden_state[0]
        ref = h.mean(0) if pooling == "mean" else h[0]
        diff = (torch.tensor(mine["embedding"]) - ref).abs()
        check(bool((diff <= 1e-5 + 1e-4 * ref.abs()).all()), f"embed {pooling} {text!r}: max diff {diff.max():.3g}")
    print(f"embed ({pooling}): {len(PLAIN)} texts compared")

if failures:
    sys.exit(f"{len(failures)} mismatches")
print("all outputs match transformers")
