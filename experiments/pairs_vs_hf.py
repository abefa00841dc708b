"""Checks the sentence-pair inputs of a RoPE fine-tuning run end to end against transformers: the run's
best/ checkpoint loaded as RoFormerForSequenceClassification, the test pairs tokenized by the
tokenizer its tokenizer_config.json names, transformers' RoFormerTokenizer (jieba words, then
WordPiece; jieba or rjieba needed), with longest_first truncation to the run's max length, token
types 0 / 1 and the padding mask, and the logits compared with the run's predictions.jsonl scores.
(transformers' Python tokenizers' longest_first takes one token at a time from the longer text, ties
from the second; the Rust "fast" tokenizers split the budget in one step and can keep one token more
of the second text. Ours follows the Python ones, as RoFormerTokenizer does.) Equal logits mean our ids, token types, positions, masks and classifier
input are HF's. Also prints how the predictions spread over the labels.
Usage: pairs_vs_hf.py RUN_DIR TEST_JSONL MAX_LENGTH [N (200)]   (the hf venv: scripts/hf-env.sh)"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "hf"))
import rjieba_shim  # noqa: E402,F401  (before transformers: jieba stands in for rjieba)
import torch  # noqa: E402
from transformers import RoFormerForSequenceClassification, RoFormerTokenizer  # noqa: E402

run, test_path, max_length = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = int(sys.argv[4]) if len(sys.argv) > 4 else 200
best = f"{run}/best"
config = json.load(open(f"{best}/config.json"))
if config.get("position_encoding", "rope") != "rope":
    sys.exit(f"{best}: position_encoding {config['position_encoding']}: transformers' RoFormer has RoPE only")
tok = RoFormerTokenizer.from_pretrained(best)
model = RoFormerForSequenceClassification.from_pretrained(best).eval()
rows = [json.loads(l) for l in open(test_path)]
preds = [json.loads(l) for l in open(f"{run}/predictions.jsonl")]
worst = 0.0
for start in range(0, min(n, len(preds)), 16):
    batch = preds[start:min(n, start + 16)]
    first = [rows[p["line"] - 1]["sentence1"] for p in batch]
    second = [rows[p["line"] - 1]["sentence2"] for p in batch]
    enc = tok(first, second, truncation="longest_first", max_length=max_length, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    ours = torch.tensor([p["scores"] for p in batch])  # the class logits
    worst = max(worst, (ours - logits).abs().max().item())
labels = collections.Counter(p["label"] for p in preds)
print(f"{run}: {min(n, len(preds))} test pairs, max |ours - transformers| = {worst:.2e} (logits); "
      f"predicted labels {dict(labels)}")
sys.exit(0 if worst < 1e-5 else 1)
