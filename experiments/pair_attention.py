"""How much a pre-trained encoder's attention already links the two texts of a sentence pair: for every
token of the second text that also occurs in the first (same WordPiece id, not a special token or
punctuation), the attention probability it puts on its occurrences in the first text, summed, per
layer and head; reported as the mean over such tokens, for the best head of each layer, beside
the same mass on as many other first-text tokens drawn at random (what attention without any
matching would give). The MRPC analogue's paraphrases share most of their words, so a head that
matches words across the pair is what the fine-tuned classifier needs.

The pairs are the validation set's "paraphrase" pairs, tokenized by transformers' RoFormerTokenizer
as `roformer finetune` tokenizes them (experiments/pairs_vs_hf.py checks that), truncated to 96
tokens; the attention maps come from `roformer forward` (every layer's softmax probabilities).
Usage: pair_attention.py ROFORMER_BINARY RUN_DIR(runs/glue) [N_PAIRS (200)]   (the hf venv)"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "hf"))
import rjieba_shim  # noqa: E402,F401  (before transformers: jieba stands in for rjieba)
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import RoFormerTokenizer  # noqa: E402

roformer, runs = sys.argv[1], sys.argv[2]
n_pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 200
rows = [json.loads(l) for l in open("data/bible-pairs/validation.jsonl")]
pairs = [r for r in rows if r["label"] == "paraphrase"][:n_pairs]


def checkpoint(pe):
    d = os.path.join(runs, f"pre-{pe}")
    return os.path.join(d, open(os.path.join(d, "latest")).read().strip())


tok = RoFormerTokenizer.from_pretrained(checkpoint("rope"))
enc = tok([p["sentence1"] for p in pairs], [p["sentence2"] for p in pairs], truncation="longest_first",
          max_length=96, padding=True, return_tensors="pt")
special = set(tok.all_special_ids)
punct = {i for t, i in tok.vocab.items() if len(t) == 1 and not t.isalnum()}
rng = random.Random(0)

print("| encoder | layer | best head | mass on the same word in the first text | on as many random first-text tokens |")
print("|---|---|---|---|---|")
with tempfile.TemporaryDirectory() as tmp:
    inputs = os.path.join(tmp, "inputs.safetensors")
    save_file({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
               "token_type_ids": enc["token_type_ids"]}, inputs)
    for pe in ("rope", "learned"):
        out = os.path.join(tmp, f"{pe}.safetensors")
        subprocess.run([roformer, "forward", "--model", checkpoint(pe), "--inputs", inputs, "--out", out], check=True)
        att = load_file(out)["attentions"]  # (L, B, n, T, T)
        L, B, n = att.shape[0], att.shape[1], att.shape[2]
        same = torch.zeros(L, n)
        chance = torch.zeros(L, n)
        count = 0
        for b in range(B):
            ids, types, mask = enc["input_ids"][b], enc["token_type_ids"][b], enc["attention_mask"][b]
            first = [t for t in range(len(ids)) if mask[t] and types[t] == 0 and int(ids[t]) not in special]
            second = [t for t in range(len(ids)) if mask[t] and types[t] == 1 and int(ids[t]) not in special]
            for t in second:
                tid = int(ids[t])
                if tid in punct:
                    continue
                hits = [s for s in first if int(ids[s]) == tid]
                others = [s for s in first if int(ids[s]) != tid]
                if not hits or len(others) < len(hits):
                    continue
                drawn = rng.sample(others, len(hits))
                same += att[:, b, :, t, hits].sum(-1)
                chance += att[:, b, :, t, drawn].sum(-1)
                count += 1
        same /= count
        chance /= count
        for l in range(L):
            h = int(same[l].argmax())
            print(f"| {pe} | {l} | {h} | {same[l, h]:.3f} | {chance[l, h]:.3f} |")
        print(f"<!-- {pe}: {count} second-text tokens with a match in the first, {B} pairs -->")
