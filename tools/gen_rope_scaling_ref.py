#!/usr/bin/env python3
# Generates tests/testdata/hf_rope_scaling.json: reference RoPE inverse frequencies and attention factors for
# every frequency-scaling method (default/none, linear, dynamic NTK, YaRN, Llama 3, LongRoPE), computed by
# Hugging Face transformers' own ROPE_INIT_FUNCTIONS (transformers.modeling_rope_utils), so that the C++
# tests can check roformer.cpp against an independent implementation.
#
# Environment (Debian 12; venv outside the repo, using Debian's torch 1.13 and numpy):
#   apt-get install -y python3-torch python3-numpy python3-venv
#   /usr/bin/python3 -m venv --system-site-packages /work/venv-ref
#   /work/venv-ref/bin/pip install transformers==4.57.6
#   /work/venv-ref/bin/python tools/gen_rope_scaling_ref.py            # writes tests/testdata/hf_rope_scaling.json
#   (options: --out PATH, --check to compare against an existing JSON instead of writing)
#
# The committed JSON was produced by transformers 4.57.6 with torch 1.13.0a0 (Debian python3-torch 1.13.1+dfsg-4,
# Python 3.11.2).
# transformers >= 4.52 disables its torch integration when torch < 2.1, so modeling_rope_utils then lacks
# its module-level `torch`; this script injects the already-imported torch module into it (the functions only
# use basic tensor ops). transformers 4.51.3 imports torch natively and gives bit-identical values for every
# case except truncate=False YaRN (added in 4.55), which this script skips on versions without support.
#
# All values are what HF returns: inv_freq is a float32 tensor (printed as the exact float64 repr of each
# float32 value); attention_factor is a Python float64.  Each case is also checked against an independent
# float64 implementation of the semantics documented in the JSON (assertion below), so the field meanings are
# guaranteed to describe what HF computed.

import argparse
import inspect
import json
import math
import os
import sys

import torch
import transformers
from transformers import PretrainedConfig
import transformers.modeling_rope_utils as mru

if getattr(mru, "torch", None) is None:  # transformers disabled torch (needs torch >= 2.1); give it ours
    mru.torch = torch
TORCH_INJECTED = mru.torch is torch and not transformers.utils.is_torch_available()

ROPE_INIT_FUNCTIONS = mru.ROPE_INIT_FUNCTIONS
YARN_HAS_TRUNCATE = "truncate" in inspect.getsource(ROPE_INIT_FUNCTIONS["yarn"])

HF_TYPE = {"none": "default", "linear": "linear", "dynamic_ntk": "dynamic", "yarn": "yarn",
           "llama3": "llama3", "longrope": "longrope"}


# ----------------------------------------------------------------------------------------------------------
# Cases, in roformer.cpp's terms (the JSON fields); hf_config() maps each onto an HF config
# ----------------------------------------------------------------------------------------------------------

def geom(head_dim, prf):
    return {"head_dim": head_dim, "partial_rotary_factor": prf, "rot_dim": int(head_dim * prf)}


def longrope_factors(half, lo, hi, phase):
    """Varied, deterministic per-pair factors in [lo, hi]: half a rising ramp, half a periodic wiggle."""
    out = []
    for i in range(half):
        t = i / max(half - 1, 1)
        w = 0.5 + 0.5 * math.sin(1.7 * i + phase)
        v = lo + (hi - lo) * (0.6 * t + 0.4 * w)
        out.append(float(f"{v:.6g}"))  # short decimals, exactly reproducible in C++
    return out


