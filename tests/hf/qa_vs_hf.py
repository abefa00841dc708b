"""`roformer finetune --task question-answering` against transformers 4.40.2, run_qa's feature preparation
and post-processing (utils_qa.postprocess_qa_predictions, copied below from transformers' examples) and
the official SQuAD v1.1 evaluation (evaluate-v1.1.py's functions, copied below), on a generated task over
the roformer-hf case1 fixture: "he said X" somewhere in a context of 8 to 45 words (upper case too),
question "he said ?", answer X (one or two words); 30% of the contexts say "he said" twice, and either
is the answer, so that no model is always right. With --max-length 32 and --doc-stride 8 most contexts
take several windows, and some answers lie in no window whole. Checks:
  - out/best loads with RoFormerForQuestionAnswering.from_pretrained (no weight missing or new);
  - transformers' features (BertTokenizerFast over the same vocab.txt: truncation only_second, stride,
    overflowing tokens, offsets, as prepare_validation_features) through transformers' model, post-processed
    by utils_qa, give our validation exact match and F1 at the best step (official v1.1 script, 1e-9);
  - our out/predictions.jsonl holds utils_qa's answer, its character span and probability (1e-4) for
    every test question;
  - the task is learnt (validation F1 >= 50).
Usage: qa_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import collections
import json
import random
import re
import string
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import numpy as np
import torch
from transformers import BertTokenizerFast, RoFormerForQuestionAnswering

roformer, fixtures, work = sys.argv[1:4]
model_dir = f"{fixtures}/case1_mlm_basic"
FILL = ["the", "quick", "brown", "Fox", "jump", "over", "lazy", "is", "and", "do", "Token", "the", "un", "it"]
ANSWERS = ["hello world", "yes", "stop", "love", "dog run", "OK", "rain"]
MAX_LENGTH, STRIDE = 32, 8


def example(rng, i):
    words = [rng.choice(FILL) for _ in range(rng.randint(8, 45))]
    said = rng.sample(ANSWERS, 2 if rng.random() < 0.3 else 1)  # a second "he said": no model is always right
    for answer in said:
        words.insert(rng.randint(0, len(words)), "he said " + answer)
    answer = rng.choice(said)
    context = " ".join(words)
    start = context.index("he said " + answer) + len("he said ")
    return {"id": f"q{i}", "question": "he said ?", "context": context,
            "answers": {"text": [answer], "answer_start": [start]}}


rng = random.Random(0)
for name, n in (("train", 400), ("val", 60), ("test", 20)):
    with open(f"{work}/{name}.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps(example(rng, i)) + "\n")

out = f"{work}/run"
subprocess.run([roformer, "finetune", "--task", "question-answering", "--model", model_dir,
                "--train", f"{work}/train.jsonl", "--validation", f"{work}/val.jsonl", "--test", f"{work}/test.jsonl",
                "--predict", "--out", out, "--epochs", "4", "--batch", "16", "--lr", "1e-3",
                "--max-length", str(MAX_LENGTH), "--doc-stride", str(STRIDE), "--threads", "1", "--no-progress"], check=True)
records = [json.loads(line) for line in open(f"{out}/metrics.jsonl") if '"val_f1"' in line]
best = max(records, key=lambda r: r["val_f1"])
print("best:", {k: best[k] for k in ("val_exact_match", "val_f1")})

tokenizer = BertTokenizerFast(f"{model_dir}/vocab.txt", do_lower_case=True)
model, info = RoFormerForQuestionAnswering.from_pretrained(f"{out}/best", output_loading_info=True)
model.eval()
failures = []
if any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")):
    failures.append(f"loading info {info}")


def features(examples):
    """run_qa's prepare_validation_features, without padding (each feature runs alone)."""
    enc = tokenizer([e["question"].lstrip() for e in examples], [e["context"] for e in examples],
                    truncation="only_second", max_length=MAX_LENGTH, stride=STRIDE, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding=False)
    out = []
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        out.append({"example_id": examples[enc["overflow_to_sample_mapping"][i]]["id"],
                    "input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
                    "offset_mapping": [o if seq[k] == 1 else None for k, o in enumerate(enc["offset_mapping"][i])]})
    return out


