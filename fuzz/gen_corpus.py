#!/usr/bin/env python3
"""Regenerates the seed corpus in fuzz/corpus/<target>/ (small valid and invalid examples).

    python3 fuzz/gen_corpus.py [--fixtures ../shared/fixtures/roformer-hf]

Sources: tests/testdata/ (torch_bin/*.bin up to 4 KiB, roformer_v2 / roformer_sim configs), the Hugging
Face fixtures (configs, vocab.txt, tokenizer files, model.safetensors headers with the data cut
away) and hand-made cases. The PyTorch seeds (strided views, tied storages, parameters, deflated zip
members, state_dict()'s _metadata) need torch: run this with build/hf-venv/bin/python
(scripts/hf-env.sh) to refresh them; without torch they are kept as they are.
"""
import argparse
import io
import json
import os
import shutil
import struct
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_bytes(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds(fixtures):
    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
    # Every dtype, a scalar, an empty tensor, metadata.
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for i, (dt, sz) in enumerate(sizes.items()):
        shape = [2, 1] if i % 2 else [2]
        n = 2 * sz
        header["t_" + dt.lower()] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes(range(i, i + n))
    header["scalar"] = {"dtype": "F32", "shape": [], "data_offsets": [len(data), len(data) + 4]}
    data += struct.pack("<f", 1.5)
    header["empty"] = {"dtype": "F32", "shape": [0, 3], "data_offsets": [len(data), len(data)]}
    put("safetensors", "valid_all_dtypes.safetensors", st_bytes(header, data))
    put("safetensors", "valid_empty_header.safetensors", st_bytes({}))
    # HF legacy names (gamma/beta renames) and a collision.
    g = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    b = {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}
    put("safetensors", "valid_legacy_names.safetensors", st_bytes({"ln.gamma": g, "ln.beta": b}, b"\0" * 8))
    put("safetensors", "legacy_rename_collision.safetensors", st_bytes({"ln.gamma": g, "ln.weight": b}, b"\0" * 8))
    # Invalid: overlap, offsets outside, size mismatch, bad dtype, duplicate key, non-object, huge length.
    put("safetensors", "bad_overlap.safetensors", st_bytes({"a": g, "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 8))
    put("safetensors", "bad_offsets.safetensors", st_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8))
    put("safetensors", "bad_size.safetensors", st_bytes({"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
    put("safetensors", "bad_dtype.safetensors", st_bytes({"a": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
    dup = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    put("safetensors", "bad_duplicate_key.safetensors", struct.pack("<Q", len(dup)) + dup + b"\0")
    put("safetensors", "bad_not_object.safetensors", st_bytes([1, 2, 3]))
    put("safetensors", "bad_header_length.safetensors", struct.pack("<Q", 2**63) + b"{}")
    put("safetensors", "bad_short.safetensors", b"\x02\0\0")
    put("safetensors", "bad_huge_shape.safetensors", st_bytes({"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 0]}}))
    # The fixture's real header (43 tensors) over tiny data: names, dtypes and shapes as in a checkpoint.
    path = os.path.join(fixtures, "case1_mlm_basic", "model.safetensors")
    if os.path.exists(path):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        put("safetensors", "fixture_case1_header_truncated.safetensors", raw[: 8 + n + 64])
        real = json.loads(raw[8 : 8 + n])
        small, off = {"__metadata__": real.get("__metadata__", {})}, 0
        for k, v in real.items():
            if k == "__metadata__":
                continue
            shape = [min(d, 2) for d in v["shape"]]
            nb = sizes[v["dtype"]]
            for d in shape:
                nb *= d
            small[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + nb]}
            off += nb
        put("safetensors", "fixture_case1_shrunk.safetensors", st_bytes(small, bytes(off)))
    src = os.path.join(ROOT, "tests", "testdata", "torch_bin", "dtypes.safetensors")
    if os.path.exists(src):
        shutil.copy(src, os.path.join(OUT, "safetensors", "tests_dtypes.safetensors"))


def torch_bin_seeds():
    src = os.path.join(ROOT, "tests", "testdata", "torch_bin")
    for name in sorted(os.listdir(src)):
        p = os.path.join(src, name)
        if name.endswith(".bin") and os.path.getsize(p) <= 4096:
            shutil.copy(p, os.path.join(OUT, "torch_bin", "tests_" + name))
    try:
        import torch
    except ImportError:
        print("torch not importable: the generated .bin seeds are left as they are", file=sys.stderr)
        return
    torch.manual_seed(0)
    w = torch.randn(2, 3)
    sd = {
        "w": w,
        "w_t": w.t(),                          # non-contiguous view of the same storage
        "w_row": w[1],                         # storage offset
        "w_col": w[:, 1],                      # stride 3
        "expanded": torch.ones(1).expand(3, 2),  # stride 0
        "h": torch.arange(4, dtype=torch.float16),
        "bf": torch.arange(3, dtype=torch.bfloat16),
        "i": torch.arange(3, dtype=torch.int64),
        "i32": torch.arange(2, dtype=torch.int32),
        "u8": torch.arange(2, dtype=torch.uint8),
        "b": torch.tensor([True, False]),
        "d": torch.zeros(2, dtype=torch.float64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "p": torch.nn.Parameter(torch.ones(2)),
    }
    buf = io.BytesIO()
    torch.save(sd, buf)
    put("torch_bin", "gen_views_dtypes.bin", buf.getvalue())
    buf = io.BytesIO()
    torch.save(sd, buf, _use_new_zipfile_serialization=False)
    put("torch_bin", "gen_views_dtypes_legacy.bin", buf.getvalue())
    # A module's state_dict(): an OrderedDict with a _metadata attribute (BUILD), tied weights.
    m = torch.nn.Sequential(torch.nn.Embedding(4, 2), torch.nn.LayerNorm(2), torch.nn.Linear(2, 4))
    m[2].weight = m[0].weight
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    put("torch_bin", "gen_state_dict_tied.bin", buf.getvalue())
    # The same archive with deflated members (torch.save stores them; zip tools may not).
    zin = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    put("torch_bin", "gen_state_dict_deflated.bin", out.getvalue())


def config_seeds(fixtures):
    for case in ("case1_mlm_basic", "case2_embproj_rotary_value", "case3_seq_eq_max_positions"):
        p = os.path.join(fixtures, case, "config.json")
        if os.path.exists(p):
            shutil.copy(p, os.path.join(OUT, "config", "fixture_" + case + ".json"))
    for case in ("roformer_v2", "roformer_sim"):
        p = os.path.join(ROOT, "tests", "testdata", case, "config.json")
        if os.path.exists(p):
            shutil.copy(p, os.path.join(OUT, "config", "tests_" + case + ".json"))
    CASE1 = {"vocab_size": 129, "hidden_size": 64, "embedding_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "max_position_embeddings": 64}
    base = {"vocab_size": 97, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 64, "max_position_embeddings": 64, "model_type": "roformer"}
    variants = {
        "engine_yarn": {"position_encoding": "rope", "rope_theta": 500000.0, "rope_layout": "half", "rope_scaling": "yarn:4:2048", "is_decoder": True},
        "engine_llama3": {"rope_scaling": "llama3:8:8192", "hidden_act": "relu"},
        "engine_dynamic_ntk": {"rope_scaling": "dynamic-ntk:2:512"},
        "engine_linear": {"rope_scaling": "linear:2", "position_encoding": "learned"},
        "engine_sinusoidal": {"position_encoding": "sinusoidal", "embedding_size": 16},
        "engine_performer": {"attention_type": "performer", "performer_features": 16},
        "engine_linear_attention": {"attention_type": "linear", "position_encoding": "none"},
        "engine_sim": {"pooler_activation": "tanh", "is_decoder": True, "norm_type": "layer_norm"},
        "generic_fields": {"architectures": ["RoFormerForMaskedLM"], "torch_dtype": "float32", "id2label": {"0": "a"}, "use_cache": True},
        "bad_unknown_field": {"hiden_size": 32},
        "bad_type": {"hidden_size": "32"},
        "bad_heads": {"num_attention_heads": 5},
        "bad_scaling": {"rope_scaling": "yarn:4"},
        "bad_model_type": {"model_type": "bert"},
        "bad_layout": {"rope_layout": "other"},
        "bad_negative": {"vocab_size": -1},
        "bad_probability": {"hidden_dropout_prob": 1.0},
        "bad_huge_intermediate": {"intermediate_size": 4000000000},
        "bad_huge_vocab": {"vocab_size": 9007199254740993},
        "bad_huge_total": {"hidden_size": 32768, "num_attention_heads": 64, "intermediate_size": 131072, "num_hidden_layers": 1000},
        "bad_huge_hidden": {"hidden_size": 4294967296, "num_attention_heads": 4},
        "bad_huge_embedding": {"embedding_size": 65537},
        "bad_huge_layers": {"num_hidden_layers": 1025},
        "bad_huge_heads": {"num_attention_heads": 33},
        "bad_huge_positions": {"max_position_embeddings": 16777217},
        "bad_huge_type_vocab": {"type_vocab_size": 65537},
        "bad_huge_performer_features": {"attention_type": "performer", "performer_features": 65538},
        "bad_huge_performer_total": {"attention_type": "performer", "performer_features": 65536, "hidden_size": 4096,
                                     "num_attention_heads": 1, "intermediate_size": 64, "num_hidden_layers": 2},
        "bad_huge_num_labels": {"architectures": ["RoFormerForSequenceClassification"], "num_labels": 65537},
        "bad_num_labels_vs_id2label": {"architectures": ["RoFormerForSequenceClassification"], "num_labels": 3,
                                       "id2label": {"0": "a", "1": "b"}},
        "classifier": {"architectures": ["RoFormerForSequenceClassification"], "num_labels": 3,
                       "problem_type": "multi_label_classification"},
        "regression": {"architectures": ["RoFormerForSequenceClassification"], "num_labels": 1},
        # case1's sizes (fuzz_config's checkpoint) with one field off.
        "case1_layers": {**CASE1, "num_hidden_layers": 3},
        "case1_positions": {**CASE1, "max_position_embeddings": 16777216},
        "case1_heads": {**CASE1, "num_attention_heads": 8},
        "case1_learned": {**CASE1, "position_encoding": "learned"},
        "case1_classifier": {**CASE1, "architectures": ["RoFormerForSequenceClassification"], "num_labels": 2},
    }
    for name, extra in variants.items():
        put("config", name + ".json", json.dumps({**base, **extra}, indent=1))
    put("config", "bad_not_json.json", '{"vocab_size": 97,')
    put("config", "bad_array.json", "[1, 2]")
    put("config", "bad_null.json", "null")


def vocab_seeds(fixtures):
    p = os.path.join(fixtures, "tokenizer", "vocab.txt")
    v = open(p, "rb").read() if os.path.exists(p) else b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n##c\n"
    put("vocab", "fixture_vocab.txt", v)
    put("vocab", "crlf_vocab.txt", v.replace(b"\n", b"\r\n"))
    put("vocab", "cr_vocab.txt", v.replace(b"\n", b"\r"))
    put("vocab", "bom_vocab.txt", b"\xef\xbb\xbf" + v)
    put("vocab", "duplicates_empty_lines.txt", b"[PAD]\n\n[UNK]\na\na\n##b\n\n  spaced  \n[CLS]\n[SEP]\na")
    put("vocab", "no_specials.txt", "今天\n天气\n很\n好\nhello\n##llo\n,\n".encode())
    put("vocab", "bad_invalid_utf8.txt", b"[PAD]\n[UNK]\n\xff\xfe\nok\n")
    put("vocab", "bad_surrogate.txt", b"[PAD]\n\xed\xa0\x80\n")
    put("vocab", "empty.txt", b"")


def tokenizer_seeds(fixtures):
    texts = [
        "今天天气很好，我们去公园玩。",
        "Hello, World! naïve café ÅNGSTRÖM don't 3.14",
        "[CLS] 中文 [MASK] english [SEP]",
        "mixed中文and English 123abc！？。",
        "\t\n\r  \u3000 spaces\u00a0and\u2028separators",
        "e\u0301 \ufffd \x00 control\x7f",
        "İstanbul ΣΊΣΥΦΟΣ ß ﬁ",
        "😀 emoji 𠀀 ext-b",
    ]
    for mode in (0, 1):
        for i, t in enumerate(texts):
            opt = (i * 37) & 0xFF
            put("tokenizer", "m%d_text_%d" % (mode, i), bytes([mode, opt]) + t.encode("utf-8"))
        put("tokenizer", "m%d_pair" % mode, bytes([mode, 0x2A]) + "第一句话\x1fsecond sentence here".encode())
        put("tokenizer", "m%d_pair_truncate" % mode, bytes([mode, 0x52]) + "a b c d e f g\x1f今天天气".encode())
    put("tokenizer", "m0_invalid_utf8", bytes([0, 0]) + b"ok \xff\xfe \xe4\xbb bad \xed\xa0\x80")
    dt = [
        {"version": 1, "kind": "byte", "tokens": []},
        {"version": 1, "kind": "char", "tokens": ["a", "b", "中", "é", "😀"]},
        {"version": 1, "kind": "char", "tokens": ["a", "a"]},
        {"version": 2, "kind": "char", "tokens": ["a"]},
        {"version": 1, "kind": "word", "tokens": []},
        {"version": 1, "kind": "char", "tokens": ["ab"]},
        {"version": 1, "kind": "char", "tokens": []},
        {"version": 1, "kind": "byte", "tokens": [], "extra": 1},
    ]
    for i, j in enumerate(dt):
        put("tokenizer", "m2_data_tokenizer_%d" % i, bytes([2, i]) + json.dumps(j, ensure_ascii=False).encode())
    put("tokenizer", "m2_bad_json", bytes([2, 0]) + b'{"version": 1, "kind": "char", "tokens": ["a",')
    p = os.path.join(fixtures, "tokenizer", "tokenizer_config.json")
    if os.path.exists(p):
        put("tokenizer", "m3_fixture_tokenizer_config", bytes([3, 0]) + open(p, "rb").read())
    cfgs = [
        {"tokenizer_class": "BertTokenizer", "do_lower_case": False, "strip_accents": True,
         "never_split": ["[KEEP]", "Hello"], "model_max_length": 8, "padding_side": "left", "truncation_side": "left"},
        {"tokenizer_class": "RoFormerTokenizer", "additional_special_tokens": ["<extra>", {"content": " spaced ", "lstrip": True, "rstrip": True}],
         "added_tokens_decoder": {"200": {"content": "new", "special": False, "normalized": True},
                                  "201": {"content": "[CLS]", "special": True}}},
        {"unk_token": None, "cls_token": None, "sep_token": {"content": "</s>"}, "pad_token": "<pad>", "mask_token": "[MASK]",
         "do_basic_tokenize": False, "tokenize_chinese_chars": False},
        {"tokenizer_class": "GPT2Tokenizer"},
        {"added_tokens_decoder": {"x": "bad"}},
        {"model_max_length": 1e30, "do_lower_case": "yes"},
    ]
    for i, c in enumerate(cfgs):
        put("tokenizer", "m3_tokenizer_config_%d" % i, bytes([3, 0]) + json.dumps(c, ensure_ascii=False).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "roformer-hf"))
    a = ap.parse_args()
    for t in ("safetensors", "torch_bin", "config", "vocab", "tokenizer"):
        os.makedirs(os.path.join(OUT, t), exist_ok=True)
    safetensors_seeds(a.fixtures)
    torch_bin_seeds()
    config_seeds(a.fixtures)
    vocab_seeds(a.fixtures)
    tokenizer_seeds(a.fixtures)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print("fuzz/corpus: %d bytes" % total)


if __name__ == "__main__":
    main()
