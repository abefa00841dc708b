"""roformer.Model and roformer.Tokenizer against the roformer-hf fixtures (transformers 4.40.2's outputs,
within the fixtures' tolerance 1e-5 + 1e-4·|HF|: forward and embed) and against the command line
(`roformer embed`, `similarity`, `fill-mask`, `classify`: the same numbers); threads (settable, the
same results at 1 and 2, two Python threads on one Model, the GIL released during compute).
ROFORMER_FIXTURES and ROFORMER_CLI locate them (scripts/python-test.sh sets both); the tests that need
the command line skip without it, or fail when ROFORMER_REQUIRE_CLI is set (CI)."""
import json
import os
import shutil
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import roformer

FIXTURES = os.environ.get("ROFORMER_FIXTURES", os.path.join(os.path.dirname(__file__), "../../../shared/fixtures/roformer-hf"))
CLI = os.environ.get("ROFORMER_CLI", "")
CASE1 = os.path.join(FIXTURES, "case1_mlm_basic")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(t["shape"])
    return out


def close(actual, expected):
    return np.all(np.abs(actual - expected) <= 1e-5 + 1e-4 * np.abs(expected))


def fixture_io(case):
    return read_safetensors(os.path.join(FIXTURES, case, "io.safetensors"))


@pytest.mark.parametrize("case", ["case1_mlm_basic", "case2_embproj_rotary_value", "case3_seq_eq_max_positions"])
def test_forward_matches_transformers(case):
    io = fixture_io(case)
    m = roformer.Model.from_pretrained(os.path.join(FIXTURES, case))
    out = m.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"])
    assert out["last_hidden_state"].shape == io["last_hidden_state"].shape
    assert close(out["last_hidden_state"], io["last_hidden_state"])
    assert close(out["logits"], io["logits"])


def test_tokenizer_matches_transformers():
    tok = roformer.Tokenizer.from_pretrained(os.path.join(FIXTURES, "tokenizer"))
    cases = json.load(open(os.path.join(FIXTURES, "tokenizer", "cases.json"), encoding="utf-8"))
    for c in cases:
        assert tok.tokenize(c["text"]) == c["tokens"], c["text"]
        assert tok(c["text"])["input_ids"] == c["input_ids"], c["text"]
    enc = tok("hello world", "今天天气", max_length=6)
    assert len(enc["input_ids"]) == 6 and enc["token_type_ids"][-1] == 1


# Texts whose tokens are rows 0 and 1 of case1's inputs (single segments: token types 0).
FIXTURE_TEXTS = ["brown l:？非常[MASK] ok world f中", "[MASK] 4 bo，"]


def test_embed_matches_transformers():
    io, m = fixture_io("case1_mlm_basic"), roformer.Model.from_pretrained(CASE1)
    tok = roformer.Tokenizer.from_pretrained(CASE1)
    hidden, mask = io["last_hidden_state"].astype(np.float64), io["attention_mask"]
    for r, text in enumerate(FIXTURE_TEXTS):
        assert tok(text)["input_ids"] == io["input_ids"][r][mask[r] == 1].tolist()  # the fixture's tokens
    cls = m.embed(FIXTURE_TEXTS, pooling="cls")
    assert close(cls, hidden[:2, 0])
    mean = m.embed(FIXTURE_TEXTS, pooling="mean", normalize=True)
    expected = np.stack([hidden[r][mask[r] == 1].mean(axis=0) for r in range(2)])  # over the real tokens
    assert close(mean, expected / np.linalg.norm(expected, axis=1, keepdims=True))


@pytest.fixture
def cli():
    """The roformer binary: the test skips without it, unless ROFORMER_REQUIRE_CLI is set (CI)."""
    if not CLI:
        if os.environ.get("ROFORMER_REQUIRE_CLI"):
            pytest.fail("ROFORMER_REQUIRE_CLI is set but ROFORMER_CLI (the roformer binary) is not")
        pytest.skip("ROFORMER_CLI (the roformer binary) is not set")
    return CLI


def run_cli(*args, stdin=""):
    return [json.loads(line) for line in subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True,
                                                        check=True).stdout.splitlines()]


