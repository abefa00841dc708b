#!/usr/bin/env python3
"""PyTorch peer benchmark for RoFormer training throughput, side by side with our trainer.

It trains the same model as ours (src/model/roformer.cc, the Hugging Face RoFormer architecture)
in plain PyTorch eager mode and reports tokens/s, ms/step, achieved GFLOP/s and peak RSS, so that
our trainer's figures can be compared on the same machine, config, batch, sequence length and
thread count. Run it with the interpreter that carries Debian's `python3-torch` (1.13 on the dev
machine), i.e. /usr/bin/python3, NOT the pyenv `python3` on PATH:

    /usr/bin/python3 bench/peers/roformer_torch.py --preset small --threads 2
    /usr/bin/python3 bench/peers/roformer_torch.py --preset large --threads 1 --json torch.json
    /usr/bin/python3 bench/peers/roformer_torch.py --sweep --json torch.json     # small,large x 1,2 threads
    /usr/bin/python3 bench/peers/roformer_torch.py --sweep --ours ours.json      # + ratios to ours
    /usr/bin/python3 bench/peers/roformer_torch.py --hidden 64 --layers 1 --heads 2 --ff 128 \
        --seq 32 --steps 3                                                      # tiny smoke run
    /usr/bin/python3 bench/peers/roformer_torch.py --self-test                 # RoPE/mask/loss checks
    /usr/bin/python3 bench/peers/roformer_torch.py --sweep --precision bf16    # bf16 autocast

Only torch and the standard library are used.

Model (HF RoFormer, fp32; shapes B batch, T tokens, V vocab, H hidden = E embedding size, I ff,
L layers, n heads of D = H/n):
  word Embedding(V, H) + token-type Embedding(2, H) (all type 0) -> LayerNorm(eps 1e-12)
  L post-LN blocks:
    q, k, v = Linear(H, H) (with bias); interleaved RoPE on q and k: pairs (2i, 2i+1) rotated by
      m*theta_i, theta_i = 10000^(-2i/D), positions m = 0..T-1, built as HF RoFormer's sinusoidal
      table (sin | cos halves, each repeated per pair) and its apply_rotary_position_embeddings;
    scores = q k^T / sqrt(D) (+ causal mask, -inf above the diagonal, for --task clm; no mask for
      mlm), fused as one torch.baddbmm; softmax; @ v (--attention eager), or all of it in one
      torch.nn.functional.scaled_dot_product_attention call (--attention sdpa: is_causal for clm,
      attention dropout inside; auto, the default: sdpa on PyTorch >= 2.0, where the CPU flash
      kernel takes it unless there is dropout, eager on 1.13); Linear(H, H) + residual -> LayerNorm;
    Linear(H, I) -> exact GELU -> Linear(I, H) + residual -> LayerNorm
  head: Linear(H, E) -> GELU -> LayerNorm -> decoder = word embedding weight (tied) + bias(V)
  dropout: --dropout (default 0, so the comparison is pure compute) on embeddings, attention
    probabilities and both block outputs, as HF places it.
  init: HF (normal std 0.02 for Linear/Embedding weights, zero biases, LayerNorm 1/0).
Loss: --task clm (default): cross-entropy of the logits at positions 0..T-1 against the next
  tokens 1..T of a (B, T+1) random token batch. --task mlm: the first T tokens, BERT corruption:
  each position selected with p 0.15; of those 80% -> [MASK] (id 0), 10% -> random id, 10% kept;
  cross-entropy over the selected positions (labels -100 elsewhere, ignore_index -100).
  Logits are computed at every position for both tasks.
Precision: --precision fp32 (default) or bf16: the forward and the loss under
  torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's recommended CPU mixed precision (its linear
  layers and matmuls run oneDNN's bf16 kernels, with bf16 outputs; softmax, LayerNorm and the loss in
  fp32), the backward outside it, fp32 parameters, gradients and optimizer; no loss scaling.
Optimizer: torch.optim.AdamW(lr 1e-3, betas (0.9, 0.999), eps 1e-8), weight_decay 0.01 on the
  weight matrices and embeddings, 0 on biases and LayerNorm parameters; foreach implementation
  (--optim-impl foreach, the faster one on CPU; `single` = the per-tensor loop); gradients
  clipped to global norm 1.0 (torch.nn.utils.clip_grad_norm_); zero_grad(set_to_none=True).
Data: random token batches, uniform over [0, V), from a fixed seed (--seed), generated before
  the timed region (one fresh batch per step; --repeat-batch reuses the first one, which a
  correct trainer memorises: the loss must fall).

PyTorch's best settings: OMP_WAIT_POLICY=PASSIVE (idle OpenMP workers sleep instead of
spinning between ops). It must be in the environment before torch (libgomp) loads, so if it is not
PASSIVE the script re-executes itself with it set. With it, OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS are set to --threads (Debian's torch calls the system OpenBLAS, whose OpenMP
build shares torch's libgomp), and in-process torch.set_num_threads(threads) and
torch.set_num_interop_threads(1). Eager mode (torch.compile does not exist in 1.13).

Timing: --warmup steps (default 3), then --steps timed steps (default 20); one step = forward +
backward + clip + optimizer step + zero_grad, with loss.item() read every step. The wall time of
the timed steps as a whole is measured (time.perf_counter).
  tokens/s   = B * T * steps / wall time of the timed steps
  ms/step    = wall time / steps (also the median and minimum of the per-step times)
  FLOPs/token (the formula, documented so ours can use the same one):
    matmul weights  W = L*(4*H*H + 2*H*I) + H*E + E*V     (q,k,v,o; ff in, out; head dense; tied decoder)
    forward         F = 2*W + 4*L*T*H                      (QK^T and AV: 2*T*H each per layer per
                                                            token; the causal mask is NOT discounted)
    training        3*F                                    (backward = 2x forward)
  GFLOP/s    = tokens/s * 3*F / 1e9 (embedding lookups, elementwise ops, softmax, LayerNorm and
               the optimizer are not counted)
  peak RSS   = VmHWM of the process (MiB; peer_common.py), i.e. including the
               Python interpreter and torch's libraries (rss_before_model_mib reports that base).
  loss first / last: the loss of the first warm-up step and of the last timed step (sanity: about
               ln V at init for random tokens).

Output: a table on stdout; --json PATH writes
  {"tool": "bench/peers/roformer_torch.py", "torch_version": str, "python": str,
   "omp_wait_policy": str, "cpu_count": int, "blas": str,
   "runs": [{"preset": "small"|"large"|"custom", "task": "clm"|"mlm",
             "hidden", "layers", "heads", "ff", "vocab", "batch", "seq", "threads",
             "interop_threads", "steps", "warmup", "dropout", "optim_impl", "repeat_batch", "precision",
             "attention": "sdpa"|"eager", "sdpa_backend": the kernel SDPA picks ("FLASH_ATTENTION",
             "MATH", ...) or null,
             "params", "matmul_params", "flops_per_token", "tokens_per_s", "ms_per_step",
             "ms_per_step_median", "ms_per_step_min", "gflops", "loss_first", "loss_last",
             "peak_rss_mib", "rss_before_model_mib", "wall_s"}]}
--sweep runs small and large x threads 1 and 2 (override with --presets / --thread-list), each in
a fresh subprocess of this script (so peak RSS is per run), and prints one table.

--ours PATH: our trainer's figures for the same configs, printed side by side with ratios. Schema
(a subset of this script's own --json output, which is therefore accepted too):
  {"runs": [{"preset": "small", "threads": 2, "tokens_per_s": 6000.0, "peak_rss_mib": 120.5}, ...]}
A run of ours matches a run here when "preset" and "threads" are equal and every optional key it
also carries ("task", "batch", "seq", "vocab", "hidden", "layers", "heads", "ff") is equal too.
ours/torch > 1 means ours is faster (tok/s) or, for memory, uses more (we want it < 1).
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from peer_common import peak_rss_mib, rss_now_mib

PRESETS = {  # name: (hidden, layers, heads, ff)
    "small": (256, 4, 4, 1024),
    "large": (512, 6, 8, 2048),
}
TORCH_FIGURES = {  # tok/s measured for PyTorch 1.13 (the requirement), seq 256, batch 8, vocab 256
    ("small", 2): 5716.0,
    ("large", 2): 1087.0,
}
MATCH_KEYS = ("task", "batch", "seq", "vocab", "hidden", "layers", "heads", "ff", "precision")
_REEXEC_MARK = "ROFORMER_TORCH_PEER_REEXEC"


def default_threads():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Run with /usr/bin/python3 (Debian python3-torch). "
                                        "The module docstring documents the formulas and the JSON.")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="small = 256/4/4/1024, large = 512/6/8/2048")
    ap.add_argument("--hidden", type=int, help="d_model (default: small preset's 256)")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--ff", type=int, help="intermediate size")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=default_threads(),
                    help="intra-op threads (default: all cores available, %(default)s)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--task", choices=("clm", "mlm"), default="clm")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--optim-impl", choices=("foreach", "single"), default="foreach")
    ap.add_argument("--attention", choices=("auto", "sdpa", "eager"), default="auto",
                    help="sdpa: torch.nn.functional.scaled_dot_product_attention (PyTorch >= 2.0; on the CPU its "
                         "flash kernel); eager: baddbmm, softmax, bmm (HF RoFormer's formulation); auto: sdpa where "
                         "this torch has it, else eager")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--repeat-batch", action="store_true",
                    help="train on the same batch every step (the loss must fall: a correctness check)")
    ap.add_argument("--print-losses", action="store_true", help="print the loss of every step")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--ours", metavar="PATH", help="our figures (JSON, see the docstring) to print side by side")
    ap.add_argument("--sweep", action="store_true",
                    help="presets x thread counts, each in a fresh process, one table")
    ap.add_argument("--presets", default="small,large", help="--sweep: presets (default small,large)")
    ap.add_argument("--thread-list", default="1,2", help="--sweep: thread counts (default 1,2)")
    ap.add_argument("--self-test", action="store_true", help="check RoPE, the causal mask and the loss, then exit")
    args = ap.parse_args(argv)

    dims = (args.hidden, args.layers, args.heads, args.ff)
    if args.preset:
        base = PRESETS[args.preset]
        explicit = [d for d, b in zip(dims, base) if d is not None and d != b]
        if explicit:
            ap.error("--preset %s conflicts with an explicit --hidden/--layers/--heads/--ff" % args.preset)
        args.hidden, args.layers, args.heads, args.ff = base
    else:
        base = PRESETS["small"]
        args.hidden, args.layers, args.heads, args.ff = (d if d is not None else b for d, b in zip(dims, base))
        match = [p for p, v in PRESETS.items() if v == (args.hidden, args.layers, args.heads, args.ff)]
        args.preset = match[0] if match else "custom"
    for name in ("hidden", "layers", "heads", "ff", "vocab", "batch", "seq", "threads", "steps"):
        if getattr(args, name) <= 0:
            ap.error("--%s must be positive" % name)
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.hidden % args.heads or (args.hidden // args.heads) % 2:
        ap.error("--hidden must split into --heads heads of even size")
    if not 0.0 <= args.dropout < 1.0:
        ap.error("--dropout must be in [0, 1)")
    return args


# ----------------------------------------------------------------------------------------------
# Environment: OMP_WAIT_POLICY=PASSIVE (and thread counts) before torch loads
# ----------------------------------------------------------------------------------------------

ARGS = parse_args() if __name__ == "__main__" else None

if ARGS is not None and not ARGS.sweep:
    _want = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(ARGS.threads),
             "OPENBLAS_NUM_THREADS": str(ARGS.threads)}
    if any(os.environ.get(k) != v for k, v in _want.items()):
        if os.environ.get(_REEXEC_MARK):  # pragma: no cover - defensive, avoids a loop
            sys.exit("roformer_torch.py: could not set %s" % _want)
        env = dict(os.environ, **_want)
        env[_REEXEC_MARK] = "1"
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

try:
    import torch  # noqa: E402
    import torch.nn as nn  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:  # pragma: no cover - depends on the interpreter
    sys.exit("roformer_torch.py: cannot import torch with %s; run it with the interpreter that has "
             "PyTorch (on Debian: /usr/bin/python3 with python3-torch installed)" % sys.executable)


def blas_library():
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({l.split()[-1] for l in f if "blas" in l.split()[-1]})
        return ", ".join(libs) or "?"
    except OSError:
        return "?"


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def sinusoidal_table(T, D, dtype=torch.float32):
    """HF RoFormerSinusoidalPositionalEmbedding: [T, D], sin(m*theta_i) in the first half, cos in
    the second, theta_i = 10000^(-2i/D) (HF: position_enc[m, j] = m / 10000^(2*(j//2)/D))."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    inv = torch.pow(10000.0, -2.0 * torch.arange(D // 2, dtype=torch.float64) / D)[None, :]
    ang = pos * inv
    return torch.cat((ang.sin(), ang.cos()), dim=-1).to(dtype)


def rope_tables(T, D, dtype=torch.float32):
    """cos_pos, sin_pos [T, 1, D] as HF's apply_rotary_position_embeddings builds them
    (stack([sin, sin], -1).reshape: each value repeated for the two lanes of its pair), with a
    singleton head axis for q, k laid out [B, T, n, D]."""
    sin, cos = sinusoidal_table(T, D, dtype).chunk(2, dim=-1)
    sin_pos = torch.stack((sin, sin), dim=-1).reshape(T, D)
    cos_pos = torch.stack((cos, cos), dim=-1).reshape(T, D)
    return cos_pos[:, None, :], sin_pos[:, None, :]


def apply_rope(x, cos_pos, sin_pos):
    """HF RoFormerSelfAttention.apply_rotary_position_embeddings for one tensor [..., D]:
    (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin) for each pair (2i, 2i+1)."""
    rot = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).reshape_as(x)
    return x * cos_pos + rot * sin_pos


def has_sdpa():
    return hasattr(F, "scaled_dot_product_attention")


def resolve_attention(attention):
    """--attention auto|sdpa|eager to sdpa or eager (idempotent); sdpa needs PyTorch >= 2.0."""
    if attention == "auto":
        return "sdpa" if has_sdpa() else "eager"
    if attention == "sdpa" and not has_sdpa():
        sys.exit("roformer_torch.py: --attention sdpa needs PyTorch >= 2.0 (this is %s)" % torch.__version__)
    return attention


class Block(nn.Module):
    def __init__(self, H, n, I, eps, dropout, attention="eager"):
        super().__init__()
        self.n, self.D = n, H // n
        self.attention = attention
        self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
        self.attn_out = nn.Linear(H, H)
        self.attn_ln = nn.LayerNorm(H, eps=eps)
        self.ff_in, self.ff_out = nn.Linear(H, I), nn.Linear(I, H)
        self.out_ln = nn.LayerNorm(H, eps=eps)
        self.p = dropout

    def forward(self, h, cos_pos, sin_pos, mask):
        B, T, H = h.shape
        n, D = self.n, self.D
        q = apply_rope(self.query(h).view(B, T, n, D), cos_pos, sin_pos)
        k = apply_rope(self.key(h).view(B, T, n, D), cos_pos, sin_pos)
        v = self.value(h).view(B, T, n, D)
        if self.attention == "sdpa":  # (B, n, T, D); the causal mask as is_causal, dropout inside
            ctx = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 dropout_p=self.p if self.training else 0.0,
                                                 is_causal=mask is not None)
            return self.after_attention(h, ctx.transpose(1, 2).reshape(B, T, H))
        q = q.transpose(1, 2).reshape(B * n, T, D)
        kt = k.permute(0, 2, 3, 1).reshape(B * n, D, T)
        v = v.transpose(1, 2).reshape(B * n, T, D)
        # scale and mask fused into the GEMM; for mlm (mask None) beta=0 ignores the input
        if mask is not None:
            # .to: a no-op but in the self-test's float64 (which PyTorch 2 no longer mixes with float32)
            scores = torch.baddbmm(mask.to(q.dtype), q, kt, alpha=1.0 / math.sqrt(D))
        else:
            scores = torch.baddbmm(q.new_empty(1, 1, 1), q, kt, beta=0.0, alpha=1.0 / math.sqrt(D))
        probs = torch.softmax(scores, dim=-1)
        if self.p:
            probs = F.dropout(probs, self.p, self.training)
        ctx = torch.bmm(probs, v).view(B, n, T, D).transpose(1, 2).reshape(B, T, H)
        return self.after_attention(h, ctx)

    def after_attention(self, h, ctx):
        """The output dense, residual LayerNorm and feed-forward on the context ctx (B, T, H)."""
        a = self.attn_out(ctx)
        if self.p:
            a = F.dropout(a, self.p, self.training)
        a = self.attn_ln(a + h)
        f = self.ff_out(F.gelu(self.ff_in(a)))
        if self.p:
            f = F.dropout(f, self.p, self.training)
        return self.out_ln(f + a)


class RoFormer(nn.Module):
    """HF RoFormerForMaskedLM / RoFormerForCausalLM (embedding_size = hidden_size)."""

    def __init__(self, V, H, L, n, I, eps=1e-12, dropout=0.0, type_vocab=2, attention="eager"):
        super().__init__()
        self.H, self.n, self.p = H, n, dropout
        self.word = nn.Embedding(V, H)
        self.token_type = nn.Embedding(type_vocab, H)
        self.emb_ln = nn.LayerNorm(H, eps=eps)
        self.layers = nn.ModuleList(Block(H, n, I, eps, dropout, attention) for _ in range(L))
        self.head_dense = nn.Linear(H, H)
        self.head_ln = nn.LayerNorm(H, eps=eps)
        self.decoder_bias = nn.Parameter(torch.zeros(V))
        self._tables = {}
        for m in self.modules():  # HF RoFormerPreTrainedModel._init_weights
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def constants(self, T, causal):
        key = (T, causal)
        if key not in self._tables:
            cos_pos, sin_pos = rope_tables(T, self.H // self.n)
            mask = torch.full((T, T), float("-inf")).triu_(1) if causal else None
            self._tables[key] = (cos_pos, sin_pos, mask)
        return self._tables[key]

    def forward(self, ids, causal):
        B, T = ids.shape
        cos_pos, sin_pos, mask = self.constants(T, causal)
        x = self.word(ids) + self.token_type.weight[0]  # token types all 0
        h = self.emb_ln(x)
        if self.p:
            h = F.dropout(h, self.p, self.training)
        for layer in self.layers:
            h = layer(h, cos_pos, sin_pos, mask)
        # .to(h.dtype): a no-op without autocast; under bf16 autocast it keeps the LayerNorm in fp32, as PyTorch 2's
        # CPU autocast does by itself (1.13's refuses a bf16 input with fp32 weights).
        t = self.head_ln(F.gelu(self.head_dense(h)).to(h.dtype))
        return F.linear(t, self.word.weight, self.decoder_bias)  # tied decoder


def matmul_params(H, L, I, V, E=None):
    E = H if E is None else E
    return L * (4 * H * H + 2 * H * I) + H * E + E * V


def flops_per_token(H, L, I, V, T):
    """Training FLOPs per token: 3 * (2 * matmul weights + 4 * L * T * H)."""
    return 3 * (2 * matmul_params(H, L, I, V) + 4 * L * T * H)


def make_batches(args, count):
    """(ids, labels) per step; ids [B, T], labels [B, T] (clm: the next tokens; mlm: -100 except
    at the selected positions). Generated from a fixed seed, outside the timed region."""
    g = torch.Generator().manual_seed(args.seed)
    B, T, V = args.batch, args.seq, args.vocab
    out = []
    for _ in range(1 if args.repeat_batch else count):
        tok = torch.randint(0, V, (B, T + 1), generator=g)
        if args.task == "clm":
            out.append((tok[:, :T].contiguous(), tok[:, 1:].contiguous()))
            continue
        ids = tok[:, :T].clone()
        sel = torch.rand(B, T, generator=g) < 0.15
        labels = torch.where(sel, ids, torch.full_like(ids, -100))
        r = torch.rand(B, T, generator=g)
        ids[sel & (r < 0.8)] = 0  # [MASK]
        rnd = sel & (r >= 0.8) & (r < 0.9)
        ids[rnd] = torch.randint(0, V, (int(rnd.sum()),), generator=g)
        out.append((ids, labels))
    return out * count if args.repeat_batch else out


def build(args):
    torch.manual_seed(args.seed)
    model = RoFormer(args.vocab, args.hidden, args.layers, args.heads, args.ff, dropout=args.dropout,
                     attention=resolve_attention(args.attention))
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)  # biases, LayerNorm (1-D): no decay
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            foreach=(args.optim_impl == "foreach"))
    return model, opt


