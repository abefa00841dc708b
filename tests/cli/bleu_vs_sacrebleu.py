"""`roformer bleu` against the sacrebleu package (2.6.0, defaults): the same text line, signature
included, on random corpora built to exercise the 13a tokeniser (punctuation, digits with . , -, HTML
entities, <skipped>, Unicode spaces and scripts, empty lines), one to three references, short and long
outputs, and on real text (the roformer-hf tokenizer cases against perturbed copies); and scores equal
to 0.01 BLEU. `--chrf` prints sacrebleu's CHRF() line (signature and score) on the same corpora. Usage: bleu_vs_sacrebleu.py ROFORMER_BINARY WORK_DIR FIXTURES"""
import json
import os
import random
import subprocess
import sys

from sacrebleu.metrics import BLEU, CHRF

roformer, work, fixtures = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
rng = random.Random(2026)
PIECES = ["the", "cat", "sat", "on", "mat", "Hello", "world", "3.14", "1,000", "12-3", "a.b", "x,y", "-", ".", ",",
          "!", "?", "&quot;", "&amp;", "&lt;tag&gt;", "<skipped>", "(", ")", "[", "]", "{", "}", "~", "`", "'", "\"",
          "é", "naïve", "日本語", "中文。", "\u00a0", "\u2028", "\t", "$5", "%", "@home", "C++", "e-mail", "U.S.A.", "9.",
          ".5", "end-", "--", "...", "#1", "a/b", "ok:", ";", "=", "^", "_", "|"]


def sentence():
    n = rng.randint(0, 18)
    return "".join(rng.choice(PIECES) + rng.choice([" ", " ", " ", "", "  "]) for _ in range(n)).rstrip("\n")


def perturb(s):
    words = s.split(" ")
    for _ in range(rng.randint(0, 4)):
        if words and rng.random() < 0.5:
            del words[rng.randrange(len(words))]
        else:
            words.insert(rng.randint(0, len(words)), rng.choice(PIECES))
    return " ".join(words)


def check(name, hyps, refs):
    for i, lines in enumerate([hyps] + refs):
        with open(f"{work}/{name}.{i}", "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
    args = [roformer, "bleu", "--chrf", "--input", f"{work}/{name}.0"]
    for i in range(len(refs)):
        args += ["--ref", f"{work}/{name}.{i + 1}"]
    ours, ours_chrf = subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip().split("\n")
    chrf = CHRF()
    chrf_score = chrf.corpus_score(hyps, refs).score
    theirs_chrf = f"chrF2|{chrf.get_signature()} = {chrf_score:.2f}"
    if ours_chrf != theirs_chrf:
        print(f"FAIL {name} (chrF):\n  ours   {ours_chrf}\n  theirs {theirs_chrf}")
        return 1
    bleu = BLEU()
    score = bleu.corpus_score(hyps, refs)
    theirs = f"BLEU|{bleu.get_signature()} = {score.score:.2f} {score._verbose}"
    ours_score = float(ours.split(" = ")[1].split()[0])
    SCORES.append(ours_score)
    if ours != theirs or abs(ours_score - score.score) > 0.01:
        print(f"FAIL {name}:\n  ours   {ours}\n  theirs {theirs}")
        return 1
    return 0


SCORES = []
failures = 0
for case in range(150):
    n = rng.randint(1, 12)
    hyps = [sentence() for _ in range(n)]
    refs = [[perturb(h) if rng.random() < 0.8 else sentence() for h in hyps] for _ in range(rng.randint(1, 3))]
    failures += check(f"random{case}", hyps, refs)
texts = [c["text"] for c in json.load(open(f"{fixtures}/tokenizer/cases.json", encoding="utf-8"))]
texts = [t.replace("\n", " ") for t in texts]
failures += check("real", [perturb(t) for t in texts], [texts])
failures += check("no_match", ["aaa bbb"], [["ccc ddd"]])
failures += check("empty_hyp", [""], [["a b c"]])
print(f"153 corpora compared with sacrebleu, BLEU and chrF (BLEU scores {min(SCORES):.2f}..{max(SCORES):.2f}, "
      f"mean {sum(SCORES) / len(SCORES):.2f}): {failures} differ")
sys.exit(1 if failures else 0)
