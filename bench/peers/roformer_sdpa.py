"""A RoFormer encoder in plain PyTorch 2.x whose attention is torch.nn.functional.scaled_dot_product_attention
(SDPA: on the CPU its flash kernel, O(T) memory), loading the weights of a Hugging Face RoFormer directory.

It computes what transformers' RoFormerModel computes (last_hidden_state; tests/hf/sdpa_vs_hf.py checks
it to 1e-4 in fp32), with the same module names, so an HF model.safetensors loads as it is:
  embeddings: word + token type embeddings, LayerNorm (no position embeddings: RoPE carries positions);
  embeddings_project: Linear(embedding_size, hidden_size) when the two differ;
  per layer: q, k, v = Linear(x); RoFormer's sinusoidal rotary on q and k (and v with rotary_value), the
  rotation of RoFormerSelfAttention.apply_rotary_position_embeddings (interleaved pairs (2i, 2i+1) rotated
  by pos * 10000^(-2i/d)) written as a complex product (view_as_complex: PyTorch's fastest formulation in
  bench/peers/rope_torch.py, 4 to 50 times faster here than transformers' stack of strided halves, and
  equal to it in fp32 to rounding); SDPA with the padding mask; output dense + residual LayerNorm; the activation
  FFN + residual LayerNorm.
Shapes: ids (B, T) -> hidden (B, T, hidden); q, k, v (B, heads, T, head_dim) as transformers lays them out.

    from roformer_sdpa import load_roformer_sdpa
    model = load_roformer_sdpa("build/bench/roformer-base")         # config.json + model.safetensors
    with torch.inference_mode():
        hidden = model(ids, attention_mask=mask, token_type_ids=types)  # (B, T, hidden)

Needs torch >= 2.0 (SDPA) and safetensors; not transformers.
"""
import json
import math
import os

import torch
from torch import nn
import torch.nn.functional as F

