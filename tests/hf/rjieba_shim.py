"""Imported before transformers by the HF comparison scripts: RoFormerTokenizer needs rjieba; without it,
jieba (which rjieba ports) stands in with the same calls: cut, and tokenize ((word, start, end) triples,
which RoFormerTokenizerFast's pre-tokenizer uses)."""
import importlib.machinery
import sys
import types

try:
    import rjieba  # noqa: F401
except ImportError:
    import jieba

    shim = types.ModuleType("rjieba")
    shim.__spec__ = importlib.machinery.ModuleSpec("rjieba", None)
    shim.cut = lambda text, hmm=True: list(jieba.cut(text, HMM=hmm))
    shim.tokenize = lambda text, mode="default", hmm=True: list(jieba.tokenize(text, mode=mode, HMM=hmm))
    sys.modules["rjieba"] = shim
