"""`roformer ner` and `roformer qa` against transformers 4.40.2's token-classification and question-answering
pipelines, on RoFormerForTokenClassification / RoFormerForQuestionAnswering checkpoints that transformers
initialises at random over the roformer-hf case1 fixture's config and saves (the heads' weights scaled up
so that predictions are confident and varied). The pipelines get BertTokenizerFast over the same
vocab.txt (they need a fast tokenizer's offsets); the texts are ASCII, upper case, digits and punctuation,
where it tokenises as our RoFormer tokenizer does. Checks, for every input:
  - ner with each aggregation_strategy (none, simple, first, average, max): the same entities in the same
    order, with equal labels, words, character spans (and token index for none), scores within 1e-4;
  - qa (contexts split into windows by max_seq_len 24 and doc_stride 6) with top_k 1 and 3, with and
    without handle_impossible_answer: the same answers, spans and scores within 1e-4;
  - `roformer serve` on each checkpoint answers huggingface_hub's InferenceClient.token_classification
    and .question_answering (POST /), and /token-classification with parameters, with the pipelines' outputs.
Usage: pipelines_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # InferenceClient calls the local server (the hub is never
    os.environ.pop(name, None)                     # reached: the models are objects and local directories)
import rjieba_shim  # noqa: F401,E402  (before transformers)
import torch
import huggingface_hub
from transformers import (BertTokenizerFast, RoFormerConfig, RoFormerForQuestionAnswering,
                          RoFormerForTokenClassification, pipeline)

roformer, fixtures, work = sys.argv[1:4]
fixture = f"{fixtures}/case1_mlm_basic"
WORDS = ["the", "Quick", "brown", "FOX", "jumps", "over", "lazy", "dog", "hello", "World", "runs", "42", "7",
         "un", "believ", "able", "said", "ok", "yes", "stop", "love", "token", "is", "and", "do", "Cafe"]
PUNCT = [",", ".", "!", "?", "(", ")", "'", "-"]
rng = random.Random(0)


def sentence(lo, hi):
    out = []
    for _ in range(rng.randint(lo, hi)):
        w = rng.choice(WORDS)
        if rng.random() < 0.2:
            w += rng.choice(PUNCT)
        if rng.random() < 0.1:
            w += rng.choice(WORDS)  # a glued word: several pieces
        out.append(w)
    return " ".join(out)


def save(model, name):
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith(("classifier", "qa_outputs")):
                p.mul_(40)
    path = f"{work}/{name}"
    model.save_pretrained(path)
    shutil.copy(f"{fixture}/vocab.txt", path)  # HF's defaults otherwise: RoFormerTokenizer, uncased
    return path


torch.manual_seed(0)
config = RoFormerConfig.from_pretrained(fixture)
labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]
config.id2label = dict(enumerate(labels))
config.label2id = {l: i for i, l in enumerate(labels)}
ner_dir = save(RoFormerForTokenClassification(config).eval(), "ner")
torch.manual_seed(0)
qa_config = RoFormerConfig.from_pretrained(fixture)
qa_dir = save(RoFormerForQuestionAnswering(qa_config).eval(), "qa")
tokenizer = BertTokenizerFast(f"{fixture}/vocab.txt", do_lower_case=True)
failures = []


def ours(command, model_dir, lines, *flags):
    path = f"{work}/{command}.in"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = subprocess.run([roformer, command, "--model", model_dir, "--input", path, "--threads", "1", *flags],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def same(kind, got, want, keys):
    if len(got) != len(want):
        failures.append(f"{kind}: {len(got)} results for {len(want)}: ours {got}, transformers {want}")
        return 0.0
    worst = 0.0
    for g, w in zip(got, want):
        if any(g.get(k) != w.get(k) for k in keys):
            failures.append(f"{kind}: ours {g}, transformers {w}")
        worst = max(worst, abs(g["score"] - float(w["score"])))
    return worst


texts = [sentence(3, 14) for _ in range(80)]
model = RoFormerForTokenClassification.from_pretrained(ner_dir).eval()
for strategy in ("none", "simple", "first", "average", "max"):
    pipe = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=strategy)
    got = ours("ner", ner_dir, texts, "--aggregation-strategy", strategy)
    worst, entities, punctuated = 0.0, 0, 0
    for text, g in zip(texts, got):
        want = pipe(text)
        keys = ("entity", "index", "word", "start", "end") if strategy == "none" else ("entity_group", "word", "start", "end")
        worst = max(worst, same(f"ner {strategy} {text!r}", g, want, keys))
        entities += len(want)
        punctuated += sum(any(p in e["word"] for p in ".,!?'") and len(e["word"]) > 1 for e in want)
    print(f"ner --aggregation-strategy {strategy}: {entities} entities over {len(texts)} texts "
          f"({punctuated} words joined across punctuation), max score difference {worst:.2e}")
    if worst > 1e-4:
        failures.append(f"ner {strategy}: scores differ by {worst:.2e}")

questions = [{"question": sentence(1, 4), "context": sentence(8, 40)} for _ in range(30)]
model = RoFormerForQuestionAnswering.from_pretrained(qa_dir).eval()
pipe = pipeline("question-answering", model=model, tokenizer=tokenizer)
for top_k in (1, 3):
    for impossible in (False, True):
        flags = ["--max-seq-len", "24", "--doc-stride", "6", "--top-k", str(top_k)] + (["--handle-impossible-answer"] if impossible else [])
        got = ours("qa", qa_dir, [json.dumps(q) for q in questions], *flags)
        worst = 0.0
        for q, g in zip(questions, got):
            want = pipe(question=q["question"], context=q["context"], max_seq_len=24, doc_stride=6, top_k=top_k,
                        handle_impossible_answer=impossible)
            want = want if isinstance(want, list) else [want]
            g = g if isinstance(g, list) else [g]
            worst = max(worst, same(f"qa top_k {top_k} impossible {impossible} {q}", g, want, ("answer", "start", "end")))
        print(f"qa --top-k {top_k}{' --handle-impossible-answer' if impossible else ''}: {len(questions)} questions, "
              f"max score difference {worst:.2e}")
        if worst > 1e-4:
            failures.append(f"qa top_k {top_k}: scores differ by {worst:.2e}")


class Server:
    def __init__(self, model_dir):
        self.log = open(f"{work}/serve.log", "w+")
        self.process = subprocess.Popen([roformer, "serve", "--model", model_dir, "--port", "0", "--threads", "1"],
                                        stderr=self.log)
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                return
            time.sleep(0.1)
        raise AssertionError("the server did not start")

    def post(self, route, body):
        request = urllib.request.Request(self.url + route, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request).read())

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=60) == 0


model = RoFormerForTokenClassification.from_pretrained(ner_dir).eval()
server = Server(ner_dir)
try:
    hub = huggingface_hub.InferenceClient(model=server.url)
    simple = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple")
    first = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="first")
    worst = 0.0
    for text in texts[:10]:
        got = [{"entity_group": e.entity_group, "score": e.score, "word": e.word, "start": e.start, "end": e.end}
               for e in hub.token_classification(text)]
        worst = max(worst, same(f"serve token_classification {text!r}", got, simple(text),
                                ("entity_group", "word", "start", "end")))
        got = server.post("/token-classification", {"inputs": [text], "parameters": {"aggregation_strategy": "FIRST"}})[0]
        worst = max(worst, same(f"serve first {text!r}", got, first(text), ("entity_group", "word", "start", "end")))
        got = server.post("/token-classification", {"inputs": text, "parameters": {"ignore_labels": []}})
        worst = max(worst, same(f"serve ignore_labels [] {text!r}", got, simple(text, ignore_labels=[]),
                                ("entity_group", "word", "start", "end")))
    print(f"serve: InferenceClient.token_classification and /token-classification, max score difference {worst:.2e}")
finally:
    server.stop()
model = RoFormerForQuestionAnswering.from_pretrained(qa_dir).eval()
pipe = pipeline("question-answering", model=model, tokenizer=tokenizer)
server = Server(qa_dir)
try:
    hub = huggingface_hub.InferenceClient(model=server.url)
    worst = 0.0
    for q in questions[:10]:
        a = hub.question_answering(question=q["question"], context=q["context"])
        got = [{"answer": a.answer, "score": a.score, "start": a.start, "end": a.end}]
        worst = max(worst, same(f"serve question_answering {q}", got, [pipe(**q)], ("answer", "start", "end")))
        got = server.post("/question-answering", {"inputs": [q], "parameters": {"top_k": 2, "max_seq_len": 24, "doc_stride": 6}})
        want = pipe([q], top_k=2, max_seq_len=24, doc_stride=6)
        if isinstance(got, list) != isinstance(want, list):
            failures.append(f"serve /question-answering shape: ours {got}, transformers {want}")
        got, want = (x if isinstance(x, list) else [x] for x in (got, want))
        worst = max(worst, same(f"serve /question-answering {q}", got, want, ("answer", "start", "end")))
    try:
        server.post("/question-answering", {"inputs": {"question": "", "context": "he said so"}})
        failures.append("an empty question was answered")
    except urllib.error.HTTPError as e:
        if e.code != 422 or "`question` cannot be empty" not in e.read().decode():
            failures.append(f"an empty question: {e.code}")
    print(f"serve: InferenceClient.question_answering and /question-answering, max score difference {worst:.2e}")
finally:
    server.stop()
print("\n".join(failures[:20]) if failures else "ok")
sys.exit(1 if failures else 0)