ACTIVATIONS = {  # config.hidden_act -> function, as transformers' ACT2FN
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


def _container(**children):
    m = nn.Module()
    for name, child in children.items():
        setattr(m, name, child)
    return m


def rotary_table(max_positions, head_dim):
    """(P, d/2) complex64 cos + i sin of pos / 10000^(2i/d), the angles computed in float64 and cos, sin
    rounded to float32, as RoFormerSinusoidalPositionalEmbedding makes its table."""
    pos = torch.arange(max_positions, dtype=torch.float64)[:, None]
    j = torch.arange(head_dim // 2, dtype=torch.float64)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2 * j / head_dim)  # (P, d/2)
    return torch.complex(torch.cos(angle).float(), torch.sin(angle).float())


def rotate(x, table):
    """x (..., T, d), any strides with the last one 1, rotated in pairs: (x0, x1) -> (x0 cos - x1 sin,
    x1 cos + x0 sin), table (T, d/2) from rotary_table. In float32 (as transformers' fp32 table makes
    it under bf16 autocast), returned contiguous in x's dtype."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (x.shape[-1] // 2, 2)))
    return torch.view_as_real(pairs * table).flatten(-2).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I, eps = c["hidden_size"], c["intermediate_size"], c["layer_norm_eps"]
        self.heads = c["num_attention_heads"]
        self.rotary_value = c["rotary_value"]
        self.act = ACTIVATIONS[c["hidden_act"]]
        self.attention = _container(
            self=_container(query=nn.Linear(H, H), key=nn.Linear(H, H), value=nn.Linear(H, H)),
            output=_container(dense=nn.Linear(H, H), LayerNorm=nn.LayerNorm(H, eps=eps)))
        self.intermediate = _container(dense=nn.Linear(H, I))
        self.output = _container(dense=nn.Linear(I, H), LayerNorm=nn.LayerNorm(H, eps=eps))

    def forward(self, x, table, mask):
        B, T, H = x.shape
        att = self.attention.self
        split = lambda y: y.view(B, T, self.heads, H // self.heads).transpose(1, 2)  # (B, heads, T, d)
        q, k, v = split(att.query(x)), split(att.key(x)), split(att.value(x))
        q, k = rotate(q, table), rotate(k, table)
        if self.rotary_value:
            v = rotate(v, table)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ctx = ctx.transpose(1, 2).reshape(B, T, H)
        out = self.attention.output
        x = out.LayerNorm(out.dense(ctx) + x)
        return self.output.LayerNorm(self.output.dense(self.act(self.intermediate.dense(x))) + x)


class RoFormerSdpa(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = dict(embedding_size=None, hidden_act="gelu", type_vocab_size=2, layer_norm_eps=1e-12, rotary_value=False)
        c.update({k: v for k, v in config.items() if v is not None})
        if c["hidden_act"] not in ACTIVATIONS:
            raise ValueError("hidden_act %r is not one of %s" % (c["hidden_act"], ", ".join(sorted(ACTIVATIONS))))
        H, n = c["hidden_size"], c["num_attention_heads"]
        if H % n or (H // n) % 2:
            raise ValueError("hidden_size %d is not num_attention_heads %d times an even head size" % (H, n))
        E = c["embedding_size"] or H
        self.max_positions = c["max_position_embeddings"]
        self.embeddings = _container(word_embeddings=nn.Embedding(c["vocab_size"], E),
                                     token_type_embeddings=nn.Embedding(c["type_vocab_size"], E),
                                     LayerNorm=nn.LayerNorm(E, eps=c["layer_norm_eps"]))
        if E != H:
            self.embeddings_project = nn.Linear(E, H)
        self.encoder = _container(layer=nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"])))
        self.register_buffer("rotary", rotary_table(self.max_positions, H // n), persistent=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """input_ids, attention_mask (1: token, 0: padding), token_type_ids: (B, T) -> (B, T, hidden).
        An all-ones mask (or none) runs SDPA unmasked; otherwise keys at padding are left out (a
        boolean (B, 1, 1, T) mask) for every query row, padding rows included, as transformers does."""
        B, T = input_ids.shape
        if T > self.max_positions:
            raise ValueError("sequence of %d tokens exceeds max_position_embeddings %d" % (T, self.max_positions))
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        emb = self.embeddings
        x = emb.LayerNorm(emb.word_embeddings(input_ids) + emb.token_type_embeddings(token_type_ids))
        if hasattr(self, "embeddings_project"):
            x = self.embeddings_project(x)
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            if not bool(attention_mask.any(dim=-1).all()):
                raise ValueError("attention_mask has a row without any token (all padding)")
            mask = attention_mask.bool()[:, None, None, :]
        table = self.rotary[:T]
        for layer in self.encoder.layer:
            x = layer(x, table, mask)
        return x


def load_roformer_sdpa(model_dir):
    """RoFormerSdpa with the weights of model_dir/model.safetensors (names `roformer.*` as the task models
    save them, or bare as RoFormerModel does; heads and other tensors are left out), in eval mode."""
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    model = RoFormerSdpa(config)
    path = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(path):
        raise FileNotFoundError("%s: no model.safetensors (this loader reads safetensors only)" % model_dir)
    tensors = load_file(path)
    prefixed = any(k.startswith("roformer.") for k in tensors)
    tensors = {k[len("roformer."):] if prefixed else k: v for k, v in tensors.items()
               if not prefixed or k.startswith("roformer.")}
    wanted = model.state_dict()
    missing = [k for k in wanted if k not in tensors]
    if missing:
        raise KeyError("%s: missing %s%s" % (path, ", ".join(("roformer." if prefixed else "") + k for k in missing[:4]),
                                            " ..." if len(missing) > 4 else ""))
    for k, v in wanted.items():
        if tensors[k].shape != v.shape:
            raise ValueError("%s: %s has shape %s, config.json gives %s" % (path, k, tuple(tensors[k].shape), tuple(v.shape)))
    model.load_state_dict({k: tensors[k] for k in wanted})
    return model.eval()


def sdpa_backend(q, k, v, mask=None, is_causal=False, dropout_p=0.0):
    """The name of the kernel SDPA picks for these inputs ("FLASH_ATTENTION", "MATH", ...), or "unknown"."""
    try:
        from torch.nn.attention import SDPBackend
        return SDPBackend(torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal)).name
    except Exception:  # private API: absent or changed in some versions
        return "unknown"
