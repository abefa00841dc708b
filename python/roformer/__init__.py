"""roformer.cpp from Python.

roformer.rope        librope: exact rotary position embedding for NumPy arrays and PyTorch tensors
roformer.rope_torch  PyTorch autograd and drop-in adapters (transformers, FlashAttention); needs torch
"""
from . import rope

__version__ = "0.1.0"
__all__ = ["rope"]
