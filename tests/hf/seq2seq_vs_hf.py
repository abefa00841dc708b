"""`roformer translate-train` checkpoints are Hugging Face EncoderDecoderModel directories.

Trains a tiny RoFormer encoder-decoder with `roformer translate-train` on a toy parallel corpus
(number words, English -> Spanish, in reverse order), then loads the checkpoint with transformers'
EncoderDecoderModel.from_pretrained (every weight must load; none may be newly initialised) and checks:
  - the logits agree: the scores of our `translate --scores` hypotheses (decoded in one padded batch)
    equal transformers' teacher-forced log-probabilities of the same tokens (|diff| <= 1e-4);
  - generate(num_beams=4, length_penalty=0.6) gives our `translate --beam 4 --length-penalty 0.6`
    tokens and sequence scores, with and without early stopping, and greedy (num_beams=1) too;
  - a perturbed weight makes the comparison fail (the check can fail).

Usage: seq2seq_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by tests/hf/jieba_py.sh).
"""
import json
import os
import random
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import EncoderDecoderModel
from transformers.utils import logging

roformer, _fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
logging.set_verbosity_error()
torch.manual_seed(0)

EN = "zero one two three four five six seven eight nine ten eleven twelve".split()
ES = "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce".split()


def corpus(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            idx = [rng.randrange(len(EN)) for _ in range(rng.randint(2, 7))]
            f.write(" ".join(EN[i] for i in idx) + "\t" + " ".join(ES[i] for i in reversed(idx)) + "\n")


def run(*args, stdin=None):
    r = subprocess.run([roformer, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"roformer {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


corpus(f"{work}/train.tsv", 1500, 1)
corpus(f"{work}/valid.tsv", 40, 2)
run("translate-train", "--train", f"{work}/train.tsv", "--validation", f"{work}/valid.tsv", "--out", f"{work}/run",
    "--vocab-size", "40", "--layers", "2", "--hidden", "32", "--heads", "4", "--ff", "64", "--max-positions", "64",
    "--steps", "150", "--warmup", "30", "--lr", "3e-3", "--max-tokens", "512", "--eval-every", "150",
    "--bleu-sentences", "10", "--dropout", "0.1", "--no-progress", "--threads", "1")
ckpt = f"{work}/run/" + open(f"{work}/run/latest").read().strip()

model, info = EncoderDecoderModel.from_pretrained(ckpt, output_loading_info=True)
model.eval()
missing = [k for k in info["missing_keys"] if not k.endswith("embed_positions.weight")]
assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], info
print(f"EncoderDecoderModel.from_pretrained: every tensor loaded "
      f"({sum(p.numel() for p in model.parameters())} parameters)")

sources = [line.split("\t")[0] for line in open(f"{work}/valid.tsv")][:12]


def ours(extra):
    out = run("translate", "--model", ckpt, "--format", "jsonl", "--scores", "--threads", "1", "--max-len-a", "0",
              "--max-len-b", "12", *extra, stdin="".join(json.dumps({"source": s}) + "\n" for s in sources))
    return [json.loads(line) for line in out.splitlines()]


def teacher_forced_log_prob(src, toks, eos):
    cfg = model.config
    ids = torch.tensor([src + [cfg.eos_token_id]])
    dec = torch.tensor([[cfg.decoder_start_token_id] + toks])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=dec).logits[0]
    lp = torch.log_softmax(logits.double(), -1)
    targets = toks + [cfg.eos_token_id] if eos else toks
    return sum(lp[t, targets[t]].item() for t in range(len(targets)))


def compare(beams, lp, early, label):
    mine = ours(["--beam", str(beams), "--length-penalty", str(lp), "--nbest", "1"] +
                (["--early-stopping"] if early else []))
    cfg = model.config
    worst = 0.0
    for row in mine:
        src = row["source_tokens"]
        ids = torch.tensor([src + [cfg.eos_token_id]])
        with torch.no_grad():
            g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beams,
                               length_penalty=lp, early_stopping=early, max_length=13, do_sample=False,
                               decoder_start_token_id=cfg.decoder_start_token_id, eos_token_id=cfg.eos_token_id,
                               pad_token_id=cfg.pad_token_id, output_scores=True, return_dict_in_generate=True)
        seq = g.sequences[0].tolist()[1:]
        finished = cfg.eos_token_id in seq
        hf_tokens = seq[:seq.index(cfg.eos_token_id)] if finished else seq
        best = row["nbest"][0]
        assert best["tokens"] == hf_tokens, (label, row["source"], best["tokens"], hf_tokens)
        # The score is the length-normalised log-probability of the tokens (+ eos when finished).
        n = len(best["tokens"]) + (1 if finished else 0)
        tf = teacher_forced_log_prob(src, best["tokens"], finished) / n ** lp
        worst = max(worst, abs(tf - best["score"]))
        if beams > 1:
            worst = max(worst, abs(g.sequences_scores[0].item() - best["score"]))
    assert worst <= 1e-4, (label, worst)
    print(f"{label}: {len(mine)} sources, same tokens as generate(); |score - HF| <= {worst:.2e}")
    return mine


compare(4, 0.6, False, "beam 4, length_penalty 0.6")
compare(4, 0.6, True, "beam 4, length_penalty 0.6, early stopping")
compare(1, 1.0, False, "greedy")

# The check can fail: a perturbed cross-attention weight changes transformers' outputs.
weights = load_file(f"{ckpt}/model.safetensors")
name = "decoder.roformer.encoder.layer.0.crossattention.self.value.weight"
weights[name] = weights[name] + 0.5 * torch.randn_like(weights[name])
os.makedirs(f"{work}/perturbed", exist_ok=True)
save_file(weights, f"{work}/perturbed/model.safetensors", metadata={"format": "pt"})
for f in ("config.json", "spm.model"):
    with open(f"{ckpt}/{f}", "rb") as src, open(f"{work}/perturbed/{f}", "wb") as dst:
        dst.write(src.read())
model = EncoderDecoderModel.from_pretrained(f"{work}/perturbed").eval()
try:
    compare(4, 0.6, False, "perturbed")
except AssertionError:
    print("perturbed checkpoint: the comparison fails, as it must")
else:
    sys.exit("a perturbed checkpoint passed the comparison")
