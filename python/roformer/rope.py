"""librope from Python: rotary position embedding with exact angles, every layout and scaling method.

    import torch, roformer.rope as rope
    q = torch.randn(2, 128, 8, 64)                      # [batch, seq, heads, head_dim]
    q_rot = rope.apply(q, config=rope.Config(64))        # RoFormer's pairs (2i, 2i+1), base 10000

Arrays are NumPy arrays or PyTorch tensors (any strides whose last dimension is contiguous;
float32, float16, bfloat16 or float64), shaped [batch, seq, heads, head_dim] or [seq, heads, head_dim].
PyTorch CUDA tensors (float32, float16, bfloat16) are rotated on their GPU by librope's CUDA backend, on
the device's current stream and without waiting for it; their position arrays (int64 or int32) may be
CUDA tensors on the same device, and a bad position held there gives NaN rows that cuda_check reports.
Nothing is copied: `inplace=True` rotates the input itself, otherwise the result goes into a new array
of the same type (or `out=`). Angles m·θ_i are computed exactly (librope's own range reduction), so a
rotation at position 10^6 is as accurate as at position 1. Errors raise ValueError/TypeError with
librope's message. For autograd, use roformer.rope_torch.rope (a torch.autograd.Function whose
backward is the inverse rotation).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Optional

import numpy as np

from . import _rope

__all__ = ["Config", "apply", "apply_qk", "inv_freq", "attention_factor", "version", "cpu_target", "cuda_available",
           "cuda_check"]


@dataclasses.dataclass(frozen=True)
class Config:
    """A RoPE configuration (librope's rope_config).

    head_dim: elements per head. rot_dim: rotated elements (default: all; partial rotary otherwise),
    starting at rot_offset. layout: "interleaved" pairs (2i, 2i+1) (the paper's eq. 34, RoFormer,
    GPT-J, Meta Llama) or "half" pairs (i, i + rot_dim/2) (GPT-NeoX, Hugging Face Llama). base: θ_i =
    base^(-2i/rot_dim). scaling: "none", "linear:F", "ntk:F", "dynamic-ntk:F:ORIG", "yarn:F:ORIG" or
    "llama3:F:ORIG". attention_factor: overrides the scaling method's (YaRN's) factor on cos and sin.
    seq_len: the sequence length for dynamic NTK. table_positions: N > 0 precomputes an fp32 cos/sin
    table for positions [0, N) (librope's TABLE mode: the same results, faster for small calls;
    positions from N on are an error); 0 computes cos/sin per call from the exact angle. preset: start from a librope preset ("roformer",
    "gptj", "neox", "llama", "llama3", "qwen2", "qwen2_vl"); fields left at None keep the preset's
    (config.plan().layout is the layout in effect).
    The attribute `spec` is the configuration as canonical JSON (Config.from_spec reads it back).
    """

    head_dim: int
    rot_dim: Optional[int] = None
    rot_offset: int = 0
    layout: Optional[str] = None
    base: Optional[float] = None
    scaling: Optional[str] = None
    attention_factor: float = 0.0
    seq_len: int = 0
    table_positions: int = 0
    preset: Optional[str] = None

    def __post_init__(self):
        # `spec`: the configuration as canonical JSON, a string that names it (PyTorch custom ops take
        # strings, not objects; roformer.rope_torch passes it). Made here, so reading it is plain
        # attribute access, which torch.compile traces.
        spec = json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, sort_keys=True)
        object.__setattr__(self, "spec", spec)

    @staticmethod
    def from_preset(name: str, head_dim: int, **overrides) -> "Config":
        return Config(head_dim=head_dim, preset=name, **overrides)

    @staticmethod
    def from_spec(spec: str) -> "Config":
        """The Config whose `spec` is this string."""
        return Config(**json.loads(spec))

    def plan(self) -> "_rope.Plan":
        """The compiled librope plan, made on first use and kept on the (immutable) config."""
        p = self.__dict__.get("_plan")
        if p is None:
            p = _make_plan(self)
            object.__setattr__(self, "_plan", p)
        return p


def _make_plan(c: Config) -> "_rope.Plan":
    layout = c.layout if c.layout is not None else ("preset" if c.preset else "interleaved")
    scaling = c.scaling if c.scaling is not None else ("preset" if c.preset else "none")
    base = c.base if c.base is not None or c.preset else 10000.0
    return _rope.Plan(c.preset, c.head_dim, c.rot_dim, c.rot_offset, layout, base, scaling, c.attention_factor,
                      c.seq_len, c.table_positions)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _empty_like(x):
    if _is_torch(x):
        return x.new_empty(x.shape)
    return np.empty_like(x)


def _index(a, name: str):
    """An int64 C-contiguous NumPy view of positions (NumPy array, CPU torch tensor or sequence); a CUDA
    tensor stays on its device, contiguous, as int32 or int64."""
    if a is None:
        return None
    if _is_torch(a) and a.is_cuda:
        import torch  # only reached with torch tensors

        a = a.detach()
        if a.dtype not in (torch.int32, torch.int64):
            a = a.long()
        if a.dim() == 0:
            raise ValueError(f"{name} must be an array")
        return a.contiguous()
    if _is_torch(a):
        a = a.detach().cpu().numpy()
    out = np.ascontiguousarray(np.asarray(a, dtype=np.int64))
    if out.ndim == 0:
        raise ValueError(f"{name} must be an array")
    return out


def _positions(positions, start, cu_seqlens, seq_starts):
    """(start, starts, ids, cu_seqlens, seq_starts) for the extension from the Python arguments."""
    if positions is None and cu_seqlens is None and seq_starts is None:
        return start, None, None, None, None  # the common case, kept cheap for decode-sized calls
    starts = ids = None
    if positions is not None:
        p = _index(positions, "positions")
        if p.ndim == 1:
            starts = p  # one start per batch row
        else:
            ids = p  # [batch, seq] (or [axes, batch, seq]) explicit positions
    return start, starts, ids, _index(cu_seqlens, "cu_seqlens"), _index(seq_starts, "seq_starts")


def apply(x, *, config: Config, start: int = 0, positions=None, cu_seqlens=None, seq_starts=None,
          inplace: bool = False, out=None, backward: bool = False, key: bool = False, threads: int = 0):
    """Rotates x ([batch, seq, heads, dim] or [seq, heads, dim]) and returns the result.

    Positions: token t of batch row b is at start + t (default), or positions[b] + t when positions
    is 1-D (one start per row), or positions[b, t] when 2-D. Packed sequences: x is [total, heads,
    dim] with cu_seqlens [n + 1] (FlashAttention's varlen layout), positions restarting at each
    sequence (or at seq_starts). backward=True applies the inverse rotation (the gradient of the
    forward). key=True marks x as keys (xPos scales keys by the inverse factor).
    """
    target = x if inplace else (out if out is not None else _empty_like(x))
    _rope.apply(config.plan(), x, None if inplace else target, backward, key,
                *_positions(positions, start, cu_seqlens, seq_starts), threads)
    return target


def apply_qk(q, k, *, config: Config, start: int = 0, positions=None, cu_seqlens=None, seq_starts=None,
             inplace: bool = False, backward: bool = False, threads: int = 0):
    """Rotates q and k in one pass over the tokens (their head counts may differ: GQA/MQA)."""
    q_out = q if inplace else _empty_like(q)
    k_out = k if inplace else _empty_like(k)
    _rope.apply_qk(config.plan(), q, k, None if inplace else q_out, None if inplace else k_out, backward,
                   *_positions(positions, start, cu_seqlens, seq_starts), threads)
    return q_out, k_out


def inv_freq(config: Config) -> np.ndarray:
    """θ_i after scaling, one per rotary pair (float64)."""
    return np.asarray(config.plan().inv_freq(), dtype=np.float64)


def attention_factor(config: Config) -> float:
    """The factor the scaling method puts on cos and sin (1 unless YaRN/LongRoPE or overridden)."""
    return config.plan().attention_factor()


def version() -> str:
    return _rope.version()


def cpu_target() -> str:
    """The SIMD target librope dispatches to on this CPU (e.g. "AVX2")."""
    return _rope.cpu_target()


def cuda_available() -> bool:
    """Whether librope's CUDA backend can run here (built with CUDA, and a GPU present)."""
    return _rope.cuda_unavailable_reason() == ""


def cuda_check(config: Config, device: int = 0) -> None:
    """Waits for the current stream of cuda:`device`, then raises ValueError if a CUDA call with this
    config met a bad position in a device-side position array since the last check (its rows are NaN)."""
    _rope.cuda_check(config.plan(), device)
