"""PyTorch on librope: an autograd-aware rotation and drop-in replacements for the RoPE functions of
Hugging Face transformers and FlashAttention.

    from roformer import rope, rope_torch
    cfg = rope.Config(64, layout="half")
    q = rope_torch.rope(q, cfg, start=past)     # differentiable; the backward is the inverse rotation

The adapters keep the peers' tensor layouts, pairings, offsets and packed batches, but take a
rope.Config (and positions) where the peers take precomputed cos/sin tables: librope computes each
angle m·θ_i exactly instead of rounding m and θ_i to float32 first, so at long positions the result is
closer to the float64 formula than the peers' (tests/test_adapters.py measures it).

On PyTorch >= 2.4, `rope` is the custom op torch.ops.roformer.rope (torch.library.custom_op) with a
fake implementation and an autograd formula: it passes torch.library.opcheck, and torch.compile traces
it without a graph break. On older PyTorch (Debian 12 has 1.13) it is a torch.autograd.Function with
the same backward; torch.compile, where it exists (2.0-2.3), breaks the graph there. Either way
gradcheck passes in float64. The custom op's dispatch costs about 22 µs a call (docs/python.md):
calls that need no autograd are faster through roformer.rope.apply.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import rope as _rope

__all__ = ["rope", "hf_apply_rotary_pos_emb", "flash_apply_rotary_emb"]


def _head_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, config, start, positions, cu_seqlens, key):  # noqa: D401 (autograd signature)
        ctx.args = (config, start, positions, cu_seqlens, key)
        return _rope.apply(_head_contiguous(x.detach()), config=config, start=start, positions=positions,
                           cu_seqlens=cu_seqlens, key=key)

    @staticmethod
    def backward(ctx, grad):
        config, start, positions, cu_seqlens, key = ctx.args
        dx = _rope.apply(_head_contiguous(grad), config=config, start=start, positions=positions,
                         cu_seqlens=cu_seqlens, key=key, backward=True)
        return dx, None, None, None, None, None


# Custom ops take tensors, numbers and strings, so the op carries the Config's spec (its JSON); each
# spec maps back to one Config, and so one cached librope plan, per process.
_CONFIGS: dict = {}


def _config_of(spec: str) -> _rope.Config:
    config = _CONFIGS.get(spec)
    if config is None:
        config = _CONFIGS.setdefault(spec, _rope.Config.from_spec(spec))
    return config


def _index_tensor(a) -> Optional[torch.Tensor]:
    return None if a is None else torch.as_tensor(a, dtype=torch.int64)


if hasattr(torch.library, "custom_op"):  # PyTorch >= 2.4

    @torch.library.custom_op("roformer::rope", mutates_args=())
    def _rope_op(x: torch.Tensor, config: str, start: int, positions: Optional[torch.Tensor],
                 cu_seqlens: Optional[torch.Tensor], key: bool, backward: bool) -> torch.Tensor:
        return _rope.apply(_head_contiguous(x.detach()), config=_config_of(config), start=start, positions=positions,
                           cu_seqlens=cu_seqlens, key=key, backward=backward)

    @_rope_op.register_fake
    def _(x, config, start, positions, cu_seqlens, key, backward):
        return x.new_empty(x.shape)  # what rope.apply returns: a new contiguous tensor of x's shape and dtype

    def _setup_context(ctx, inputs, output):
        x, config, start, positions, cu_seqlens, key, backward = inputs
        ctx.save_for_backward(positions, cu_seqlens)
        ctx.args = (config, start, key, backward)

    def _backward_op(ctx, grad):  # the inverse rotation, itself differentiable (double backward)
        positions, cu_seqlens = ctx.saved_tensors
        config, start, key, backward = ctx.args
        return _rope_op(grad, config, start, positions, cu_seqlens, key, not backward), None, None, None, None, None, None

    _rope_op.register_autograd(_backward_op, setup_context=_setup_context)


def rope(x: torch.Tensor, config: _rope.Config, *, start: int = 0, positions=None, cu_seqlens=None,
         key: bool = False) -> torch.Tensor:
    """Differentiable rotation of x ([batch, seq, heads, dim], [seq, heads, dim] or packed with cu_seqlens)."""
    if hasattr(torch.library, "custom_op"):
        return torch.ops.roformer.rope(x, config.spec, start, _index_tensor(positions),
                                       _index_tensor(cu_seqlens), key, False)
    return _Rope.apply(x, config, start, positions, cu_seqlens, key)


def hf_apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor, config: _rope.Config,
                            unsqueeze_dim: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb(q, k, cos, sin) with the cos/sin of `position_ids` ([batch, seq])
    under `config`: q, k are [batch, heads, seq, dim] (unsqueeze_dim=1) or [batch, seq, heads, dim]
    (unsqueeze_dim=2); their head counts may differ (GQA). Pairing: config.layout "half" is Llama's
    rotate_half, "interleaved" is RoFormer's apply_rotary_position_embeddings. Differentiable."""
    if unsqueeze_dim not in (1, 2):
        raise ValueError("unsqueeze_dim must be 1 ([batch, heads, seq, dim]) or 2 ([batch, seq, heads, dim])")
    positions = position_ids.expand(q.shape[0], -1) if position_ids.shape[0] == 1 else position_ids
    if unsqueeze_dim == 1:  # librope's view [batch, seq, heads, dim] of HF's [batch, heads, seq, dim]
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    q_out = rope(q, config, positions=positions)
    k_out = rope(k, config, positions=positions, key=True)
    if unsqueeze_dim == 1:
        q_out, k_out = q_out.transpose(1, 2), k_out.transpose(1, 2)
    return q_out, k_out


def _packed_positions(cu_seqlens: torch.Tensor, seqlen_offsets) -> torch.Tensor:
    """[1, total] positions of packed sequences (token t of sequence s at seqlen_offsets(s) + t): the
    explicit-positions form of librope's packed (varlen) call, which the autograd path takes."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int64)
    lengths = cu[1:] - cu[:-1]
    offsets = torch.as_tensor(seqlen_offsets, dtype=torch.int64, device=cu.device).expand(lengths.numel()) - cu[:-1]
    return (torch.arange(int(cu[-1]), dtype=torch.int64, device=cu.device) + offsets.repeat_interleave(lengths))[None]


def flash_apply_rotary_emb(x: torch.Tensor, config: _rope.Config, interleaved: bool = False, inplace: bool = False,
                           seqlen_offsets=0, cu_seqlens: Optional[torch.Tensor] = None) -> torch.Tensor:
    """FlashAttention's apply_rotary_emb(x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens) with
    the angles of `config`: x is [batch, seq, heads, dim], or [total, heads, dim] with cu_seqlens; the
    first config.rot_dim elements of each head rotate (the rest pass through); interleaved picks the
    pairing (and must agree with the config's layout, a preset's when config.layout is None);
    seqlen_offsets is an int or one offset per sequence. inplace rotates x itself (not differentiable);
    otherwise the result is differentiable, packed batches included."""
    layout = "interleaved" if interleaved else "half"
    if config.plan().layout != layout:
        raise ValueError(f"interleaved={interleaved} needs the layout '{layout}', the config's is '{config.plan().layout}'")
    if cu_seqlens is not None:
        where = {"positions": _packed_positions(cu_seqlens, seqlen_offsets)}
    elif torch.is_tensor(seqlen_offsets) and seqlen_offsets.dim() > 0:
        where = {"positions": seqlen_offsets}  # one start per batch row
    else:
        where = {"start": int(seqlen_offsets)}
    if inplace:
        return _rope.apply(x, config=config, inplace=True, **where)
    return rope(x, config, **where)
