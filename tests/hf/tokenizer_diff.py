"""Differential tokenizer fuzzer: random text, encoded by our RoFormerTokenizer (fuzz/tokenizer_diff.cc,
over a pipe) and by transformers' slow tokenizers, must give the same input_ids ([CLS]/[SEP] included).

Configurations (one vocabulary, three tokenizer_config.json): RoFormerTokenizer with jieba and
BertTokenizer, each uncased (the fixture's config), cased (do_lower_case false) and uncased with added
tokens (special and not, lstrip/rstrip, normalized or not; [MASK] with lstrip, as BERT checkpoints
have). The vocabulary is the fixture's vocab.txt (ids unchanged) with lines appended, drawn from the
seed, so that random text meets real tokens and not only [UNK]: the BERT pieces (and ##pieces) of
characters of every category, jieba dictionary words, multi-character words, and odd tokens that
jieba can emit whole (whitespace, U+FFFD, controls).

Text: bytes built from segments: ASCII words, characters of every Unicode general category
(Cs as the 3-byte encodings of surrogates, i.e. invalid UTF-8), combining-mark stacks, NFC-sensitive
sequences, CJK (and compatibility) ideographs, jieba words, emoji sequences, invalid UTF-8, words
around max_input_chars_per_word (100), every kind of whitespace (U+00A0, U+3000, U+2028, \\r\\n, ...),
control and format characters, U+FFFD, NUL, special tokens whole and broken, case-mapping oddities.
Invalid UTF-8: transformers takes str, so its text is bytes.decode("utf-8", errors="replace"), which is
what our tokenizer does with bytes (base/utf8.h: each maximal invalid subpart → U+FFFD); the driver's
decoded code points are compared with Python's as well. Code points on which utf8proc's and Python's
unicodedata general categories disagree (a Unicode version skew, documented in
src/text/roformer_tokenizer.h) are never drawn.

A difference is shrunk (bytes removed while it persists) and printed escaped, with both sides' tokens.
Usage (tests/hf/tokenizer_diff.sh runs it):
  tokenizer_diff.py DRIVER TOKENIZER_DIR WORK [--seed N] [--cases N | --seconds S] [--replay FILE]
TOKENIZER_DIR: the fixture tokenizer (../shared/fixtures/roformer-hf/tokenizer, or its copy
fuzz/data/roformer-tokenizer).
Exit status 0: no difference; 1: differences (listed, and kept in WORK/findings.txt).
"""
import bisect
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jieba  # noqa: E402
import rjieba_shim  # noqa: E402,F401  (before transformers)
from transformers import BertTokenizer, RoFormerTokenizer  # noqa: E402
from transformers.models.bert.tokenization_bert import BasicTokenizer  # noqa: E402
from diff_harness import argument_parser, vocab_lines, write_tokenizer_dir  # noqa: E402

ap = argument_parser()
ap.add_argument("--seed", type=int, default=None, help="default: random (printed)")
ap.add_argument("--cases", type=int, default=None)
ap.add_argument("--seconds", type=float, default=None)
ap.add_argument("--max-findings", type=int, default=5)
ap.add_argument("--replay", help="compare this file's bytes only")
args = ap.parse_args()
seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
rng = random.Random(seed)
JIEBA_DICT = os.path.join(os.path.dirname(jieba.__file__), "dict.txt")


# ---- Unicode pools: runs of code points by general category, where utf8proc and Python agree ----

def category_pools():
    out = subprocess.run([args.driver, "--categories"], capture_output=True, text=True, check=True).stdout
    runs, skew = {}, set()
    for line in out.splitlines():
        first, last, ours = line.split()
        start = None
        for cp in range(int(first), int(last) + 2):
            same = cp <= int(last) and not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) == ours
            if cp <= int(last) and not same and not 0xD800 <= cp <= 0xDFFF:
                skew.add(cp)
            if same and start is None:
                start = cp
            elif not same and start is not None:
                runs.setdefault(ours, []).append((start, cp - 1))
                start = None
    pools = {}
    for cat, rs in runs.items():
        cum, total = [], 0
        for a, b in rs:
            total += b - a + 1
            cum.append(total)
        pools[cat] = (rs, cum)
    return pools, skew


def draw(pools, cat):
    rs, cum = pools[cat]
    k = rng.randrange(cum[-1])
    i = bisect.bisect_right(cum, k)
    a, b = rs[i]
    return a + (k - (cum[i - 1] if i else 0))


pools, skew = category_pools()
CATEGORIES = sorted(pools) + ["Cs"]


# ---- text segments (each returns bytes) ----

def u(s):
    return s.encode("utf-8")


