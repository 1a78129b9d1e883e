"""``VertexCutPart``: one rank's part of a vertex cut (paper 002 §5.2, design §7).

A part holds the edges assigned to it and a copy of every endpoint of those edges (its *local
vertices*, ascending by dataset id). A vertex whose edges lie in several parts is *split*: one of
its copies is the root, the others are leaves. Each part aggregates over its own edges; the
partial aggregates of split vertices are then synchronised leaf → root → leaf
(:class:`~lightning_gnn_dist.comm.vertex_cut.PartialAggregateSync`).

Conventions shared with :class:`~lightning_gnn_dist.data.local.LocalPartition`: ``global_ids``
are dataset ids, degrees are **global**, and labels and masks are set on root copies only, so
every vertex counts once in the loss and metrics. Features are replicated on every copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import graph_attributes
from lightning_gnn_dist.data.graph import gcn_norm_weights, sorted_unique


@dataclass(frozen=True)
class VertexCopies:
    """Where every vertex of a vertex cut has copies, and which copy is the root.

    Attributes:
        vertex: ``[C] int64`` vertex of each copy, sorted by (vertex, part).
        part: ``[C] int64`` part of each copy.
        root_part: ``[num_nodes] int64`` part of each vertex's root copy.
    """

    vertex: np.ndarray
    part: np.ndarray
    root_part: np.ndarray

    @property
    def is_root(self) -> np.ndarray:
        """``[C] bool``: the copy is its vertex's root."""
        return self.root_part[self.vertex] == self.part


ROOT_CHOICES = ("random", "balanced")


def vertex_copies(
    edge_index: np.ndarray,
    edge_parts: np.ndarray,
    num_nodes: int,
    num_parts: int,
    seed: int = 0,
    root_choice: str = "random",
) -> VertexCopies:
    """Copies of every vertex (every part holding one of its edges; a vertex without edges gets
    one copy, round-robin over parts) and the root of each.

    Args:
        root_choice: ``"random"``: a copy drawn uniformly with ``seed`` (paper 002 §5.3);
            ``"balanced"``: load-aware, see :func:`_balanced_roots`.
    """
    if root_choice not in ROOT_CHOICES:
        raise ValueError(f"root_choice must be one of {ROOT_CHOICES} (got {root_choice!r})")
    src, dst = np.asarray(edge_index, dtype=np.int64)
    edge_parts = np.asarray(edge_parts, dtype=np.int64)
    keys = np.concatenate([src, dst]) * num_parts + np.concatenate([edge_parts, edge_parts])
    touched = np.bincount(np.concatenate([src, dst]), minlength=num_nodes) > 0
    isolated = np.flatnonzero(~touched)
    keys = np.concatenate([keys, isolated * num_parts + np.arange(isolated.size) % num_parts])
    keys = sorted_unique(keys)
    vertex, part = keys // num_parts, keys % num_parts
    copies = np.bincount(vertex, minlength=num_nodes)
    first = np.zeros(num_nodes, dtype=np.int64)
    np.cumsum(copies[:-1], out=first[1:])
    rng = np.random.default_rng(seed % 2**63)
    pick = (rng.random(num_nodes) * copies).astype(np.int64)
    root_part = part[first + pick]
    if root_choice == "balanced":
        _balanced_roots(root_part, vertex, part, copies, first, num_parts, rng)
    return VertexCopies(vertex=vertex, part=part, root_part=root_part)


