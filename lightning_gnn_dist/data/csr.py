"""Compressed sparse row (CSR) adjacencies of a rank's local graph, built once and reused.

A message-passing layer aggregates ``out[i] = Σ_{(j, i) ∈ E} w_ji · x[j]``. With the edges as the
sparse matrix ``Â[i, j] = w_ji`` (rows = targets, columns = sources: PyG's ``adj_t``) this is one
sparse × dense product ``Â · X``, and its backward is ``Âᵀ · G``. :class:`CSRAdjacency` holds the
structure of ``Â`` in CSR form and, built on first use, the structure of ``Âᵀ``; the products
themselves live in :mod:`lightning_gnn_dist.nn.spmm`.

Parallel edges stay separate entries (a multigraph's ``Â`` sums them), so does every repeated
self loop; vertices without in-edges are empty rows, without out-edges empty columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lightning_gnn_dist.data import _kernels
from lightning_gnn_dist.data.sampler import use_compiled

_INT32_MAX = 2**31 - 1


def index_dtype(*sizes: int) -> torch.dtype:
    """``int32`` when every size fits below ``2**31`` (half the bytes of ``int64``), else
    ``int64``."""
    return torch.int32 if max(sizes, default=0) <= _INT32_MAX else torch.int64


@dataclass(eq=False)
class CSRAdjacency:
    """The structure of ``Â`` (``num_rows`` targets × ``num_cols`` sources) in CSR form.

    Attributes:
        num_rows: targets (rows of ``Â``).
        num_cols: sources (columns of ``Â``).
        crow: ``[num_rows + 1]`` entry offsets per row (``int32`` when it fits, else ``int64``).
        col: ``[E]`` source of each entry; within a row, entries keep their input order (the
            order of a row's entries only changes the summation order).
        perm: ``[E]`` (``int32`` when it fits): entry ``k`` is edge ``perm[k]`` of the edge list
            it was built from (so per-edge values in edge order become ``values[perm]`` in entry
            order).
    """

    num_rows: int
    num_cols: int
    crow: Tensor
    col: Tensor
    perm: Tensor
    _transpose: CSRAdjacency | None = field(default=None, repr=False)

    @classmethod
    def from_edge_index(
        cls, edge_index: Tensor, num_rows: int, num_cols: int, grouped: bool | None = None
    ) -> CSRAdjacency:
        """``Â`` of the edges ``edge_index [2, E]`` (row 0 sources ``< num_cols``, row 1 targets
        ``< num_rows``): one stable sort of the edges by target (none when they come grouped).

        ``grouped``: whether the targets are known to be non-decreasing (``True``: no sort;
        ``False``: sort). ``None`` checks, which reads one boolean from the device (a host round
        trip on a GPU): callers on a training step's path say what they know."""
        src, dst = edge_index[0], edge_index[1]
        return cls._build(dst, src, num_rows, num_cols, grouped)

    @classmethod
    def _build(
        cls, row: Tensor, col: Tensor, num_rows: int, num_cols: int, grouped: bool | None = None
    ) -> CSRAdjacency:
        dtype = index_dtype(num_rows, num_cols, row.numel())
        if grouped is None:  # a partition or a sampler's hops come grouped: skip the sort
            grouped = bool((row[1:] >= row[:-1]).all())  # host: reads the device
        if not grouped and row.device.type == "cpu" and _kernels.loaded() and use_compiled():
            # A sampler's kernels are loaded (mini-batches: a transpose per batch): the stable
            # order by one counting pass, as DGL transposes its blocks, not a comparison sort.
            crow, perm = _kernels.counting_order(row, num_rows)
            col = col[perm]
        else:
            if grouped:
                perm = torch.arange(row.numel(), device=row.device)
            else:
                perm = torch.sort(row, stable=True).indices
                col = col[perm]
            # Entries per row by index_add_ into the known size (bincount sizes its output from
            # the values' maximum: a host round trip on a GPU).
            crow = torch.zeros(num_rows + 1, dtype=torch.long, device=row.device)
            crow[1:].index_add_(0, row, torch.ones_like(row, dtype=torch.long))
            crow = torch.cumsum(crow, 0)
        return cls(num_rows, num_cols, crow.to(dtype), unlinked(col.to(dtype)), perm.to(dtype))

    @property
    def num_entries(self) -> int:
        return int(self.col.numel())

    @property
    def shape(self) -> tuple[int, int]:
        return self.num_rows, self.num_cols

    @property
    def device(self) -> torch.device:
        return self.col.device

    def degree(self) -> Tensor:
        """``[num_rows] int64`` entries per row (in-degree of each target, loops and parallel
        edges counted)."""
        return torch.diff(self.crow).long()

    @property
    def row(self) -> Tensor:
        """``[E] int64`` row (target) of every entry (computed on each call, not kept: 8 bytes
        per entry)."""
        return torch.repeat_interleave(
            torch.arange(self.num_rows, device=self.device),
            self.degree(),
            output_size=self.num_entries,
        )

    def transpose(self) -> CSRAdjacency:
        """``Âᵀ`` (``num_cols × num_rows``), built once; its ``perm`` maps its entries to the
        entries of ``Â`` (not to the edge list)."""
        if self._transpose is None:
            # Sources are rarely grouped: sort, on the narrow column ids (an int32 key sorts
            # about twice as fast as an int64 one).
            self._transpose = CSRAdjacency._build(
                self.col, self.row, self.num_cols, self.num_rows, grouped=False
            )
            self._transpose._transpose = None
        return self._transpose

    def entry_values(self, edge_values: Tensor) -> Tensor:
        """Per-edge values ``[E]`` in the input edge order → the same values in entry order."""
        return edge_values[self.perm.long()]

    def row_prefix(self, num_rows: int, num_cols: int) -> CSRAdjacency:
        """The first ``num_rows`` rows as a ``num_rows × num_cols`` matrix (views, no copy).

        Valid when those rows' sources are all ``< num_cols`` (true for the hop-ordered batches of
        :class:`~lightning_gnn_dist.data.sampler.NeighborSampler`, where the targets of the
        first ``k`` hops are a prefix of the vertices and their sources a longer prefix).
        """
        if num_rows == self.num_rows and num_cols == self.num_cols:
            return self
        end = int(self.crow[num_rows])
        return CSRAdjacency(
            num_rows, num_cols, self.crow[: num_rows + 1], self.col[:end], self.perm[:end]
        )

    def nbytes(self) -> int:
        """Bytes held (structure, cached transpose and row index included)."""
        total = sum(t.numel() * t.element_size() for t in (self.crow, self.col, self.perm))
        return total + (self._transpose.nbytes() if self._transpose is not None else 0)

    def __repr__(self) -> str:
        return f"CSRAdjacency({self.num_rows}x{self.num_cols}, entries={self.num_entries})"


def tensor_version(tensor: Tensor) -> int | None:
    """``tensor``'s in-place version counter, or ``None`` for an inference tensor (Lightning's
    test and predict loops), which keeps none and cannot be edited outside inference mode."""
    return None if tensor.is_inference() else tensor._version


def unlinked(tensor: Tensor) -> Tensor:
    """``tensor`` sharing its storage but not linked to the tensor it is a view of (no copy), so
    it may be kept in that tensor's :func:`tensor_cache`."""
    return tensor.detach() if tensor._is_view() else tensor


def tensor_cache(tensor: Tensor) -> dict:
    """A dict stored on the tensor object itself, emptied when the tensor is modified in place.

    Structures derived from a partition's or a batch's ``edge_index`` (its CSR, its GCN
    normalisation) live as long as the tensor, which every layer of every step reuses, and no
    longer. What is stored must not hold a *view* of ``tensor`` (use :func:`unlinked`): a view
    keeps its base alive from C++, where Python's garbage collector cannot see the cycle, so the
    tensor and its cache would never be freed (a sampled batch's, once per step).
    """
    key = _cache_key(tensor)
    cached = getattr(tensor, "_lgd_cache", None)
    if cached is None or cached[0] != key:
        cached = (key, {})
        tensor._lgd_cache = cached
    return cached[1]


def _cache_key(tensor: Tensor) -> tuple:
    return (tensor.data_ptr(), tuple(tensor.shape), tensor_version(tensor))


def carry_cache(source: Tensor, target: Tensor, move: Callable[[Tensor], Tensor]) -> list[Tensor]:
    """Give ``target`` (``source`` copied to another device) the CSR matrices and hop prefixes
    cached on ``source`` (what :func:`prepare_batch_adjacency` built on the host), each of their
    tensors copied by ``move``, so the step on the device builds none of them (and makes no
    host round trip for them). Returns the tensors ``move`` made (a caller copying on a side
    stream marks them used by the consuming stream); none when ``source`` holds no cache."""
    cached = getattr(source, "_lgd_cache", None)
    if cached is None or cached[0] != _cache_key(source):
        return []
    made: list[Tensor] = []

    def copied(tensor: Tensor) -> Tensor:
        made.append(move(tensor))
        return made[-1]

    def adjacency(adj: CSRAdjacency) -> CSRAdjacency:
        out = CSRAdjacency(
            adj.num_rows, adj.num_cols, copied(adj.crow), copied(adj.col), copied(adj.perm)
        )
        if adj._transpose is not None:
            out._transpose = adjacency(adj._transpose)
        return out

    cache = tensor_cache(target)
    if "csr" in cached[1]:
        cache["csr"] = {shape: adjacency(adj) for shape, adj in cached[1]["csr"].items()}
    if "hop_prefix" in cached[1]:
        prefixes = cache.setdefault("hop_prefix", {})
        for num_edges, prefix in cached[1]["hop_prefix"].items():
            prefixes[num_edges] = unlinked(target[:, :num_edges])  # a view: no copy
            made += carry_cache(prefix, prefixes[num_edges], move)
    return made


def adjacency_of(edge_index: Tensor, num_rows: int, num_cols: int) -> CSRAdjacency:
    """The :class:`CSRAdjacency` of ``edge_index``, cached on the tensor (:func:`tensor_cache`).

    A larger shape than the cached one only adds empty rows/columns, so one sort serves every
    size.
    """
    sizes = tensor_cache(edge_index).setdefault("csr", {})
    if not sizes:
        base = CSRAdjacency.from_edge_index(edge_index, num_rows, num_cols)
        sizes[base.shape] = base
    if (num_rows, num_cols) not in sizes:
        base = next(iter(sizes.values()))
        sizes[(num_rows, num_cols)] = resized(base, num_rows, num_cols)
    return sizes[(num_rows, num_cols)]


def resized(adj: CSRAdjacency, num_rows: int, num_cols: int) -> CSRAdjacency:
    """The same entries in a ``num_rows × num_cols`` matrix (rows and columns added or dropped
    at the end; dropped ones must be empty). A transpose already built is resized with it."""
    if num_rows < adj.num_rows and int(adj.crow[num_rows]) != adj.num_entries:
        raise ValueError(
            f"cannot shrink a CSR adjacency to {num_rows} rows: rows beyond it hold entries"
        )
    if num_cols < adj.num_cols and adj.num_entries and int(adj.col.max()) >= num_cols:
        raise ValueError(
            f"cannot shrink a CSR adjacency to {num_cols} columns: an edge has a source "
            f"{int(adj.col.max())}"
        )
    out = _resized_structure(adj, num_rows, num_cols)
    if adj._transpose is not None:
        out._transpose = _resized_structure(adj._transpose, num_cols, num_rows)
    return out


def _resized_structure(adj: CSRAdjacency, num_rows: int, num_cols: int) -> CSRAdjacency:
    crow = adj.crow
    if num_rows > adj.num_rows:
        crow = torch.cat([crow, crow[-1:].expand(num_rows - adj.num_rows)])
    else:
        crow = crow[: num_rows + 1]
    dtype = index_dtype(num_rows, num_cols, adj.num_entries)
    return CSRAdjacency(num_rows, num_cols, crow.to(dtype), adj.col.to(dtype), adj.perm.to(dtype))


def hop_prefix(edge_index: Tensor, num_edges: int) -> Tensor:
    """``edge_index[:, :num_edges]`` as one tensor object per batch and length, so every layer
    (and step of a trimmed model) sees the same edges tensor and its cached CSR."""
    if num_edges == edge_index.size(1):
        return edge_index
    prefixes = tensor_cache(edge_index).setdefault("hop_prefix", {})
    if num_edges not in prefixes:
        prefixes[num_edges] = unlinked(edge_index[:, :num_edges])
    return prefixes[num_edges]


def prepare_batch_adjacency(
    edge_index: Tensor, num_sampled_nodes: list[int], num_sampled_edges: list[int]
) -> None:
    """Build (and cache on the tensors) the CSR matrices and transposes a model needs on a
    sampled batch: the whole batch graph (``N × N``) and each hop prefix that a trimmed layer
    uses. A loader calls it while it prepares the batch (in its prefetch thread, if any), so
    the training step finds them built."""
    num_nodes = sum(num_sampled_nodes)
    adjacency_of(edge_index, num_nodes, num_nodes).transpose()
    for hops in range(1, len(num_sampled_edges)):
        edges = hop_prefix(edge_index, sum(num_sampled_edges[:hops]))
        num_src, num_dst = sum(num_sampled_nodes[: hops + 1]), sum(num_sampled_nodes[:hops])
        adjacency_of(edges, num_dst, num_src).transpose()
