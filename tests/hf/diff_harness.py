"""What the differential tokenizer tests (tokenizer_diff.py, offsets_vs_fast.py) share: their first
arguments, quiet logging, and tokenizer directories (a copy of the fixture tokenizer's files with another
vocabulary, configuration changes and added tokens). Import it after rjieba_shim and transformers."""
import argparse
import json
import os
import shutil

import jieba
from transformers.utils import logging


def argument_parser(description=None):
    """A parser of DRIVER (fuzz/tokenizer_diff.cc's binary), TOKENIZER_DIR and WORK, for more options;
    transformers' and jieba's logging is turned down to errors at the same time."""
    logging.set_verbosity_error()
    jieba.setLogLevel(60)
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("driver")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("work")
    return ap


def vocab_lines(src):
    """The tokens of src/vocab.txt, one a line."""
    with open(os.path.join(src, "vocab.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def write_tokenizer_dir(src, d, lines, change=None, added=()):
    """Writes to d (created) src's tokenizer_config.json updated with `change` and its
    special_tokens_map.json, and vocab.txt with `lines` (ids unchanged for src's own lines). `added`:
    (content, special, lstrip, rstrip, normalized) tokens after the vocabulary, the special ones also
    additional special tokens; with them [MASK] eats the space on its left (lstrip), as BERT
    checkpoints have it."""
    os.makedirs(d, exist_ok=True)
    for f in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), d)
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config.update(change or {})
    if added:
        config["added_tokens_decoder"]["4"]["lstrip"] = True
        for k, (content, special, lstrip, rstrip, normalized) in enumerate(added):
            config["added_tokens_decoder"][str(len(set(lines)) + k)] = {
                "content": content, "special": special, "lstrip": lstrip, "rstrip": rstrip,
                "normalized": normalized, "single_word": False}
        config["additional_special_tokens"] = [t[0] for t in added if t[1]]
        with open(os.path.join(d, "special_tokens_map.json"), encoding="utf-8") as f:
            special_map = json.load(f)
        special_map["mask_token"] = {"content": "[MASK]", "lstrip": True, "rstrip": False, "normalized": False,
                                     "single_word": False}
        special_map["additional_special_tokens"] = config["additional_special_tokens"]
        with open(os.path.join(d, "special_tokens_map.json"), "w", encoding="utf-8") as f:
            json.dump(special_map, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in lines))
    return d
