"""Offsets against Hugging Face's fast tokenizers: our Encoding::offsets (fuzz/tokenizer_diff.cc, over a
pipe) must equal transformers' return_offsets_mapping=True of BertTokenizerFast (the `tokenizers`
library's BertNormalizer alignments) wherever our tokens equal its tokens. Where the tokens differ
(the fast tokenizer has no NFC, its own whitespace and control classes, its own longest-first
truncation, ...) the case is skipped and counted ("tokens differ"), as is one the fast tokenizer refuses
("fast error": e.g. only_second truncation of a second text too short) and, for RoFormerTokenizerFast,
one with [UNK] ("[UNK] (jieba)": it cuts other jieba words, and equal [UNK]s then stand for other
text); a run with too few compared cases fails.

Configurations, ours in BERT mode (no jieba) against BertTokenizerFast from the same files:
  fixture        the roformer-hf tokenizer directory (uncased);
  case1..case3   the roformer-hf model directories (vocab.txt and config.json only: HF's defaults);
  uncased, cased, nostrip (lower-case, keep accents), strip (cased, strip accents), added (added
                 tokens with lstrip/rstrip, special or not): the fixture's vocab.txt with WordPiece
                 pieces of the texts' words appended (seeded), so that words split into several pieces;
and ours in RoFormer mode (jieba) against RoFormerTokenizerFast (which normalises before jieba;
rjieba_shim.py's tokenize stands in for rjieba) on fixture and uncased.
Texts: the fixture's cases.json, hand-picked edge cases, and --texts random mixed-script strings
(Latin with composed and decomposed accents, Greek, Cyrillic, Hangul, Arabic and Devanagari marks,
CJK, emoji, case-mapping oddities, punctuation, every kind of whitespace, controls, invalid UTF-8,
special tokens). Each text is also encoded as the second text of a pair with a random other text
under random options (truncation longest_first / only_first / only_second, max_length, padding
longest / max_length, pad_to_multiple_of, left or right sides).

Usage (tests/hf/tokenizer_diff.sh --script offsets_vs_fast.py runs it):
  offsets_vs_fast.py DRIVER TOKENIZER_DIR WORK [--seed N] [--texts N] [--min-compared N]
Exit status 0: every compared case equal; 1: a difference (the first ones listed) or too few compared.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jieba  # noqa: E402
import rjieba_shim  # noqa: E402,F401  (before transformers)
from transformers import BertTokenizerFast, RoFormerTokenizerFast  # noqa: E402
from transformers.models.bert.tokenization_bert import BasicTokenizer  # noqa: E402
from diff_harness import argument_parser, vocab_lines, write_tokenizer_dir  # noqa: E402

ap = argument_parser()
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--texts", type=int, default=3000, help="random texts")
ap.add_argument("--min-compared", type=int, default=None,
                help="fail below this many compared (text, configuration) cases (default: texts × 4)")
ap.add_argument("--max-findings", type=int, default=10)
args = ap.parse_args()
rng = random.Random(args.seed)
fixtures = os.path.dirname(os.path.abspath(args.tokenizer_dir))

# ---- random mixed-script text (str; invalid UTF-8 is added as bytes at the end) ----

LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
ACCENTED = "éèêëÉÈÊËàáâãäåÀÁÂÃÄÅçÇñÑöÖøØüÜßÿŸıİĳǅǈΐΰŉǰ"
MARKS = [chr(c) for c in range(0x300, 0x370)] + ["\u0483", "\u0591", "\u064b", "\u0650", "\u093c", "\u0941",
                                                   "\u0e31", "\u20d7", "\u302a", "\u3099", "\ufe0f"]
SCRIPTS = ["αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΣΩάέήίόύώ", "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЯЁё",
           "한국어텍스트가나다라마바사", "\u1100\u1161\u11a8\u1102\u1162", "مرحبابالعالم", "नमस्तेदुनिया", "สวัสดีชาวโลก",
           "ａｂｃＡＢＣ１２３", "日本語のテキストカタカナ", "今天天气非常好我们是中国人学生预报说不会下雨混合文",
           "\u3400\u4dbf\U00020000\U0002a6df\uf900\ufa10\U0002f800"]
PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~。，、！？：；“”‘’《》—–…«»¡¿·•§¶†‡©®™°±×÷"
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2002", "\u2028", "\u2029", "\x0b", "\x0c",
          "\x1c", "\x1f", "\x85", "\u200a", "\u202f"]
CONTROLS = ["\x00", "\x07", "\x1b", "\x7f", "\u200b", "\u200c", "\u200d", "\u00ad", "\ufeff", "\ufffd", "\u2060",
            "\ue000", "\U000e0001", "\u061c"]
EMOJI = ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f",
         "\U0001f1e8\U0001f1f3", "1\ufe0f\u20e3", "\u2603"]
SPECIALS = ["[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", " [MASK] ", "[mask]", "[MASK", "<extra_0>", " <Sep2> ",
            "New York", "ＡＢ", "zq", " zq "]


def word(alphabet, lo=1, hi=8):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def decomposed():
    base = word(LATIN + "αиı", 1, 4)
    return base + "".join(rng.choice(MARKS) for _ in range(rng.randint(1, 3))) + word(LATIN, 0, 3)


SEGMENTS = [(lambda: word(LATIN), 20), (lambda: word(LATIN + ACCENTED), 10), (decomposed, 8),
            (lambda: word(rng.choice(SCRIPTS)), 14), (lambda: word(PUNCT, 1, 3), 8), (lambda: rng.choice(EMOJI), 3),
            (lambda: rng.choice(CONTROLS), 4), (lambda: rng.choice(SPECIALS), 5),
            (lambda: unicodedata.normalize(rng.choice(["NFD", "NFC"]), word(ACCENTED + LATIN, 2, 6)), 6)]


def random_text():
    kinds, weights = zip(*SEGMENTS)
    parts = []
    for _ in range(rng.choice([1, 2, 3, 5, 8, 12, 20])):
        parts.append(rng.choices(kinds, weights)[0]())
        parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    text = "".join(parts).encode("utf-8")
    if rng.random() < 0.05:  # invalid UTF-8: each maximal invalid subpart is one U+FFFD code point
        k = rng.randint(0, len(text))
        text = text[:k] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf0\x9f\x98"]) + text[k:]
    return text


EDGE = ["e\u0301", "xe\u0301", "e\u0301x", "cafe\u0301 CAFE\u0301", "CAFÉ déjà", "İstanbul İ", "ǅemal Σσς", "ﬁne ß",
        "a\u0000b", "中文abc", "a [MASK] b", "a[MASK]b", "\u0301abc", "x\u00adz", "zero\u200bwidth", "한국어 텍스트",
        "\u1100\u1161\u11a8", "Å Å Å", "  lead and trail  ", "\t\n", "", "[CLS] [SEP] [PAD]", "hello [MASK]  world",
        "e\u0301\u0301\u0301", "\u0958\u0959", "Ω≈ç√∫ ##ing", "don't stop-believing (yes); ok?"]


def texts():
    with open(os.path.join(args.tokenizer_dir, "cases.json"), encoding="utf-8") as f:
        fixed = [c["text"].encode("utf-8") for c in json.load(f)]
    return fixed + [t.encode("utf-8") for t in EDGE] + [random_text() for _ in range(args.texts)]


TEXTS = texts()

# ---- configurations ----

# Added tokens of the "added" configuration: (content, special, lstrip, rstrip, normalized).
ADDED = [("<extra_0>", True, False, True, False), ("<Sep2>", True, True, True, False),
         ("New York", False, False, False, True), ("ＡＢ", False, False, False, True), ("zq", False, True, False, True)]


def augmented_vocab(base_lines):
    """The fixture's lines, then pieces of the texts' words: whole words, and first piece + ##rest."""
    extra = []
    for lower in (True, False):
        basic = BasicTokenizer(do_lower_case=lower, strip_accents=None if lower else False)
        for data in TEXTS:
            for w in basic.tokenize(data.decode("utf-8", errors="replace")):
                r = rng.random()
                if r < 0.4:
                    extra.append(w)
                elif r < 0.85 and len(w) > 1:
                    k = rng.randint(1, len(w) - 1)
                    extra += [w[:k], "##" + w[k:]]
                    if len(w) > 2:
                        j = rng.randint(1, len(w) - 1)
                        extra += [w[:j], "##" + w[j:]]
    seen = set(base_lines)
    return base_lines + [t for t in dict.fromkeys(extra) if t not in seen and t.strip() == t and t and "\n" not in t]


