"""Every task head against transformers 4.40.2: for RoFormerFor{SequenceClassification,
TokenClassification,QuestionAnswering,MultipleChoice}, a randomly initialised model saved with
save_pretrained (safetensors, and pytorch_model.bin for one) is run by `roformer forward` on a padded
batch, and our head_logits must equal transformers' outputs at |ours - HF| <= 1e-5 + 1e-4·|HF|:
  sequence classification: logits (B, L);
  token classification:    logits (B, T, L);
  question answering:      start_logits and end_logits (B, T) = our (B, T, 2)[..., 0] and [..., 1];
  multiple choice:         logits (E, C) from inputs (E, C, T) = our (E·C, 1) rows.
The check can fail: a perturbed head weight must make the comparison fail.
Usage: heads_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (RoFormerConfig, RoFormerForMultipleChoice, RoFormerForQuestionAnswering,
                          RoFormerForSequenceClassification, RoFormerForTokenClassification)

roformer, _fixtures, work = sys.argv[1:4]
torch.manual_seed(0)


def config(**extra):
    return RoFormerConfig(vocab_size=97, embedding_size=24, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=48, max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu",
                          rotary_value=False, **extra)


def batch(rows, T):
    ids = torch.randint(1, 97, (rows, T))
    mask = torch.ones(rows, T, dtype=torch.long)
    for r in range(rows):  # padding on every other row
        n = T - (r % 3)
        mask[r, n:] = 0
        ids[r, n:] = 0
    types = torch.zeros(rows, T, dtype=torch.long)
    types[:, T // 2:] = 1
    return ids, mask, types


def ours(model_dir, ids, mask, types, name):
    inputs = f"{work}/{name}_in.safetensors"
    out = f"{work}/{name}_out.safetensors"
    save_file({"input_ids": ids.contiguous(), "attention_mask": mask.contiguous(), "token_type_ids": types.contiguous()},
              inputs)
    subprocess.run([roformer, "forward", "--model", model_dir, "--inputs", inputs, "--out", out, "--threads", "1"],
                   check=True)
    return load_file(out)["head_logits"].double()


def close(a, b):
    return a.shape == b.shape and bool(((a - b).abs() <= 1e-5 + 1e-4 * b.abs()).all())


failures = 0


def check(name, got, want):
    global failures
    err = (got - want).abs().max().item() if got.shape == want.shape else float("inf")
    ok = close(got, want)
    print(f"{name}: shape {tuple(got.shape)}, max |ours - HF| {err:.2e} {'ok' if ok else 'FAIL'}")
    failures += not ok


E, C, T, B = 3, 4, 11, 5
cases = [
    ("sequence_classification", RoFormerForSequenceClassification(config(num_labels=3)), False),
    ("token_classification", RoFormerForTokenClassification(
        config(num_labels=5, id2label={i: t for i, t in enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])},
               label2id={t: i for i, t in enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])})), False),
    ("question_answering", RoFormerForQuestionAnswering(config()), True),  # also as pytorch_model.bin
    ("multiple_choice", RoFormerForMultipleChoice(config()), False),
]
for name, model, as_bin in cases:
    model.eval()
    model_dir = f"{work}/{name}"
    model.save_pretrained(model_dir, safe_serialization=not as_bin)
    rows = E * C if name == "multiple_choice" else B
    ids, mask, types = batch(rows, T)
    with torch.no_grad():
        if name == "multiple_choice":
            out = model(input_ids=ids.view(E, C, T), attention_mask=mask.view(E, C, T), token_type_ids=types.view(E, C, T))
            want = out.logits.double().reshape(E * C, 1)
        else:
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
            want = (torch.stack([out.start_logits, out.end_logits], -1) if name == "question_answering"
                    else out.logits).double()
    check(name, ours(model_dir, ids, mask, types, name), want)

# The comparison can fail: one head weight changed by 1e-2.
model = cases[1][1]
with torch.no_grad():
    model.classifier.weight[0, 0] += 1e-2
    model.save_pretrained(f"{work}/perturbed")
    ids, mask, types = batch(B, T)
    want = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.double()
    model.classifier.weight[0, 0] -= 1e-2
    model.save_pretrained(f"{work}/perturbed")
if close(ours(f"{work}/perturbed", ids, mask, types, "perturbed"), want):
    print("a perturbed classifier weight went unnoticed: FAIL")
    failures += 1
print("ok" if failures == 0 else f"{failures} failures")
sys.exit(1 if failures else 0)