def postprocess_qa_predictions(examples, features, predictions, n_best_size=20, max_answer_length=30):
    """transformers' examples/pytorch/question-answering/utils_qa.py (v4.40), version_2_with_negative=False."""
    all_start_logits, all_end_logits = predictions
    example_id_to_index = {k["id"]: i for i, k in enumerate(examples)}
    features_per_example = collections.defaultdict(list)
    for i, feature in enumerate(features):
        features_per_example[example_id_to_index[feature["example_id"]]].append(i)
    all_predictions = collections.OrderedDict()
    for example_index, example in enumerate(examples):
        prelim_predictions = []
        for feature_index in features_per_example[example_index]:
            start_logits = all_start_logits[feature_index]
            end_logits = all_end_logits[feature_index]
            offset_mapping = features[feature_index]["offset_mapping"]
            start_indexes = np.argsort(start_logits)[-1: -n_best_size - 1: -1].tolist()
            end_indexes = np.argsort(end_logits)[-1: -n_best_size - 1: -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if (start_index >= len(offset_mapping) or end_index >= len(offset_mapping)
                            or offset_mapping[start_index] is None or len(offset_mapping[start_index]) < 2
                            or offset_mapping[end_index] is None or len(offset_mapping[end_index]) < 2):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim_predictions.append({
                        "offsets": (offset_mapping[start_index][0], offset_mapping[end_index][1]),
                        "score": start_logits[start_index] + end_logits[end_index],
                        "start_logit": start_logits[start_index], "end_logit": end_logits[end_index]})
        predictions = sorted(prelim_predictions, key=lambda x: x["score"], reverse=True)[:n_best_size]
        context = example["context"]
        for pred in predictions:
            offsets = pred["offsets"]
            pred["text"] = context[offsets[0]: offsets[1]]
        if len(predictions) == 0 or (len(predictions) == 1 and predictions[0]["text"] == ""):
            predictions.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        scores = np.array([pred.pop("score") for pred in predictions])
        exp_scores = np.exp(scores - np.max(scores))
        probs = exp_scores / exp_scores.sum()
        for prob, pred in zip(probs, predictions):
            pred["probability"] = prob
        all_predictions[example["id"]] = predictions[0]
    return all_predictions


def normalize_answer(s):  # evaluate-v1.1.py
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def f1_score(prediction, ground_truth):
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def answers_of(path):
    examples = [json.loads(line) for line in open(path)]
    feats = features(examples)
    starts, ends = [], []
    for f in feats:
        with torch.no_grad():
            o = model(input_ids=torch.tensor([f["input_ids"]]), token_type_ids=torch.tensor([f["token_type_ids"]]))
        starts.append(o.start_logits[0].numpy())
        ends.append(o.end_logits[0].numpy())
    return examples, postprocess_qa_predictions(examples, feats, (starts, ends))


val, val_answers = answers_of(f"{work}/val.jsonl")
em = 100 * sum(max(normalize_answer(val_answers[e["id"]]["text"]) == normalize_answer(g) for g in e["answers"]["text"])
               for e in val) / len(val)
f1 = 100 * sum(max(f1_score(val_answers[e["id"]]["text"], g) for g in e["answers"]["text"]) for e in val) / len(val)
print(f"transformers + utils_qa + evaluate-v1.1 on the validation set: exact_match {em:.4f}, f1 {f1:.4f}")
for name, want in (("val_exact_match", em), ("val_f1", f1)):
    if abs(best[name] - want) > 1e-9:
        failures.append(f"{name}: ours {best[name]}, transformers {want}")
test, test_answers = answers_of(f"{work}/test.jsonl")
ours = [json.loads(line) for line in open(f"{out}/predictions.jsonl")]
if len(ours) != len(test):
    failures.append(f"{len(ours)} predictions for {len(test)} test rows")
worst = 0.0
for e, got in zip(test, ours):
    want = test_answers[e["id"]]
    span = [want["offsets"][0], want["offsets"][1]] if "offsets" in want else None
    if got["id"] != e["id"] or got["answer"] != want["text"] or [got.get("start"), got.get("end")] != (span or [None, None]):
        failures.append(f"test line {got['line']}: ours {got}, utils_qa {want['text']!r} at {span}")
    worst = max(worst, abs(got["probability"] - float(want["probability"])))
print(f"max |ours - utils_qa| over the test answers' probabilities: {worst:.2e}")
if worst > 1e-4:
    failures.append(f"probabilities differ by {worst:.2e}")
if best["val_f1"] < 50:
    failures.append(f"validation f1 {best['val_f1']:.1f} < 60: the task was not learnt")
print("\n".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
