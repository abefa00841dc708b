"""WordPiece pre-training against transformers:
1. `roformer vocab` + `roformer train --tokenizer wordpiece --whole-word-mask` write a complete HF
   directory: RoFormerForMaskedLM.from_pretrained loads every weight (none missing or new), and
   RoFormerTokenizer.from_pretrained reads it; transformers' fill-mask pipeline on it gives
   `roformer fill-mask`'s tokens and scores (1e-5).
2. `--init-from` starts from HF directories: the roformer-hf case1 masked LM (its MLM head kept) and
   an encoder-only RoFormerModel saved by transformers (a new MLM head). One step at lr 1e-12 leaves
   the encoder as it was, so the output's hidden states equal the source's (1e-5), and the MLM
   logits of case1 too.
3. A causal LM on WordPiece tokens (`--task clm`): RoFormerForCausalLM.from_pretrained loads every
   weight, and its logits on a tokenised text equal `roformer forward`'s (1e-4 + 1e-4·|HF|).
Usage: pretrain_wordpiece_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from transformers import RoFormerForMaskedLM, RoFormerModel, RoFormerTokenizer, pipeline

roformer, fixtures, work = sys.argv[1:4]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(args, stdin=None):
    r = subprocess.run([roformer] + args, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"roformer {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def latest(out):
    with open(os.path.join(out, "latest")) as f:
        return os.path.join(out, f.read().strip())


# 1. vocab → pre-training → an HF directory.
corpus = os.path.join(work, "corpus.txt")
with open(corpus, "w", encoding="utf-8") as out:
    for path in sorted(glob.glob("/usr/share/common-licenses/*"))[:12]:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                out.write(f.read())
tok_dir = os.path.join(work, "tok")
run(["vocab", "--data", corpus, "--size", "1200", "--out-dir", tok_dir])
small = ["--layers", "2", "--hidden", "64", "--heads", "4", "--ff", "128", "--seq", "48", "--batch", "4",
         "--eval-every", "0", "--eval-batches", "1", "--save-every", "0", "--no-progress"]
out = os.path.join(work, "mlm")
shutil.rmtree(out, ignore_errors=True)
run(["train", "--data", corpus, "--tokenizer", "wordpiece", "--vocab", tok_dir, "--task", "mlm",
     "--whole-word-mask", "--steps", "20", "--lr", "0.005", "--out", out] + small)
ckpt = latest(out)
for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    check(os.path.exists(os.path.join(ckpt, name)), f"checkpoint lacks {name}")
model, info = RoFormerForMaskedLM.from_pretrained(ckpt, output_loading_info=True)
check(not info["missing_keys"] and not info["unexpected_keys"], f"loading info {info}")
tok = RoFormerTokenizer.from_pretrained(ckpt)
texts = ["the licensor grants you a [MASK] license.", "you may [MASK] the work under the terms of this license.",
         "permission is hereby [MASK], free of charge."]
fm = pipeline("fill-mask", model=model.eval(), tokenizer=tok, top_k=5)
ours = [json.loads(l) for l in run(["fill-mask", "--model", ckpt, "--top-k", "5"], "".join(t + "\n" for t in texts)).splitlines()]
for text, mine in zip(texts, ours):
    for h, m in zip(fm(text), mine):
        same = all(h[k] == m[k] for k in ("token", "token_str", "sequence"))
        check(same and abs(h["score"] - m["score"]) <= 1e-5, f"fill-mask {text!r}: ours {m}, HF {h}")
print(f"pre-trained WordPiece MLM: loads in transformers, fill-mask equal on {len(texts)} texts")

# 2. --init-from an HF masked LM and an HF encoder-only model.
def hf_dir(name, encoder_only):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    src = os.path.join(fixtures, "case1_mlm_basic")
    if encoder_only:
        RoFormerModel.from_pretrained(src).save_pretrained(d)
    else:
        os.makedirs(d)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(src, f), d)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixtures, "tokenizer", f), d)
    return d


ids = torch.tensor([[2, 65, 10, 66, 5, 3, 0]])
mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
zh_corpus = os.path.join(work, "zh.txt")
with open(zh_corpus, "w", encoding="utf-8") as f:
    f.write("今天天气非常好。我们一起去公园散步吧。\nhello world, the quick brown fox.\n" * 200)
for name, encoder_only in (("init_mlm", False), ("init_encoder", True)):
    src = hf_dir(name + "_src", encoder_only)
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    run(["train", "--data", zh_corpus, "--init-from", src, "--task", "mlm", "--steps", "1", "--lr", "1e-12",
         "--warmup", "0", "--out", out, "--seq", "16", "--batch", "2", "--eval-every", "0", "--eval-batches", "1",
         "--no-progress"])
    ckpt = latest(out)
    with torch.no_grad():
        before = RoFormerModel.from_pretrained(src).eval()(input_ids=ids, attention_mask=mask).last_hidden_state
        trained, info = RoFormerForMaskedLM.from_pretrained(ckpt, output_loading_info=True)
        check(not info["missing_keys"], f"{name}: missing {info['missing_keys']}")
        after = trained.eval().roformer(input_ids=ids, attention_mask=mask).last_hidden_state
        diff = (after - before).abs().max().item()
        check(diff <= 1e-5, f"{name}: encoder moved by {diff:.3g} at lr 1e-12")
        if not encoder_only:
            src_logits = RoFormerForMaskedLM.from_pretrained(src).eval()(input_ids=ids, attention_mask=mask).logits
            ldiff = (trained(input_ids=ids, attention_mask=mask).logits - src_logits).abs().max().item()
            check(ldiff <= 1e-5, f"{name}: MLM logits moved by {ldiff:.3g}")
    print(f"--init-from {name}: hidden states within {diff:.2g} of the source")

# 3. A causal LM on WordPiece tokens.
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import RoFormerForCausalLM  # noqa: E402

out = os.path.join(work, "clm")
shutil.rmtree(out, ignore_errors=True)
run(["train", "--data", corpus, "--tokenizer", "wordpiece", "--vocab", tok_dir, "--task", "clm", "--steps", "20",
     "--lr", "0.005", "--sample-tokens", "0", "--out", out] + small)
ckpt = latest(out)
model, info = RoFormerForCausalLM.from_pretrained(ckpt, output_loading_info=True)
check(model.config.is_decoder, "the causal LM's config.json lacks is_decoder")
check(not info["missing_keys"] and not info["unexpected_keys"], f"causal LM loading info {info}")
enc = RoFormerTokenizer.from_pretrained(ckpt)(["permission is hereby granted, free of charge, to any person"],
                                             return_tensors="pt")
io_in, io_out = os.path.join(work, "clm_in.safetensors"), os.path.join(work, "clm_out.safetensors")
save_file({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}, io_in)
run(["forward", "--model", ckpt, "--inputs", io_in, "--out", io_out])
with torch.no_grad():
    hf_logits = model.eval()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
ours_logits = load_file(io_out)["logits"]
worst = ((ours_logits - hf_logits).abs() / (1e-4 + 1e-4 * hf_logits.abs())).max().item()
check(worst <= 1, f"causal LM logits differ from transformers' (worst {worst:.3g} of the tolerance)")
print(f"WordPiece causal LM: loads in transformers, logits within {worst:.3f} of the tolerance")

if failures:
    sys.exit(f"{len(failures)} failures")
print("WordPiece pre-training and --init-from match transformers")
