"""The drop-in adapters give what the peers' formulas give, written out here as the peers write them:
transformers' apply_rotary_pos_emb (Llama's rotate_half pairing, with float32 cos/sin from inv_freq and
position_ids) and RoFormer's interleaved apply_rotary_position_embeddings, and FlashAttention's
apply_rotary_emb_torch (partial rotary, interleaved or not, offsets, packed batches). On random inputs,
strided views, GQA, per-sequence offsets and packed batches (in place or not) they agree to float32
rounding; the packed path is differentiable; at long positions, where the peers' float32 angles go
wrong, ours are closer to the float64 formula."""
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


def hf_roformer(q, position_ids, dim):  # RoFormerSinusoidalPositionalEmbedding + apply_rotary_position_embeddings
    n = int(position_ids.max()) + 1  # the table's rows, gathered at position_ids ([batch, seq]) as Llama's are
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n)])
    table = torch.zeros(n, dim)
    table[:, : dim // 2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    table[:, dim // 2:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    rows = table[position_ids][:, None]  # [batch, 1, seq, dim]
    sin, cos = rows.chunk(2, dim=-1)
    sin_pos = torch.stack([sin, sin], dim=-1).reshape_as(rows)
    cos_pos = torch.stack([cos, cos], dim=-1).reshape_as(rows)
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


def flash_tables(start, stop, ro_dim, base=10000.0):  # rows [start, stop) of flash_attn RotaryEmbedding's fp32 cache
    inv_freq = 1.0 / (base ** (torch.arange(0, ro_dim, 2, dtype=torch.float32) / ro_dim))
    freqs = torch.outer(torch.arange(start, stop, dtype=torch.float32), inv_freq)  # exact integers below 2^24
    return torch.cos(freqs), torch.sin(freqs)


def close(a, b):  # float32 rounding
    return a.shape == b.shape and (a - b).abs().max() < 2e-5


def flash(x, config, interleaved, **kwargs):
    return rope_torch.flash_apply_rotary_emb(x, config, interleaved=interleaved, **kwargs)


def packed_reference(x, cu_seqlens, offsets, ro_dim, interleaved):  # flash_reference per sequence of a packed batch
    parts = []
    for s, o in enumerate(offsets):
        a, b = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        cos, sin = flash_tables(o, o + b - a, ro_dim)
        parts.append(flash_reference(x[a:b], cos, sin, interleaved))
    return torch.cat(parts)


def assert_closer_to_float64(ours, theirs, exact, peer):
    err_ours, err_theirs = (ours.double() - exact).abs().max(), (theirs.double() - exact).abs().max()
    print(f"max error at positions ~1e6: ours {err_ours:.2e}, {peer} {err_theirs:.2e}")
    assert err_ours < 1e-5 and err_theirs > 10 * err_ours


def test_hf_llama_pairing_with_gqa_and_offsets():
    q, k = torch.randn(2, 8, 13, 64), torch.randn(2, 2, 13, 64)  # 8 query heads, 2 key heads
    pos = torch.stack([torch.arange(13), torch.arange(13) + 50])
    ours = rope_torch.hf_apply_rotary_pos_emb(q, k, pos, rope.Config(64, layout="half"))
    theirs = hf_llama(q, k, pos, 64)
    for a, b in zip(ours, theirs):
        assert close(a, b)
    # [batch, seq, heads, dim] inputs (unsqueeze_dim=2).
    q2 = q.transpose(1, 2).contiguous()
    q_out, _ = rope_torch.hf_apply_rotary_pos_emb(q2, k.transpose(1, 2), pos, rope.Config(64, layout="half"), 2)
    assert close(q_out.transpose(1, 2), theirs[0])


def test_hf_roformer_interleaved_pairing():
    q = torch.randn(2, 4, 20, 32)  # [batch, heads, seq, dim]
    pos = torch.arange(20)[None]
    ours, _ = rope_torch.hf_apply_rotary_pos_emb(q, q, pos, rope.Config(32))
    assert close(ours, hf_roformer(q, pos.expand(2, -1), 32))


def test_hf_roformer_interleaved_pairing_with_gqa_and_offsets():
    q, k = torch.randn(2, 8, 13, 32), torch.randn(2, 2, 13, 32)  # 8 query heads, 2 key heads
    pos = torch.stack([torch.arange(13), torch.arange(13) + 50])
    q_out, k_out = rope_torch.hf_apply_rotary_pos_emb(q, k, pos, rope.Config(32))
    assert close(q_out, hf_roformer(q, pos, 32)) and close(k_out, hf_roformer(k, pos, 32))


@pytest.mark.parametrize("interleaved", [False, True])
def test_flash_partial_rotary_and_offsets(interleaved):
    cfg = rope.Config(64, rot_dim=32, layout="interleaved" if interleaved else "half")
    x = torch.randn(3, 11, 4, 64)
    cos, sin = flash_tables(7, 18, 32)
    assert close(flash(x, cfg, interleaved, seqlen_offsets=7), flash_reference(x, cos, sin, interleaved))
    offsets = torch.tensor([0, 5, 20])
    ours = flash(x, cfg, interleaved, seqlen_offsets=offsets)
    for b, o in enumerate(offsets.tolist()):
        cos, sin = flash_tables(o, o + 11, 32)
        assert close(ours[b], flash_reference(x[b], cos, sin, interleaved))
    with pytest.raises(ValueError, match="layout"):
        flash(x, cfg, not interleaved)


def test_flash_strided_input_in_and_out_of_place():
    cfg = rope.Config(64, rot_dim=32, layout="half")
    base = torch.randn(3, 4, 11, 64)  # [batch, heads, seq, dim]
    x = base.transpose(1, 2)  # FlashAttention's [batch, seq, heads, dim] as a strided view
    cos, sin = flash_tables(5, 16, 32)
    expected = flash_reference(x, cos, sin, False)
    assert close(flash(x, cfg, False, seqlen_offsets=5), expected)
    out = flash(x, cfg, False, inplace=True, seqlen_offsets=5)
    assert out.data_ptr() == x.data_ptr() and close(base.transpose(1, 2), expected)  # rotated through the view


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_flash_packed_with_per_sequence_offsets(interleaved, inplace):
    cfg = rope.Config(64, rot_dim=32, layout="interleaved" if interleaved else "half")
    packed, cu = torch.randn(15, 4, 64), torch.tensor([0, 6, 6, 15])  # the middle sequence is empty
    for offsets in (torch.tensor([3, 9, 40]), 7):
        x = packed.clone()
        out = flash(x, cfg, interleaved, inplace=inplace, seqlen_offsets=offsets, cu_seqlens=cu)
        assert (out.data_ptr() == x.data_ptr()) == inplace
        per_seq = offsets.tolist() if torch.is_tensor(offsets) else [offsets] * 3
        assert close(out, packed_reference(packed, cu, per_seq, 32, interleaved))


def test_flash_packed_out_of_place_is_differentiable():
    cfg = rope.Config(16, layout="half", scaling="yarn:2:32")
    cu, offsets = torch.tensor([0, 4, 9]), torch.tensor([7, 1000])
    x = torch.randn(9, 2, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: flash(t, cfg, False, seqlen_offsets=offsets, cu_seqlens=cu), (x,))
    # The gradient of Σ y·g is the inverse rotation a·R(−θ)·g at each token's position.
    g = torch.randn(9, 2, 16, dtype=torch.float64)
    (flash(x, cfg, False, seqlen_offsets=offsets, cu_seqlens=cu) * g).sum().backward()
    positions = np.concatenate([np.arange(7, 11), np.arange(1000, 1005)])
    expected = rotate(g.numpy(), positions, rope.inv_freq(cfg), "half", inverse=True, factor=rope.attention_factor(cfg))
    assert np.abs(x.grad.numpy() - expected).max() < 1e-12


def test_flash_layout_is_a_presets_when_the_config_has_none():
    x = torch.randn(2, 5, 3, 64)
    neox = rope.Config.from_preset("neox", 64)  # half pairs, rot_dim 16, layout left to the preset
    cos, sin = flash_tables(0, 5, 16)
    assert close(flash(x, neox, False), flash_reference(x, cos, sin, False))
    for config, interleaved in ((neox, True), (rope.Config.from_preset("llama", 64), True),
                                (rope.Config.from_preset("roformer", 64), False), (rope.Config(64), False)):
        with pytest.raises(ValueError, match="layout"):
            flash(x, config, interleaved)


def test_at_long_positions_ours_is_closer_to_float64():
    pos = torch.arange(1_000_000, 1_000_064)[None]
    q = torch.randn(1, 2, 64, 128, dtype=torch.float64)
    exact = torch.from_numpy(rotate(q.transpose(1, 2).numpy(), pos[0].numpy(), rope.inv_freq(rope.Config(128)),
                                    "half")).transpose(1, 2)
    ours, _ = rope_torch.hf_apply_rotary_pos_emb(q.float(), q.float(), pos, rope.Config(128, layout="half"))
    theirs, _ = hf_llama(q.float(), q.float(), pos, 128)
    assert_closer_to_float64(ours, theirs, exact, "transformers' float32 formula")


def test_flash_at_long_positions_ours_is_closer_to_float64():
    x = torch.randn(1, 64, 2, 128, dtype=torch.float64)  # [batch, seq, heads, dim]
    exact = torch.from_numpy(rotate(x.numpy(), np.arange(1_000_000, 1_000_064), rope.inv_freq(rope.Config(128)), "half"))
    ours = flash(x.float(), rope.Config(128, layout="half"), False, seqlen_offsets=1_000_000)
    cos, sin = flash_tables(1_000_000, 1_000_064, 128)
    assert_closer_to_float64(ours, flash_reference(x.float(), cos, sin, False), exact, "FlashAttention's float32 tables")
