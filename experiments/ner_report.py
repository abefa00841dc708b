#!/usr/bin/env python3
"""Tables of experiments/ner.sh's runs: pre-training, then validation and test entity F1 per position
encoding (mean ± sample sd over the seeds) and per entity type.

Test predictions ({"line", "tags"}, null for a character past --max-length) are scored against the full
gold tags of data/peoples-daily-ner/test.jsonl, a null counting as O (so an entity past the cut-off is
missed): seqeval's default (conlleval) entity extraction, micro-averaged precision, recall and F1,
written out here so that no package is needed. --check-seqeval compares it with seqeval itself.

Usage: experiments/ner_report.py DATA_DIR ARCHIVE_DIR [--check-seqeval]
"""
import gzip, json, os, statistics, sys

TYPES = ("PER", "LOC", "ORG")


def entities(tags):
    """seqeval 1.2.2's get_entities (default mode, IOB prefixes): {(type, start, end)}."""
    out, prev_tag, prev_type, begin = set(), "O", "", 0
    for i, chunk in enumerate(list(tags) + ["O"]):
        tag, typ = chunk[0], chunk[1:].split("-", maxsplit=1)[-1] or "_"
        end = (prev_tag in "ES" or (prev_tag in "BI" and tag in "BSO")
               or (prev_tag not in "O." and prev_type != typ))
        start = (tag in "BS" or (prev_tag in "ES" and tag in "EI") or (prev_tag == "O" and tag in "EI")
                 or (tag not in "O." and prev_type != typ))
        if end:
            out.add((prev_type, begin, i - 1))
        if start:
            begin = i
        prev_tag, prev_type = tag, typ
    return out


def score(gold, pred):
    """Micro P/R/F1 over all entities and per type; gold, pred: lists of tag lists."""
    g, p = set(), set()
    for k, (gs, ps) in enumerate(zip(gold, pred)):
        g |= {(k,) + e for e in entities(gs)}
        p |= {(k,) + e for e in entities(ps)}
    def prf(sel):
        gg, pp = {e for e in g if sel(e)}, {e for e in p if sel(e)}
        tp = len(gg & pp)
        pr = tp / len(pp) if pp else 0.0
        rc = tp / len(gg) if gg else 0.0
        return {"precision": pr, "recall": rc, "f1": 2 * pr * rc / (pr + rc) if pr + rc else 0.0, "number": len(gg)}
    res = {"all": prf(lambda e: True)}
    for t in TYPES:
        res[t] = prf(lambda e, t=t: e[1] == t)
    return res


def read_jsonl(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def ms(xs, digits=4):
    if not xs:
        return "—"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def main():
    data, archive = sys.argv[1], sys.argv[2]
    gold = [r["ner_tags"] for r in read_jsonl(f"{data}/test.jsonl")]
    runs = {}
    for name in sorted(os.listdir(archive)):
        d = f"{archive}/{name}"
        if name.startswith("ft-") and os.path.exists(f"{d}/predictions.jsonl.gz"):
            _, pos, seed = name.split("-")
            metrics = [m for m in read_jsonl(f"{d}/metrics.jsonl") if "val_f1" in m]
            best = max(metrics, key=lambda m: m["val_f1"])  # the checkpoint --metric f1 keeps
            rows = read_jsonl(f"{d}/predictions.jsonl.gz")
            pred = [None] * len(gold)
            for r in rows:
                pred[r["line"] - 1] = [t if t is not None else "O" for t in r["tags"]]
            assert all(p is not None and len(p) == len(gg) for p, gg in zip(pred, gold)), name
            if "--check-seqeval" in sys.argv:
                import seqeval.metrics as sm
                ours = score(gold, pred)["all"]
                theirs = (sm.precision_score(gold, pred), sm.recall_score(gold, pred), sm.f1_score(gold, pred))
                assert max(abs(a - b) for a, b in zip((ours["precision"], ours["recall"], ours["f1"]), theirs)) < 1e-12, (ours, theirs)
                print(f"{name}: seqeval agrees ({theirs[2]:.6f})", file=sys.stderr)
            tok_s = [m["tokens_per_s"] for m in read_jsonl(f"{d}/metrics.jsonl") if "tokens_per_s" in m]
            runs.setdefault(pos, []).append({"seed": int(seed), "val": best, "test": score(gold, pred),
                                             "elapsed": metrics[-1].get("elapsed_s"), "tok_s": tok_s[-1] if tok_s else None})
    cut = sum(1 for g in gold for e in entities(g) if e[2] >= 126)
    print("# People's Daily NER: RoPE against learned positions (experiments/ner.sh)\n")
    print("## Pre-training (masked LM)\n")
    print("| positions | steps | first validation loss | last validation loss | tok/s | wall (s) | model sha256 |")
    print("|---|---|---|---|---|---|---|")
    for pos in ("rope", "learned"):
        d = f"{archive}/pre-{pos}"
        if not os.path.exists(f"{d}/metrics.jsonl"):
            continue
        ms_ = read_jsonl(f"{d}/metrics.jsonl")
        val = [m for m in ms_ if "val_loss" in m]
        tok = [m["tokens_per_s"] for m in ms_ if "tokens_per_s" in m]
        sha = open(f"{d}/model.sha256").read().strip()
        print(f"| {pos} | {ms_[-1].get('step')} | {val[0]['val_loss']:.4f} | {val[-1]['val_loss']:.4f} | "
              f"{statistics.mean(tok):.0f} | {ms_[-1].get('elapsed_s', 0):.0f} | `{sha[:12]}` |")
    print("\n## Fine-tuning: entity F1 (seqeval default mode), mean ± sd over seeds\n")
    print(f"Test: {len(gold)} sentences, {sum(len(entities(g)) for g in gold)} entities "
          f"({cut} of them reach past character 126, where 128 tokens end: scored as missed).\n")
    print("| positions | seeds | validation F1 (best epoch) | test F1 | test precision | test recall | "
          + " | ".join(f"test {t} F1" for t in TYPES) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(TYPES))
    for pos in ("rope", "learned"):
        rs = sorted(runs.get(pos, []), key=lambda r: r["seed"])
        if not rs:
            continue
        cells = [ms([r["val"]["val_f1"] for r in rs]), ms([r["test"]["all"]["f1"] for r in rs]),
                 ms([r["test"]["all"]["precision"] for r in rs]), ms([r["test"]["all"]["recall"] for r in rs])]
        cells += [ms([r["test"][t]["f1"] for r in rs]) for t in TYPES]
        print(f"| {pos} | {','.join(str(r['seed']) for r in rs)} | " + " | ".join(cells) + " |")
    print("\n## Each run\n")
    print("| positions | seed | best epoch | validation F1 | test F1 | " + " | ".join(f"test {t} F1" for t in TYPES)
          + " | fine-tuning wall (s) | tok/s |")
    print("|---|---|---|---|---|" + "---|" * len(TYPES) + "---|---|")
    for pos in ("rope", "learned"):
        for r in sorted(runs.get(pos, []), key=lambda r: r["seed"]):
            print(f"| {pos} | {r['seed']} | {r['val']['epoch']:.0f} | {r['val']['val_f1']:.4f} | "
                  f"{r['test']['all']['f1']:.4f} | " + " | ".join(f"{r['test'][t]['f1']:.4f}" for t in TYPES)
                  + f" | {r['elapsed'] or 0:.0f} | {r['tok_s'] or 0:.0f} |")


if __name__ == "__main__":
    main()
