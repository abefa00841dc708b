"""librope's CUDA backend from Python: every entry point (rope.apply / apply_qk, rope_torch.rope with its
gradient, the HF and FlashAttention adapters) takes CUDA tensors and gives what the same call gives on
the CPU (which test_rope.py and test_adapters.py hold to float64 and to the peers), with positions as
CUDA tensors (int64 or int32), on the current stream, in and out of place. Bad device-side positions
are reported by rope.cuda_check. Skipped where there is no GPU or the package was built without CUDA."""
import pytest
import torch

from roformer import rope, rope_torch

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and rope.cuda_available()),
                                reason="no CUDA GPU, or roformer built without librope's CUDA backend")


def close(gpu, cpu, dtype=torch.float32):
    tol = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(gpu.cpu().float(), cpu.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_apply_qk_matches_the_cpu(layout, dtype):
    torch.manual_seed(0)
    config = rope.Config(128, layout=layout, rot_dim=96, rot_offset=16)
    q, k = torch.randn(2, 33, 8, 128).to(dtype), torch.randn(2, 33, 2, 128).to(dtype)
    cq, ck = rope.apply_qk(q, k, config=config, start=1000)
    gq, gk = rope.apply_qk(q.cuda(), k.cuda(), config=config, start=1000)
    assert gq.is_cuda and gk.is_cuda
    close(gq, cq, dtype)
    close(gk, ck, dtype)
    # In place, on strided (bhsd) views.
    qb = q.cuda().transpose(1, 2).contiguous().transpose(1, 2)
    rope.apply_qk(qb, k.cuda(), config=config, start=1000, inplace=True)
    close(qb, cq, dtype)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_positions_as_cuda_tensors(index_dtype):
    torch.manual_seed(1)
    config = rope.Config(64, layout="half")
    x = torch.randn(3, 17, 4, 64)
    ids = torch.randint(0, 1 << 30, (3, 17))
    starts = torch.tensor([5, 100000, 7 << 20])
    for kwargs_cpu, kwargs_gpu in [({"positions": ids}, {"positions": ids.to("cuda", index_dtype)}),
                                   ({"positions": starts}, {"positions": starts.to("cuda", index_dtype)})]:
        close(rope.apply(x.cuda(), config=config, **kwargs_gpu), rope.apply(x, config=config, **kwargs_cpu))
    packed = torch.randn(40, 4, 64)
    cu = torch.tensor([0, 7, 7, 30, 40])
    seq_starts = torch.tensor([0, 3, 1 << 28, 9])
    close(rope.apply(packed.cuda(), config=config, cu_seqlens=cu.to("cuda", index_dtype),
                     seq_starts=seq_starts.to("cuda", index_dtype)),
          rope.apply(packed, config=config, cu_seqlens=cu, seq_starts=seq_starts))


def test_positions_must_be_on_the_tensors_device():
    config = rope.Config(64)
    with pytest.raises(ValueError, match="GPU"):
        rope.apply(torch.randn(1, 4, 2, 64).cuda(), config=config, positions=torch.tensor([[0, 1, 2, 3]]).numpy())
    with pytest.raises(ValueError, match="cuda"):
        rope.apply_qk(torch.randn(1, 4, 2, 64).cuda(), torch.randn(1, 4, 2, 64), config=config)


def test_bad_device_positions_are_reported():
    config = rope.Config(64)
    y = rope.apply(torch.randn(1, 4, 2, 64).cuda(), config=config, positions=torch.tensor([[0, 1, -3, 2]]).cuda())
    with pytest.raises(ValueError, match=r"ids\[2\] = -3"):
        rope.cuda_check(config)
    assert torch.isnan(y[0, 2]).all() and not torch.isnan(y[0, 1]).any()
    rope.cuda_check(config)  # the record was cleared


def test_runs_on_the_current_stream():
    config = rope.Config(128, layout="half")
    x = torch.randn(4, 256, 8, 128)
    expected = rope.apply(x, config=config, start=3)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        xs = x.cuda(non_blocking=False)
        y = rope.apply(xs, config=config, start=3)
    stream.synchronize()
    close(y, expected)


def test_rope_torch_gradient_on_cuda():
    torch.manual_seed(2)
    config = rope.Config(64, layout="interleaved")
    x = torch.randn(2, 9, 3, 64, requires_grad=True)
    xg = x.detach().cuda().requires_grad_()
    y = rope_torch.rope(x, config, start=50)
    yg = rope_torch.rope(xg, config, start=50)
    close(yg.detach(), y.detach())
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (yg * w.cuda()).sum().backward()
    close(xg.grad, x.grad)


def test_hf_adapter_on_cuda_with_gqa():
    torch.manual_seed(3)
    config = rope.Config(128, layout="half", base=500000.0)
    q, k = torch.randn(2, 16, 11, 128), torch.randn(2, 4, 11, 128)  # [batch, heads, seq, dim]
    position_ids = torch.arange(11)[None] + 4000
    cq, ck = rope_torch.hf_apply_rotary_pos_emb(q, k, position_ids, config)
    gq, gk = rope_torch.hf_apply_rotary_pos_emb(q.cuda(), k.cuda(), position_ids.cuda(), config)
    close(gq, cq)
    close(gk, ck)


@pytest.mark.parametrize("inplace", [False, True])
def test_flash_adapter_packed_on_cuda(inplace):
    torch.manual_seed(4)
    config = rope.Config(64, layout="interleaved", rot_dim=32)
    x = torch.randn(25, 4, 64)
    cu = torch.tensor([0, 10, 25], dtype=torch.int32)
    offsets = torch.tensor([3, 70000], dtype=torch.int32)
    expected = rope_torch.flash_apply_rotary_emb(x.clone(), config, interleaved=True, inplace=inplace,
                                                 seqlen_offsets=offsets, cu_seqlens=cu)
    xg = x.cuda()
    got = rope_torch.flash_apply_rotary_emb(xg, config, interleaved=True, inplace=inplace,
                                            seqlen_offsets=offsets.cuda(), cu_seqlens=cu.cuda())
    close(got, expected)
    if inplace:
        close(xg, expected)
