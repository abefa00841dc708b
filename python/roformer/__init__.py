"""roformer.cpp from Python.

roformer.rope        librope: exact rotary position embedding for NumPy arrays and PyTorch tensors
roformer.rope_torch  PyTorch autograd and drop-in adapters (transformers, FlashAttention); needs torch
roformer.Model, roformer.Tokenizer   the inference engine on Hugging Face RoFormer directories
"""
from . import rope

try:
    from .engine import Model, Tokenizer, get_threads, set_threads
except ImportError as e:  # a build of librope alone (ROFORMER_LIBROPE_ONLY) has roformer.rope and no engine
    if "_engine" not in str(e):
        raise

__version__ = "0.1.0"
__all__ = ["rope", "Model", "Tokenizer", "set_threads", "get_threads"]