def make_cases():
    cases = []

    def add(name, type_, head_dim, prf=1.0, base=10000.0, factor=1.0, orig=0, seq_len=0, **extra):
        c = {"name": name, "type": type_}
        c.update(geom(head_dim, prf))
        c.update({"base": float(base), "factor": float(factor), "original_max_positions": int(orig),
                  "seq_len": int(seq_len)})
        if type_ == "yarn":
            c.update({"beta_fast": float(extra.pop("beta_fast", 32.0)), "beta_slow": float(extra.pop("beta_slow", 1.0)),
                      "mscale": float(extra.pop("mscale", 1.0)), "mscale_all_dim": float(extra.pop("mscale_all_dim", 0.0)),
                      "attention_factor": float(extra.pop("attention_factor", 0.0)),
                      "truncate": int(extra.pop("truncate", 1))})
            c["_orig_in_rope_scaling"] = extra.pop("orig_in_rope_scaling", True)
        elif type_ == "llama3":
            c.update({"low_freq_factor": float(extra.pop("low_freq_factor")),
                      "high_freq_factor": float(extra.pop("high_freq_factor"))})
        elif type_ == "longrope":
            half = c["rot_dim"] // 2
            c["short_factor"] = longrope_factors(half, 1.0, 1.6, 0.3)
            c["long_factor"] = longrope_factors(half, 1.0, 3.0, 1.1)
            c["attention_factor"] = float(extra.pop("attention_factor", 0.0))
            c["_orig_on_config"] = extra.pop("orig_on_config", True)
        assert not extra, extra
        cases.append(c)

    # --- none (HF "default") ---
    add("none_d128_b1e4", "none", 128)
    add("none_d64_b5e5", "none", 64, base=500000)
    add("none_d16_b1e4", "none", 16)
    add("none_h128_prf0.5_d64_b1e6", "none", 128, prf=0.5, base=1e6)
    add("none_d96_b1e4", "none", 96)

    # --- linear ---
    add("linear_d128_b1e4_f2", "linear", 128, factor=2)
    add("linear_d64_b5e5_f4", "linear", 64, base=500000, factor=4)
    add("linear_h128_prf0.5_d64_b1e6_f8", "linear", 128, prf=0.5, base=1e6, factor=8)
    add("linear_d96_b1e4_f16", "linear", 96, factor=16)

    # --- dynamic NTK (original_max_positions = HF max_position_embeddings) ---
    add("dynamic_d128_b1e4_f2_o2048_seq1024_below", "dynamic_ntk", 128, factor=2, orig=2048, seq_len=1024)
    add("dynamic_d128_b1e4_f2_o2048_seq2048_equal", "dynamic_ntk", 128, factor=2, orig=2048, seq_len=2048)
    add("dynamic_d128_b1e4_f2_o2048_seq4096", "dynamic_ntk", 128, factor=2, orig=2048, seq_len=4096)
    add("dynamic_d64_b5e5_f4_o4096_seq10000", "dynamic_ntk", 64, base=500000, factor=4, orig=4096, seq_len=10000)
    add("dynamic_d16_b1e4_f8_o512_seq5000", "dynamic_ntk", 16, factor=8, orig=512, seq_len=5000)
    add("dynamic_h128_prf0.5_d64_b1e6_f16_o8192_seq100000", "dynamic_ntk", 128, prf=0.5, base=1e6, factor=16,
        orig=8192, seq_len=100000)
    add("dynamic_d96_b1e4_f40_o4096_seq163840", "dynamic_ntk", 96, factor=40, orig=4096, seq_len=163840)

    # --- YaRN ---
    add("yarn_d128_b1e4_f4_o4096_defaults_origViaMaxPos", "yarn", 128, factor=4, orig=4096,
        orig_in_rope_scaling=False)
    add("yarn_d128_b1e4_f4_o4096_defaults", "yarn", 128, factor=4, orig=4096)
    add("yarn_d64_b5e5_f8_o8192_beta16_2", "yarn", 64, base=500000, factor=8, orig=8192, beta_fast=16, beta_slow=2)
    add("yarn_d128_b1e6_f4_o32768_qwen25", "yarn", 128, base=1e6, factor=4, orig=32768)
    add("yarn_d128_b1e4_f2_o2048_beta64_0.5", "yarn", 128, factor=2, orig=2048, beta_fast=64, beta_slow=0.5)
    add("yarn_d64_b1e4_f40_o4096_deepseekv2_ms0.707_msall0.707", "yarn", 64, factor=40, orig=4096,
        mscale=0.707, mscale_all_dim=0.707)
    add("yarn_d64_b1e4_f40_o4096_deepseekv3_ms1_msall1", "yarn", 64, factor=40, orig=4096,
        mscale=1.0, mscale_all_dim=1.0)
    add("yarn_d64_b1e4_f40_o4096_ms1_msall0.707", "yarn", 64, factor=40, orig=4096, mscale=1.0, mscale_all_dim=0.707)
    add("yarn_d64_b1e4_f40_o4096_ms0.707_msall1", "yarn", 64, factor=40, orig=4096, mscale=0.707, mscale_all_dim=1.0)
    # HF quirk: mscale is ignored unless mscale_all_dim is also non-zero (attention_factor = 0.1*ln(s)+1)
    add("yarn_d64_b1e4_f40_o4096_ms0.707_msall0_hfIgnoresMscale", "yarn", 64, factor=40, orig=4096, mscale=0.707)
    add("yarn_d128_b1e4_f8_o2048_attn1.5", "yarn", 128, factor=8, orig=2048, attention_factor=1.5)
    add("yarn_d128_b1e4_f16_o4096_attn1_ms1_msall0.707_attnWins", "yarn", 128, factor=16, orig=4096,
        attention_factor=1.0, mscale=1.0, mscale_all_dim=0.707)
    add("yarn_d16_b1e4_f2_o512", "yarn", 16, factor=2, orig=512)
    add("yarn_d16_b1e4_f2_o128_lowClampedTo0", "yarn", 16, factor=2, orig=128)
    add("yarn_d64_b1e4_f4_o131072_highAboveHalf", "yarn", 64, factor=4, orig=131072)
    add("yarn_h128_prf0.5_d64_b1e6_f8_o4096", "yarn", 128, prf=0.5, base=1e6, factor=8, orig=4096)
    add("yarn_d96_b1e4_f4_o2048", "yarn", 96, factor=4, orig=2048)
    if YARN_HAS_TRUNCATE:
        add("yarn_d64_b150000_f32_o4096_gptoss_notrunc", "yarn", 64, base=150000, factor=32, orig=4096, truncate=0)
        add("yarn_d128_b1e4_f4_o4096_beta16_2_notrunc", "yarn", 128, factor=4, orig=4096, beta_fast=16,
            beta_slow=2, truncate=0)
        add("yarn_d96_b5e5_f8_o8192_notrunc", "yarn", 96, base=500000, factor=8, orig=8192, truncate=0)

    # --- Llama 3 ---
    add("llama3_d128_b5e5_f8_lo1_hi4_o8192_llama31", "llama3", 128, base=500000, factor=8, orig=8192,
        low_freq_factor=1, high_freq_factor=4)
    add("llama3_d64_b5e5_f32_lo1_hi4_o8192_llama32", "llama3", 64, base=500000, factor=32, orig=8192,
        low_freq_factor=1, high_freq_factor=4)
    add("llama3_d128_b1e4_f4_lo2_hi8_o4096", "llama3", 128, factor=4, orig=4096, low_freq_factor=2,
        high_freq_factor=8)
    add("llama3_d96_b1e6_f16_lo1_hi4_o2048", "llama3", 96, base=1e6, factor=16, orig=2048, low_freq_factor=1,
        high_freq_factor=4)
    add("llama3_h128_prf0.5_d64_b5e5_f8_lo1_hi4_o8192", "llama3", 128, prf=0.5, base=500000, factor=8, orig=8192,
        low_freq_factor=1, high_freq_factor=4)

    # --- LongRoPE (Phi-3 style: original 4096; short factors iff seq_len <= original) ---
    add("longrope_d96_b1e4_f32_o4096_seq2048_short_phi3", "longrope", 96, factor=32, orig=4096, seq_len=2048)
    add("longrope_d96_b1e4_f32_o4096_seq4096_equal_short", "longrope", 96, factor=32, orig=4096, seq_len=4096)
    add("longrope_d96_b1e4_f32_o4096_seq4097_long", "longrope", 96, factor=32, orig=4096, seq_len=4097)
    add("longrope_d96_b1e4_f32_o4096_seq131072_long", "longrope", 96, factor=32, orig=4096, seq_len=131072)
    add("longrope_d128_b5e5_f8_o4096_seq20000_long_attn1.25", "longrope", 128, base=500000, factor=8, orig=4096,
        seq_len=20000, attention_factor=1.25)
    add("longrope_h128_prf0.5_d64_b1e6_f16_o4096_seq70000_long", "longrope", 128, prf=0.5, base=1e6, factor=16,
        orig=4096, seq_len=70000)
    add("longrope_d64_b1e4_f4_o4096_seq1000_short_factorInRopeScaling", "longrope", 64, factor=4, orig=4096,
        seq_len=1000, orig_on_config=False)
    add("longrope_d64_b1e4_f4_o4096_seq9000_long_factorInRopeScaling", "longrope", 64, factor=4, orig=4096,
        seq_len=9000, orig_on_config=False)
    return cases


