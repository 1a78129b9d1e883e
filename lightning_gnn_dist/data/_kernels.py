"""Compiled (numba) kernels of the neighbour sampler, used when ``numba`` is installed.

The vectorised ``torch`` sampler of :mod:`lightning_gnn_dist.data.sampler` spends most of a
mini-batch step in per-operation overhead (~100 small tensor operations per hop). These kernels
do the same per-target work in one compiled loop (~10× faster on the 1 M-edge R-MAT graph,
fan-out [25, 10]) and give the same samples: the same counter-based hash, the same selection
rule per target. (Two edges of one target whose keys collide — the same source twice, a parallel
edge, or a 32-bit hash collision — may be picked in another order; for parallel edges the
sampled sources are the same.)

``numba`` is optional (``pip install lightning-gnn-dist[fast]``); without it the ``torch``
sampler runs. Kernels compile on first use and are cached on disk (numba's cache: later processes load
them, see :mod:`lightning_gnn_dist.data._compiled`).
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import torch
from torch import Tensor

AVAILABLE = importlib.util.find_spec("numba") is not None
"""Whether ``numba`` is installed. It is imported only when a kernel first runs (importing it
costs ~0.3 s and ~350 MiB of resident memory, LLVM included), i.e. in mini-batch sampling."""
_SAMPLE = None
_RELABEL = None
_COUNTING_ORDER = None
_NO_EXTRA = np.empty(0, dtype=np.int64)


def _compiled():
    from lightning_gnn_dist.data import _compiled as compiled  # imports numba: on first use

    return compiled


def loaded() -> bool:
    """Whether the kernels are compiled or loaded in this process already (a sampler ran), so
    that using one more costs no import of ``numba``."""
    return "lightning_gnn_dist.data._compiled" in sys.modules


def counting_order(keys: Tensor, num_keys: int) -> tuple[Tensor, Tensor]:
    """``(offsets [num_keys + 1] int64, order [K] int64)`` of ``keys [K]`` (integers in
    ``[0, num_keys)``): ``order`` is the stable sort's permutation (``torch.sort(keys,
    stable=True).indices``) and ``offsets`` where each key's run starts in it, by one counting
    pass (linear in ``K + num_keys``; a comparison sort is ``K log K``). CPU tensors only."""
    global _COUNTING_ORDER
    if _COUNTING_ORDER is None:
        _COUNTING_ORDER = _compiled().counting_order
    offsets, order = _COUNTING_ORDER(keys.contiguous().numpy(), int(num_keys))
    return torch.from_numpy(offsets), torch.from_numpy(order)


def relabel(table: Tensor, src: Tensor, num_local: int) -> tuple[Tensor, Tensor]:
    """``(new, local)``: the sources not in ``table`` yet (``table[id] == -1``), ascending, get
    the local indices ``num_local, num_local + 1, ...`` (written to ``table``); ``local [E]`` is
    every source's local index."""
    global _RELABEL
    if _RELABEL is None:
        _RELABEL = _compiled().relabel
    new, local = _RELABEL(table.numpy(), src.contiguous().numpy(), int(num_local))
    return torch.from_numpy(new), torch.from_numpy(local)


def sample_without_replacement(
    colptr: Tensor,
    src: Tensor,
    src_key: Tensor,
    dst_key: Tensor,
    start: int,
    targets: Tensor,
    stream: Tensor | int,
    fanout: int,
    sparse: int,
    extra: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """:meth:`~lightning_gnn_dist.data.sampler.InEdges.sample` without replacement, compiled:
    ``(counts [T] int64, src [Σ counts] int64, extra [Σ counts] int64 or None)``, where
    ``extra`` (``[E] int64`` per in-edge, optional) is read at the same chosen in-edges in the
    same pass. CPU tensors only."""
    global _SAMPLE
    if _SAMPLE is None:
        _SAMPLE = _compiled().sample
    streams = (
        np.full(targets.numel(), stream, dtype=np.int64)
        if isinstance(stream, int)
        else torch.as_tensor(stream, dtype=torch.long).expand(targets.numel()).contiguous().numpy()
    )
    counts, out, out_extra = _SAMPLE(
        colptr.numpy(),
        src.numpy(),
        src_key.numpy(),
        dst_key.numpy(),
        int(start),
        targets.contiguous().numpy(),
        streams,
        int(fanout),
        int(sparse),
        _NO_EXTRA if extra is None else extra.numpy(),
    )
    return (
        torch.from_numpy(counts),
        torch.from_numpy(out),
        None if extra is None else torch.from_numpy(out_extra),
    )
