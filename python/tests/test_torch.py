"""roformer.rope on PyTorch tensors: zero-copy in place through any strides, every dtype, the errors of
the tensor path, table plans, and the autograd Function (gradcheck in float64; gradients equal the
float64 formula's)."""
import numpy as np
import pytest
import torch

from reference import rotate
from roformer import rope, rope_torch


def test_in_place_on_a_tensor_view_and_bfloat16():
    base = torch.randn(2, 4, 9, 32)  # [batch, heads, seq, dim]
    view = base.transpose(1, 2)
    expected = rotate(view.numpy(), np.arange(9), rope.inv_freq(rope.Config(32)))
    out = rope.apply(view, config=rope.Config(32), inplace=True)
    assert out.data_ptr() == view.data_ptr()
    assert np.abs(base.transpose(1, 2).numpy() - expected).max() < 2e-6
    b = torch.randn(1, 5, 2, 32).to(torch.bfloat16)
    r = rope.apply(b, config=rope.Config(32), start=3)
    assert r.dtype == torch.bfloat16
    ref = rotate(b.float().numpy(), np.arange(3, 8), rope.inv_freq(rope.Config(32)))
    assert np.abs(r.float().numpy() - ref).max() < 0.03


def test_autograd_gradcheck_and_the_inverse_rotation():
    cfg = rope.Config(8, layout="half", scaling="yarn:2:16")
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope_torch.rope(t, cfg, start=7), (x,))
    k = torch.randn(2, 5, 3, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 4, 9, 100, 3], [1, 1, 2, 5000, 8]])
    assert torch.autograd.gradcheck(lambda t: rope_torch.rope(t, cfg, positions=pos, key=True), (k,))
    # The gradient of Σ rope(x)·g is the transpose a·R(−θ)·g of the forward a·R(θ).
    g = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    (rope_torch.rope(x, cfg, start=7) * g).sum().backward()
    a = rope.attention_factor(cfg)
    expected = rotate(g.numpy(), np.arange(7, 12), rope.inv_freq(cfg), "half", inverse=True, factor=a)
    assert np.abs(x.grad.numpy() - expected).max() < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_tensors_are_read_in_place_through_their_strides(dtype):
    # Tensors are described from data_ptr/shape/stride, not DLPack: views with a storage offset,
    # transposed and head-strided views must give exactly what the same call on NumPy gives.
    base = torch.randn(3, 6, 10, 32, dtype=torch.float64).to(dtype)  # [batch, heads, seq, dim]
    views = [base.transpose(1, 2), base[1:, ::2].transpose(1, 2), base[:, 2:5].transpose(1, 2)[:, 3:],
             base[0].transpose(0, 1)]  # the last is [seq, heads, dim]
    cfg = rope.Config(32, layout="half")
    for view in views:
        expected = rope.apply(view.double().numpy(), config=cfg, start=11)
        out = rope.apply(view, config=cfg, start=11)
        assert out.dtype == dtype and out.shape == view.shape
        tol = {torch.float64: 1e-12, torch.float32: 2e-6}.get(dtype, 0.03)
        assert np.abs(out.double().numpy() - expected).max() < tol
        copy = view.clone()
        q_rot, k_rot = rope.apply_qk(view, copy, config=cfg, start=11)  # q and k in one pass
        assert torch.equal(q_rot, out) and torch.equal(k_rot, out)
        rope.apply(view, config=cfg, start=11, inplace=True)  # rotates base through the view
        assert torch.equal(view, out)
    param = torch.nn.Parameter(torch.randn(1, 4, 2, 32), requires_grad=False)  # a Tensor subclass
    assert torch.equal(rope.apply(param, config=cfg), rope.apply(param.data.clone(), config=cfg))


def test_tensor_errors_name_the_argument():
    cfg = rope.Config(8)
    with pytest.raises(ValueError, match="x requires grad"):
        rope.apply(torch.zeros(1, 2, 1, 8, requires_grad=True), config=cfg)
    with pytest.raises(ValueError, match="x must be a CPU or CUDA tensor"):
        rope.apply(torch.zeros(1, 2, 1, 8, device="meta"), config=cfg, out=torch.zeros(1, 2, 1, 8))
    with pytest.raises(ValueError, match="out must be a dense"):
        rope.apply(torch.zeros(1, 2, 1, 8), config=cfg, out=torch.zeros(1, 2, 1, 8).to_sparse())
    with pytest.raises(TypeError, match="k: the array must be float32"):
        rope.apply_qk(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8, dtype=torch.int32), config=cfg)
    with pytest.raises(ValueError, match="contiguous"):
        rope.apply(torch.zeros(1, 2, 1, 16)[..., ::2], config=cfg)
    with pytest.raises(ValueError, match="batch, seq, heads, dim"):
        rope.apply(torch.zeros(2, 8), config=cfg)
    with pytest.raises(ValueError, match="k: the last dimension is 4, the configuration's head_dim is 8"):
        rope.apply_qk(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 4), config=cfg)
    with pytest.raises(TypeError, match="x must be a NumPy array"):
        rope.apply([[[[0.0] * 8]]], config=cfg, inplace=True)
    with pytest.raises(ValueError, match="overlaps"):  # an expanded view: heads and tokens share memory
        rope.apply(torch.zeros(1, 1, 1, 8).expand(1, 4, 2, 8), config=cfg, inplace=True)


def test_empty_tensors_are_nothing_to_do():
    cfg = rope.Config(8)
    assert rope.apply(torch.zeros(1, 0, 2, 8), config=cfg).shape == (1, 0, 2, 8)
    assert rope.apply(np.zeros((0, 3, 2, 8), np.float32), config=cfg).shape == (0, 3, 2, 8)
    q = torch.randn(2, 3, 4, 8)
    q_rot, k_rot = rope.apply_qk(q, torch.zeros(2, 3, 0, 8), config=cfg, start=5)  # k with no heads
    assert torch.equal(q_rot, rope.apply(q, config=cfg, start=5)) and k_rot.shape == (2, 3, 0, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_table_plan_gives_the_same_bits(dtype):
    x = torch.randn(2, 40, 3, 64).to(dtype)
    table = rope.Config(64, scaling="yarn:4:32", table_positions=512)
    exact = rope.Config(64, scaling="yarn:4:32")
    assert torch.equal(rope.apply(x, config=table, start=470), rope.apply(x, config=exact, start=470))
    with pytest.raises(ValueError, match="table"):
        rope.apply(x, config=table, start=480)  # positions 480..519 run past the table
