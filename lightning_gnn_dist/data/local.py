"""``LocalPartition``: everything one rank holds of a partitioned graph (design §3).

Vertices are relabelled so part ``p`` owns the contiguous id range
``[part_offsets[p], part_offsets[p + 1])``; global→(part, local) is then a binary search. A rank
holds its owned rows and the rows of ``Â`` for them, with columns indexed ``[owned | halo]``
where the halo (remote in-neighbours) is sorted by relabelled id, hence grouped by owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
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
    def load(cls, path: str | Path) -> LocalPartition:
        return cls(**torch.load(path, weights_only=True))

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


def build_local_partitions(
    data: Data, assignment: np.ndarray, num_parts: int
) -> Iterator[LocalPartition]:
    """Yield the :class:`LocalPartition` of every part of a canonical graph, in part order.

    Vectorised over edges; the only Python loop is over parts.
    """
    num_nodes = data.num_nodes
    assignment = np.asarray(assignment, dtype=np.int64)
    new_to_old, offsets = relabel_order(assignment, num_parts)
    old_to_new = np.empty(num_nodes, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(num_nodes)
    new_part = assignment[new_to_old]

    src_old, dst_old = data.edge_index.numpy()
    src, dst = old_to_new[src_old], old_to_new[dst_old]
    loop = src == dst
    in_degree = np.bincount(dst[~loop], minlength=num_nodes)
    num_loops = np.bincount(dst[loop], minlength=num_nodes)

    # Halo pairs (target part, remote source), unique and sorted: per target part the halo is
    # ascending in relabelled id, hence grouped by owner.
    cross = new_part[src] != new_part[dst]
    halo_key = sorted_unique(new_part[dst[cross]] * num_nodes + src[cross])
    halo_part, halo_src = halo_key // num_nodes, halo_key % num_nodes
    halo_bounds = np.searchsorted(halo_part, np.arange(num_parts + 1))
    # The same pairs ordered by (owner, target part, id) form every part's send plan.
    send_order = np.lexsort((halo_src, halo_part, new_part[halo_src]))
    send_owner, send_peer, send_src = (
        new_part[halo_src][send_order],
        halo_part[send_order],
        halo_src[send_order],
    )
    send_bounds = np.searchsorted(send_owner, np.arange(num_parts + 1))
    # Cross edges ordered like the send entries (owner, peer, source): each entry's out-edges.
    cross_src, cross_dst = src[cross], dst[cross]
    cross_order = np.lexsort((cross_dst, cross_src, new_part[cross_dst], new_part[cross_src]))
    cross_src, cross_dst = cross_src[cross_order], cross_dst[cross_order]
    entry_key = (send_owner * num_parts + send_peer) * num_nodes + send_src
    cross_key = (new_part[cross_src] * num_parts + new_part[cross_dst]) * num_nodes + cross_src
    send_edge_bounds = np.searchsorted(cross_key, entry_key)
    send_edge_bounds = np.append(send_edge_bounds, cross_key.size).astype(np.int64)

    edge_order = np.argsort(dst, kind="stable")
    src, dst = src[edge_order], dst[edge_order]
    edge_bounds = np.searchsorted(dst, offsets)
    attributes = graph_attributes(data)

    for p in range(num_parts):
        start, end = offsets[p], offsets[p + 1]
        halo = halo_src[halo_bounds[p] : halo_bounds[p + 1]]
        s, d = src[edge_bounds[p] : edge_bounds[p + 1]], dst[edge_bounds[p] : edge_bounds[p + 1]]
        owned = (s >= start) & (s < end)
        local_src = np.where(owned, s - start, end - start + np.searchsorted(halo, s))
        sl = slice(send_bounds[p], send_bounds[p + 1])
        local_vertices = np.concatenate([np.arange(start, end), halo])
        owned_old = new_to_old[start:end]
        part = LocalPartition(
            part_id=p,
            num_parts=num_parts,
            num_nodes_global=num_nodes,
            part_offsets=torch.from_numpy(offsets.copy()),
            global_ids=torch.from_numpy(owned_old.copy()),
            edge_index=torch.from_numpy(np.stack([local_src, d - start])),
            halo_ids=torch.from_numpy(halo.copy()),
            recv_counts=torch.from_numpy(np.bincount(new_part[halo], minlength=num_parts)),
            send_index=torch.from_numpy(send_src[sl] - start),
            send_counts=torch.from_numpy(np.bincount(send_peer[sl], minlength=num_parts)),
            in_degree=torch.from_numpy(in_degree[local_vertices]),
            has_self_loop=torch.from_numpy(num_loops[local_vertices] > 0),
            num_self_loops=torch.from_numpy(num_loops[local_vertices]),
        )
        part.halo_global_ids = torch.from_numpy(new_to_old[halo])
        edge_bounds_p = send_edge_bounds[send_bounds[p] : send_bounds[p + 1] + 1]
        part.send_edge_offsets = torch.from_numpy(edge_bounds_p - edge_bounds_p[0])
        part.send_edge_targets = torch.from_numpy(
            new_to_old[cross_dst[edge_bounds_p[0] : edge_bounds_p[-1]]]
        )
        index = torch.from_numpy(owned_old)
        for key in _OPTIONAL:
            value = getattr(data, key, None)
            if value is not None:
                setattr(part, key, value[index].clone())
        edge_ids = torch.from_numpy(edge_order[edge_bounds[p] : edge_bounds[p + 1]].copy())
        part.edge_ids = edge_ids
        part.node_attrs = {key: data[key][index].clone() for key in attributes.node}
        part.edge_attrs = {key: data[key][edge_ids].clone() for key in attributes.edge}
        yield part
