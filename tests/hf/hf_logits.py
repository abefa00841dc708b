#!/usr/bin/env python3
"""Runs a roformer.cpp checkpoint through Hugging Face transformers and writes the reference outputs.

Usage: hf_logits.py CHECKPOINT_DIR OUT.safetensors [--seq T] [--batch B] [--seed S]

CHECKPOINT_DIR holds config.json and model.safetensors as `roformer train` writes them. The model is
loaded with RoFormerForMaskedLM.from_pretrained, or RoFormerForCausalLM when config.json's
architectures says so, put in eval mode, and run on a fixed random batch (B rows of T tokens, row 1
right-padded through attention_mask, token_type_ids all 0). OUT gets the same tensors, names, dtypes
and layout as the fixtures in ../shared/fixtures/roformer-hf (see their README): input_ids,
token_type_ids, attention_mask (I64); embedding_output, hidden_states (L+1, B, T, H), attentions
(L, B, n, T, T), last_hidden_state, logits, sinusoidal_pos (F32). tests/model/roformer_parity_test.cc
compares our forward pass with them (ROFORMER_ROUNDTRIP_DIR).

Exit status: 0 written; 1 the checkpoint does not load cleanly into transformers (a missing,
unexpected or misshaped weight: transformers would have initialised something at random or dropped
a tensor); 2 the checkpoint is not HF-compatible by construction (position_encoding other than
"rope", rope_theta other than 10000, rope_layout other than "interleaved"): transformers' RoFormer
has none of these options. It ignores the fields and applies interleaved base-10000 RoPE anyway: a
sinusoidal/learned/none checkpoint loads with only a "newly initialized:
['roformer.encoder.embed_positions.weight']" warning (learned: the position table is also dropped as
an unexpected key), a rope_theta/rope_layout one loads without any warning, and either computes
something other than the trained model.
Pass --allow-incompatible to run such a checkpoint anyway (to see what transformers does).
"""
import argparse
import json
import logging
import os
import sys

# HF-compatible values of our config.json extensions. transformers' RoFormer always applies
# interleaved RoPE with base 10000 and has no absolute position embeddings.
HF_COMPATIBLE = {"position_encoding": "rope", "rope_theta": 10000.0, "rope_layout": "interleaved"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=32, help="tokens per row (capped at max_position_embeddings)")
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20241122)
    ap.add_argument("--allow-incompatible", action="store_true",
                    help="run a non-rope / non-default-RoPE checkpoint anyway")
    args = ap.parse_args()

    with open(os.path.join(args.checkpoint, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    incompatible = [f"{k}={json.dumps(cfg[k])} (transformers' RoFormer only does {json.dumps(v)})"
                    for k, v in HF_COMPATIBLE.items() if k in cfg and cfg[k] != v]
    if incompatible:
        msg = (f"{args.checkpoint}: not loadable as a Hugging Face RoFormer: " + "; ".join(incompatible) +
               ". transformers' RoFormer ignores these config fields and always applies interleaved RoPE "
               "with base 10000, so it would compute something other than the trained model (for a "
               "non-rope checkpoint it only warns that roformer.encoder.embed_positions.weight is newly "
               "initialised; for rope_theta/rope_layout it says nothing).")
        if not args.allow_incompatible:
            print("hf_logits: " + msg, file=sys.stderr)
            return 2
        print("hf_logits: warning: " + msg + " (--allow-incompatible: running anyway)", file=sys.stderr)

    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import RoFormerForCausalLM, RoFormerForMaskedLM

    architectures = cfg.get("architectures") or ["RoFormerForMaskedLM"]
    classes = {"RoFormerForMaskedLM": RoFormerForMaskedLM, "RoFormerForCausalLM": RoFormerForCausalLM}
    if len(architectures) != 1 or architectures[0] not in classes:
        print(f"hf_logits: {args.checkpoint}: architectures {architectures} is not one of {list(classes)}",
              file=sys.stderr)
        return 1
    cls = classes[architectures[0]]
    if (cls is RoFormerForCausalLM) != bool(cfg.get("is_decoder", False)):
        print(f"hf_logits: {args.checkpoint}: {architectures[0]} with is_decoder={cfg.get('is_decoder')}",
              file=sys.stderr)
        return 1

    # Collect every warning transformers logs while loading (missing/unexpected keys, config
    # oddities), print them, and treat the missing/unexpected/mismatched ones as failures.
    transformers.logging.set_verbosity_warning()
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(level=logging.WARNING)
    hf_logger = transformers.logging.get_logger("transformers")
    hf_logger.addHandler(handler)
    try:
        model, info = cls.from_pretrained(args.checkpoint, output_loading_info=True)
    finally:
        hf_logger.removeHandler(handler)
    for r in records:
        print(f"hf_logits: transformers {r.levelname.lower()}: {r.getMessage()}", file=sys.stderr)
    problems = {k: info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
                if info.get(k)}
    if problems:
        for k, v in problems.items():
            print(f"hf_logits: {args.checkpoint}: {k}: {v}", file=sys.stderr)
        print(f"hf_logits: FAIL: {cls.__name__}.from_pretrained did not load every weight from the "
              "checkpoint (newly initialised or dropped tensors)", file=sys.stderr)
        return 1
    model.eval()
    c = model.config
    torch.set_num_threads(1)  # tiny models; the machine is shared

    B = args.batch
    T = min(args.seq, c.max_position_embeddings)
    g = torch.Generator().manual_seed(args.seed)
    low = 1 if c.vocab_size > 1 else 0
    input_ids = torch.randint(low, c.vocab_size, (B, T), generator=g, dtype=torch.int64)
    attention_mask = torch.ones(B, T, dtype=torch.int64)
    if B > 1 and T > 1:  # row 1 right-padded to about 60% of its length
        valid = max(1, (3 * T) // 5)
        attention_mask[1, valid:] = 0
        input_ids[1, valid:] = c.pad_token_id
    token_type_ids = torch.zeros(B, T, dtype=torch.int64)

    captured = {}
    hook = model.roformer.embeddings.register_forward_hook(lambda mod, inp, out: captured.setdefault("emb", out))
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                    output_hidden_states=True, output_attentions=True, return_dict=True,
                    **({"use_cache": False} if cls is RoFormerForCausalLM else {}))
    hook.remove()

    hidden = torch.stack(out.hidden_states)  # (L+1, B, T, H); 0 = encoder input (after embeddings_project)
    tensors = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "embedding_output": captured["emb"],
        "hidden_states": hidden,
        "attentions": torch.stack(out.attentions),  # (L, B, n, T, T)
        "last_hidden_state": out.hidden_states[-1],
        "logits": out.logits,
        "sinusoidal_pos": model.roformer.encoder.embed_positions.weight[:T],
    }
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    for k in ("embedding_output", "hidden_states", "attentions", "last_hidden_state", "logits", "sinusoidal_pos"):
        tensors[k] = tensors[k].to(torch.float32)
    if not all(torch.isfinite(tensors[k]).all() for k in ("hidden_states", "attentions", "logits")):
        print("hf_logits: FAIL: transformers produced non-finite outputs", file=sys.stderr)
        return 1
    save_file(tensors, args.out, metadata={"format": "pt"})
    print(f"hf_logits: {cls.__name__} (transformers {transformers.__version__}, torch {torch.__version__}) "
          f"on B={B} T={T}: logits {tuple(out.logits.shape)}, |logits| max {out.logits.abs().max().item():.4g} "
          f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
