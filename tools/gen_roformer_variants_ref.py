#!/usr/bin/env python3
# Generates reference cases for two RoFormer variants that Hugging Face transformers does not implement,
# in the format of the shared HF fixtures (../shared/fixtures/roformer-hf/README.md: config.json,
# model.safetensors with HF-style names, io.safetensors with inputs and reference outputs):
#
#   tests/testdata/roformer_v2/   RoFormer-V2 masked LM (norm_type "rms_norm", use_bias false, relu)
#   tests/testdata/roformer_sim/  RoFormer-Sim (SimBERT v2): UniLM seq2seq mask from token_type_ids, a pooler,
#                             and the V1 MLM head
#
# The models are written here in plain PyTorch from their published definitions:
#
# * RoFormer-V2 (Su Jianlin, 2022; https://github.com/ZhuiyiTechnology/roformer-v2):
#   - bert4keras >= 0.11 `RoFormerV2` (bert4keras/models.py, https://github.com/bojone/bert4keras; read here
#     in the copy that bert4keras3 keeps in Models/Roformers.py), with bert4keras/layers.py
#     LayerNormalization (epsilon defaults to 1e-12): embeddings =
#     Embedding-Token + Embedding-Segment (no position embedding), Embedding-Dropout, then
#     LayerNormalization(zero_mean=False, scale=False, offset=False), i.e. x / sqrt(mean(x^2) + 1e-12);
#     MultiHeadAttention and FeedForward with use_bias=False and RoPE on
#     q and k; post-norm blocks (Att -> Add -> Norm -> FFN -> Add -> Norm) with the same parameter-free norm;
#     the MLM output is the tied Embedding-Token in 'dense' mode (x . W_word^T), no dense/LayerNorm/bias
#     (bert4keras adds a bias-free 'Output-Mapping' Dense H->E first when embedding_size != hidden_size).
#   - junnyu's `roformer` package 0.4.3 (PyPI; https://github.com/JunnYu/RoFormer_pytorch,
#     roformer/modeling_roformer.py), whose parameter names the V2 checkpoints junnyu/roformer_v2_chinese_char_*
#     use and which this generator follows exactly:
#       `Norm(eps=config.layer_norm_eps)`: x / torch.sqrt(torch.mean(x**2, -1, keepdim=True) + eps), used for
#       embeddings.LayerNorm / attention.output.LayerNorm / output.LayerNorm when norm_type != "layer_norm"
#       (so no LayerNorm tensors exist); every q/k/v/output/intermediate/output Linear is
#       nn.Linear(..., bias=config.use_bias); the MLM head for norm_type != "layer_norm" is
#       `RoFormerV2LMPredictionHead`: only `decoder = nn.Linear(embedding_size, vocab_size, bias=False)`, tied
#       to roformer.embeddings.word_embeddings.weight (no transform, no cls.predictions.bias).
#       With embedding_size != hidden_size junnyu's V2 is not usable: `embeddings_project` is
#       nn.Linear(E, H) *with* a bias whatever use_bias says, and the head applies Linear(E, V) to the
#       H-wide encoder output, which raises a shape error. All published V2 checkpoints have E == H
#       (roformer_v2_chinese_char_{small,base,large}), so this generator only accepts E == H for V2.
#     eps: config.layer_norm_eps, which the published V2 configs set to 1e-12 (bert4keras' default). This
#     case uses layer_norm_eps = 0.01 on purpose, so that a C++ RMS norm that ignores the configured eps (or
#     adds it outside the square root) is caught; the formula is the same.
#     Published V2 config fields (huggingface.co/junnyu/roformer_v2_chinese_char_base/config.json):
#     "norm_type": "rms_norm", "use_bias": false, "hidden_act": "relu", "rotary_value": false,
#     "layer_norm_eps": 1e-12, "embedding_size" == "hidden_size".
#
# * RoFormer-Sim (https://github.com/ZhuiyiTechnology/roformer-sim):
#   bert4keras `build_transformer_model(..., model='roformer', application='unilm', with_pool='linear')`;
#   sentence vectors are `outputs[0]`, the pooler output (Dense H->H with bias, linear activation, on the
#   position-0 [CLS] state), computed with all segment ids 0.
#   - UniLM mask: bert4keras `UniLM_Mask.compute_attention_bias` (bert4keras/models.py): idxs = cumsum(segment_ids, axis=1);
#     mask = idxs[:, None, :] <= idxs[:, :, None]  (query i may attend key j iff idxs[j] <= idxs[i]), added
#     as -(1 - mask) * 1e12; the key padding mask (bert4keras masks token id 0) is applied on top. Here both
#     are combined into one boolean `allowed` and disallowed scores get torch.finfo(float32).min added, as in
#     the HF fixtures. With all segment ids 0 this is the plain bidirectional encoder; with all 1 it is the
#     causal mask.
#   - junnyu's package: `RoFormerForCausalLM` builds `RoFormerModel(config, add_pooling_layer=True)`;
#     `RoFormerPooler`: dense = nn.Linear(H, H) (always with bias), activation ACT2FN[config.pooler_activation]
#     on hidden_states[:, 0] -> tensors roformer.pooler.dense.weight / roformer.pooler.dense.bias. The head is
#     `RoFormerLMPredictionHead` (norm_type "layer_norm"), identical to HF's. The published config
#     (huggingface.co/junnyu/roformer_chinese_sim_char_base, commit 490fc08) adds "architectures":
#     ["RoFormerForCausalLM"], "is_decoder": true, "eos_token_id": 102, "pooler_activation": "linear" to the
#     V1 fields (and its README example uses `outputs.pooler_output` as the sentence vector).
#     NOTE junnyu's full-sequence forward (no past_key_values, 2-D attention_mask) is bidirectional even with
#     is_decoder true; the UniLM pattern only arises in its generation loop (segment A encoded with token type
#     0, then each new token, token type 1, attends to the cache and itself), which is exactly the UniLM
#     mask applied to the whole sequence. A 3-D attention_mask is passed through unchanged, which is how the
#     junnyu cross-check below feeds it the UniLM mask. HF transformers' own RoFormerModel would instead
#     use a causal mask for is_decoder true.
#
# Everything else (interleaved RoPE with the HF sinusoidal table, softmax attention, post-LN, exact-erf GELU,
# MLM transform) is as in the HF fixtures' README.
#
# Weights are drawn like the HF fixtures: torch.manual_seed(seed), then every parameter redrawn in module
# order from a torch.Generator seeded with the same seed: LayerNorm weight 1 + 0.2 N(0,1), biases 0.1 N(0,1),
# embedding tables 0.25 N(0,1), other matrices N(0,1)/sqrt(fan_in); inputs are drawn from the same generator
# afterwards. The rotary table is not stored in model.safetensors (junnyu's models list
# roformer.encoder.embed_positions.weight in _keys_to_ignore_on_save and the published checkpoints lack it);
# io.safetensors carries the rows used as `sinusoidal_pos`.
#
# Self-checks (run every time, before anything is written; any failure aborts):
#   1. The generic model here with norm_type "layer_norm", use_bias true, gelu (V1) equals transformers'
#      RoFormerForMaskedLM on the same weights (E == H and E != H), if transformers is importable.
#   2. The Sim model with all token_type_ids 0 equals the plain bidirectional encoder (mask off), and that
#      encoder equals transformers' RoFormerModel on the Sim weights.
#   3. If junnyu's package is importable (--junnyu-path DIR, DIR holding the unpacked wheel's `roformer/`):
#      the V2 case equals junnyu's RoFormerForMaskedLM; the Sim case equals junnyu's RoFormerForCausalLM fed
#      the UniLM mask as a 3-D attention_mask (logits, hidden states, attentions, pooler), and with all
#      token_type_ids 0 and the 2-D mask (its own bidirectional first pass).
#
# Command (from the repository root; build/hf-venv = python3 -m venv --system-site-packages over Debian's
# torch 1.13, with transformers==4.40.2 and safetensors==0.4.3):
#   build/hf-venv/bin/pip download roformer==0.4.3 --no-deps -d /tmp/rf
#   python3 -m zipfile -e /tmp/rf/roformer-0.4.3-py3-none-any.whl /tmp/rf/x
#   OMP_NUM_THREADS=1 build/hf-venv/bin/python tools/gen_roformer_variants_ref.py --junnyu-path /tmp/rf/x
# (options: --out-dir DIR (default tests/testdata), --check: regenerate in memory and compare with the files
# there instead of writing, --no-hf / --no-junnyu to skip those cross-checks)
# The committed files were produced with torch 1.13.0a0 (Debian python3-torch 1.13.1), transformers 4.40.2,
# safetensors 0.4.3, roformer 0.4.3, Python 3.11.2, CPU, float32.

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