# ----------------------------------------------------------------------------------------------------------
# Build the HF config for a case, and check HF will interpret it with our semantics
# ----------------------------------------------------------------------------------------------------------

def hf_config(c):
    t, s, orig = c["type"], c["factor"], c["original_max_positions"]
    rs = {"rope_type": HF_TYPE[t]}
    kw = {}
    max_pos = 4096
    if t == "linear":
        rs["factor"] = s
    elif t == "dynamic_ntk":
        rs["factor"] = s
        max_pos = orig                                  # HF dynamic uses max_position_embeddings as trained ctx
    elif t == "yarn":
        rs["factor"] = s
        rs["beta_fast"], rs["beta_slow"] = c["beta_fast"], c["beta_slow"]
        if c["mscale"] != 1.0 or c["mscale_all_dim"] != 0.0:
            rs["mscale"] = c["mscale"]
        if c["mscale_all_dim"] != 0.0:
            rs["mscale_all_dim"] = c["mscale_all_dim"]
        if c["attention_factor"] != 0.0:
            rs["attention_factor"] = c["attention_factor"]
        if not c["truncate"]:
            rs["truncate"] = False
        if c["_orig_in_rope_scaling"]:
            rs["original_max_position_embeddings"] = orig
            max_pos = int(round(s * orig))              # so that max_pos / original == factor (HF <= 4.54 derives it)
        else:
            max_pos = orig                              # HF falls back to max_position_embeddings as the original
    elif t == "llama3":
        rs.update(factor=s, low_freq_factor=c["low_freq_factor"], high_freq_factor=c["high_freq_factor"],
                  original_max_position_embeddings=orig)
        max_pos = int(round(s * orig))
    elif t == "longrope":
        rs.update(short_factor=list(c["short_factor"]), long_factor=list(c["long_factor"]))
        if c["attention_factor"] != 0.0:
            rs["attention_factor"] = c["attention_factor"]
        if c["_orig_on_config"]:                        # Phi-3 style: factor = max_pos / original (HF derives it)
            kw["original_max_position_embeddings"] = orig
            max_pos = int(round(s * orig))
        else:                                           # original = max_pos, factor from rope_scaling
            rs["factor"] = s
            max_pos = orig
    cfg = PretrainedConfig(rope_theta=c["base"], hidden_size=c["head_dim"] * 4, num_attention_heads=4,
                           head_dim=c["head_dim"], partial_rotary_factor=c["partial_rotary_factor"],
                           max_position_embeddings=max_pos, rope_scaling=None if t == "none" else rs, **kw)
    assert_semantics(c, cfg)
    return cfg


