"""`roformer vocab` against Hugging Face: the directory it writes loads with transformers'
RoFormerTokenizer and tokenises the whole corpus as `roformer tokenize` does (uncased, cased, and
with jieba words kept whole), and the vocabulary is as good as the one HF tokenizers' WordPiece trainer learns from
the same text (tokens per held-out word within 5%).

Text: the licence texts of /usr/share/common-licenses, the roformer-hf tokenizer cases, and Chinese
sentences drawn from jieba's dictionary by frequency (seeded). Every 5th line is held out.
Usage: vocab_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh).
"""
import glob
import json
import os
import random
import subprocess
import sys
import time

import jieba
import rjieba_shim  # noqa: F401  (before transformers)
from tokenizers import BertWordPieceTokenizer
from transformers import BertTokenizer, RoFormerTokenizer

binary, fixtures, work = sys.argv[1:4]


def corpus():
    lines = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                lines += [l.rstrip("\n") for l in f if l.strip()]
    with open(os.path.join(fixtures, "tokenizer", "cases.json"), encoding="utf-8") as f:
        lines += [c["text"].replace("\n", " ") for c in json.load(f)]
    words, weights = [], []
    with open(os.path.join(os.path.dirname(jieba.__file__), "dict.txt"), encoding="utf-8") as f:
        for row in f:
            w, freq = row.split(" ")[:2]
            words.append(w)
            weights.append(int(freq))
    rng = random.Random(5)
    for _ in range(3000):
        lines.append("".join(rng.choices(words, weights, k=rng.randint(3, 12))) + "。")
    return lines


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    return path


def ours(model_dir, lines):
    out = subprocess.run([binary, "tokenize", "--model", model_dir, "--input-format", "text"],
                         input="".join(l + "\n" for l in lines), capture_output=True, text=True, check=True)
    return [json.loads(l)["input_ids"] for l in out.stdout.splitlines()]


lines = corpus()
train = write(os.path.join(work, "train.txt"), [l for i, l in enumerate(lines) if i % 5])
held = [l for i, l in enumerate(lines) if i % 5 == 0]
failures = 0
for name, flags in [("uncased", []), ("cased", ["--cased"]), ("jieba-words", ["--chinese-words", "400"])]:
    d = os.path.join(work, name)
    t0 = time.perf_counter()
    subprocess.run([binary, "vocab", "--data", train, "--size", "5000", "--out-dir", d] + flags, check=True)
    seconds = time.perf_counter() - t0
    hf = RoFormerTokenizer.from_pretrained(d)
    # The whole corpus: the training lines the vocabulary was learned from and the held-out ones.
    expected = [hf(l)["input_ids"] for l in lines]
    got = ours(d, lines)
    bad = [i for i, (a, b) in enumerate(zip(expected, got)) if a != b] + ([-1] if len(got) != len(expected) else [])
    failures += bool(bad)
    with open(os.path.join(d, "vocab.txt"), encoding="utf-8") as f:
        vocab = f.read().splitlines()
    words_kept = sum(1 for t in vocab if len(t) > 1 and all("\u4e00" <= c <= "\u9fff" for c in t))
    print(f"{name}: {len(vocab)} tokens ({words_kept} Chinese words) in {seconds:.2f} s; "
          f"RoFormerTokenizer == roformer tokenize on {len(expected) - len(bad)}/{len(expected)} lines")
    if bad:
        i = bad[0]
        print(f"  first difference: {lines[i]!r}\n  hf:   {expected[i]}\n  ours: {got[i] if i < len(got) else None}")

# The vocabulary's quality against HF tokenizers' trainer (BPE with ##, as ours), both read by
# BertTokenizer (no jieba) on the held-out lines.
peer_dir = os.path.join(work, "hf-trainer")
os.makedirs(peer_dir, exist_ok=True)
t0 = time.perf_counter()
peer = BertWordPieceTokenizer(lowercase=True, strip_accents=True, clean_text=True, handle_chinese_chars=True)
peer.train([train], vocab_size=5000, min_frequency=2, show_progress=False,
           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], limit_alphabet=100000)
peer_seconds = time.perf_counter() - t0
peer.save_model(peer_dir)
ratio = {}
for name, d in [("ours", os.path.join(work, "uncased")), ("hf", peer_dir)]:
    tok = BertTokenizer(os.path.join(d, "vocab.txt"), do_lower_case=True)
    pieces = sum(len(tok.tokenize(l)) for l in held)
    words = sum(len(tok.basic_tokenizer.tokenize(l)) for l in held)
    unk = sum(tok.tokenize(l).count("[UNK]") for l in held)
    with open(os.path.join(d, "vocab.txt"), encoding="utf-8") as f:
        size = len(f.read().splitlines())
    ratio[name] = pieces / words
    print(f"{name}: {size} tokens, {pieces / words:.4f} pieces per held-out word, {unk} [UNK]")
with open(os.path.join(work, "uncased", "vocab.txt"), encoding="utf-8") as f:
    a = set(f.read().splitlines())
with open(os.path.join(peer_dir, "vocab.txt"), encoding="utf-8") as f:
    b = set(f.read().splitlines())
print(f"HF tokenizers trainer: {peer_seconds:.2f} s; vocabularies share {len(a & b)} of {len(b)} tokens; "
      f"pieces per word ours / hf = {ratio['ours'] / ratio['hf']:.4f}")
if ratio["ours"] > 1.05 * ratio["hf"]:
    print("FAIL: our vocabulary splits held-out words more than 5% more often than HF's")
    failures += 1
sys.exit(1 if failures else 0)
