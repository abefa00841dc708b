"""The RoFormer inference engine from Python: Hugging Face RoFormer directories (config.json, weights,
vocab.txt) with the command line's results.

    import roformer
    m = roformer.Model.from_pretrained("path/to/roformer")
    m.embed(["今天天气很好"], pooling="mean")           # NumPy (n, hidden)
    m.fill_mask(["今天[MASK]气很好"])                   # per text, per mask: [{"score", "token", "token_str", "sequence"}]
    m.classify(["..."])                                 # [{"label", "label_id", "score", "probabilities", "logits"}]
    m.token_classification(["..."])                     # per text: [{"entity_group", "score", "word", "start", "end"}]
    m.question_answering([("who?", "he said so.")])     # per question: [{"score", "start", "end", "answer"}]
    m.similarity([("a", "b")])                          # cosine similarities
    m.forward(input_ids, attention_mask)                # {"last_hidden_state", "logits"} as NumPy
    tok = roformer.Tokenizer.from_pretrained("path/to/roformer")

The GIL is released while the engine runs. A Model computes one call at a time: Python threads that
share one Model take turns (its activation buffers are shared), threads with a Model each run at once.
OpenMP threads: a Model's `threads` (from_pretrained or the attribute), else roformer.set_threads's
count, for calls from any Python thread.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import _engine

__all__ = ["Model", "Tokenizer", "set_threads", "get_threads"]


class Tokenizer:
    """transformers' RoFormerTokenizer (jieba for word-level vocabularies, BertTokenizer otherwise)."""

    def __init__(self, impl):
        self._t = impl

    @classmethod
    def from_pretrained(cls, path: str, jieba_dict: str = "") -> "Tokenizer":
        return cls(_engine.Tokenizer(str(path), jieba_dict))

    def tokenize(self, text: str) -> list:
        return self._t.tokenize(text)

    def __call__(self, text: str, text_pair: Optional[str] = None, max_length: int = -1) -> dict:
        """{"input_ids", "token_type_ids", "attention_mask", "tokens"} with [CLS]/[SEP]; truncation
        longest_first when max_length > 0."""
        return self._t.encode(text, text_pair, max_length)

    def __len__(self) -> int:
        return len(self._t)


class Model:
    """A RoFormer checkpoint: masked LM, encoder-only, sequence classifier or RoFormer-Sim."""

    def __init__(self, impl):
        self._m = impl

    @classmethod
    def from_pretrained(cls, path: str, rope_scaling: str = "", jieba_dict: str = "", threads: int = 0) -> "Model":
        return cls(_engine.Model(str(path), rope_scaling, jieba_dict, threads))

    def embed(self, texts: Sequence[str], pooling: str = "auto", normalize: bool = False, batch_size: int = 16,
              prompt_name: str = ""):
        return self._m.embed(list(texts), pooling, normalize, batch_size, prompt_name)

    def similarity(self, pairs, pooling: str = "auto", batch_size: int = 16) -> list:
        return self._m.similarity([tuple(p) for p in pairs], pooling, batch_size)

    def classify(self, texts: Sequence[str], batch_size: int = 16) -> list:
        return self._m.classify(list(texts), batch_size)

    def token_classification(self, texts: Sequence[str], aggregation_strategy: str = "simple",
                             batch_size: int = 16) -> list:
        """Per text, transformers' token-classification pipeline's entities (a RoFormerForTokenClassification
        checkpoint): aggregation_strategy none, simple, first, average or max; spans are characters."""
        return self._m.token_classification(list(texts), aggregation_strategy, batch_size)

    def question_answering(self, questions, top_k: int = 1, max_answer_len: int = 15, max_seq_len: int = 0,
                           doc_stride: int = 0, handle_impossible_answer: bool = False, batch_size: int = 16) -> list:
        """Per (question, context) pair (or {"question", "context"} dict), transformers' question-answering
        pipeline's top_k answers, best first (a RoFormerForQuestionAnswering checkpoint). max_seq_len and
        doc_stride 0: the pipeline's defaults (384, or less as the model allows; min(128, max_seq_len / 2))."""
        pairs = [(q["question"], q["context"]) if isinstance(q, dict) else tuple(q) for q in questions]
        return self._m.question_answering(pairs, top_k, max_answer_len, max_seq_len, doc_stride,
                                          handle_impossible_answer, batch_size)

    def fill_mask(self, texts: Sequence[str], top_k: int = 5, batch_size: int = 16) -> list:
        return self._m.fill_mask(list(texts), top_k, batch_size)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> dict:
        def ids(a):
            return None if a is None else np.ascontiguousarray(np.asarray(a, dtype=np.int64))
        x = ids(input_ids)
        if x.ndim == 1:
            x = x[None]
        mask, types = ids(attention_mask), ids(token_type_ids)
        if mask is not None and mask.ndim == 1:
            mask = mask[None]
        if types is not None and types.ndim == 1:
            types = types[None]
        return self._m.forward(x, mask, types)

    @property
    def hidden_size(self) -> int:
        return self._m.hidden_size

    @property
    def max_length(self) -> int:
        return self._m.max_length

    @property
    def labels(self) -> list:
        return self._m.labels

    @property
    def threads(self) -> int:
        """This model's OpenMP threads; 0 (the default): roformer.set_threads's count."""
        return self._m.threads

    @threads.setter
    def threads(self, n: int) -> None:
        self._m.threads = n


def set_threads(n: int) -> None:
    """The engine's OpenMP threads for Models without their own count, from any Python thread; 0:
    OpenMP's default (OMP_NUM_THREADS, else all cores). ValueError when n < 0."""
    _engine.set_threads(n)


def get_threads() -> int:
    """The OpenMP threads a Model without its own count uses."""
    return _engine.get_threads()