def _balanced_roots(
    root_part: np.ndarray,
    vertex: np.ndarray,
    part: np.ndarray,
    copies: np.ndarray,
    first: np.ndarray,
    num_parts: int,
    rng: np.random.Generator,
) -> None:
    """Re-choose (in place) the roots of vertices with three or more copies to balance the rows
    each part sends per synchronisation.

    With every copy of a split vertex a leaf, a part sends one row per copy; making its copy of
    ``v`` the root adds ``copies_v − 2`` rows (it answers every leaf instead of sending once).
    Vertices with two copies cost the same wherever the root is, so they keep the random root;
    the others go, largest first, to their least-loaded copy's part, in chunks decided against the
    loads at the chunk's start (vectorised, like :func:`libra_chunked`).
    """
    split = copies[vertex] > 1
    load = np.bincount(part[split], minlength=num_parts).astype(np.float64)
    jitter = rng.random(part.size) * 0.5  # loads are integers: only ties move
    order = np.flatnonzero(copies >= 3)
    order = order[np.argsort(-copies[order], kind="stable")]
    chunk = max(1, order.size // (64 * num_parts))
    for start in range(0, order.size, chunk):
        vs = order[start : start + chunk]
        counts = copies[vs]
        offsets = np.cumsum(counts) - counts
        pos = np.repeat(first[vs], counts) + np.arange(counts.sum()) - np.repeat(offsets, counts)
        owner = np.repeat(np.arange(vs.size), counts)
        best = pos[np.lexsort((load[part[pos]] + jitter[pos], owner))[offsets]]
        root_part[vs] = part[best]
        np.add.at(load, part[best], counts - 2)


_MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class VertexCutPart:
    """One rank's part of a vertex cut.

    Attributes:
        part_id: this part (= rank).
        num_parts: P.
        num_nodes_global: vertices in the whole graph.
        global_ids: ``[num_local] int64`` dataset ids of the local vertex copies, ascending.
        edge_index: ``[2, E_local] int64`` the part's edges over local vertex indices.
        is_root: ``[num_local] bool`` whether the copy is its vertex's root (unsplit vertices are
            their own root).
        leaf_index: ``[Σ leaf_counts] int64`` local leaf copies, grouped by the root's part and
            ascending by dataset id within a group; sent to the roots, overwritten by the totals.
        leaf_counts: ``[P] int64`` leaf copies whose root lies on each part.
        root_index: ``[Σ root_counts] int64`` local root copies with a leaf on a peer, grouped by
            the leaf's part (a root appears once per leaf) in the peers' ``leaf_index`` order.
        root_counts: ``[P] int64`` leaves each part holds of this part's roots.
        in_degree: ``[num_local] int64`` global in-degree (no self loops) of every local vertex.
        has_self_loop: ``[num_local] bool`` whether the input graph has the vertex's loop.
        num_self_loops: ``[num_local] int64`` self loops of the vertex in the input graph
            (multigraphs may have several); ``None`` in parts written before it existed.
        x: ``[num_local, d]`` features of every copy (replicated).
        y, train_mask, val_mask, test_mask: labels and masks; masks are ``False`` on leaves.
        edge_ids: ``[E_local] int64`` position of each local edge in the dataset's canonical
            ``edge_index`` (PyG's ``e_id``); ``None`` in parts stored before it existed.
        node_attrs: every other node attribute by name, ``[num_local, ...]`` (replicated on
            every copy, as ``x``).
        edge_attrs: every edge attribute by name, ``[E_local, ...]`` in ``edge_index`` order
            (each edge lives on one part, with its values).
        link_label_index, link_label, link_label_id: link stores only, as
            :class:`~lightning_gnn_dist.data.local.LocalPartition`'s (the pairs whose source's
            root copy is on this part).
    """

    part_id: int
    num_parts: int
    num_nodes_global: int
    global_ids: Tensor
    edge_index: Tensor
    is_root: Tensor
    leaf_index: Tensor
    leaf_counts: Tensor
    root_index: Tensor
    root_counts: Tensor
    in_degree: Tensor
    has_self_loop: Tensor
    num_self_loops: Tensor | None = None
    x: Tensor | None = None
    y: Tensor | None = None
    train_mask: Tensor | None = None
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    edge_ids: Tensor | None = None
    node_attrs: dict[str, Tensor] = field(default_factory=dict)
    edge_attrs: dict[str, Tensor] = field(default_factory=dict)
    link_label_index: dict[str, Tensor] = field(default_factory=dict)
    link_label: dict[str, Tensor] = field(default_factory=dict)
    link_label_id: dict[str, Tensor] = field(default_factory=dict)

    kind = "vertex-cut"

    @property
    def num_owned(self) -> int:
        """Rows the layers compute on this rank: every local copy (roots and leaves)."""
        return int(self.global_ids.numel())

    @property
    def num_halo(self) -> int:
        """Always 0: every source of a local edge is a local vertex."""
        return 0

    @property
    def send_counts(self) -> Tensor:
        """``[P] int64`` rows sent to each peer per synchronisation (leaf partials, then totals)."""
        return self.leaf_counts + self.root_counts

    @property
    def recv_counts(self) -> Tensor:
        """``[P] int64`` rows received from each peer per synchronisation (equal to sent)."""
        return self.root_counts + self.leaf_counts

    def gcn_edge_weight(
        self, add_self_loops: bool = True, improved: bool = False, normalize: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Local edges with PyG 2.8 ``gcn_norm`` weights from **global** degrees, the semantics of
        :meth:`~lightning_gnn_dist.data.local.LocalPartition.gcn_edge_weight` (``improved`` has
        no effect without edge weights; parallel edges count once each). Adding self loops
        replaces the graph's own loops by one loop of weight 1 per vertex, placed on the root
        copy only, so the synchronised sum counts it once.

        Returns:
            ``(edge_index [2, E'] int64, edge_weight [E'] float32)`` over local vertices.
        """
        del improved  # PyG 2.8 ignores it when no edge weights are given
        loops = self.has_self_loop if self.num_self_loops is None else self.num_self_loops
        roots = torch.nonzero(self.is_root).flatten()
        return gcn_norm_weights(
            self.edge_index, self.in_degree, loops, roots, add_self_loops, normalize
        )

    def save(self, path: str | Path) -> None:
        torch.save({f.name: getattr(self, f.name) for f in fields(self)}, path)

    @classmethod
    def load(cls, path: str | Path, mmap: bool = False) -> VertexCutPart:
        """Read a part written by :meth:`save`; ``mmap=True`` maps its tensors from the file
        (copy-on-write: nothing is read until used, and writes stay in this process)."""
        return cls(**torch.load(path, weights_only=True, mmap=mmap))

    def __repr__(self) -> str:
        return (
            f"VertexCutPart(part={self.part_id}/{self.num_parts}, local={self.num_owned}, "
            f"roots={int(self.is_root.sum())}, edges={self.edge_index.size(1)}, "
            f"leaf_rows={int(self.leaf_counts.sum())}, root_rows={int(self.root_counts.sum())})"
        )


def build_vertex_cut_parts(
    data: Data,
    edge_parts: np.ndarray,
    num_parts: int,
    seed: int = 0,
    copies: VertexCopies | None = None,
) -> Iterator[VertexCutPart]:
    """Yield the :class:`VertexCutPart` of every part, in part order (vectorised over edges;
    the only Python loop is over parts).

    Args:
        data: canonical graph.
        edge_parts: ``[num_edges] int64`` part of each edge.
        num_parts: P.
        seed: seed of the root choice (as :func:`vertex_copies`).
        copies: precomputed :func:`vertex_copies` (saves recomputing it).
    """
    num_nodes = data.num_nodes
    edge_index = data.edge_index.numpy()
    edge_parts = np.asarray(edge_parts, dtype=np.int64)
    if copies is None:
        copies = vertex_copies(edge_index, edge_parts, num_nodes, num_parts, seed)
    src, dst = edge_index
    loop = src == dst
    in_degree = np.bincount(dst[~loop], minlength=num_nodes)
    num_loops = np.bincount(dst[loop], minlength=num_nodes)

    # Copies sorted by (part, vertex): each part's local vertices, ascending.
    by_part = np.lexsort((copies.vertex, copies.part))
    local_vertex = copies.vertex[by_part]
    part_bounds = np.searchsorted(copies.part[by_part], np.arange(num_parts + 1))
    edge_order = np.argsort(edge_parts, kind="stable")
    edge_bounds = np.searchsorted(edge_parts[edge_order], np.arange(num_parts + 1))

    attributes = graph_attributes(data)
    leaf = ~copies.is_root
    leaf_vertex, leaf_part = copies.vertex[leaf], copies.part[leaf]
    leaf_root = copies.root_part[leaf_vertex]
    as_leaf = np.lexsort((leaf_vertex, leaf_root, leaf_part))  # by (leaf part, root part, v)
    as_root = np.lexsort((leaf_vertex, leaf_part, leaf_root))  # by (root part, leaf part, v)
    leaf_bounds = np.searchsorted(leaf_part[as_leaf], np.arange(num_parts + 1))
    root_bounds = np.searchsorted(leaf_root[as_root], np.arange(num_parts + 1))

    for p in range(num_parts):
        vertices = local_vertex[part_bounds[p] : part_bounds[p + 1]]
        edges = edge_order[edge_bounds[p] : edge_bounds[p + 1]]
        local_edges = np.searchsorted(vertices, edge_index[:, edges])
        mine = as_leaf[leaf_bounds[p] : leaf_bounds[p + 1]]
        theirs = as_root[root_bounds[p] : root_bounds[p + 1]]
        is_root = copies.root_part[vertices] == p
        part = VertexCutPart(
            part_id=p,
            num_parts=num_parts,
            num_nodes_global=num_nodes,
            global_ids=torch.from_numpy(vertices.copy()),
            edge_index=torch.from_numpy(np.ascontiguousarray(local_edges)),
            is_root=torch.from_numpy(is_root),
            leaf_index=torch.from_numpy(np.searchsorted(vertices, leaf_vertex[mine])),
            leaf_counts=torch.from_numpy(np.bincount(leaf_root[mine], minlength=num_parts)),
            root_index=torch.from_numpy(np.searchsorted(vertices, leaf_vertex[theirs])),
            root_counts=torch.from_numpy(np.bincount(leaf_part[theirs], minlength=num_parts)),
            in_degree=torch.from_numpy(in_degree[vertices]),
            has_self_loop=torch.from_numpy(num_loops[vertices] > 0),
            num_self_loops=torch.from_numpy(num_loops[vertices]),
        )
        index = torch.from_numpy(vertices)
        root = torch.from_numpy(is_root)
        for key in ("x", "y", *_MASKS):
            value = getattr(data, key, None)
            if value is not None:
                value = value[index].clone()
                setattr(part, key, value & root if key in _MASKS else value)
        part.edge_ids = torch.from_numpy(edges.copy())
        part.node_attrs = {key: data[key][index].clone() for key in attributes.node}
        part.edge_attrs = {key: data[key][part.edge_ids].clone() for key in attributes.edge}
        yield part
