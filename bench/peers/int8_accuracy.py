#!/usr/bin/env python3
"""int8 accuracy of a fine-tuned RoFormer classifier, ours beside ONNX Runtime's (issue 15).

    build/hf-venv/bin/python bench/peers/int8_accuracy.py --roformer build/release/tools/roformer \
        --model runs/int8/ft/best --test data/vader-movies/test.jsonl

The model directory is a Hugging Face RoFormerForSequenceClassification (what `roformer finetune`
writes). Every engine classifies the same test sentences ({"sentence", "label"} JSON lines):
- ours: `roformer classify` with fp32 linear layers and with `--quantize int8`;
- PyTorch 1.13 + transformers 4.40.2 in fp32 (the reference);
- ONNX Runtime: a graph torch.onnx.export wrote from the same model, in fp32 and after
  onnxruntime.quantization.quantize_dynamic (per-channel s8 weights, u8 activations).
Printed as a Markdown table: test accuracy, the share of sentences whose int8 label equals the same
engine's fp32 label, and for ours the cosine between fp32 and int8 sentence embeddings
(`roformer embed`, [CLS]), smallest and mean. Inputs longer than the model's positions are cut there.
With --bf16 (CPUs with AVX512-BF16 or AMX), the same for ours with `--quantize bf16` beside PyTorch under
torch.autocast(bfloat16); ONNX Runtime's CPU provider has no bf16 matmul.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--text-column", default="sentence")
    ap.add_argument("--label-column", default="label")
    ap.add_argument("--max-length", type=int, help="default: the model's max_position_embeddings, where ours cuts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="add ours --quantize bf16 and PyTorch bf16 autocast")
    return ap.parse_args()


def ours(args, texts, command, quantize):
    """`roformer classify|embed` on texts, one JSON object per line back."""
    cmd = [args.roformer, command, "--model", args.model, "--input-format", "text", "--threads", str(args.threads),
           "--quantize", quantize]
    res = subprocess.run(cmd, input="\n".join(texts) + "\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    if res.returncode != 0:
        sys.exit("%s failed: %s" % (" ".join(cmd), res.stderr))
    return [json.loads(l) for l in res.stdout.splitlines()]


def main():
    args = parse_args()
    import numpy as np
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import BertTokenizer, RoFormerForSequenceClassification

    rows = [json.loads(l) for l in open(args.test) if l.strip()]
    texts = [r[args.text_column].replace("\n", " ") for r in rows]
    gold = [str(r[args.label_column]) for r in rows]
    torch.set_num_threads(args.threads)
    model = RoFormerForSequenceClassification.from_pretrained(args.model).eval()
    # RoFormerTokenizer is BertTokenizer plus jieba (rjieba) for Chinese words; these are English texts,
    # so BertTokenizer on the same vocab.txt and casing gives the same ids without rjieba.
    with open(os.path.join(args.model, "tokenizer_config.json")) as f:
        lower = json.load(f).get("do_lower_case", True)
    tok = BertTokenizer(os.path.join(args.model, "vocab.txt"), do_lower_case=lower)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    if args.max_length is None:
        args.max_length = model.config.max_position_embeddings
    enc = tok(texts, truncation=True, max_length=args.max_length)
    # Our tokeniser cuts at the model's positions; both sides see the same ids when no text is longer.
    lengths = [len(ids) for ids in enc["input_ids"]]

    def batches(size=32):
        for i in range(0, len(texts), size):
            ids = enc["input_ids"][i:i + size]
            width = max(len(x) for x in ids)
            pad = lambda x: x + [tok.pad_token_id] * (width - len(x))
            yield (np.array([pad(x) for x in ids], dtype=np.int64),
                   np.array([[1] * len(x) + [0] * (width - len(x)) for x in ids], dtype=np.int64))

    preds = {}
    for name, bf16 in (("PyTorch fp32", False), ("PyTorch bf16", True)):
        if bf16 and not args.bf16:
            continue
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = []
            for ids, mask in batches():
                logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
                out += [id2label[int(k)] for k in logits.float().argmax(-1)]
            preds[name] = out

    with tempfile.TemporaryDirectory() as tmp:
        fp32_path, int8_path = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "model.int8.onnx")
        ids, mask = next(batches(2))
        with torch.no_grad():
            torch.onnx.export(model, (torch.from_numpy(ids), torch.from_numpy(mask)), fp32_path,
                              input_names=["input_ids", "attention_mask"], output_names=["logits"], opset_version=14,
                              dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"},
                                            "logits": {0: "b"}})
        quantize_dynamic(fp32_path, int8_path, per_channel=True, weight_type=QuantType.QInt8)
        for name, path in (("ONNX Runtime fp32", fp32_path), ("ONNX Runtime int8", int8_path)):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            out = []
            for ids, mask in batches():
                logits = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
                out += [id2label[int(k)] for k in logits.argmax(-1)]
            preds[name] = out

    preds["ours fp32"] = [r["label"] for r in ours(args, texts, "classify", "none")]
    preds["ours int8"] = [r["label"] for r in ours(args, texts, "classify", "int8")]
    e32 = np.array([r["embedding"] for r in ours(args, texts, "embed", "none")])
    e8 = np.array([r["embedding"] for r in ours(args, texts, "embed", "int8")])
    cosine = lambda a, b: (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    cos = cosine(e32, e8)
    if args.bf16:
        preds["ours bf16"] = [r["label"] for r in ours(args, texts, "classify", "bf16")]
        cos16 = cosine(e32, np.array([r["embedding"] for r in ours(args, texts, "embed", "bf16")]))

    accuracy = {k: sum(p == g for p, g in zip(v, gold)) / len(gold) for k, v in preds.items()}
    agree = lambda a, b: sum(x == y for x, y in zip(preds[a], preds[b])) / len(gold)
    print("# int8 accuracy: a fine-tuned RoFormer classifier (%d test sentences, longest %d tokens)\n"
          % (len(gold), max(lengths)))
    print("Model: `%s`; %d threads; onnxruntime %s, torch %s.\n" % (args.model, args.threads, ort.__version__,
                                                                   torch.__version__))
    print("| engine | test accuracy | int8 − fp32 (points) | labels equal to the engine's fp32 |")
    print("|---|---|---|---|")
    print("| PyTorch fp32 (reference) | %.4f | | |" % accuracy["PyTorch fp32"])
    for engine in ("ours", "ONNX Runtime"):
        a32, a8 = accuracy[engine + " fp32"], accuracy[engine + " int8"]
        print("| %s fp32 | %.4f | | %.4f vs PyTorch |" % (engine, a32, agree(engine + " fp32", "PyTorch fp32")))
        print("| %s int8 | %.4f | %+.2f | %.4f |" % (engine, a8, 100 * (a8 - a32), agree(engine + " int8", engine + " fp32")))
    if args.bf16:
        for engine, ref in (("ours", "ours fp32"), ("PyTorch", "PyTorch fp32")):
            a32, a16 = accuracy[ref], accuracy[engine + " bf16"]
            print("| %s bf16 | %.4f | %+.2f (bf16 − fp32) | %.4f |" % (engine, a16, 100 * (a16 - a32),
                                                                      agree(engine + " bf16", ref)))
    print("\nOurs, [CLS] embeddings of the same sentences, int8 against fp32: cosine min %.5f, mean %.5f."
          % (cos.min(), cos.mean()))
    if args.bf16:
        print("Ours, bf16 against fp32: cosine min %.5f, mean %.5f." % (cos16.min(), cos16.mean()))


if __name__ == "__main__":
    main()