def test_similarity_equals_the_command_line(cli):
    pairs = [("hello world", "hello"), ("今天天气非常好", "今天天气不好"), ("the quick brown fox", "今天")]
    m = roformer.Model.from_pretrained(CASE1)
    ours = m.similarity(pairs, pooling="mean")
    # With the engine's thread count: a reduction split over another number of threads rounds elsewhere
    # (5e-9 apart at 1 and 2 threads on Zen 3), and torch's import leaves this process at 1.
    got = run_cli("similarity", "--model", CASE1, "--pooling", "mean", "--threads", str(roformer.get_threads()),
                  stdin="".join(f"{a}\t{b}\n" for a, b in pairs))
    assert np.abs(np.array(ours) - [c["similarity"] for c in got]).max() < 1e-9
    e = m.embed([t for p in pairs for t in p], pooling="mean", normalize=True).astype(np.float64)
    assert np.abs(np.array(ours) - (e[0::2] * e[1::2]).sum(axis=1)).max() < 1e-6  # the cosine of the embeddings


def test_embed_fill_mask_and_classify_equal_the_command_line(cli, tmp_path):
    texts = ["hello world", "今天天气非常好", "the quick brown fox"]
    m = roformer.Model.from_pretrained(CASE1)
    ours = m.embed(texts, pooling="mean", normalize=True)
    got = run_cli("embed", "--model", CASE1, "--pooling", "mean", "--normalize", stdin="\n".join(texts) + "\n")
    assert np.abs(ours - np.array([c["embedding"] for c in got])).max() < 1e-6
    masked = ["今天[MASK]气非常好", "hello [MASK]"]
    ours = m.fill_mask(masked, top_k=3)
    got = run_cli("fill-mask", "--model", CASE1, "--top-k", "3", "--threads", str(roformer.get_threads()),
                  stdin="\n".join(masked) + "\n")
    for o, k in zip(ours, got):
        assert [(p["token"], p["sequence"]) for p in o[0]] == [(p["token"], p["sequence"]) for p in k]
        assert max(abs(p["score"] - q["score"]) for p, q in zip(o[0], k)) < 1e-9
    # A classifier fine-tuned by the command line, served from Python.
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"sentence": t, "label": ["a", "b"][i % 2]}) + "\n"
                            for i, t in enumerate(texts * 4)), encoding="utf-8")
    subprocess.run([CLI, "finetune", "--model", CASE1, "--train", str(data), "--validation", str(data), "--out",
                    str(tmp_path / "ft"), "--epochs", "1", "--batch", "4", "--no-progress"], check=True,
                   capture_output=True)
    c = roformer.Model.from_pretrained(str(tmp_path / "ft" / "best"))
    assert c.labels == ["a", "b"]
    ours = c.classify(texts)
    got = run_cli("classify", "--model", str(tmp_path / "ft" / "best"), stdin="\n".join(texts) + "\n")
    for o, k in zip(ours, got):
        assert o["label"] == k["label"] and abs(o["score"] - k["score"]) < 1e-9


def same_results(ours, theirs):
    """Lists of lists of dicts: equal but for scores, which may differ in the last bits (thread counts)."""
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert [{k: v for k, v in d.items() if k != "score"} for d in o] == [{k: v for k, v in d.items() if k != "score"} for d in t]
        assert all(abs(a["score"] - b["score"]) < 1e-6 for a, b in zip(o, t))


