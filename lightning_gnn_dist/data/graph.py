"""Graph structure helpers shared by datasets, partitioners and metrics.

Convention (PyG's ``source_to_target`` flow): ``edge_index[0]`` holds sources ``j`` and
``edge_index[1]`` targets ``i``; a message flows ``j -> i``, so row ``i`` of the normalised
adjacency ``Â`` has a non-zero in column ``j``. Row ``i`` always also has the diagonal
non-zero (self loop), whether or not the input lists it.

Parallel edges are kept: a multigraph aggregates exactly as PyG does on the same ``edge_index``
(a doubled edge counts twice in a sum, a mean and a GCN degree). The partition model is
set-based: non-zeros, nets and halo rows count each distinct ``(j, i)`` pair once.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import graph_attributes


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an integer array.

    Same result as ``np.unique``, which in numpy 2.4 hashes and is ~100x slower on millions of
    int64 keys (14 s vs 0.14 s for 8 M measured here).
    """
    values = np.sort(values)
    if values.size == 0:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def distinct_edges(
    src: np.ndarray, dst: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` with parallel edges merged, sorted by ``(src, dst)`` (``int64`` arrays)."""
    key = sorted_unique(np.asarray(src, dtype=np.int64) * num_nodes + dst)
    return key // num_nodes, key % num_nodes


def canonicalize(data: Data, *, source: str = "graph") -> Data:
    """Validate ``data`` and return it with a sorted ``int64`` ``edge_index``.

    Edges are sorted by ``(source, target)``, stably; parallel edges and self loops are kept as
    given (a graph without parallel edges comes out exactly as ``torch_geometric.utils.coalesce``
    would return it), and every edge attribute
    (:func:`~lightning_gnn_dist.data.attributes.graph_attributes`) is permuted with its edge.

    Raises:
        ValueError: empty graph, malformed ``edge_index`` or vertex ids out of range. The message
            names ``source`` (a file path or dataset spec).
    """
    num_nodes = data.num_nodes
    if num_nodes is None or num_nodes < 1:
        raise ValueError(
            f"{source}: the graph is empty (0 vertices); a graph needs at least one vertex"
        )
    edge_index = data.edge_index
    if edge_index is None:
        edge_index = torch.empty(2, 0, dtype=torch.long)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"{source}: edge_index must have shape [2, num_edges] (got {tuple(edge_index.shape)})"
        )
    edge_index = edge_index.long()
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        bad = int(edge_index.max()) if int(edge_index.max()) >= num_nodes else int(edge_index.min())
        raise ValueError(f"{source}: vertex id {bad} is out of range [0, {num_nodes})")
    data = data.clone()
    # One stable permutation sorts the edges and every edge attribute alike (parallel edges keep
    # their own values, in their given order).
    src, dst = edge_index.numpy()
    order = torch.from_numpy(np.argsort(src * num_nodes + dst, kind="stable"))
    data.edge_index = edge_index[:, order]
    data.num_nodes = num_nodes
    for key in graph_attributes(data).edge:
        data[key] = data[key][order]
    return data


def row_nnz(edge_index: Tensor, num_nodes: int) -> np.ndarray:
    """Non-zeros per row of ``Â`` (distinct in-neighbours plus the diagonal):
    ``[num_nodes] int64``. Parallel edges count once.
    """
    src, dst = distinct_edges(*edge_index.numpy(), num_nodes)
    off_diagonal = src != dst
    return np.bincount(dst[off_diagonal], minlength=num_nodes).astype(np.int64) + 1


def column_net_pins(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Pins of the column-net hypergraph of ``Â`` as ``(net, pin)`` pairs, sorted by net.

    Net ``j`` (column ``j``) has pins ``{j} ∪ {i : j -> i}`` (paper 000 eq. 10): the rows that
    need row ``j`` of the layer input. Returns two ``int64`` arrays of equal length (one entry
    per non-zero of ``Â``); every pair appears once, also for parallel edges.
    """
    src, dst = distinct_edges(*edge_index.numpy(), num_nodes)
    off_diagonal = src != dst
    diagonal = np.arange(num_nodes, dtype=np.int64)
    nets = np.concatenate([src[off_diagonal], diagonal])
    pins = np.concatenate([dst[off_diagonal], diagonal])
    order = np.lexsort((pins, nets))
    return nets[order], pins[order]


def symmetric_csr(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices)`` of the undirected graph ``A + Aᵀ`` without self loops.

    This is the graph model of paper 000 §4.3.1 (unit edge costs).
    """
    src, dst = edge_index.numpy()
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    key = sorted_unique(a * num_nodes + b)
    rows, cols = key // num_nodes, key % num_nodes
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return indptr, cols.astype(np.int64)


def gcn_norm_weights(
    edge_index: Tensor,
    in_degree: Tensor,
    self_loops: Tensor,
    loop_vertices: Tensor,
    add_self_loops: bool = True,
    normalize: bool = True,
) -> tuple[Tensor, Tensor]:
    """PyG 2.8 ``gcn_norm`` without edge weights, from **global** degrees, on a rank's edges.

    As PyG's ``add_remaining_self_loops`` with no edge weights, adding self loops replaces the
    graph's own loops by exactly one loop of weight 1 per vertex (``improved`` has no effect);
    parallel edges count once each. Without ``add_self_loops`` the graph's loops, parallel ones
    included, are kept. With ``normalize=False`` every edge weighs 1.

    Args:
        edge_index: ``[2, E] int64`` local edges.
        in_degree: ``[num_local] int64`` global in-degree without self loops.
        self_loops: ``[num_local]`` the vertex's self loops in the input graph (count or bool).
        loop_vertices: ``[L] int64`` local vertices that get the added loop (each vertex once
            over all ranks).

    Returns:
        ``(edge_index [2, E'] int64, edge_weight [E'] float32)``.
    """
    if not normalize:
        return edge_index, torch.ones(edge_index.size(1), device=edge_index.device)
    degree = in_degree.to(torch.float32)
    if add_self_loops:
        src, dst = edge_index
        loops = loop_vertices.to(edge_index.device)
        edge_index = torch.cat([edge_index[:, src != dst], loops.repeat(2, 1)], dim=1)
        degree = degree + 1.0
    else:
        degree = degree + self_loops.to(torch.float32)
    src, dst = edge_index
    inv_sqrt = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    return edge_index, inv_sqrt[src] * inv_sqrt[dst]


def last_self_loop(
    edge_index: Tensor, edge_weight: Tensor, num_rows: int, order: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """The self loop of every row that PyG's ``add_remaining_self_loops`` keeps: of a row's
    loops the last in edge order (its ``loop_attr[row] = edge_attr[loop]`` assignment writes
    them in order, so the last one stays).

    Args:
        edge_index: ``[2, E] int64`` edges whose targets are rows ``[0, num_rows)``.
        edge_weight: ``[E]`` their weights.
        order: ``[E]`` a key giving the edges' order in the whole graph (e.g. ``edge_ids``);
            (default: the position in ``edge_index``)

    Returns:
        ``(key [num_rows] float64, weight [num_rows], has_loop [num_rows] bool)``: the kept
        loop's order key (``-1`` for a row without a loop) and weight (``0`` without one).
    """
    src, dst = edge_index
    loop = (src == dst).nonzero().flatten()
    if order is None:
        order = torch.arange(src.numel(), device=src.device)
    keys = order[loop].to(torch.float64)  # edge positions are far below 2**53: exact
    key = torch.full((num_rows,), -1.0, dtype=torch.float64, device=src.device)
    key.scatter_reduce_(0, dst[loop], keys, "amax")
    has_loop = key >= 0
    # Each row's last loop: the loop whose key equals the row's maximum.
    winner = loop[keys == key[dst[loop]]]
    weight = edge_weight.new_zeros(num_rows)
    weight[dst[winner]] = edge_weight[winner]
    return key, weight, has_loop


def gcn_weighted_edges(
    edge_index: Tensor,
    edge_weight: Tensor,
    loop_vertices: Tensor,
    loop_weight: Tensor,
    add_self_loops: bool = True,
) -> tuple[Tensor, Tensor]:
    """PyG 2.8 ``add_remaining_self_loops`` on a rank's edges: every self loop is removed and
    ``loop_vertices`` each get one loop weighing ``loop_weight`` (PyG: the vertex's own last
    loop's weight, else the fill value, 1 or 2 with ``improved``). Without ``add_self_loops``
    the edges are returned as they are (loops, parallel ones included, kept).

    Args:
        edge_index: ``[2, E] int64`` local edges; edge_weight: ``[E]`` their weights.
        loop_vertices: ``[L] int64`` local vertices that get the loop (each vertex once over all
            ranks); loop_weight: ``[L]`` its weight.

    Returns:
        ``(edge_index [2, E'] int64, edge_weight [E'])``.
    """
    if not add_self_loops:
        return edge_index, edge_weight
    keep = edge_index[0] != edge_index[1]
    loops = loop_vertices.to(edge_index.device)
    return (
        torch.cat([edge_index[:, keep], loops.repeat(2, 1)], dim=1),
        torch.cat([edge_weight[keep], loop_weight.to(edge_weight.dtype)]),
    )


def weighted_in_degree(edge_index: Tensor, edge_weight: Tensor, num_rows: int) -> Tensor:
    """``[num_rows]`` sum of the weights of each row's in-edges (PyG ``gcn_norm``'s ``deg``)."""
    return edge_weight.new_zeros(num_rows).index_add_(0, edge_index[1], edge_weight)


def gcn_weight_terms(
    edge_index: Tensor, edge_weight: Tensor, num_rows: int, order: Tensor | None = None
) -> Tensor:
    """What PyG's weighted ``gcn_norm`` needs of every row, for any layer configuration:
    ``[num_rows, 3]`` = (sum of the weights of its in-edges that are not self loops, the weight
    of its last self loop or NaN without one (:func:`last_self_loop`), sum of its self loops'
    weights). The degree is ``t0 + (t1, or the fill value if NaN)`` with ``add_self_loops``,
    else ``t0 + t2``. An owner computes them for its owned vertices from their in-edges."""
    loop = edge_index[0] == edge_index[1]
    _, last_weight, has_loop = last_self_loop(edge_index, edge_weight, num_rows, order)
    return torch.stack(
        [
            weighted_in_degree(edge_index[:, ~loop], edge_weight[~loop], num_rows),
            last_weight.masked_fill(~has_loop, float("nan")),
            weighted_in_degree(edge_index[:, loop], edge_weight[loop], num_rows),
        ],
        dim=1,
    )


def gcn_normalise(edge_index: Tensor, edge_weight: Tensor, degree: Tensor) -> Tensor:
    """``deg^-1/2[j] · w · deg^-1/2[i]`` per edge ``j → i`` as PyG ``gcn_norm`` computes it (a
    zero degree gives zero, a negative one NaN), from ``degree [num_local]`` of every endpoint
    (**global** weighted degrees)."""
    inv_sqrt = degree.pow(-0.5)
    inv_sqrt.masked_fill_(inv_sqrt == float("inf"), 0)
    src, dst = edge_index
    return inv_sqrt[src] * edge_weight * inv_sqrt[dst]


#: Bytes hashed per ``update`` call: the fingerprint reads a tensor in slices of its own
#: memory, never a copy of it (a memory-mapped tensor stays on disk but for the pages read).
_HASH_BLOCK = 1 << 24
_FINGERPRINT_KEYS = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")


def _fingerprinted(data: Data) -> list[tuple[str, Tensor]]:
    """The tensors :func:`graph_fingerprint` hashes, in its order."""
    extra = graph_attributes(data)
    keys = (*_FINGERPRINT_KEYS, *extra.node, *extra.edge)
    return [(key, data[key]) for key in keys if getattr(data, key, None) is not None]


def _signature(data: Data) -> tuple:
    """What identifies the tensors of ``data`` without reading them: each one's name, address,
    shape and dtype (a replaced tensor, or a copy of the graph, has another)."""
    return (int(data.num_nodes),) + tuple(
        (key, value.data_ptr(), tuple(value.shape), str(value.dtype))
        for key, value in _fingerprinted(data)
    )


def remember_fingerprint(data: Data, fingerprint: str) -> None:
    """Record ``fingerprint`` as the :func:`graph_fingerprint` of ``data`` (computed elsewhere,
    e.g. streamed from its files at ingestion, :mod:`~lightning_gnn_dist.data.chunked`); it is
    used while ``data`` holds the same tensors (a replaced or copied tensor hashes again)."""
    data._lgd_fingerprint = (fingerprint, _signature(data))


def graph_fingerprint(data: Data) -> str:
    """SHA-256 over the structure, features, labels, masks and every other node and edge
    attribute of ``data`` (hex string; the other attributes after the legacy keys, so a graph
    without them keeps the fingerprint it had before they were partitioned), then, for a typed
    graph (:func:`~lightning_gnn_dist.data.hetero.typed_graph`), its types and per-type
    attributes.

    Two graphs share a fingerprint only if a stored partition of one is valid for the other.
    Each tensor is hashed in slices of its own memory (no copy); a fingerprint recorded with
    :func:`remember_fingerprint` for these very tensors is returned without reading them.
    """
    remembered = getattr(data, "_lgd_fingerprint", None)
    if remembered is not None and remembered[1] == _signature(data):
        return remembered[0]
    digest = hashlib.sha256()
    digest.update(f"num_nodes={data.num_nodes}".encode())
    for key, value in _fingerprinted(data):
        tensor = value.detach().cpu()
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        flat = tensor.numpy().reshape(-1).view(np.uint8)
        for start in range(0, flat.size, _HASH_BLOCK):
            digest.update(flat[start : start + _HASH_BLOCK])
    typed = getattr(data, "hetero", None)  # a typed graph: its types and per-type attributes
    if typed is not None:
        typed.update_digest(digest)
    return digest.hexdigest()