def assert_semantics(c, cfg):
    """Re-derive, the way HF's functions read the config, every quantity our semantics name."""
    t, s, orig = c["type"], c["factor"], c["original_max_positions"]
    dim = int((getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
              * getattr(cfg, "partial_rotary_factor", 1.0))
    assert dim == c["rot_dim"] and dim % 2 == 0, (dim, c)
    assert cfg.rope_theta == c["base"]
    rs = cfg.rope_scaling or {}
    if t in ("linear", "dynamic_ntk", "llama3"):
        assert rs["factor"] == s
    if t == "dynamic_ntk":
        assert cfg.max_position_embeddings == orig
    if t == "llama3":
        assert rs["original_max_position_embeddings"] == orig
    if t == "yarn":
        # newer HF: original = rope_scaling.get(original) or max_pos, factor = rope_scaling["factor"]
        # HF <= 4.54: if original in rope_scaling: factor = max_pos / original, else original = max_pos
        o = rs.get("original_max_position_embeddings") or cfg.max_position_embeddings
        assert o == orig and rs["factor"] == s
        if "original_max_position_embeddings" in rs:
            assert cfg.max_position_embeddings / rs["original_max_position_embeddings"] == s
        assert (rs.get("beta_fast") or 32) == c["beta_fast"] and (rs.get("beta_slow") or 1) == c["beta_slow"]
        assert rs.get("truncate", True) == bool(c["truncate"])
    if t == "longrope":
        o = getattr(cfg, "original_max_position_embeddings", None)
        if o:
            assert o == orig and cfg.max_position_embeddings / o == s
        else:
            assert cfg.max_position_embeddings == orig and rs["factor"] == s
        assert len(rs["short_factor"]) == len(rs["long_factor"]) == dim // 2


# ----------------------------------------------------------------------------------------------------------
# Independent float64 implementation of *our* semantics, used only as a consistency check of the JSON fields
# ----------------------------------------------------------------------------------------------------------

def ours_float64(c):
    d, b, s, o = c["rot_dim"], c["base"], c["factor"], c["original_max_positions"]
    half = d // 2
    default = [b ** (-2.0 * i / d) for i in range(half)]
    t = c["type"]
    if t == "none":
        return default, 1.0
    if t == "linear":
        return [f / s for f in default], 1.0
    if t == "dynamic_ntk":
        L = max(c["seq_len"], o)
        b2 = b * ((s * L / o) - (s - 1)) ** (d / (d - 2))
        return [b2 ** (-2.0 * i / d) for i in range(half)], 1.0
    if t == "yarn":
        def corr(rot):
            return d * math.log(o / (rot * 2 * math.pi)) / (2 * math.log(b))
        lo, hi = corr(c["beta_fast"]), corr(c["beta_slow"])
        if c["truncate"]:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        if lo == hi:
            hi += 0.001
        out = []
        for i in range(half):
            r = min(max((i - lo) / (hi - lo), 0.0), 1.0)   # 0 -> keep (extrapolate), 1 -> divide by s
            out.append(default[i] / s * r + default[i] * (1 - r))
        if c["attention_factor"]:
            a = c["attention_factor"]
        else:
            def gm(m):
                return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            a = gm(c["mscale"]) / gm(c["mscale_all_dim"]) if (c["mscale"] and c["mscale_all_dim"]) else gm(1.0)
        return out, a
    if t == "llama3":
        lf, hf = c["low_freq_factor"], c["high_freq_factor"]
        out = []
        for f in default:
            w = 2 * math.pi / f
            if w < o / hf:
                out.append(f)
            elif w > o / lf:
                out.append(f / s)
            else:
                sm = (o / w - lf) / (hf - lf)
                out.append((1 - sm) * f / s + sm * f)
        return out, 1.0
    if t == "longrope":
        ext = c["long_factor"] if c["seq_len"] > o else c["short_factor"]
        a = c["attention_factor"] or (1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(o)))
        return [f / e for f, e in zip(default, ext)], a
    raise ValueError(t)