def test_token_classification_and_question_answering_equal_the_command_line(cli, tmp_path):
    # A token classifier and a QA model fine-tuned by the command line, served from Python.
    ner = tmp_path / "ner.jsonl"
    ner.write_text("".join(json.dumps({"tokens": ["hello", "world", "the", "dog"][i % 2:],
                                       "ner_tags": ["B-X", "I-X", "O", "B-Y"][i % 2:]}) + "\n" for i in range(8)))
    subprocess.run([CLI, "finetune", "--task", "token-classification", "--model", CASE1, "--train", str(ner),
                    "--validation", str(ner), "--out", str(tmp_path / "ner"), "--epochs", "2", "--batch", "4",
                    "--lr", "1e-3", "--no-progress"], check=True, capture_output=True)
    texts = ["hello world the dog", "the dog said hello"]
    m = roformer.Model.from_pretrained(str(tmp_path / "ner" / "best"))
    for strategy in ("none", "simple", "max"):
        got = run_cli("ner", "--model", str(tmp_path / "ner" / "best"), "--aggregation-strategy", strategy,
                      stdin="\n".join(texts) + "\n")
        same_results(m.token_classification(texts, aggregation_strategy=strategy), got)
    squad = tmp_path / "squad.jsonl"
    squad.write_text("".join(json.dumps({"id": str(i), "question": "he said ?", "context": f"the dog {w} he said {w}",
                                         "answers": {"text": [w], "answer_start": [len(f"the dog {w} he said ")]}}) + "\n"
                             for i, w in enumerate(["yes", "stop", "ok", "love"] * 2)))
    subprocess.run([CLI, "finetune", "--task", "question-answering", "--model", CASE1, "--train", str(squad),
                    "--validation", str(squad), "--out", str(tmp_path / "qa"), "--epochs", "2", "--batch", "4",
                    "--max-length", "16", "--doc-stride", "4", "--no-progress"], check=True, capture_output=True)
    q = roformer.Model.from_pretrained(str(tmp_path / "qa" / "best"))
    questions = [{"question": "he said ?", "context": "the dog ok he said yes and the fox said stop"}] * 2
    got = run_cli("qa", "--model", str(tmp_path / "qa" / "best"), "--top-k", "2", "--max-seq-len", "12",
                  "--doc-stride", "3", stdin="\n".join(json.dumps(x) for x in questions) + "\n")
    got = [g if isinstance(g, list) else [g] for g in got]  # the command line prints one answer as an object
    same_results(q.question_answering(questions, top_k=2, max_seq_len=12, doc_stride=3), got)
    with pytest.raises(ValueError, match="RoFormerForQuestionAnswering"):
        m.question_answering(questions)
    with pytest.raises(ValueError, match="aggregation strategy 'mean'"):
        m.token_classification(texts, aggregation_strategy="mean")


def test_errors_are_value_errors_with_the_engine_message(tmp_path):
    with pytest.raises(ValueError, match="no such model directory"):
        roformer.Model.from_pretrained(str(tmp_path / "missing"))
    m = roformer.Model.from_pretrained(CASE1)
    with pytest.raises(ValueError, match="mask"):
        m.fill_mask(["no mask here"])
    with pytest.raises(ValueError, match="classif"):
        m.classify(["x"])
    with pytest.raises(ValueError, match="shape"):
        m.forward(np.zeros((2, 3), np.int64), np.ones((2, 4), np.int64))
    with pytest.raises(ValueError):
        m.forward(np.full((1, 3), 10**6, np.int64))


def test_threads_are_settable_and_give_the_same_results():
    io = fixture_io("case1_mlm_basic")
    args = (io["input_ids"], io["attention_mask"], io["token_type_ids"])
    m = roformer.Model.from_pretrained(CASE1, threads=1)
    assert m.threads == 1
    one = m.forward(*args)["last_hidden_state"]
    m.threads = 2
    assert close(m.forward(*args)["last_hidden_state"], one)
    m.threads = 0  # the process-wide count, from any Python thread
    default = roformer.get_threads()
    try:
        roformer.set_threads(2)
        assert roformer.get_threads() == 2
        assert close(m.forward(*args)["last_hidden_state"], one)
        roformer.set_threads(0)
        assert roformer.get_threads() == default
    finally:
        roformer.set_threads(0)
    with pytest.raises(ValueError, match="threads must be >= 0"):
        roformer.set_threads(-1)
    with pytest.raises(ValueError, match="at most 1024"):  # the OpenMP runtime crashed on such counts
        roformer.set_threads(100000)
    with pytest.raises(ValueError, match="threads must be >= 0"):
        m.threads = -2
    with pytest.raises(ValueError, match="threads must be >= 0"):
        roformer.Model.from_pretrained(CASE1, threads=-1)
    with pytest.raises(TypeError):
        roformer.set_threads("2")
    assert roformer.get_threads() == default and m.threads == 0


