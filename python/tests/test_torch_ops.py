"""roformer.rope_torch.rope as the PyTorch custom op torch.ops.roformer.rope (PyTorch >= 2.4): opcheck
(schema, fake tensor, autograd registration, AOT dispatch), gradcheck and gradgradcheck in float64,
torch.compile with fullgraph=True (no graph break) against eager. scripts/python-test.sh runs this file
in a venv with PyTorch from PyPI; the Debian venv (PyTorch 1.13, no custom ops) leaves it out."""
import json

import numpy as np
import torch

from reference import rotate
from roformer import rope, rope_torch

CFG = rope.Config(16, layout="half", scaling="yarn:2:32")


def test_the_op_passes_opcheck():
    base = torch.randn(2, 3, 7, 16)  # [batch, heads, seq, dim]
    pos = torch.tensor([[0, 5, 9, 100, 3, 2, 1], [1, 1, 2, 5000, 8, 9, 10]])
    cu = torch.tensor([0, 3, 7])
    spec = CFG.spec
    cases = [
        (torch.randn(2, 7, 3, 16, requires_grad=True), spec, 11, None, None, False, False),
        (base.transpose(1, 2).requires_grad_(), spec, 0, pos, None, True, False),  # strided, explicit ids
        (torch.randn(7, 3, 16, dtype=torch.float64, requires_grad=True), spec, 0, None, cu, False, True),  # packed
        (torch.randn(1, 4, 2, 16).to(torch.bfloat16), spec, 3, None, None, False, False),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.roformer.rope.default, args)


def test_gradients_are_the_inverse_rotation_to_second_order():
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 4, 9, 100, 3], [1, 1, 2, 5000, 8]])
    assert torch.autograd.gradcheck(lambda t: rope_torch.rope(t, CFG, positions=pos, key=True), (x,))
    assert torch.autograd.gradgradcheck(lambda t: rope_torch.rope(t, CFG, start=7), (x,))
    g = torch.randn_like(x)
    (rope_torch.rope(x, CFG, start=7) * g).sum().backward()
    expected = rotate(g.numpy(), np.arange(7, 12), rope.inv_freq(CFG), "half", inverse=True,
                      factor=rope.attention_factor(CFG))
    assert np.abs(x.grad.numpy() - expected).max() < 1e-12


def test_torch_compile_traces_the_op_without_a_graph_break():
    def block(q, k, config):  # a scaled dot product with both rotations: the graph compiles whole
        q, k = rope_torch.rope(q, config, start=5), rope_torch.rope(k, config, start=5, key=True)
        return torch.einsum("bthd,bshd->bhts", q, k) / 4.0

    q, k = torch.randn(2, 9, 3, 16), torch.randn(2, 9, 3, 16)
    compiled = torch.compile(block, fullgraph=True)
    for config in (CFG, rope.Config(16, base=500.0), CFG):  # another configuration is another graph
        torch.testing.assert_close(compiled(q, k, config), block(q, k, config))


def test_a_config_travels_as_its_json():
    spec = json.dumps({**json.loads(CFG.spec), "base": 500.0}, sort_keys=True)  # a Config never made here
    x = torch.randn(1, 4, 2, 16)
    got = torch.ops.roformer.rope(x, spec, 2, None, None, False, False)
    want = rope.apply(x, config=rope.Config(16, layout="half", scaling="yarn:2:32", base=500.0), start=2)
    assert torch.equal(got, want)
