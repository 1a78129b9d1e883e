"""numba kernels of :mod:`lightning_gnn_dist.nn.trim` (imported on first use only; ``numba`` is
optional, see :data:`lightning_gnn_dist.data._kernels.AVAILABLE`).

``relu_dropout`` is ``dropout(relu(x))`` in one pass: ``torch``'s CPU Bernoulli and uniform
samplers cost ~2–3 ns per element (~3 ms for a 4,085 × 256 hidden layer, a third of a
GraphSAGE layer's forward), this ~0.2 ns. Its random numbers come from a counter-based hash
(splitmix64) of a seed drawn from ``torch``'s generator and the element's index, so runs are
reproducible under ``torch.manual_seed``. Module-level functions, so that numba's disk cache
finds them in the next process (see :mod:`lightning_gnn_dist.data._compiled`).
"""

from __future__ import annotations

import numba
import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, nogil=True)
def relu_dropout(x, out, seed, threshold, scale):
    """``out[i] = x[i] · scale`` where ``x[i] > 0`` and the element is kept (its 24-bit uniform
    draw is ``>= threshold``), else ``0``; ``x`` and ``out`` are flat arrays."""
    base = np.uint64(seed)
    for i in range(x.size):
        z = base + np.uint64(i) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
        value = x[i]
        keep = (z >> np.uint64(40)) >= threshold and value > 0
        out[i] = value * scale if keep else 0


@numba.njit(cache=True, nogil=True)
def relu_dropout_backward(grad, out, grad_in, scale):
    """``grad_in[i] = grad[i] · scale`` where the forward's ``out[i] > 0``, else ``0``."""
    for i in range(grad.size):
        grad_in[i] = grad[i] * scale if out[i] > 0 else 0