def any_char():
    cat = rng.choice(CATEGORIES)
    if cat == "Cs":  # a surrogate "encoded" as UTF-8: invalid bytes
        cp = rng.randrange(0xD800, 0xE000)
        return bytes([0xED, 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)])
    return u(chr(draw(pools, cat)))


def chars_of(cats, n):
    return "".join(chr(draw(pools, rng.choice(cats))) for _ in range(n))


def ascii_word():
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    if rng.random() < 0.3:  # with the other characters of jieba's word runs
        letters += "+#&._%-" * 3
    return u("".join(rng.choice(letters) for _ in range(rng.randint(1, 12))))


def category_run():
    return b"".join(any_char() for _ in range(rng.randint(1, 4)))


def combining():
    base = rng.choice(["a", "e", "o", "A", "Z", "ı", "α", "Σ", "中", "ㄱ", " ", "", "1", "[", "\u00df"])
    marks = chars_of(["Mn", "Mc", "Me"], rng.randint(1, 4))
    return u(base + marks)


NFC_CASES = ["e\u0301", "E\u0301\u0327", "\u1100\u1161\u11a8", "\u212b", "\u2126", "\u212a", "\u0340", "\u0344",
             "\uf900", "\ufa10", "\U0002f800", "\u0958", "\u1e9b\u0323", "\u00c5\u030a", "a\u0328\u0301",
             "\u0387", "\u037e", "\u1f71", "\u2000", "\u2001", "\u0f73", "\u0cc0\u0cd5", "\u3099", "\u304b\u3099"]


def nfc_sensitive():
    return u("".join(rng.choice(NFC_CASES) for _ in range(rng.randint(1, 3))))


CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0xF900, 0xFAFF),
              (0x2F800, 0x2FA1F), (0x9FD0, 0x9FFF), (0x3000, 0x303F), (0xFF00, 0xFFEF), (0x3040, 0x30FF)]


def cjk():
    out = []
    for _ in range(rng.randint(1, 6)):
        a, b = rng.choice(CJK_RANGES)
        cp = rng.randint(a, b)
        if unicodedata.category(chr(cp)) != "Cn":
            out.append(chr(cp))
    return u("".join(out))


def load_jieba_words():
    words = []
    with open(JIEBA_DICT, encoding="utf-8") as f:
        for line in f:
            words.append(line.split(" ")[0])
    return words


JIEBA_WORDS = load_jieba_words()


def jieba_word():
    return u("".join(rng.choice(JIEBA_WORDS) for _ in range(rng.randint(1, 4))))


EMOJI = ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f",
         "\U0001f1e8\U0001f1f3", "1\ufe0f\u20e3", "\U0001f3f3\ufe0f\u200d\U0001f308", "\u263a", "\U0001faf6",
         "\U0001f9d1\u200d\U0001f4bb", "\U000e0067", "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"]


def emoji():
    return u("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3))))


INVALID = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xe0\x80\x80", b"\xe0\xa0", b"\xed\xa0\x80",
           b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
           b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xef\xbf\xbd", b"\xe4\xb8", b"\xc3\x28"]


def invalid():
    if rng.random() < 0.5:
        return rng.choice(INVALID)
    return bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 5)))


def long_word():
    n = rng.choice([99, 100, 101, 120, 250])
    alphabet = rng.choice(["a", "ab", "é", "e\u0301", "A", "\u00c0", "x-", "中", "\U0001f600", "ǅ", "ﬁ"])
    s = (alphabet * n)[:n] if len(alphabet) == 1 else "".join(rng.choice(alphabet) for _ in range(n))
    return u(s)


WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u00a0",
              "\u1680", "\u2000", "\u2007", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e",
              "\u200b", "\ufeff", "  ", "\n\n"]


def whitespace():
    return u("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 3))))


CONTROLS = ["\x00", "\x01", "\x07", "\x08", "\x1b", "\x7f", "\x80", "\x9f", "\u00ad", "\u061c", "\u200c", "\u200d",
            "\u200e", "\u200f", "\u202a", "\u202e", "\u2060", "\u2066", "\ufff9", "\ufffc", "\ufffd", "\U000e0001",
            "\U000e0020", "\U000f0000", "\ue000", "\ufdd0", "\uffff", "\U0010ffff", "\U0001d173", "\U000110bd"]


def control():
    return u("".join(rng.choice(CONTROLS) for _ in range(rng.randint(1, 3))))


SPECIALS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[mask]", "[Mask]", "[CLS", "CLS]", "[[MASK]]",
            "[MAS[MASK]", "[SEP][SEP]", "[UNK]]", "[", "]", "##", "##a", "[ＭＡＳＫ]", " [MASK] ", "<extra_0>",
            "<extra_0> ", " <Sep2>  ", "<sep2>", "New York", "new york", "NEW YORK", "ＡＢ", "ab", "zq", " zq", "Zq"]


