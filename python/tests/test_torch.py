"""roformer.rope on PyTorch tensors: zero-copy in place, bfloat16, and the autograd Function
(gradcheck in float64; gradients equal the float64 formula's)."""
import numpy as np
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