torch.set_num_threads(1)
FMIN = torch.finfo(torch.float32).min
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4

# ----------------------------------------------------------------------------------------------------------
# Model (module tree mirrors the HF / junnyu parameter names)


def _ln(n, eps):
    return nn.LayerNorm(n, eps=eps)


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["embedding_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["embedding_size"])
        if c["norm_type"] == "layer_norm":
            self.LayerNorm = _ln(c["embedding_size"], c["layer_norm_eps"])


class SelfAttn(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, b = c["hidden_size"], c["use_bias"]
        self.query, self.key, self.value = nn.Linear(H, H, bias=b), nn.Linear(H, H, bias=b), nn.Linear(H, H, bias=b)


class DenseNorm(nn.Module):
    def __init__(self, c, n_in, n_out):
        super().__init__()
        self.dense = nn.Linear(n_in, n_out, bias=c["use_bias"])
        if c["norm_type"] == "layer_norm":
            self.LayerNorm = _ln(n_out, c["layer_norm_eps"])


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttn(c)
        self.output = DenseNorm(c, c["hidden_size"], c["hidden_size"])


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=c["use_bias"])


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseNorm(c, c["intermediate_size"], c["hidden_size"])


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])  # junnyu: always with bias


class Backbone(nn.Module):
    def __init__(self, c, with_pooler):
        super().__init__()
        self.embeddings = Embeddings(c)
        if c["embedding_size"] != c["hidden_size"]:
            # junnyu / HF: nn.Linear(E, H) with a bias (junnyu ignores use_bias here).
            self.embeddings_project = nn.Linear(c["embedding_size"], c["hidden_size"])
        self.encoder = Encoder(c)
        if with_pooler:
            self.pooler = Pooler(c)