def special():
    return u(rng.choice(SPECIALS))


CASE_ODDITIES = ["\u0130", "\u0131", "\u1e9e", "\u00df", "\u03a3", "\u03c2", "\u03a3\u03a3", "\ufb01", "\u01c5",
                 "\u212a", "\u2126", "\u0390", "\u0149", "\u01f0", "\u13a0", "\uab70", "\u1c90", "\u10d0",
                 "\u1f88", "\u1fbc", "\u0345", "\u2160", "\u24b6", "\U0001e900", "\U00010400", "ΑΣ", "ΌΣΟΣ"]


def case_oddity():
    return u("".join(rng.choice(CASE_ODDITIES) for _ in range(rng.randint(1, 3))))


def punctuation():
    return u(chars_of(["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"], rng.randint(1, 3))
             + rng.choice(["", "$", "^", "`", "~", "|", "<=>", "..."]))


def vocab_word():
    w = rng.choice(VOCAB_WORDS)
    return u(w.upper() if rng.random() < 0.2 else w)


SEGMENTS = [(ascii_word, 12), (vocab_word, 12), (category_run, 14), (combining, 5), (nfc_sensitive, 4), (cjk, 8),
            (jieba_word, 8), (emoji, 4), (invalid, 5), (long_word, 2), (whitespace, 10), (control, 6),
            (special, 5), (case_oddity, 4), (punctuation, 6)]
SEPARATORS = [b"", b" ", b" ", b"  ", b"\t", b"\n", b"\xc2\xa0", b"\xe3\x80\x80", b"\r\n", b"\x00", b"\xef\xbf\xbd"]


def random_text():
    # Random bytes (invalid(), and invalid segments side by side) can spell a valid code point on which the
    # two Unicode versions disagree; such a text is drawn again, as the pools leave those code points out.
    kinds, weights = zip(*SEGMENTS)
    while True:
        parts = []
        for _ in range(rng.choice([0, 1, 1, 2, 3, 4, 6, 8, 12, 20, 40])):
            parts.append(rng.choices(kinds, weights)[0]())
            parts.append(rng.choice(SEPARATORS))
        text = b"".join(parts)
        if not any(ord(c) in skew for c in text.decode("utf-8", errors="replace")):
            return text


# ---- the vocabulary and the two configurations ----

def vocabulary(base_lines):
    extra = []
    lower, cased = BasicTokenizer(do_lower_case=True), BasicTokenizer(do_lower_case=False)
    for _ in range(3000):
        c = chr(draw(pools, rng.choice([cat for cat in CATEGORIES if cat[0] in "LMNPS"])))
        for piece in set(lower.tokenize(c) + cased.tokenize(c)):
            extra += [piece, "##" + piece]
    for _ in range(400):
        w = rng.choice(JIEBA_WORDS)
        extra += [w, w.lower()]
    for _ in range(300):
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789éü") for _ in range(rng.randint(2, 6)))
        extra += [w, "##" + w]
    extra += [" ", "\u3000", "\u00a0", "\t", "\ufffd", "\x00", "\x1f", "\u200b", "\u2028", "\x85", "\ue000", "-",
              "[mask]", "##", "#", "中文", "中", "##中"]
    extra = [t for t in dict.fromkeys(extra) if t and "\n" not in t and "\r" not in t]
    return base_lines + extra


VOCAB_WORDS = []
# Added tokens of the "added" configuration: (content, special, lstrip, rstrip, normalized).
ADDED = [("<extra_0>", True, False, True, False), ("<Sep2>", True, True, True, False),
         ("New York", False, False, False, True), ("ＡＢ", False, False, False, False), ("zq", False, True, False, False)]


def make_dirs():
    src = args.tokenizer_dir
    base_lines = vocab_lines(src)
    lines = vocabulary(base_lines)
    VOCAB_WORDS.extend(t[2:] if t.startswith("##") else t for t in lines if t.strip())
    changes = {"uncased": {}, "cased": {"do_lower_case": False}, "added": {}}
    dirs = {name: write_tokenizer_dir(src, os.path.join(args.work, name), lines, change,
                                      ADDED if name == "added" else ())
            for name, change in changes.items()}
    return dirs, len(lines) - len(base_lines)


dirs, extra_tokens = make_dirs()
CONFIGS = [("roformer", "uncased", RoFormerTokenizer), ("bert", "uncased", BertTokenizer),
           ("roformer", "cased", RoFormerTokenizer), ("bert", "cased", BertTokenizer),
           ("roformer", "added", RoFormerTokenizer), ("bert", "added", BertTokenizer)]
