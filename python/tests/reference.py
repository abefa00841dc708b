"""The RoPE formula in float64 NumPy, the reference of the Python tests: x rotated pairwise by
angle(m, i) = m · base^(-2i/rot_dim) (times a scaling's effect through inv_freq)."""
import numpy as np


def rotate(x, positions, inv_freq, layout="interleaved", rot_offset=0, inverse=False, factor=1.0):
    """factor · R(±angle) x for x [..., seq, heads, dim] (float64), positions broadcastable to [..., seq]:
    inverse=True rotates by −angle (with the factor, this is the transpose: the gradient's rotation)."""
    x = np.array(x, dtype=np.float64)
    rot = 2 * len(inv_freq)
    angle = np.asarray(positions, dtype=np.float64)[..., None] * np.asarray(inv_freq)  # [..., seq, rot/2]
    if inverse:
        angle = -angle
    cos, sin = (np.cos(angle) * factor)[..., None, :], (np.sin(angle) * factor)[..., None, :]
    part = x[..., rot_offset:rot_offset + rot]
    if layout == "interleaved":
        a, b = part[..., 0::2].copy(), part[..., 1::2].copy()
        part[..., 0::2], part[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    else:
        h = rot // 2
        a, b = part[..., :h].copy(), part[..., h:].copy()
        part[..., :h], part[..., h:] = a * cos - b * sin, a * sin + b * cos
    x[..., rot_offset:rot_offset + rot] = part
    return x