class Transform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["embedding_size"])
        self.LayerNorm = _ln(c["embedding_size"], c["layer_norm_eps"])


class Predictions(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transform = Transform(c)
        self.bias = nn.Parameter(torch.zeros(c["vocab_size"]))


class Cls(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.predictions = Predictions(c)


def act_fn(name):
    return {"gelu": F.gelu, "relu": F.relu, "tanh": torch.tanh, "linear": lambda x: x}[name]


def rope_table(n_pos, d):
    """HF RoFormerSinusoidalPositionalEmbedding: float64 angles, rounded to float32; [sin | cos]."""
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for pos in range(n_pos)])
    out = torch.empty(n_pos, d)
    out[:, : d // 2] = torch.FloatTensor(np.sin(enc[:, 0::2]))
    out[:, d // 2:] = torch.FloatTensor(np.cos(enc[:, 1::2]))
    return out


def apply_rope(x, sin, cos):
    # x [B, n, T, D]; sin/cos [T, D/2]; adjacent pairs (2i, 2i+1) rotated by theta_i (junnyu's formulation).
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2, -1)


class Variant(nn.Module):
    """RoFormer V1 / V2 / Sim.  c: config dict (HF/junnyu field names, plus defaults filled in)."""

    def __init__(self, c, with_pooler=False):
        super().__init__()
        self.c = c
        if c["norm_type"] != "layer_norm":
            assert c["norm_type"] == "rms_norm", c["norm_type"]
            assert c["embedding_size"] == c["hidden_size"], "RoFormer-V2 (junnyu) needs embedding_size == hidden_size"
        self.roformer = Backbone(c, with_pooler)
        if c["norm_type"] == "layer_norm":
            self.cls = Cls(c)

    def norm(self, x, mod):
        c = self.c
        if c["norm_type"] == "layer_norm":
            return F.layer_norm(x, (x.shape[-1],), mod.LayerNorm.weight, mod.LayerNorm.bias, c["layer_norm_eps"])
        # junnyu Norm / bert4keras LayerNormalization(zero_mean=False, scale=False, offset=False)
        return x / torch.sqrt(torch.mean(torch.square(x), dim=-1, keepdim=True) + c["layer_norm_eps"])

    def forward(self, input_ids, token_type_ids, attention_mask, unilm):
        c, r = self.c, self.roformer
        B, T = input_ids.shape
        n = c["num_attention_heads"]
        D = c["hidden_size"] // n
        act = act_fn(c["hidden_act"])
        out = {}

        e = r.embeddings.word_embeddings.weight[input_ids] + r.embeddings.token_type_embeddings.weight[token_type_ids]
        e = self.norm(e, r.embeddings)
        out["embedding_output"] = e
        h = r.embeddings_project(e) if hasattr(r, "embeddings_project") else e

        table = rope_table(c["max_position_embeddings"], D)[:T]
        out["sinusoidal_pos"] = table
        sin, cos = table[:, : D // 2], table[:, D // 2:]

        allowed = attention_mask.bool()[:, None, :].expand(B, T, T)  # [b, query, key]
        if unilm:  # bert4keras UniLM_Mask
            idxs = torch.cumsum(token_type_ids, dim=1)
            allowed = allowed & (idxs[:, None, :] <= idxs[:, :, None])
        bias = torch.zeros(B, 1, T, T).masked_fill(~allowed[:, None], FMIN)

        hs, atts = [h], []
        for L in r.encoder.layer:
            sa = L.attention.self
            split = lambda x: x.view(B, T, n, D).permute(0, 2, 1, 3)
            q, k, v = split(sa.query(h)), split(sa.key(h)), split(sa.value(h))
            q, k = apply_rope(q, sin, cos), apply_rope(k, sin, cos)
            if c["rotary_value"]:
                v = apply_rope(v, sin, cos)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D) + bias
            p = torch.softmax(scores, dim=-1)
            atts.append(p)
            ctx = torch.matmul(p, v).permute(0, 2, 1, 3).reshape(B, T, n * D)
            a = self.norm(h + L.attention.output.dense(ctx), L.attention.output)
            f = L.output.dense(act(L.intermediate.dense(a)))
            h = self.norm(a + f, L.output)
            hs.append(h)

        out["hidden_states"] = torch.stack(hs)
        out["attentions"] = torch.stack(atts)
        out["last_hidden_state"] = h
        W = r.embeddings.word_embeddings.weight
        if c["norm_type"] == "layer_norm":
            t = self.cls.predictions.transform
            x = F.layer_norm(act(t.dense(h)), (c["embedding_size"],), t.LayerNorm.weight, t.LayerNorm.bias,
                             c["layer_norm_eps"])
            out["logits"] = torch.matmul(x, W.t()) + self.cls.predictions.bias
        else:  # RoFormerV2LMPredictionHead: tied decoder only (E == H)
            out["logits"] = torch.matmul(h, W.t())
        if hasattr(r, "pooler"):
            z = r.pooler.dense(h[:, 0])
            out["pooler_pre_activation"] = z
            out["pooler_output"] = act_fn(c.get("pooler_activation", "tanh"))(z)
        return out


# ----------------------------------------------------------------------------------------------------------
# Weights and inputs


def draw_weights(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embeddings.word_embeddings" in name or "token_type_embeddings" in name:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
            else:
                assert p.dim() == 2, name
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def draw_inputs(g, c, lengths, seg_a):
    """[CLS] A.. [SEP] B.. [SEP] [PAD]..; token type 0 for A (with [CLS] and its [SEP]), 1 for B, 0 on padding."""
    B, T = len(lengths), max(lengths)
    ids = torch.randint(5, c["vocab_size"], (B, T), generator=g)
    tt = torch.zeros(B, T, dtype=torch.long)
    am = torch.zeros(B, T, dtype=torch.long)
    for b, (n, a) in enumerate(zip(lengths, seg_a)):
        assert 2 <= a < n
        ids[b, 0] = CLS
        ids[b, a - 1] = SEP
        ids[b, n - 1] = SEP
        ids[b, n:] = PAD
        tt[b, a:n] = 1
        am[b, :n] = 1
    return ids, tt, am


# ----------------------------------------------------------------------------------------------------------
# Cases

BASE = {
    "vocab_size": 97, "embedding_size": 32, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2, "pad_token_id": 0,
    "rotary_value": False, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}

V2 = dict(BASE, seed=20240804, hidden_act="relu", layer_norm_eps=0.01, norm_type="rms_norm", use_bias=False,
          lengths=[12, 8, 12], seg_a=[6, 4, 12 - 5])
SIM = dict(BASE, seed=20240905, hidden_act="gelu", layer_norm_eps=1e-12, norm_type="layer_norm", use_bias=True,
           pooler_activation="linear", lengths=[12, 9, 12], seg_a=[5, 4, 8])

CONFIG_KEYS = ["attention_probs_dropout_prob", "embedding_size", "hidden_act", "hidden_dropout_prob", "hidden_size",
               "initializer_range", "intermediate_size", "layer_norm_eps", "max_position_embeddings",
               "num_attention_heads", "num_hidden_layers", "pad_token_id", "rotary_value", "type_vocab_size",
               "vocab_size"]


def config_json(case, kind):
    j = {k: case[k] for k in CONFIG_KEYS}
    j["model_type"] = "roformer"
    j["torch_dtype"] = "float32"
    j["use_cache"] = True
    if kind == "v2":  # as junnyu/roformer_v2_chinese_char_base
        j["architectures"] = ["RoFormerForMaskedLM"]
        j["norm_type"] = "rms_norm"
        j["use_bias"] = False
    else:  # as junnyu/roformer_chinese_sim_char_base
        j["architectures"] = ["RoFormerForCausalLM"]
        j["directionality"] = "bidi"
        j["is_decoder"] = True
        j["eos_token_id"] = SEP
        j["pooler_activation"] = case["pooler_activation"]
    return json.dumps(dict(sorted(j.items())), indent=2) + "\n"


def build(case, kind):
    torch.manual_seed(case["seed"])
    model = Variant(case, with_pooler=(kind == "sim")).eval()
    g = torch.Generator().manual_seed(case["seed"])
    draw_weights(model, g)
    ids, tt, am = draw_inputs(g, case, case["lengths"], case["seg_a"])
    return model, ids, tt, am


def run_case(case, kind):
    model, ids, tt, am = build(case, kind)
    with torch.no_grad():
        o = model(ids, tt, am, unilm=(kind == "sim"))
        io = {"input_ids": ids, "token_type_ids": tt, "attention_mask": am}
        for k in ["embedding_output", "hidden_states", "attentions", "last_hidden_state", "logits", "sinusoidal_pos"]:
            io[k] = o[k].contiguous()
        if kind == "sim":
            io["pooler_output"] = o["pooler_output"].contiguous()
            io["pooler_output_tanh"] = torch.tanh(o["pooler_pre_activation"]).contiguous()
            o0 = model(ids, torch.zeros_like(tt), am, unilm=True)  # sentence-vector mode: all segment ids 0
            io["pooler_output_tt0"] = o0["pooler_output"].contiguous()
    weights = {n: p.detach().clone().contiguous() for n, p in model.state_dict().items()}
    return model, io, weights, o


# ----------------------------------------------------------------------------------------------------------
# Checks


def maxdiff(a, b):
    a, b = a.detach().float(), b.detach().float()
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def expect_close(what, a, b, tol=2e-5, rel=2e-5):
    a, b = a.detach().float(), b.detach().float()
    d = maxdiff(a, b)
    lim = tol + rel * b.abs().max().item()
    print(f"  {what}: max |diff| {d:.3g} (limit {lim:.3g})")
    if not d <= lim:
        raise SystemExit(f"CHECK FAILED: {what}")


def check_hf_v1():
    try:
        import transformers
        from transformers import RoFormerConfig, RoFormerForMaskedLM
    except Exception as e:  # pragma: no cover
        print(f"check 1 skipped: transformers not importable ({e})")
        return
    print(f"check 1: generic model (layer_norm, use_bias, gelu) vs transformers {transformers.__version__} "
          "RoFormerForMaskedLM")
    for E, rv in [(32, False), (24, True)]:
        case = dict(BASE, seed=7 + E, hidden_act="gelu", layer_norm_eps=1e-12, norm_type="layer_norm", use_bias=True,
                    embedding_size=E, rotary_value=rv, lengths=[12, 8, 12], seg_a=[6, 4, 7])
        model, ids, tt, am = build(case, "v1")
        hc = RoFormerConfig(**{k: case[k] for k in CONFIG_KEYS})
        hf = RoFormerForMaskedLM(hc).eval()
        sd = dict(model.state_dict())
        sd["roformer.encoder.embed_positions.weight"] = hf.state_dict()["roformer.encoder.embed_positions.weight"]
        sd["cls.predictions.decoder.weight"] = sd["roformer.embeddings.word_embeddings.weight"]
        sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
        missing, unexpected = hf.load_state_dict(sd, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        expect_close(f"E={E} rotary table", hf.roformer.encoder.embed_positions.weight[:12], rope_table(64, 8)[:12], 0, 0)
        with torch.no_grad():
            o = model(ids, tt, am, unilm=False)
            r = hf(input_ids=ids, token_type_ids=tt, attention_mask=am, output_hidden_states=True,
                   output_attentions=True)
            emb = hf.roformer.embeddings(input_ids=ids, token_type_ids=tt)
        expect_close(f"E={E} rotary_value={rv} embedding_output", o["embedding_output"], emb)
        expect_close(f"E={E} hidden_states", o["hidden_states"], torch.stack(r.hidden_states))
        expect_close(f"E={E} attentions", o["attentions"], torch.stack(r.attentions))
        expect_close(f"E={E} logits", o["logits"], r.logits)


def check_sim_bidirectional(sim_model, ids, am):
    print("check 2: Sim with all token_type_ids 0 == the plain bidirectional encoder")
    tt0 = torch.zeros_like(ids)
    with torch.no_grad():
        a = sim_model(ids, tt0, am, unilm=True)
        b = sim_model(ids, tt0, am, unilm=False)
    for k in ["hidden_states", "attentions", "logits", "pooler_output"]:
        d = maxdiff(a[k], b[k])
        print(f"  {k}: max |diff| {d:.3g} (must be 0)")
        if d != 0:
            raise SystemExit(f"CHECK FAILED: Sim tt=0 {k}")
    try:
        from transformers import RoFormerConfig, RoFormerModel
    except Exception as e:  # pragma: no cover
        print(f"  transformers part skipped ({e})")
        return
    hf = RoFormerModel(RoFormerConfig(**{k: SIM[k] for k in CONFIG_KEYS})).eval()
    sd = {k[len("roformer."):]: v for k, v in sim_model.state_dict().items()
          if k.startswith("roformer.") and ".pooler." not in k}
    sd["encoder.embed_positions.weight"] = hf.state_dict()["encoder.embed_positions.weight"]
    hf.load_state_dict(sd, strict=True)
    with torch.no_grad():
        r = hf(input_ids=ids, token_type_ids=tt0, attention_mask=am, output_hidden_states=True, output_attentions=True)
    expect_close("vs transformers RoFormerModel hidden_states", a["hidden_states"], torch.stack(r.hidden_states))
    expect_close("vs transformers RoFormerModel attentions", a["attentions"], torch.stack(r.attentions))


def check_junnyu(v2_model, v2_in, sim_model, sim_in):
    try:
        import roformer as jr
    except Exception as e:
        print(f"check 3 skipped: junnyu's roformer package not importable ({e}); pass --junnyu-path")
        return
    print(f"check 3: vs junnyu's roformer package ({os.path.dirname(jr.__file__)})")

    def load(jm, model, extra_tied):
        sd = dict(model.state_dict())
        sd["roformer.encoder.embed_positions.weight"] = jm.state_dict()["roformer.encoder.embed_positions.weight"]
        sd["cls.predictions.decoder.weight"] = sd["roformer.embeddings.word_embeddings.weight"]
        if extra_tied:
            sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
        jm.load_state_dict(sd, strict=True)

    # V2
    jc = jr.RoFormerConfig(**{k: V2[k] for k in CONFIG_KEYS}, norm_type="rms_norm", use_bias=False)
    jm = jr.RoFormerForMaskedLM(jc).eval()
    load(jm, v2_model, extra_tied=False)
    ids, tt, am = v2_in
    with torch.no_grad():
        o = v2_model(ids, tt, am, unilm=False)
        r = jm(input_ids=ids, token_type_ids=tt, attention_mask=am, output_hidden_states=True, output_attentions=True)
    expect_close("V2 hidden_states", o["hidden_states"], torch.stack(r.hidden_states))
    expect_close("V2 attentions", o["attentions"], torch.stack(r.attentions))
    expect_close("V2 logits", o["logits"], r.logits)

    # Sim
    jc = jr.RoFormerConfig(**{k: SIM[k] for k in CONFIG_KEYS}, is_decoder=True, pooler_activation="linear")
    jm = jr.RoFormerForCausalLM(jc).eval()
    load(jm, sim_model, extra_tied=True)
    ids, tt, am = sim_in
    idxs = torch.cumsum(tt, dim=1)
    mask3 = ((idxs[:, None, :] <= idxs[:, :, None]) & am.bool()[:, None, :]).float()
    with torch.no_grad():
        o = sim_model(ids, tt, am, unilm=True)
        r = jm(input_ids=ids, token_type_ids=tt, attention_mask=mask3, output_hidden_states=True,
               output_attentions=True, use_cache=False)
    expect_close("Sim (3-D UniLM mask) hidden_states", o["hidden_states"], torch.stack(r.hidden_states))
    expect_close("Sim attentions", o["attentions"], torch.stack(r.attentions))
    expect_close("Sim logits", o["logits"], r.logits)
    expect_close("Sim pooler_output (linear)", o["pooler_output"], r.pooler_output)
    tt0 = torch.zeros_like(tt)
    with torch.no_grad():
        o = sim_model(ids, tt0, am, unilm=True)
        r = jm(input_ids=ids, token_type_ids=tt0, attention_mask=am, use_cache=False)
    expect_close("Sim tt=0, 2-D mask: logits", o["logits"], r.logits)
    expect_close("Sim tt=0, 2-D mask: pooler_output", o["pooler_output"], r.pooler_output)


# ----------------------------------------------------------------------------------------------------------
# Output


README_V2 = """# RoFormer-V2 reference case

Written by tools/gen_roformer_variants_ref.py (see its header for the definition, sources and command).
Format as the shared HF fixtures (../shared/fixtures/roformer-hf/README.md from the repository root):
safetensors, F32/I64, fp32 CPU eval.
Seed {seed}. Config: {cfg}.
Inputs: batch 3, seq_len 12, valid lengths {lengths}, segment B starts at {seg_a} (token_type_ids 1 there up to
the valid length, 0 elsewhere).

Model: embeddings = rms(word_emb[ids] + token_type_emb[tt]) (no positions, no LayerNorm tensors), where
rms(x) = x / sqrt(mean(x^2) + layer_norm_eps) over the last axis, no weight or bias (layer_norm_eps = 0.01 here,
published V2 checkpoints use 1e-12). Blocks (post-norm, no biases anywhere): q, k, v = h W^T; RoPE on q and k
(interleaved pairs, HF sinusoidal table; v too only if rotary_value); softmax(q k^T / sqrt(d) + mask) v;
a = rms(h + ctx Wo^T); h' = rms(a + relu(a W1^T) W2^T). MLM logits = h' . word_emb^T (no transform, no bias).
embedding_size == hidden_size (required: junnyu's V2 head cannot handle E != H).

io.safetensors: input_ids, token_type_ids, attention_mask [3,12] I64; embedding_output [3,12,32];
hidden_states [3,3,12,32] (0 = encoder input); attentions [2,3,4,12,12] ([layer, batch, head, query, key]);
last_hidden_state [3,12,32]; logits [3,12,97]; sinusoidal_pos [12,8] (sin | cos rows of the rotary table).
model.safetensors: roformer.embeddings.{{word,token_type}}_embeddings.weight and
roformer.encoder.layer.{{i}}.{{attention.self.{{query,key,value}},attention.output.dense,intermediate.dense,output.dense}}.weight
only (no bias, no LayerNorm, no cls.*, no embed_positions: the decoder is tied to the word embeddings).
"""

README_SIM = """# RoFormer-Sim reference case

Written by tools/gen_roformer_variants_ref.py (see its header for the definition, sources and command).
Format as the shared HF fixtures (../shared/fixtures/roformer-hf/README.md from the repository root):
safetensors, F32/I64, fp32 CPU eval.
Seed {seed}. Config: {cfg}.
Inputs: batch 3, seq_len 12, valid lengths {lengths}; each row is [CLS] A.. [SEP] B.. [SEP] [PAD]..,
segment B starts at {seg_a} (token_type_ids 1 from there to the valid length, 0 elsewhere incl. padding).

Model: HF RoFormer V1 (LayerNorm, biases, gelu, V1 MLM head) with
* the UniLM mask (bert4keras UniLM_Mask): idxs = cumsum(token_type_ids, axis=1); query i may attend key j iff
  idxs[j] <= idxs[i] and attention_mask[j] == 1; other scores get finfo(float32).min added.
  Segment A attends bidirectionally within A; a segment-B token attends to all of A and to B up to itself.
  Padded query rows (token type 0, idxs = row maximum) attend every real key.
* a pooler: pooler_output = act(roformer.pooler.dense(last_hidden_state[:, 0])), act = config
  pooler_activation ("linear" as in junnyu/roformer_chinese_sim_char_base; junnyu's default is "tanh").

io.safetensors: as the HF fixtures (input_ids, token_type_ids, attention_mask I64; embedding_output,
hidden_states [3,3,12,32], attentions [2,3,4,12,12], last_hidden_state, logits [3,12,97], sinusoidal_pos [12,8])
plus pooler_output [3,32] (linear, with the UniLM mask above), pooler_output_tanh [3,32] (tanh of the same
pre-activation, for pooler_activation "tanh"), pooler_output_tt0 [3,32] (linear pooler with token_type_ids all 0,
i.e. the bidirectional encoder: how Sim computes sentence vectors).
model.safetensors: the HF RoFormerForMaskedLM tensors (no embed_positions, tied decoder not stored) plus
roformer.pooler.dense.weight [32,32] and roformer.pooler.dense.bias [32].
"""


def save(path, tensors):
    from safetensors.torch import save_file
    save_file(tensors, path, metadata={"format": "pt"})


def write_or_check(out_dir, name, files, check):
    d = os.path.join(out_dir, name)
    if check:
        from safetensors.torch import load_file
        for fn, content in files.items():
            p = os.path.join(d, fn)
            if fn.endswith(".safetensors"):
                old = load_file(p)
                assert sorted(old) == sorted(content), (p, sorted(old), sorted(content))
                for k in content:
                    assert old[k].dtype == content[k].dtype and torch.equal(old[k], content[k]), (p, k)
            else:
                with open(p) as f:
                    assert f.read() == content, p
        print(f"{d}: identical")
        return
    os.makedirs(d, exist_ok=True)
    for fn, content in files.items():
        p = os.path.join(d, fn)
        if fn.endswith(".safetensors"):
            save(p, content)
        else:
            with open(p, "w") as f:
                f.write(content)
        print(f"wrote {p} ({os.path.getsize(p)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    ap.add_argument("--junnyu-path", help="directory holding junnyu's `roformer` package (unpacked 0.4.3 wheel)")
    ap.add_argument("--check", action="store_true", help="compare with the existing files instead of writing")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-junnyu", action="store_true")
    args = ap.parse_args()
    if args.junnyu_path:
        sys.path.insert(0, args.junnyu_path)

    v2_model, v2_io, v2_w, _ = run_case(V2, "v2")
    sim_model, sim_io, sim_w, _ = run_case(SIM, "sim")

    if not args.no_hf:
        check_hf_v1()
    check_sim_bidirectional(sim_model, sim_io["input_ids"], sim_io["attention_mask"])
    if not args.no_junnyu:
        check_junnyu(v2_model, (v2_io["input_ids"], v2_io["token_type_ids"], v2_io["attention_mask"]),
                     sim_model, (sim_io["input_ids"], sim_io["token_type_ids"], sim_io["attention_mask"]))

    # Sanity on the Sim mask: B tokens must not see later B tokens; every query row has a real key.
    a = sim_io["attentions"]
    tt, am = sim_io["token_type_ids"], sim_io["attention_mask"]
    for b in range(tt.shape[0]):
        for i in range(tt.shape[1]):
            for j in range(tt.shape[1]):
                if am[b, j] == 0 or (tt[b, j] == 1 and j > i):
                    assert (a[:, b, :, i, j] == 0).all(), (b, i, j)

    def cfg_summary(case):
        keys = ["vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps"]
        return ", ".join(f"`{k}={case[k]!r}`" for k in keys)

    write_or_check(args.out_dir, "roformer_v2", {
        "config.json": config_json(V2, "v2"),
        "model.safetensors": v2_w,
        "io.safetensors": v2_io,
        "README.md": README_V2.format(seed=V2["seed"], cfg=cfg_summary(V2) + ", `norm_type=\"rms_norm\"`, `use_bias=false`",
                                      lengths=V2["lengths"], seg_a=V2["seg_a"]),
    }, args.check)
    write_or_check(args.out_dir, "roformer_sim", {
        "config.json": config_json(SIM, "sim"),
        "model.safetensors": sim_w,
        "io.safetensors": sim_io,
        "README.md": README_SIM.format(seed=SIM["seed"], cfg=cfg_summary(SIM) + ", `is_decoder=true`, "
                                       "`pooler_activation=\"linear\"`", lengths=SIM["lengths"], seg_a=SIM["seg_a"]),
    }, args.check)


if __name__ == "__main__":
    main()