hf = [cls.from_pretrained(dirs[d]) for _, d, cls in CONFIGS]
names = [f"{m}-{d}" for m, d, _ in CONFIGS]
driver = subprocess.Popen([args.driver, "--jieba-dict", JIEBA_DICT] + [f"{m}={dirs[d]}" for m, d, _ in CONFIGS],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def ours(data):
    driver.stdin.write(b"%d\n" % len(data) + data)
    driver.stdin.flush()
    line = driver.stdout.readline()
    if not line:
        sys.exit(f"tokenizer_diff: the driver died (exit {driver.wait()}) on {data!r}")
    return json.loads(line)


def differences(data, only=None):
    """The configurations (indices) on which we and transformers differ; -1 for the decoded text."""
    reply = ours(data)
    text = data.decode("utf-8", errors="replace")
    if "error" in reply:
        return [-1], reply, text
    bad = [] if reply["cps"] == [ord(c) for c in text] else [-1]
    for i, tok in enumerate(hf):
        if only is None or i in only:
            if tok.encode(text) != reply["ids"][i]:
                bad.append(i)
    return bad, reply, text


def shrink(data, which):
    """Removes byte ranges while configuration `which` still differs (at most ~20 s)."""
    deadline = time.time() + 20
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and time.time() < deadline:
        i, progress = 0, False
        while i < len(data) and time.time() < deadline:
            trial = data[:i] + data[i + chunk:]
            if which in differences(trial, [which] if which >= 0 else [])[0]:
                data, progress = trial, True
            else:
                i += chunk
        if not progress:
            chunk //= 2
    return data


def report(data, which, k, seen):
    """Shrinks and prints a difference unless its shrunk text was reported before; True when new."""
    small = shrink(data, which)
    _, reply, text = differences(small)
    if (which, text) in seen:
        return False
    seen.add((which, text))
    print(f"DIFFERENCE (seed {seed}, case {k}, {names[which] if which >= 0 else 'decoding'})")
    shown = ascii(data)
    print(f"  text:        {shown[:400]}{f' ... ({len(data)} bytes)' if len(shown) > 400 else ''}")
    print(f"  shrunk:      {ascii(small)}  = str {ascii(text)}")
    if "error" in reply:
        print(f"  ours:        error: {reply['error']}")
    elif which < 0:
        print(f"  ours:        code points {reply['cps']}\n  python:      code points {[ord(c) for c in text]}")
    else:
        tok = hf[which]
        ids = tok.encode(text)
        print(f"  ours:        {reply['ids'][which]} {ascii(reply['tokens'][which])}")
        print(f"  transformers: {ids} {ascii(tok.convert_ids_to_tokens(ids))}")
    with open(os.path.join(args.work, "findings.txt"), "a", encoding="ascii") as f:
        f.write(f"{names[which] if which >= 0 else 'decoding'} {small.hex()} {data.hex()}\n")
    return True


if args.replay:
    with open(args.replay, "rb") as f:
        data = f.read()
    bad = differences(data)[0]
    for which in bad:
        report(data, which, 0, set())
    sys.exit(1 if bad else 0)

print(f"tokenizer_diff: seed {seed}; {len(CONFIGS)} configurations ({', '.join(names)}); vocabulary "
      f"{len(hf[0].vocab)} tokens ({extra_tokens} added to the fixture's); {len(skew)} code points left out "
      f"(general category differs: Python's Unicode {unicodedata.unidata_version} vs utf8proc's)", flush=True)
# Warm-up, not timed: both sides read jieba's dictionary on their first Chinese text (seconds in the
# instrumented driver of build/fuzz).
if differences(u("今天天气很好 Hello"))[0]:
    sys.exit("tokenizer_diff: the warm-up text differs")
start, cases, found, seen = time.time(), 0, 0, set()
while found < args.max_findings:
    if args.cases is not None and cases >= args.cases:
        break
    if args.seconds is not None and time.time() - start >= args.seconds:
        break
    if args.cases is None and args.seconds is None and cases >= 1000:
        break
    data = random_text()
    cases += 1
    bad, _, _ = differences(data)
    if bad:  # the first configuration that differs; one finding per shrunk text
        found += report(data, bad[0], cases, seen)
elapsed = time.time() - start
print(f"tokenizer_diff: {cases} texts × {len(CONFIGS)} configurations in {elapsed:.1f} s "
      f"({cases / max(elapsed, 1e-9):.0f} texts/s), {found} difference(s)")
driver.stdin.close()
if driver.wait() != 0:  # e.g. a sanitizer's report at exit (the fuzz build's driver)
    print(f"tokenizer_diff: the driver exited with status {driver.returncode}")
    found += 1
sys.exit(1 if found else 0)