def make_dirs():
    src = args.tokenizer_dir
    base = vocab_lines(src)
    lines = augmented_vocab(base)
    dirs = {"fixture": src}
    for k, case in enumerate(sorted(d for d in os.listdir(fixtures) if d.startswith("case"))):
        dirs[f"case{k + 1}"] = os.path.join(fixtures, case)
    changes = {"uncased": {}, "cased": {"do_lower_case": False}, "nostrip": {"strip_accents": False},
               "strip": {"do_lower_case": False, "strip_accents": True}, "added": {}}
    for name, change in changes.items():
        dirs[name] = write_tokenizer_dir(src, os.path.join(args.work, name), lines, change,
                                         ADDED if name == "added" else ())
    return dirs, len(lines) - len(base)


dirs, extra_tokens = make_dirs()
# (name, our mode, directory, the fast tokenizer)
CONFIGS = [(f"bert-{d}", "bert", dirs[d], BertTokenizerFast.from_pretrained(dirs[d])) for d in dirs]
CONFIGS += [(f"roformer-{d}", "roformer", dirs[d], RoFormerTokenizerFast.from_pretrained(dirs[d]))
            for d in ("fixture", "uncased")]
JIEBA_DICT = os.path.join(os.path.dirname(jieba.__file__), "dict.txt")
driver = subprocess.Popen([args.driver, "--jieba-dict", JIEBA_DICT] + [f"{m}={d}" for _, m, d, _ in CONFIGS],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def ask(request):
    driver.stdin.write(json.dumps(request).encode() + b"\n")
    driver.stdin.flush()
    line = driver.stdout.readline()
    if not line:
        sys.exit(f"offsets_vs_fast: the driver died (exit {driver.wait()}) on {request!r}")
    reply = json.loads(line)
    if "error" in reply:
        sys.exit(f"offsets_vs_fast: the driver failed on {request!r}: {reply['error']}")
    return reply


def random_options():
    o = {}
    if rng.random() < 0.7:
        o["truncation"] = rng.choice(["longest_first", "only_first", "only_second"])
        o["max_length"] = rng.randint(2, 40)
    if rng.random() < 0.5:
        o["padding"] = rng.choice(["longest", "max_length"])
        o.setdefault("max_length", rng.randint(2, 40))
        if rng.random() < 0.2:
            o["pad_to_multiple_of"] = 8
            o["max_length"] = 8 * rng.randint(1, 5)
    for side in ("truncation_side", "padding_side"):
        if rng.random() < 0.3:
            o[side] = "left"
    return o


def fast_encode(tok, text, pair, o):
    tok.truncation_side = o.get("truncation_side", "right")
    tok.padding_side = o.get("padding_side", "right")
    e = tok(text, pair, truncation=o.get("truncation", False), max_length=o.get("max_length"),
            padding=o.get("padding", False), pad_to_multiple_of=o.get("pad_to_multiple_of"),
            return_offsets_mapping=True)
    return tok.convert_ids_to_tokens(e["input_ids"]), [list(x) for x in e["offset_mapping"]]


COLUMNS = ["compared", "tokens differ", "[UNK] (jieba)", "fast error"]
stats = {name: dict.fromkeys(COLUMNS, 0) for name, _, _, _ in CONFIGS}
findings = []


def compare(data, pair=None, o=None):
    o = o or {}
    request = dict(o, text=data.hex())
    if pair is not None:
        request["pair"] = pair.hex()
    reply = ask(request)
    text = data.decode("utf-8", errors="replace")
    second = pair.decode("utf-8", errors="replace") if pair is not None else None
    for i, (name, _, _, tok) in enumerate(CONFIGS):
        try:
            tokens, offsets = fast_encode(tok, text, second, o)
        except Exception:  # e.g. only_second on a second text too short: the fast tokenizer raises
            stats[name]["fast error"] += 1
            continue
        if tokens != reply["tokens"][i]:
            stats[name]["tokens differ"] += 1
            continue
        if name.startswith("roformer") and tok.unk_token in tokens:
            # RoFormerTokenizerFast normalises before jieba and cuts other words: its [UNK] then stands
            # for other text than ours under equal token strings (no ## marks the word boundaries).
            stats[name]["[UNK] (jieba)"] += 1
            continue
        stats[name]["compared"] += 1
        if offsets != reply["offsets"][i]:
            findings.append((name, text, second, o, tokens, offsets, reply["offsets"][i]))


for k, data in enumerate(TEXTS):
    compare(data)
    compare(rng.choice(TEXTS), data, random_options())

print(f"offsets_vs_fast: seed {args.seed}; {len(TEXTS)} texts ({args.texts} random), each alone and as the second "
      f"text of a pair with random options; vocabulary +{extra_tokens} tokens for the augmented configurations")
print(f"{'configuration':<18}" + "".join(f"{c:>15}" for c in COLUMNS))
total = dict.fromkeys(COLUMNS, 0)
for name, s in stats.items():
    print(f"{name:<18}" + "".join(f"{s[c]:>15}" for c in COLUMNS))
    for c in COLUMNS:
        total[c] += s[c]
print(f"{'all':<18}" + "".join(f"{total[c]:>15}" for c in COLUMNS))
for name, text, second, o, tokens, fast, ours in findings[:args.max_findings]:
    print(f"DIFFERENCE ({name}): text {ascii(text)}" + (f" pair {ascii(second)} options {o}" if second is not None else ""))
    print(f"  tokens:       {ascii(tokens)}")
    print(f"  transformers: {fast}")
    print(f"  ours:         {ours}")
minimum = args.min_compared if args.min_compared is not None else 4 * len(TEXTS)
driver.stdin.close()
status = driver.wait()
failed = bool(findings) or total["compared"] < minimum or status != 0
if total["compared"] < minimum:
    print(f"offsets_vs_fast: only {total['compared']} cases compared (want {minimum})")
print(f"offsets_vs_fast: {len(findings)} difference(s)" + (f"; the driver exited with {status}" if status else ""))
sys.exit(1 if failed else 0)
