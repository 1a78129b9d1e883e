"""Memory-lean graph arrays for the partitioners and metrics of large graphs.

The helpers of :mod:`lightning_gnn_dist.data.graph` build ``int64`` key arrays, concatenate both
edge directions and sort copies: about 90 bytes per edge at their peak (1.4 GiB for the 16 M
edges of R-MAT scale 20, measured). Here every array is built in place or in chunks of
:data:`CHUNK` edges, from the canonical ``edge_index`` (sorted by ``(source, target)``, see
``data.graph.canonicalize``), which already lists each vertex's distinct neighbours in order:

* :func:`distinct_mask` marks the distinct off-diagonal edges with one byte per edge;
* :func:`row_nnz` counts them per target (the non-zeros of each row of ``Â``);
* :func:`symmetric_csr` builds ``A + Aᵀ`` without self loops from one ``int64`` key array sorted
  in place (16 bytes per directed edge at the peak), its indices ``int32`` where they fit;
* :func:`net_part_masks` gives every net's connectivity set as a bit mask (P <= 64).

A graph that is not sorted by ``(source, target)`` (checked in chunks) is handled too, through a
sorted copy of its keys (8 bytes per edge more).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch import Tensor

#: Edges processed per chunk: 4 Mi edges keep each temporary array at 32 MiB or less.
CHUNK = 1 << 22
#: Largest vertex count whose ids fit ``int32``.
INT32_VERTICES = 2**31 - 1


def index_dtype(num_nodes: int) -> np.dtype:
    """``int32`` when vertex ids fit it, else ``int64``."""
    return np.dtype(np.int32 if num_nodes <= INT32_VERTICES else np.int64)


def _chunks(size: int) -> Iterator[slice]:
    chunk = CHUNK  # read at call time (tests shrink it to cross chunk boundaries)
    for start in range(0, size, chunk):
        yield slice(start, min(start + chunk, size))


def _edges(edge_index: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    array = edge_index.numpy() if isinstance(edge_index, Tensor) else np.asarray(edge_index)
    return array[0], array[1]


def is_sorted(edge_index: Tensor | np.ndarray) -> bool:
    """Whether the edges are sorted by ``(source, target)`` (checked chunk by chunk)."""
    src, dst = _edges(edge_index)
    for part in _chunks(max(src.size - 1, 0)):
        a, b = slice(part.start, part.stop), slice(part.start + 1, part.stop + 1)
        step = src[b] - src[a]
        if (step < 0).any() or ((step == 0) & (dst[b] < dst[a])).any():
            return False
    return True


class EdgeView:
    """The distinct off-diagonal edges of a graph, read in chunks without copying the graph.

    Args:
        edge_index: ``[2, E]`` integer edges (a tensor or an array).
        num_nodes: ``N``.

    Attributes:
        mask: ``[E] bool``, the first copy of every distinct off-diagonal edge (sorted input), or
            ``None`` for unsorted input (then :attr:`keys` holds the distinct sorted
            ``src * N + dst`` keys instead).
        num_edges: distinct off-diagonal edges ``E'``.
    """

    def __init__(self, edge_index: Tensor | np.ndarray, num_nodes: int) -> None:
        self.num_nodes = int(num_nodes)
        self.src, self.dst = _edges(edge_index)
        self.keys: np.ndarray | None = None
        if is_sorted(edge_index):
            self.mask = np.empty(self.src.size, dtype=bool)
            for part in _chunks(self.src.size):
                s, d = self.src[part], self.dst[part]
                keep = s != d
                if part.start > 0:
                    prev = part.start - 1
                    first = np.r_[
                        (s[0] != self.src[prev]) | (d[0] != self.dst[prev]),
                        (s[1:] != s[:-1]) | (d[1:] != d[:-1]),
                    ]
                else:
                    first = np.r_[True, (s[1:] != s[:-1]) | (d[1:] != d[:-1])]
                self.mask[part] = keep & first
            self.num_edges = int(np.count_nonzero(self.mask))
        else:
            from lightning_gnn_dist.data.graph import sorted_unique

            keep = self.src != self.dst
            keys = self.src[keep].astype(np.int64) * self.num_nodes + self.dst[keep]
            self.keys = sorted_unique(keys)
            self.mask = None
            self.num_edges = int(self.keys.size)

    def chunks(self, dtype: np.dtype | type = np.int64) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` of the distinct off-diagonal edges in ``(src, dst)`` order, chunk by
        chunk, as ``dtype``."""
        if self.keys is not None:
            for part in _chunks(self.keys.size):
                key = self.keys[part]
                yield (key // self.num_nodes).astype(dtype), (key % self.num_nodes).astype(dtype)
            return
        for part in _chunks(self.src.size):
            keep = self.mask[part]
            yield self.src[part][keep].astype(dtype), self.dst[part][keep].astype(dtype)

    def arrays(self, dtype: np.dtype | type | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` of every distinct off-diagonal edge, ``[E']`` each (``int32`` where
        vertex ids fit)."""
        dtype = index_dtype(self.num_nodes) if dtype is None else np.dtype(dtype)
        src = np.empty(self.num_edges, dtype=dtype)
        dst = np.empty(self.num_edges, dtype=dtype)
        at = 0
        for s, d in self.chunks(dtype):
            src[at : at + s.size], dst[at : at + s.size] = s, d
            at += s.size
        return src, dst


def row_nnz(edge_index: Tensor | np.ndarray, num_nodes: int, view: EdgeView | None = None):
    """Non-zeros per row of ``Â`` (distinct in-neighbours plus the diagonal), ``[N] int64``;
    the same as ``data.graph.row_nnz`` with a few bytes per edge of memory."""
    view = EdgeView(edge_index, num_nodes) if view is None else view
    counts = np.ones(num_nodes, dtype=np.int64)
    for _, dst in view.chunks():
        counts += np.bincount(dst, minlength=num_nodes)
    return counts


def symmetric_csr(
    edge_index: Tensor | np.ndarray,
    num_nodes: int,
    dtype: np.dtype | type | None = None,
    view: EdgeView | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices)`` of the undirected graph ``A + Aᵀ`` without self loops, each
    row's neighbours sorted (the same arrays as ``data.graph.symmetric_csr``).

    One ``int64`` key array of both directions is sorted and deduplicated in place, then turned
    into the indices (in place for ``int64``, by chunks for ``int32``): about 16 bytes per
    directed edge at the peak instead of about 90.

    Args:
        dtype: of ``indices``; ``None``: ``int32`` where vertex ids fit.

    Returns:
        ``indptr [N + 1] int64``, ``indices [nnz] dtype``.
    """
    dtype = index_dtype(num_nodes) if dtype is None else np.dtype(dtype)
    keys = symmetric_keys(edge_index, num_nodes, view)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for part in _chunks(keys.size):
        indptr[1:] += np.bincount(keys[part] // num_nodes, minlength=num_nodes)
    np.cumsum(indptr, out=indptr)
    if dtype == np.int64:
        for part in _chunks(keys.size):
            keys[part] %= num_nodes
        return indptr, keys
    indices = np.empty(keys.size, dtype=dtype)
    for part in _chunks(keys.size):
        indices[part] = keys[part] % num_nodes
    return indptr, indices


def symmetric_keys(
    edge_index: Tensor | np.ndarray, num_nodes: int, view: EdgeView | None = None
) -> np.ndarray:
    """Sorted distinct keys ``u * N + v`` of the undirected graph ``A + Aᵀ`` without self loops
    (both directions), ``int64``; built and deduplicated in place."""
    view = EdgeView(edge_index, num_nodes) if view is None else view
    count = view.num_edges
    keys = np.empty(2 * count, dtype=np.int64)
    at = 0
    for src, dst in view.chunks():
        keys[at : at + src.size] = src * num_nodes + dst
        keys[count + at : count + at + src.size] = dst * num_nodes + src
        at += src.size
    keys.sort()
    return _unique_in_place(keys)


def _unique_in_place(keys: np.ndarray) -> np.ndarray:
    """Distinct values of sorted ``keys``, compacted into its own buffer (a view of it)."""
    write = 0
    previous = None
    for part in _chunks(keys.size):
        chunk = keys[part]
        first = np.empty(chunk.size, dtype=bool)
        first[1:] = chunk[1:] != chunk[:-1]
        first[0] = previous is None or chunk[0] != previous
        previous = chunk[-1]
        kept = chunk[first]  # a copy: the write below may overlap the chunk
        keys[write : write + kept.size] = kept
        write += kept.size
    return keys[:write]


def net_part_masks(view: EdgeView, assignment: np.ndarray, num_parts: int) -> np.ndarray:
    """``[N] uint64`` bit mask of the parts each column net spans (net ``j``: vertex ``j`` and
    its distinct out-neighbours, the column-net model of ``Â``); needs ``num_parts <= 64``."""
    if num_parts > 64:
        raise ValueError(f"net_part_masks needs at most 64 parts (got {num_parts})")
    part = np.asarray(assignment)
    masks = np.left_shift(np.uint64(1), part.astype(np.uint64))  # the diagonal pin
    for src, dst in view.chunks():
        if not src.size:
            continue
        bits = np.left_shift(np.uint64(1), part[dst].astype(np.uint64))
        starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
        masks[src[starts]] |= np.bitwise_or.reduceat(bits, starts)
    return masks


def popcount(masks: np.ndarray) -> np.ndarray:
    """Set bits of each ``uint64``, ``int64``."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(masks).astype(np.int64)
    bytes_ = masks.view(np.uint8).reshape(-1, 8)  # pragma: no cover - numpy < 2.0
    return np.unpackbits(bytes_, axis=1).sum(axis=1).astype(np.int64)


def column_net_csr(view: EdgeView) -> tuple[np.ndarray, np.ndarray]:
    """The column-net hypergraph of ``Â`` as CSR: net ``j`` holds vertex ``j`` and the distinct
    out-neighbours of ``j``, sorted (the same arrays as
    :func:`~lightning_gnn_dist.partition.column_net.column_net_hypergraph`, built in chunks
    without a sort: about 8 bytes per pin instead of ~60).

    Returns:
        ``net_offsets [N + 1] int64``, ``pins [E' + N] int64``.
    """
    num_nodes = view.num_nodes
    sizes = np.ones(num_nodes, dtype=np.int64)  # the diagonal pin of every net
    below = np.zeros(num_nodes, dtype=np.int64)  # pins of net j smaller than j
    for src, dst in view.chunks():
        sizes += np.bincount(src, minlength=num_nodes)
        below += np.bincount(src[dst < src], minlength=num_nodes)
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    del sizes
    pins = np.empty(offsets[-1], dtype=np.int64)
    diagonal = np.arange(num_nodes, dtype=np.int64)
    pins[offsets[:-1] + below] = diagonal
    del below
    # Off-diagonal pin k (in (src, dst) order) of net s lands after the s diagonal pins of the
    # nets before s, and after its own net's diagonal when it is larger than s.
    at = 0
    for src, dst in view.chunks():
        index = np.arange(at, at + src.size, dtype=np.int64) + src + (dst > src)
        pins[index] = dst
        at += src.size
    return offsets, pins
