"""``LocalPartition``: everything one rank holds of a partitioned graph (design §3).

Vertices are relabelled so part ``p`` owns the contiguous id range
``[part_offsets[p], part_offsets[p + 1])``; global→(part, local) is then a binary search. A rank
holds its owned rows and the rows of ``Â`` for them, with columns indexed ``[owned | halo]``
where the halo (remote in-neighbours) is sorted by relabelled id, hence grouped by owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import graph_attributes
from lightning_gnn_dist.data.graph import (
    gcn_norm_weights,
    gcn_normalise,
    gcn_weighted_edges,
    last_self_loop,
    sorted_unique,
    weighted_in_degree,
)

_OPTIONAL = ("x", "y", "train_mask", "val_mask", "test_mask")


@dataclass
class LocalPartition:
    """One rank's part of the graph.

    Attributes:
        part_id: this part (= rank).
        num_parts: P.
        num_nodes_global: vertices in the whole graph.
        part_offsets: ``[P + 1] int64`` relabelled id ranges of all parts.
        global_ids: ``[num_owned] int64`` original (dataset) ids of the owned vertices.
        edge_index: ``[2, E_local] int64``; sources index ``[owned | halo]`` rows, targets index
            owned rows. It holds every in-edge of every owned vertex, parallel edges included.
        halo_ids: ``[num_halo] int64`` relabelled ids of the halo vertices, ascending.
        recv_counts: ``[P] int64`` halo rows received from each peer per exchange (``R_m``,
            paper 000 eq. 9); the halo block of peer ``q`` follows those of peers ``< q``.
        send_index: ``[Σ send_counts] int64`` local owned rows to send, grouped by peer.
        send_counts: ``[P] int64`` rows sent to each peer per exchange (``S_m``, eq. 8).
        in_degree: ``[num_owned + num_halo] int64`` global in-degree without self loops of
            every local vertex, parallel edges counted (normalisation must use global degrees,
            never local ones).
        has_self_loop: ``[num_owned + num_halo] bool`` whether the input graph has the loop.
        x, y, train_mask, val_mask, test_mask: owned rows only (``[num_owned, d]`` etc.).
        num_self_loops: ``[num_owned + num_halo] int64`` self loops of every local vertex in
            the input graph (more than one in a multigraph); ``None`` in parts stored before it
            existed, read as ``has_self_loop``.
        halo_global_ids: ``[num_halo] int64`` original (dataset) ids of the halo vertices.
        send_edge_offsets: ``[Σ send_counts + 1] int64``; the out-edges of send entry ``e``
            (owned row ``send_index[e]`` → its peer) are ``send_edge_targets[offsets[e]:offsets[e+1]]``.
        send_edge_targets: original ids of the peer's vertices each send entry's row feeds. With
            the two ``halo_*``/``send_edge_*`` fields a rank restricts its plans to a sampled
            subgraph without global structure (``loaders.subgraph``).
        edge_ids: ``[E_local] int64`` position of each local edge in the dataset's canonical
            ``edge_index`` (PyG's ``e_id``); ``None`` in parts stored before it existed.
        node_attrs: every node attribute besides ``x``, ``y`` and the masks, owned rows
            ``[num_owned, ...]`` by name (``{}`` when the graph has none).
        edge_attrs: every edge attribute (``edge_weight``, ``edge_attr``, ...) ``[E_local, ...]``
            in ``edge_index`` order: a rank holds the in-edges of its owned vertices, so no edge
            attribute crosses the network in a halo exchange.
        link_label_index: link stores only: split → ``[2, n] int64`` supervision pairs (dataset
            ids) whose source the part owns (:mod:`~lightning_gnn_dist.data.links`); ``{}``
            otherwise.
        link_label: split → ``[n]`` their labels (``0`` marks a stored negative).
        link_label_id: split → ``[n] int64`` each pair's position in its split (what keys its
            negatives' random stream).
        node_type_offsets: typed graphs only (``None`` otherwise): ``[T + 1] int64`` owned rows
            of each node type (owned vertices are sorted by ``(node type, id)``).
        halo_node_type: typed graphs: ``[num_halo] int64`` node type of each halo vertex.
        edge_type_offsets: typed graphs: ``[R + 1] int64`` local edges of each relation (local
            edges are sorted by ``(edge type, target)``).
        part_type_counts: typed graphs: ``[P, T] int64`` vertices of each type on every part.
        relation_plans: typed graphs: per relation key ``"src__rel__dst"``, the homogeneous
            halo plan restricted to it (:mod:`~lightning_gnn_dist.data.hetero_local`):
            ``halo`` (positions in the halo), ``send`` (positions in ``send_index``),
            ``edge_ids`` (each local edge's position in the relation) and, for a relation
            within one type, ``halo_degrees`` (``[n, 2]`` its halo rows' global in-degree and
            self loops in the relation).
        type_schema: typed graphs: the graph's types, sizes and target type (the store's
            ``types`` record, :meth:`~lightning_gnn_dist.data.hetero.HeteroSchema.to_meta`).
    """

    part_id: int
    num_parts: int
    num_nodes_global: int
    part_offsets: Tensor
    global_ids: Tensor
    edge_index: Tensor
    halo_ids: Tensor
    recv_counts: Tensor
    send_index: Tensor
    send_counts: Tensor
    in_degree: Tensor
    has_self_loop: Tensor
    x: Tensor | None = None
    y: Tensor | None = None
    train_mask: Tensor | None = None
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    num_self_loops: Tensor | None = None
    halo_global_ids: Tensor | None = None
    send_edge_offsets: Tensor | None = None
    send_edge_targets: Tensor | None = None
    edge_ids: Tensor | None = None
    node_attrs: dict[str, Tensor] = field(default_factory=dict)
    edge_attrs: dict[str, Tensor] = field(default_factory=dict)
    link_label_index: dict[str, Tensor] = field(default_factory=dict)
    link_label: dict[str, Tensor] = field(default_factory=dict)
    link_label_id: dict[str, Tensor] = field(default_factory=dict)
    node_type_offsets: Tensor | None = None
    halo_node_type: Tensor | None = None
    edge_type_offsets: Tensor | None = None
    part_type_counts: Tensor | None = None
    relation_plans: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    type_schema: dict | None = None

    def host_offsets(self) -> list[int]:
        """``part_offsets`` as host integers, read once per tensor: on a GPU, reading them
        per use would make every exchange wait for the device."""
        cached = self.__dict__.get("_host_offsets")
        if cached is None or cached[0] is not self.part_offsets:
            cached = (self.part_offsets, self.part_offsets.tolist())
            self.__dict__["_host_offsets"] = cached
        return cached[1]

    @property
    def num_owned(self) -> int:
        offsets = self.host_offsets()
        return offsets[self.part_id + 1] - offsets[self.part_id]

    @property
    def num_halo(self) -> int:
        return int(self.halo_ids.numel())

    @property
    def owned_range(self) -> tuple[int, int]:
        """``(start, end)`` of the owned relabelled ids."""
        offsets = self.host_offsets()
        return offsets[self.part_id], offsets[self.part_id + 1]

    def gcn_edge_weight(
        self,
        add_self_loops: bool = True,
        improved: bool = False,
        normalize: bool = True,
        edge_weight: Tensor | None = None,
        halo_degree: Callable[[Tensor], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Local ``edge_index`` and edge weights of PyG 2.8's ``GCNConv``, with the symmetric
        normalisation ``deg^-1/2[j] · w · deg^-1/2[i]`` from **global** degrees.

        Without ``edge_weight``, as PyG's ``gcn_norm`` (``add_remaining_self_loops`` with no edge
        weights): adding self loops replaces the graph's own loops by exactly one loop of weight
        1 per vertex, so ``improved`` changes nothing; parallel edges count once each. Without
        ``add_self_loops`` the graph's loops, parallel ones included, are kept. With
        ``normalize=False`` every edge weighs 1 (``add_self_loops`` is then unused, as in PyG).

        With ``edge_weight`` (``[E_local]``, in ``edge_index`` order), as PyG's ``gcn_norm`` with
        weights: adding self loops removes the graph's loops and gives every vertex one loop
        weighing its own last loop's weight if it has one, else the fill value (2 with
        ``improved``, else 1); degrees are weighted in-degree sums. A rank holds every in-edge of
        its owned vertices (in the dataset's edge order), so it computes their degrees itself;
        ``halo_degree`` maps them (``[num_owned]``) to the halo vertices' (``[num_halo]``), one
        width-1 exchange that every rank calls (optional without halo vertices). With ``normalize=False`` the edges and weights are returned unchanged
        (PyG then neither adds loops nor normalises).

        Returns:
            ``(edge_index [2, E'] int64, edge_weight [E'] float32)`` over ``[owned | halo]``
            sources and owned targets, equal to the global ``gcn_norm`` restricted to owned rows.

        Raises:
            ValueError: ``halo_degree`` missing while the partition has halo vertices.
        """
        if edge_weight is not None:
            return self._weighted_gcn(edge_weight, add_self_loops, improved, normalize, halo_degree)
        del improved  # PyG 2.8 ignores it when no edge weights are given (see above)
        loops = self.has_self_loop if self.num_self_loops is None else self.num_self_loops
        owned = torch.arange(self.num_owned, device=self.edge_index.device)
        return gcn_norm_weights(
            self.edge_index, self.in_degree, loops, owned, add_self_loops, normalize
        )

    def _weighted_gcn(
        self,
        edge_weight: Tensor,
        add_self_loops: bool,
        improved: bool,
        normalize: bool,
        halo_degree: Callable[[Tensor], Tensor] | None,
    ) -> tuple[Tensor, Tensor]:
        if not normalize:
            return self.edge_index, edge_weight
        num_owned = self.num_owned
        _, last_weight, has_loop = last_self_loop(self.edge_index, edge_weight, num_owned)
        fill = last_weight.new_full((num_owned,), 2.0 if improved else 1.0)
        owned = torch.arange(num_owned, device=self.edge_index.device)
        edges, weight = gcn_weighted_edges(
            self.edge_index, edge_weight, owned, torch.where(has_loop, last_weight, fill),
            add_self_loops,
        )  # fmt: skip
        degree = weighted_in_degree(edges, weight, num_owned)
        if halo_degree is not None:  # collective: every rank calls it, with a halo or not
            degree = torch.cat([degree, halo_degree(degree).to(degree)])
        elif self.num_halo:
            raise ValueError(
                "gcn_edge_weight with edge_weight needs halo_degree: the halo vertices' "
                "weighted degrees are held by their owners"
            )
        return edges, gcn_normalise(edges, weight, degree)

    def save(self, path: str | Path) -> None:
        torch.save({f.name: getattr(self, f.name) for f in fields(self)}, path)

    @classmethod
    def load(cls, path: str | Path, mmap: bool = False) -> LocalPartition:
        """Read a part written by :meth:`save`; ``mmap=True`` maps its tensors from the file
        (copy-on-write: nothing is read until used, and writes stay in this process)."""
        return cls(**torch.load(path, weights_only=True, mmap=mmap))

    def __repr__(self) -> str:
        return (
            f"LocalPartition(part={self.part_id}/{self.num_parts}, owned={self.num_owned}, "
            f"halo={self.num_halo}, edges={self.edge_index.size(1)}, "
            f"send_rows={int(self.send_counts.sum())}, recv_rows={int(self.recv_counts.sum())})"
        )


def relabel_order(assignment: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(new_to_old [N], part_offsets [P + 1])``: vertices sorted by (part, original id)."""
    new_to_old = np.argsort(assignment, kind="stable").astype(np.int64)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(assignment, minlength=num_parts), out=offsets[1:])
    return new_to_old, offsets


#: Edges per chunk of the streamed passes of :class:`PartBuilder` (4 Mi: temporaries of 32 MiB).
EDGE_CHUNK = 1 << 22


def _edge_chunks(num_edges: int) -> Iterator[slice]:
    chunk = EDGE_CHUNK  # read at call time (tests shrink it to cross chunk boundaries)
    for start in range(0, num_edges, chunk):
        yield slice(start, min(start + chunk, num_edges))


class PartBuilder:
    """Builds the :class:`LocalPartition` of one part at a time from a canonical graph, so that
    writing a store holds one part (and a few bytes per edge) at once, never all of them.

    The graph's ``edge_index`` is read in chunks (a memory-mapped one stays on disk but for the
    pages read), the part's in-edges and cross out-edges are gathered from a part id per edge
    end (``uint8``/``uint16``/``int32``: 2 to 8 bytes per edge), and node attributes that are
    file-backed (:func:`~lightning_gnn_dist.data.chunked.file_rows`, e.g. the features of a
    ``chunked:`` dataset) are read row block by row block, never whole. At its peak a part costs
    about 60 bytes per in-edge plus its own rows; the graph-wide state is ``2 × 8 × N`` bytes of
    id maps, ``2 × 8 × N`` of degrees and the part ids of the edge ends.

    Args:
        data: canonical graph (``load_dataset`` output).
        assignment: ``[N]`` part of each vertex.
        num_parts: P.
    """

    def __init__(self, data: Data, assignment: np.ndarray, num_parts: int) -> None:
        self.data = data
        self.num_parts = int(num_parts)
        num_nodes = self.num_nodes = int(data.num_nodes)
        self.assignment = np.asarray(assignment, dtype=np.int64)
        self.new_to_old, self.offsets = relabel_order(self.assignment, num_parts)
        self.old_to_new = np.empty(num_nodes, dtype=np.int64)
        self.old_to_new[self.new_to_old] = np.arange(num_nodes)
        edge_index = data.edge_index
        if edge_index is None:
            edge_index = torch.empty(2, 0, dtype=torch.long)
        array = edge_index.numpy() if isinstance(edge_index, Tensor) else np.asarray(edge_index)
        self.src, self.dst = array[0], array[1]
        num_edges = self.num_edges = int(self.src.size)
        part_type = np.uint8 if num_parts <= 255 else np.uint16 if num_parts <= 65535 else np.int32
        part = self.assignment.astype(part_type)
        self.src_part = np.empty(num_edges, dtype=part_type)
        self.dst_part = np.empty(num_edges, dtype=part_type)
        self.in_degree = np.zeros(num_nodes, dtype=np.int64)  # by original id
        self.num_loops = np.zeros(num_nodes, dtype=np.int64)
        for chunk in _edge_chunks(num_edges):
            src, dst = np.asarray(self.src[chunk]), np.asarray(self.dst[chunk])
            self.src_part[chunk], self.dst_part[chunk] = part[src], part[dst]
            loop = src == dst
            self.in_degree += np.bincount(dst[~loop], minlength=num_nodes)
            self.num_loops += np.bincount(dst[loop], minlength=num_nodes)
        self.attributes = graph_attributes(data)

    def _select(self, mask_of: Callable[[slice], np.ndarray]) -> np.ndarray:
        """``int64`` positions of the edges where ``mask_of(chunk)`` holds, ascending."""
        pieces = [
            np.flatnonzero(mask_of(chunk)) + chunk.start for chunk in _edge_chunks(self.num_edges)
        ]
        return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)

    def part(self, p: int) -> LocalPartition:
        """The :class:`LocalPartition` of part ``p`` (the same contents as
        :func:`build_local_partitions`'s ``p``-th)."""
        offsets, new_to_old, old_to_new = self.offsets, self.new_to_old, self.old_to_new
        start, end = int(offsets[p]), int(offsets[p + 1])
        num_owned = end - start

        # In-edges of the owned vertices, by target then dataset position (a stable sort; inside
        # a part the relabelling keeps the original id order).
        edge_ids = self._select(lambda chunk: self.dst_part[chunk] == p)
        dst = self.dst[edge_ids]
        order = np.argsort(dst, kind="stable")
        edge_ids = edge_ids[order]
        dst = old_to_new[dst[order]] - start
        del order
        src = old_to_new[self.src[edge_ids]]
        owned = (src >= start) & (src < end)
        halo = sorted_unique(src[~owned])
        local_src = np.where(owned, src - start, num_owned + np.searchsorted(halo, src))
        del src, owned
        edge_index = np.stack([local_src, dst])
        del local_src, dst
        halo_old = new_to_old[halo]

        # Send plan: the cross out-edges of the owned vertices, by (peer, source, target).
        cross = self._select(
            lambda chunk: (self.src_part[chunk] == p) & (self.dst_part[chunk] != p)
        )
        peer = self.dst_part[cross].astype(np.int64)
        cross_src = old_to_new[self.src[cross]]
        cross_dst = old_to_new[self.dst[cross]]
        del cross
        order = np.lexsort((cross_dst, cross_src, peer))
        peer, cross_src, cross_dst = peer[order], cross_src[order], cross_dst[order]
        del order
        first = np.ones(peer.size, dtype=bool)
        first[1:] = (peer[1:] != peer[:-1]) | (cross_src[1:] != cross_src[:-1])
        entries = np.flatnonzero(first)
        del first
        send_edge_offsets = np.append(entries, peer.size).astype(np.int64)

        local_old = np.concatenate([new_to_old[start:end], halo_old])
        owned_old = new_to_old[start:end]
        part = LocalPartition(
            part_id=p,
            num_parts=self.num_parts,
            num_nodes_global=self.num_nodes,
            part_offsets=torch.from_numpy(offsets.copy()),
            global_ids=torch.from_numpy(owned_old.copy()),
            edge_index=torch.from_numpy(edge_index),
            halo_ids=torch.from_numpy(halo),
            recv_counts=torch.from_numpy(
                np.bincount(self.assignment[halo_old], minlength=self.num_parts)
            ),
            send_index=torch.from_numpy(cross_src[entries] - start),
            send_counts=torch.from_numpy(np.bincount(peer[entries], minlength=self.num_parts)),
            in_degree=torch.from_numpy(self.in_degree[local_old]),
            has_self_loop=torch.from_numpy(self.num_loops[local_old] > 0),
            num_self_loops=torch.from_numpy(self.num_loops[local_old]),
        )
        del local_old, peer
        part.halo_global_ids = torch.from_numpy(halo_old)
        part.send_edge_offsets = torch.from_numpy(send_edge_offsets)
        part.send_edge_targets = torch.from_numpy(new_to_old[cross_dst])
        del cross_src, cross_dst
        for key in _OPTIONAL:
            if getattr(self.data, key, None) is not None:
                setattr(part, key, self._node_rows(key, owned_old))
        part.edge_ids = torch.from_numpy(edge_ids)
        part.node_attrs = {key: self._node_rows(key, owned_old) for key in self.attributes.node}
        part.edge_attrs = {key: self._edge_rows(key, edge_ids) for key in self.attributes.edge}
        return part

    def _node_rows(self, key: str, index: np.ndarray) -> Tensor:
        from lightning_gnn_dist.data.chunked import file_rows

        rows = file_rows(self.data, key, index)
        return rows if rows is not None else self.data[key][torch.from_numpy(index)].clone()

    def _edge_rows(self, key: str, index: np.ndarray) -> Tensor:
        from lightning_gnn_dist.data.chunked import file_rows

        rows = file_rows(self.data, key, index)
        return rows if rows is not None else self.data[key][torch.from_numpy(index)].clone()


def build_local_partitions(
    data: Data, assignment: np.ndarray, num_parts: int
) -> Iterator[LocalPartition]:
    """Yield the :class:`LocalPartition` of every part of a canonical graph, in part order,
    building each only when it is asked for (:class:`PartBuilder`: drop a part before asking
    for the next one and only one is in memory).

    Vectorised over edges; the only Python loops are over parts and edge chunks.
    """
    builder = PartBuilder(data, assignment, num_parts)
    for p in range(num_parts):
        yield builder.part(p)


def to_device(part, device: torch.device):
    """``part`` (a :class:`LocalPartition`, a vertex cut's part or another dataclass of tensors)
    with every tensor field on ``device`` (itself on the CPU), as ``GNNStrategy`` places a rank's
    part; dict fields (attributes, relation plans) stay where they are."""
    if device.type == "cpu":
        return part
    moved = {
        f.name: getattr(part, f.name).to(device)
        for f in fields(part)
        if isinstance(getattr(part, f.name), Tensor)
    }
    return replace(part, **moved)