def test_an_engine_call_leaves_the_threads_openmp_count_as_it_was():
    # Debian's PyTorch shares the engine's libgomp, so its count is the calling thread's OpenMP count.
    torch = pytest.importorskip("torch")
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        roformer.Model.from_pretrained(CASE1, threads=2).embed(["hello"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)


def test_two_python_threads_share_one_model():
    # The Model's lock: calls from two threads take turns on its activation buffers (without it, batches
    # of other shapes would overwrite, or reallocate, each other's). Results equal the serial calls'.
    io, m = fixture_io("case1_mlm_basic"), roformer.Model.from_pretrained(CASE1)
    ids, mask = io["input_ids"], io["attention_mask"]
    texts = ["hello world", "今天天气非常好", "the quick brown fox jump over the lazy dog"] * 5
    serial_forward, serial_embed = m.forward(ids, mask)["logits"], m.embed(texts, batch_size=4)
    results = {"forward": [], "embed": []}

    def run(name, call):
        for _ in range(20):
            results[name].append(call())

    threads = [threading.Thread(target=run, args=("forward", lambda: m.forward(ids, mask)["logits"])),
               threading.Thread(target=run, args=("embed", lambda: m.embed(texts, batch_size=4)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results["forward"]) == 20 and all(np.array_equal(r, serial_forward) for r in results["forward"])
    assert len(results["embed"]) == 20 and all(np.array_equal(r, serial_embed) for r in results["embed"])


def test_the_gil_is_released_during_compute():
    # While one thread runs a long forward, this one keeps running Python: its ticks fill the call's
    # interval (with the GIL held, none would fall inside it but at its ends).
    m = roformer.Model.from_pretrained(CASE1, threads=1)  # one thread: durations that busy cores do not scatter
    ids = np.random.default_rng(0).integers(5, 129, size=(16, 64))
    while True:  # a batch that takes at least 0.2 s, timed on its second call (the first grows the buffers)
        m.forward(ids)
        start = time.perf_counter()
        m.forward(ids)
        if time.perf_counter() - start >= 0.2:
            break
        ids = np.tile(ids, (2, 1))
    span = {}

    def call():
        span["start"] = time.perf_counter()
        m.forward(ids)
        span["end"] = time.perf_counter()

    t = threading.Thread(target=call)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    inside = [x for x in ticks if span["start"] < x < span["end"]]
    duration = span["end"] - span["start"]
    assert duration > 0.05, f"the forward took {duration:.3f} s: too short to tell"
    assert inside and inside[-1] - inside[0] > 0.5 * duration


def write_safetensors(path, tensors):
    """A safetensors file of float32 arrays (the header padded to 8 bytes, as the library writes it)."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_sentence_transformers_folders_and_hub_ids_embed_as_the_command_line(cli, tmp_path, monkeypatch):
    # case1 as a sentence-transformers folder: max+mean pooling, a Dense (128 → 8, tanh), Normalize, prompts;
    # tests/hf/sentence_transformers_vs_hf.py compares such folders with sentence-transformers itself.
    folder = tmp_path / "st"
    shutil.copytree(CASE1, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
               {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 64, "pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": True}))
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 128, "out_features": 8, "bias": True, "activation_function": "torch.nn.modules.activation.Tanh"}))
    rng = np.random.default_rng(0)
    write_safetensors(folder / "2_Dense" / "model.safetensors",
                      {"linear.weight": rng.standard_normal((8, 128)) / 8, "linear.bias": rng.standard_normal(8)})
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    texts = ["hello world", "今天天气非常好", "the quick brown fox"]
    m = roformer.Model.from_pretrained(str(folder))
    ours = m.embed(texts, prompt_name="query")
    assert ours.shape == (3, 8)
    assert np.abs(np.linalg.norm(ours, axis=1) - 1).max() < 1e-5  # Normalize
    got = run_cli("embed", "--model", str(folder), "--prompt-name", "query", "--threads", str(roformer.get_threads()),
                  stdin="\n".join(texts) + "\n")
    assert np.abs(ours - np.array([c["embedding"] for c in got])).max() < 1e-6
    assert np.abs(ours - m.embed(texts)).max() > 1e-3  # the prompt changes the vectors
    with pytest.raises(ValueError, match="prompt_name 'doc' is not a prompt of"):
        m.embed(texts, prompt_name="doc")
    # The same folder as a Hugging Face cache snapshot, by its id.
    repo = tmp_path / "hub" / "models--org--st"
    (repo / "snapshots").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    os.symlink(folder, repo / "snapshots" / ("c" * 40))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert np.abs(roformer.Model.from_pretrained("org/st").embed(texts, prompt_name="query") - ours).max() == 0
    with pytest.raises(ValueError, match="models--org--missing"):
        roformer.Model.from_pretrained("org/missing")
