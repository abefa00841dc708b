"""The drop-in adapters give what the peers' formulas give, written out here as the peers write them:
transformers' apply_rotary_pos_emb (Llama's rotate_half pairing, with float32 cos/sin from inv_freq and
position_ids) and RoFormer's interleaved apply_rotary_position_embeddings, and FlashAttention's
apply_rotary_emb_torch (partial rotary, interleaved or not, offsets, packed batches). On random inputs,
strided views and GQA they agree to float32 rounding; at long positions, where the peers' float32 angles
go wrong, ours are closer to the float64 formula."""
import numpy as np
import pytest
import torch

from reference import rotate
from roformer import rope, rope_torch


def hf_llama(q, k, position_ids, dim, base=10000.0):  # transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def hf_roformer(q, seq_len, dim):  # RoFormerSinusoidalPositionalEmbedding + apply_rotary_position_embeddings
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(seq_len)])
    table = torch.zeros(seq_len, dim)
    table[:, : dim // 2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    table[:, dim // 2:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    sin, cos = table[None, None].chunk(2, dim=-1)
    sin_pos = torch.stack([sin, sin], dim=-1).reshape_as(table[None, None])
    cos_pos = torch.stack([cos, cos], dim=-1).reshape_as(table[None, None])
    rotated = torch.stack([-q[..., 1::2], q[..., ::2]], dim=-1).reshape_as(q)
    return q * cos_pos + rotated * sin_pos


def flash_reference(x, cos, sin, interleaved):  # flash_attn.layers.rotary.apply_rotary_emb_torch
    ro_dim = cos.shape[-1] * 2
    if interleaved:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        x1, x2 = x[..., :ro_dim][..., ::2], x[..., :ro_dim][..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        x1, x2 = x[..., :ro_dim].chunk(2, dim=-1)
        rot = torch.cat((-x2, x1), dim=-1)
    cos, sin = cos[..., None, :], sin[..., None, :]
    return torch.cat([x[..., :ro_dim] * cos + rot * sin, x[..., ro_dim:]], dim=-1)


def flash_tables(seqlen, ro_dim, base=10000.0):  # flash_attn RotaryEmbedding._update_cos_sin_cache (fp32)
    inv_freq = 1.0 / (base ** (torch.arange(0, ro_dim, 2, dtype=torch.float32) / ro_dim))
    freqs = torch.outer(torch.arange(seqlen, dtype=torch.float32), inv_freq)
    return torch.cos(freqs), torch.sin(freqs)


def test_hf_llama_pairing_with_gqa_and_offsets():
    q, k = torch.randn(2, 8, 13, 64), torch.randn(2, 2, 13, 64)  # 8 query heads, 2 key heads
    pos = torch.stack([torch.arange(13), torch.arange(13) + 50])
    ours = rope_torch.hf_apply_rotary_pos_emb(q, k, pos, rope.Config(64, layout="half"))
    theirs = hf_llama(q, k, pos, 64)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and (a - b).abs().max() < 2e-5
    # [batch, seq, heads, dim] inputs (unsqueeze_dim=2).
    q2 = q.transpose(1, 2).contiguous()
    q_out, _ = rope_torch.hf_apply_rotary_pos_emb(q2, k.transpose(1, 2), pos, rope.Config(64, layout="half"), 2)
    assert (q_out.transpose(1, 2) - theirs[0]).abs().max() < 2e-5


def test_hf_roformer_interleaved_pairing():
    q = torch.randn(2, 4, 20, 32)  # [batch, heads, seq, dim]
    pos = torch.arange(20)[None]
    ours, _ = rope_torch.hf_apply_rotary_pos_emb(q, q, pos, rope.Config(32))
    assert (ours - hf_roformer(q, 20, 32)).abs().max() < 2e-5


@pytest.mark.parametrize("interleaved", [False, True])
def test_flash_partial_rotary_offsets_and_packed(interleaved):
    layout = "interleaved" if interleaved else "half"
    cfg = rope.Config(64, rot_dim=32, layout=layout)
    x = torch.randn(3, 11, 4, 64)
    cos, sin = flash_tables(40, 32)
    ours = rope_torch.flash_apply_rotary_emb(x, cfg, interleaved=interleaved, seqlen_offsets=7)
    assert (ours - flash_reference(x, cos[7:18], sin[7:18], interleaved)).abs().max() < 2e-5
    offsets = torch.tensor([0, 5, 20])
    ours = rope_torch.flash_apply_rotary_emb(x, cfg, interleaved=interleaved, seqlen_offsets=offsets)
    for b in range(3):
        o = int(offsets[b])
        assert (ours[b] - flash_reference(x[b], cos[o:o + 11], sin[o:o + 11], interleaved)).abs().max() < 2e-5
    packed, cu = torch.randn(15, 4, 64), torch.tensor([0, 6, 15])
    inplace = packed.clone()
    rope_torch.flash_apply_rotary_emb(inplace, cfg, interleaved=interleaved, inplace=True, cu_seqlens=cu)
    for s, (a, b) in enumerate([(0, 6), (6, 15)]):
        assert (inplace[a:b] - flash_reference(packed[a:b], cos[: b - a], sin[: b - a], interleaved)).abs().max() < 2e-5
    with pytest.raises(ValueError, match="layout"):
        rope_torch.flash_apply_rotary_emb(x, cfg, interleaved=not interleaved)


def test_at_long_positions_ours_is_closer_to_float64():
    pos = torch.arange(1_000_000, 1_000_064)[None]
    q = torch.randn(1, 2, 64, 128, dtype=torch.float64)
    exact = torch.from_numpy(rotate(q.transpose(1, 2).numpy(), pos[0].numpy(), rope.inv_freq(rope.Config(128)),
                                    "half")).transpose(1, 2)
    ours, _ = rope_torch.hf_apply_rotary_pos_emb(q.float(), q.float(), pos, rope.Config(128, layout="half"))
    theirs, _ = hf_llama(q.float(), q.float(), pos, 128)
    err_ours, err_theirs = (ours.double() - exact).abs().max(), (theirs.double() - exact).abs().max()
    print(f"max error at positions ~1e6: ours {err_ours:.2e}, transformers' float32 formula {err_theirs:.2e}")
    assert err_ours < 1e-5 and err_theirs > 10 * err_ours