def compute(cases):
    out = []
    worst = {}
    for c in cases:
        cfg = hf_config(c)
        fn = ROPE_INIT_FUNCTIONS[HF_TYPE[c["type"]]]
        seq_len = c["seq_len"] if c["type"] in ("dynamic_ntk", "longrope") else None
        inv_freq, attn = fn(cfg, torch.device("cpu"), seq_len=seq_len)
        assert isinstance(inv_freq, torch.Tensor) and inv_freq.shape == (c["rot_dim"] // 2,), inv_freq.shape
        inv = [float(x) for x in inv_freq.to(torch.float64).tolist()]
        attn = float(attn)
        ref, ref_attn = ours_float64(c)
        rel = max(abs(x - y) / abs(y) for x, y in zip(inv, ref))
        assert rel < 1e-5, (c["name"], rel)
        assert abs(attn - ref_attn) <= 1e-12 * abs(ref_attn), (c["name"], attn, ref_attn)
        worst[c["type"]] = max(worst.get(c["type"], 0.0), rel)
        case = {k: v for k, v in c.items() if not k.startswith("_")}
        case["expected"] = {"inv_freq": inv, "attention_factor": attn}
        out.append(case)
    return out, worst, str(inv_freq.dtype)


def dumps_readable(doc):
    """JSON with one line per case field (lists kept on one line); floats use Python's exact repr."""
    head = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "cases")
    cases = ",\n".join(
        " {\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in c.items()) + "\n }"
        for c in doc["cases"])
    text = "{\n" + head + ',\n "cases": [\n' + cases + "\n ]\n}\n"
    assert json.loads(text) == doc
    return text


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "hf_rope_scaling.json"))
    ap.add_argument("--check", metavar="JSON", help="compare against an existing JSON instead of writing")
    args = ap.parse_args()

    cases = make_cases()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    computed, worst, dtype = compute(cases)
    doc = {
        "generator": "tools/gen_rope_scaling_ref.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "note": ("inv_freq computed by HF in float32 (" + dtype + ", printed as exact float64 repr); "
                 "attention_factor is a float64 Python scalar. Compare inv_freq with a relative tolerance "
                 "(HF float32 vs exact float64 math differ by up to %.2g relative here). "
                 "yarn: mscale=1.0/mscale_all_dim=0.0/attention_factor=0.0 mean unset; HF uses mscale only when "
                 "mscale_all_dim is non-zero. seq_len is 0 for types that ignore it."
                 % max(worst.values())),
        "torch_injected_into_transformers": TORCH_INJECTED,
        "cases": computed,
    }
    for t, w in worst.items():
        print(f"{t:12s} max rel diff HF(float32) vs float64 semantics: {w:.3g}", file=sys.stderr)
    if args.check:
        with open(args.check) as f:
            old = json.load(f)
        oldc = {c["name"]: c for c in old["cases"]}
        bad = 0
        for c in computed:
            o = oldc.get(c["name"])
            if o is None:
                print("missing in old:", c["name"], file=sys.stderr)
                continue
            if o["expected"] != c["expected"]:
                bad += 1
                print("DIFFERS:", c["name"], file=sys.stderr)
        print(f"checked {len(computed)} cases, {bad} differ", file=sys.stderr)
        return 1 if bad else 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(dumps_readable(doc))
    counts = {}
    for c in computed:
        counts[c["type"]] = counts.get(c["type"], 0) + 1
    print(f"wrote {len(computed)} cases to {os.path.normpath(args.out)}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
