"""roformer.rope against the float64 formula (reference.py): layouts, partial rotary, strided and
in-place calls, every dtype, the three kinds of positions, the inverse, inv_freq, scaling, errors."""
import numpy as np
import pytest

from reference import rotate
from roformer import rope

RNG = np.random.default_rng(7)


def theta(rot, base=10000.0):
    return base ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("rot,offset", [(64, 0), (32, 8)])
def test_matches_the_formula(layout, rot, offset):
    x = RNG.standard_normal((2, 33, 3, 64)).astype(np.float32)
    cfg = rope.Config(64, rot_dim=rot, rot_offset=offset, layout=layout)
    y = rope.apply(x, config=cfg, start=5)
    ref = rotate(x, np.arange(5, 38), theta(rot), layout, offset)
    assert np.abs(y - ref).max() < 2e-6
    assert np.array_equal(y[..., :offset], x[..., :offset])  # outside the rotary part: untouched
    np.testing.assert_allclose(rope.inv_freq(cfg), theta(rot), rtol=1e-15)


def test_strided_views_in_place_out_and_inverse():
    base = RNG.standard_normal((2, 4, 17, 64)).astype(np.float32)  # [batch, heads, seq, dim]
    view = base.transpose(0, 2, 1, 3)  # [batch, seq, heads, dim], not contiguous
    cfg = rope.Config(64)
    expected = rotate(view, np.arange(17), theta(64))
    out = np.empty_like(view)
    assert rope.apply(view, config=cfg, out=out) is out
    assert np.abs(out - expected).max() < 2e-6
    copy = base.copy()
    r = rope.apply(copy.transpose(0, 2, 1, 3), config=cfg, inplace=True)
    assert np.shares_memory(r, copy) and np.abs(r - expected).max() < 2e-6
    back = rope.apply(out, config=cfg, backward=True)
    assert np.abs(back - view).max() < 2e-6


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-6), (np.float16, 4e-3)])
def test_dtypes(dtype, tol):
    x = RNG.standard_normal((1, 9, 2, 16)).astype(dtype)
    y = rope.apply(x, config=rope.Config(16), start=1000)
    assert y.dtype == dtype
    assert np.abs(y.astype(np.float64) - rotate(x, np.arange(1000, 1009), theta(16))).max() < tol


def test_positions_per_row_explicit_and_packed():
    x = RNG.standard_normal((2, 6, 2, 8))
    cfg = rope.Config(8)
    starts = np.array([3, 40])
    y = rope.apply(x, config=cfg, positions=starts)
    for b in range(2):
        assert np.abs(y[b] - rotate(x[b], np.arange(6) + starts[b], theta(8))).max() < 1e-12
    ids = RNG.integers(0, 10000, size=(2, 6))
    y = rope.apply(x, config=cfg, positions=ids)
    assert np.abs(y - rotate(x, ids, theta(8))).max() < 1e-12
    packed = RNG.standard_normal((10, 2, 8))  # sequences of 4 and 6 tokens
    y = rope.apply(packed, config=cfg, cu_seqlens=[0, 4, 10])
    pos = np.concatenate([np.arange(4), np.arange(6)])
    assert np.abs(y - rotate(packed, pos, theta(8))).max() < 1e-12
    y = rope.apply(packed, config=cfg, cu_seqlens=[0, 4, 10], seq_starts=[100, 7])
    assert np.abs(y - rotate(packed, np.concatenate([np.arange(100, 104), np.arange(7, 13)]), theta(8))).max() < 1e-12


def test_scaling_and_presets():
    lin = rope.Config(32, scaling="linear:4")
    np.testing.assert_allclose(rope.inv_freq(lin), theta(32) / 4, rtol=1e-15)
    yarn = rope.Config(32, scaling="yarn:4:1024")
    assert rope.attention_factor(yarn) == pytest.approx(0.1 * np.log(4) + 1)
    x = RNG.standard_normal((1, 3, 1, 32))
    y = rope.apply(x, config=yarn, start=9)
    ref = rotate(x, np.arange(9, 12), rope.inv_freq(yarn), factor=rope.attention_factor(yarn))
    assert np.abs(y - ref).max() < 1e-12
    llama3 = rope.Config.from_preset("llama3", 128)
    assert rope.inv_freq(llama3)[0] == 1.0 and len(rope.inv_freq(llama3)) == 64


def test_long_positions_stay_exact():
    x = RNG.standard_normal((1, 4, 1, 64))
    y = rope.apply(x, config=rope.Config(64), start=10**9)
    assert np.abs(y - rotate(x, np.arange(10**9, 10**9 + 4), theta(64))).max() < 1e-6


def test_errors_carry_librope_messages():
    with pytest.raises(ValueError, match="even"):
        rope.apply(np.zeros((1, 2, 1, 7), np.float32), config=rope.Config(7))
    with pytest.raises(ValueError, match="contiguous"):
        rope.apply(np.zeros((1, 2, 1, 16), np.float32)[..., ::2], config=rope.Config(8))
    with pytest.raises(ValueError, match="batch, seq, heads, dim"):
        rope.apply(np.zeros((2, 8), np.float32), config=rope.Config(8))
    with pytest.raises(TypeError):
        rope.apply(np.zeros((1, 2, 1, 8), np.int32), config=rope.Config(8))
    with pytest.raises(ValueError, match="scaling"):
        rope.apply(np.zeros((1, 2, 1, 8), np.float32), config=rope.Config(8, scaling="bogus:2"))
    with pytest.raises(ValueError, match="layout"):
        rope.Config(8, layout="diagonal").plan()
    with pytest.raises(ValueError, match="x: the last dimension is 8, the configuration's head_dim is 16"):
        rope.apply(np.zeros((1, 1, 1, 8), np.float32), config=rope.Config(16))  # librope would read past it
    with pytest.raises(ValueError, match="out: the last dimension is 8"):
        rope.apply(np.zeros((1, 2, 1, 16), np.float32), config=rope.Config(16), out=np.zeros((1, 2, 1, 8), np.float32))
    with pytest.raises(ValueError, match="out"):
        rope.apply(np.zeros((1, 2, 1, 16), np.float32), config=rope.Config(16), out=np.zeros((1, 1, 1, 16), np.float32))


def test_position_arrays_must_have_the_calls_size():
    x, cfg = np.zeros((2, 3, 1, 8), np.float32), rope.Config(8)  # librope would read past a shorter array
    with pytest.raises(ValueError, match="positions has 5 elements, the call needs 6"):
        rope.apply(x, config=cfg, positions=np.zeros((1, 5), np.int64))
    with pytest.raises(ValueError, match=r"positions \(one start per batch row\) has 1 elements, the call needs 2"):
        rope.apply_qk(x, x, config=cfg, positions=[4])
    with pytest.raises(ValueError, match="seq_starts has 1 elements, the call needs 2"):
        rope.apply(np.zeros((6, 1, 8), np.float32), config=cfg, cu_seqlens=[0, 3, 6], seq_starts=[1])
    with pytest.raises(ValueError, match="positions has 6 elements, the call needs 18"):  # 3 axes (M-RoPE)
        rope.apply(x, config=rope.Config.from_preset("qwen2_vl", 8), positions=np.zeros((2, 3), np.int64))