def train_step(model, opt, params, ids, labels, causal, V, precision="fp32"):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = model(ids, causal)
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def run_one(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (only possible when imported as a module)
        pass
    rss0 = rss_now_mib()
    model, opt = build(args)
    params = [p for p in model.parameters()]
    causal = args.task == "clm"
    batches = make_batches(args, args.warmup + args.steps)
    losses, step_s = [], []
    for i in range(args.warmup):
        ids, labels = batches[i]
        losses.append(train_step(model, opt, params, ids, labels, causal, args.vocab, args.precision))
    t0 = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        ids, labels = batches[i]
        s0 = time.perf_counter()
        losses.append(train_step(model, opt, params, ids, labels, causal, args.vocab, args.precision))
        step_s.append(time.perf_counter() - s0)
    wall = time.perf_counter() - t0
    if args.print_losses:
        print("losses: " + " ".join("%.4f" % l for l in losses))
    tokens = args.batch * args.seq * args.steps
    backend = None
    if args.attention == "sdpa":  # the kernel its calls take: q, k, v as the blocks pass them, in the autocast type
        shape = (args.batch, args.heads, args.seq, args.hidden // args.heads)
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        from roformer_sdpa import sdpa_backend  # PyTorch >= 2.0 only
        backend = sdpa_backend(*(torch.zeros(shape, dtype=dtype) for _ in range(3)), None, causal, args.dropout)
    fpt = flops_per_token(args.hidden, args.layers, args.ff, args.vocab, args.seq)
    tps = tokens / wall
    return {
        "preset": args.preset, "task": args.task, "hidden": args.hidden, "layers": args.layers,
        "heads": args.heads, "ff": args.ff, "vocab": args.vocab, "batch": args.batch, "seq": args.seq,
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "steps": args.steps, "warmup": args.warmup, "dropout": args.dropout,
        "optim_impl": args.optim_impl, "repeat_batch": args.repeat_batch, "precision": args.precision,
        "attention": args.attention, "sdpa_backend": backend,
        "params": sum(p.numel() for p in params),
        "matmul_params": matmul_params(args.hidden, args.layers, args.ff, args.vocab),
        "flops_per_token": fpt, "tokens_per_s": tps, "ms_per_step": wall * 1e3 / args.steps,
        "ms_per_step_median": statistics.median(step_s) * 1e3, "ms_per_step_min": min(step_s) * 1e3,
        "gflops": tps * fpt / 1e9, "loss_first": losses[0], "loss_last": losses[-1],
        "peak_rss_mib": peak_rss_mib(), "rss_before_model_mib": rss0, "wall_s": wall,
    }


# ----------------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------------

def self_test():
    torch.manual_seed(0)
    D, T = 16, 40
    cos_pos, sin_pos = rope_tables(T, D, torch.float64)
    x = torch.randn(T, 1, D, dtype=torch.float64)
    # 1. the pair rotation by m * theta_i, theta_i = 10000^(-2i/D), on pairs (2i, 2i+1)
    y = apply_rope(x, cos_pos, sin_pos)
    theta = 10000.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None, None] * theta
    a, b = x[..., 0::2], x[..., 1::2]
    ref = torch.stack((a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()), -1).flatten(-2)
    assert torch.allclose(y, ref, atol=1e-12), "RoPE != explicit pair rotation"
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1)), "RoPE is not a rotation"
    # 2. relative positions: <R_m q, R_n k> depends only on n - m
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    rq = apply_rope(q.expand(T, 1, D), cos_pos, sin_pos)[:, 0]  # q rotated at every position
    rk = apply_rope(k.expand(T, 1, D), cos_pos, sin_pos)[:, 0]
    s = rq @ rk.T  # s[m, n]
    for delta in range(-(T - 1), T):
        diag = torch.diagonal(s, offset=delta)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-10), "score depends on m, not n-m"
    assert not torch.allclose(s[0, 0], s[0, 1]), "RoPE has no effect"
    # 3. the HF table layout: sin in the first half, cos in the second, position 0 = (0..0, 1..1)
    tab = sinusoidal_table(T, D, torch.float64)
    assert torch.equal(tab[0], torch.cat((torch.zeros(D // 2), torch.ones(D // 2))).double())
    print("RoPE: pair rotation, norm, scores depend only on n-m, HF table layout: ok")

    # 4. causal mask: the logits at t do not change when a later token does; mlm: they do
    V, H, L, n, I, B, Tm = 32, 16, 2, 2, 32, 2, 12
    model = RoFormer(V, H, L, n, I).double()
    ids = torch.randint(0, V, (B, Tm))
    ids2 = ids.clone()
    ids2[:, 7] = (ids2[:, 7] + 1) % V
    with torch.no_grad():
        c1, c2 = model(ids, True), model(ids2, True)
        m1, m2 = model(ids, False), model(ids2, False)
    assert torch.allclose(c1[:, :7], c2[:, :7], atol=1e-12), "causal: a future token leaked"
    assert not torch.allclose(c1[:, 7:], c2[:, 7:]), "causal: the changed token has no effect"
    assert not torch.allclose(m1[:, :7], m2[:, :7]), "mlm: attention is not bidirectional"
    # the fused attention equals the textbook one (HF: softmax(q k^T / sqrt(D) + mask) v)
    blk = model.layers[0]
    h = torch.randn(B, Tm, H, dtype=torch.float64)
    cp, sp, mask = model.constants(Tm, True)
    cp, sp, mask = cp.double(), sp.double(), mask.double()
    with torch.no_grad():
        got = blk(h, cp, sp, mask)
        D2 = H // n
        qq = apply_rope(blk.query(h).view(B, Tm, n, D2), cp, sp).transpose(1, 2)
        kk = apply_rope(blk.key(h).view(B, Tm, n, D2), cp, sp).transpose(1, 2)
        vv = blk.value(h).view(B, Tm, n, D2).transpose(1, 2)
        att = torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(D2) + mask, -1)
        ctx = (att @ vv).transpose(1, 2).reshape(B, Tm, H)
        a = blk.attn_ln(blk.attn_out(ctx) + h)
        want = blk.out_ln(blk.ff_out(F.gelu(blk.ff_in(a))) + a)
    assert torch.allclose(got, want, atol=1e-12), "fused attention != reference"
    print("attention: causal mask (clm), bidirectional (mlm), fused == reference: ok")
    if has_sdpa():  # the SDPA blocks give the eager ones' outputs, causal and not
        for m in (mask, None):
            blk.attention = "sdpa"
            with torch.no_grad():
                got_sdpa = blk(h, cp, sp, m)
            blk.attention = "eager"
            with torch.no_grad():
                got_eager = blk(h, cp, sp, m)
            assert torch.allclose(got_sdpa, got_eager, atol=1e-10), "sdpa attention != eager"
        print("attention: scaled_dot_product_attention == eager, causal and not: ok")

    # 5. loss at init ~ ln V; 30 steps on one repeated batch: the loss falls
    for task in ("clm", "mlm"):
        args = parse_args(["--hidden", "64", "--layers", "1", "--heads", "2", "--ff", "128", "--seq", "32",
                           "--vocab", "64", "--batch", "4", "--task", task, "--repeat-batch",
                           "--warmup", "0", "--steps", "30", "--threads", str(torch.get_num_threads())])
        model, opt = build(args)
        params = list(model.parameters())
        batches = make_batches(args, 30)
        losses = [train_step(model, opt, params, i, l, task == "clm", args.vocab) for i, l in batches]
        assert abs(losses[0] - math.log(args.vocab)) < 0.3, "%s: initial loss %.3f != ln V" % (task, losses[0])
        assert losses[-1] < 0.75 * losses[0], "%s: loss did not fall: %s" % (task, losses)
        assert all(b < a for a, b in zip(losses, losses[1:])), "%s: loss not decreasing: %s" % (task, losses)
        print("%s: loss %.3f (ln V = %.3f) -> %.3f after 30 steps on one batch: ok"
              % (task, losses[0], math.log(args.vocab), losses[-1]))
    print("self-test: ok")


# ----------------------------------------------------------------------------------------------
# Ours, printing, sweep
# ----------------------------------------------------------------------------------------------

def load_ours(path):
    with open(path) as f:
        doc = json.load(f)
    runs = doc.get("runs") if isinstance(doc, dict) else doc
    return [r for r in (runs or []) if isinstance(r, dict)]


def match_ours(ours, run):
    for r in ours:
        if r.get("preset") != run["preset"] or r.get("threads") != run["threads"]:
            continue
        if all(r[k] == run[k] for k in MATCH_KEYS if k in r and r[k] is not None):
            return r
    return None


def _num(v):
    try:
        v = float(v)
        return v if math.isfinite(v) and v > 0 else None
    except (TypeError, ValueError):
        return None


def print_table(header, rows, left=()):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header, ["-" * w for w in widths]] + rows:
        print("  ".join((str(x).ljust(w) if i in left else str(x).rjust(w))
                        for i, (x, w) in enumerate(zip(r, widths))).rstrip())


def report(runs, ours):
    header = ["config", "task", "B", "T", "thr", "params", "MFLOP/tok", "tok/s", "ms/step", "min ms",
              "GFLOP/s", "peak MiB", "loss first->last"]
    rows = []
    for r in runs:
        cfg = "%s %d/%d/%d/%d V%d" % (r["preset"], r["hidden"], r["layers"], r["heads"], r["ff"], r["vocab"])
        rows.append([cfg, "%s %s %s" % (r["task"], r.get("precision", "fp32"), r.get("attention", "eager")), r["batch"], r["seq"], r["threads"], "%.2fM" % (r["params"] / 1e6),
                     "%.2f" % (r["flops_per_token"] / 1e6), "%.0f" % r["tokens_per_s"],
                     "%.1f" % r["ms_per_step"], "%.1f" % r["ms_per_step_min"], "%.1f" % r["gflops"],
                     "%.0f" % r["peak_rss_mib"], "%.3f -> %.3f" % (r["loss_first"], r["loss_last"])])
    print("PyTorch %s (config = preset hidden/layers/heads/ff; tok/s = B*T*steps / wall time of the timed steps)"
          % torch.__version__)
    print_table(header, rows, left=(0, 1, 12))
    known = [(r, TORCH_FIGURES[(r["preset"], r["threads"])]) for r in runs
             if (r["preset"], r["threads"]) in TORCH_FIGURES and r["task"] == "clm"
             and (r["batch"], r["seq"], r["vocab"]) == (8, 256, 256)]
    if known:
        print("reference figures (PyTorch 1.13, 2 threads): "
              + "; ".join("%s %.0f tok/s (here %.0f)" % (r["preset"], v, r["tokens_per_s"]) for r, v in known))
    if ours is None:
        return
    print()
    print("Side by side with ours (ours/torch tok/s > 1: ours faster; ours/torch memory must be < 1)")
    header = ["config", "thr", "torch tok/s", "ours tok/s", "ours/torch", "torch MiB", "ours MiB",
              "mem ours/torch", "mem below"]
    rows = []
    for r in runs:
        o = match_ours(ours, r)
        r["ours"] = o
        ot, om = (_num(o.get("tokens_per_s")), _num(o.get("peak_rss_mib"))) if o else (None, None)
        rows.append(["%s %s %s %s" % (r["preset"], r["task"], r.get("precision", "fp32"), r.get("attention", "eager")),
                     r["threads"], "%.0f" % r["tokens_per_s"],
                     "%.0f" % ot if ot else "-", "%.2fx" % (ot / r["tokens_per_s"]) if ot else "-",
                     "%.0f" % r["peak_rss_mib"], "%.0f" % om if om else "-",
                     "%.2f" % (om / r["peak_rss_mib"]) if om else "-",
                     ("yes" if om < r["peak_rss_mib"] else "NO") if om else "-"])
    print_table(header, rows, left=(0,))


def passthrough(args):
    out = []
    for name in ("vocab", "batch", "seq", "steps", "warmup", "task", "dropout", "lr", "seed", "optim_impl",
                 "precision", "attention"):
        out += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.repeat_batch:
        out.append("--repeat-batch")
    return out


def sweep(args):
    presets = [p for p in args.presets.split(",") if p]
    bad = [p for p in presets if p not in PRESETS]
    if bad:
        sys.exit("unknown preset(s) %s (choose from %s)" % (",".join(bad), ",".join(PRESETS)))
    threads = [int(t) for t in args.thread_list.split(",") if t]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in presets:
            for th in threads:
                path = os.path.join(tmp, "%s_t%d.json" % (p, th))
                cmd = [sys.executable, os.path.abspath(__file__), "--preset", p, "--threads", str(th),
                       "--json", path] + passthrough(args)
                print("running: %s ..." % " ".join(cmd[1:]), flush=True)
                res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if res.returncode != 0:
                    sys.stdout.write(res.stdout)
                    sys.exit("run failed: %s" % " ".join(cmd))
                with open(path) as f:
                    r = json.load(f)["runs"][0]
                print("  %.0f tok/s, %.1f ms/step, peak %.0f MiB" % (r["tokens_per_s"], r["ms_per_step"],
                                                                    r["peak_rss_mib"]), flush=True)
                runs.append(r)
    return runs


def main(args):
    if args.self_test:
        torch.set_num_threads(args.threads)
        self_test()
        return
    args.attention = resolve_attention(args.attention)  # once: what the runs (and a sweep's children) get
    ours = load_ours(args.ours) if args.ours else None
    print("torch %s, python %s (%s), %s, %d cpus, OMP_WAIT_POLICY=%s, OMP_NUM_THREADS=%s, blas %s"
          % (torch.__version__, platform.python_version(), sys.executable, platform.machine(),
             os.cpu_count() or 0, os.environ.get("OMP_WAIT_POLICY", "(per run: PASSIVE)"),
             os.environ.get("OMP_NUM_THREADS", "(per run)"), blas_library()), flush=True)
    if args.sweep:
        runs = sweep(args)
        print()
    else:
        print("%s: hidden %d, layers %d, heads %d, ff %d, vocab %d, batch %d, seq %d, threads %d, task %s, "
              "attention %s, %d warm-up + %d timed steps"
              % (args.preset, args.hidden, args.layers, args.heads, args.ff, args.vocab, args.batch, args.seq,
                 args.threads, args.task, args.attention, args.warmup, args.steps), flush=True)
        runs = [run_one(args)]
    report(runs, ours)
    if args.json:
        doc = {"tool": "bench/peers/roformer_torch.py", "torch_version": torch.__version__,
               "python": sys.executable, "omp_wait_policy": "PASSIVE", "cpu_count": os.cpu_count(),
               "blas": blas_library(),
               "flops_formula": "3 * (2 * (L*(4*H*H + 2*H*I) + H*E + E*V) + 4*L*T*H) per token",
               "runs": runs}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("\nwrote %s" % args.json)


if __name__ == "__main__":
    main(ARGS)
