"""Partitions of typed graphs: balance per type and the metrics of every relation (issue 33).

A typed graph (:func:`~lightning_gnn_dist.data.hetero.typed_graph`) is partitioned as its
homogeneous view, all types at once. What a typed graph adds:

* **Balance per type** (DistDGL's ``balance_ntypes``): every node type's vertices, and the
  target type's training vertices, are spread evenly. The classes balanced are one per node
  type, the target type split into its training and other vertices (so both the target type
  and its training vertices are balanced). METIS balances them as extra constraints of its
  multi-constraint k-way call (:mod:`~lightning_gnn_dist.partition.metis`); every other
  method's assignment is corrected afterwards by :func:`balance_types`, which moves the fewest
  vertices a class needs, preferring those with the fewest neighbours in their part and giving
  each to the part among the class's light ones where most of its neighbours are.
* **Metrics per relation**: the halo exchange of a typed model runs per relation (the
  homogeneous plan restricted to it, :mod:`~lightning_gnn_dist.data.hetero_local`), so every
  relation gets its :class:`~lightning_gnn_dist.partition.metrics.PartitionMetrics` in its
  source type's id space (:func:`relation_metrics`): the rows each part sends each other part
  per exchange of that relation, which the counters must equal.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import sorted_unique
from lightning_gnn_dist.data.hetero import EDGE_TYPE, NODE_TYPE, is_typed
from lightning_gnn_dist.partition.metrics import PartitionMetrics
from lightning_gnn_dist.partition.placement import Topology, choose_gateways

__all__ = ["balance_classes", "balance_types", "relation_metrics", "typed_store_meta"]


def balance_classes(data: Data) -> np.ndarray:
    """``[N] int64`` class of every vertex that :func:`balance_types` balances: its node type,
    the target type's training vertices a class of their own (``T`` classes, plus one)."""
    node_type = data[NODE_TYPE].numpy().astype(np.int64)
    schema = data.hetero.schema
    classes = node_type.copy()
    train = getattr(data, "train_mask", None)
    if train is not None:
        target = schema.type_index(schema.target_type)
        classes[(node_type == target) & train.numpy()] = len(schema.node_types)
    return classes


def type_constraints(data: Data) -> np.ndarray:
    """``[N, C] int64`` 0/1 indicators of the balance classes (METIS' extra constraints)."""
    classes = balance_classes(data)
    used = np.unique(classes)
    return (classes[:, None] == used[None, :]).astype(np.int64)


def _bound(total: int, num_parts: int, epsilon: float) -> int:
    return max(math.ceil(total / num_parts), math.floor((1 + epsilon) * total / num_parts))


def balance_types(data: Data, assignment: np.ndarray, num_parts: int, epsilon: float) -> np.ndarray:
    """Move vertices until every balance class (:func:`balance_classes`) holds at most
    ``max(⌈n_c / P⌉, ⌊(1 + ε) n_c / P⌋)`` vertices per part.

    Per class, each heavy part gives up its surplus: its vertices of the class with the fewest
    neighbours (in ``A + Aᵀ``) in the part; the parts below the bound take them, each the ones
    with the most neighbours already there. Deterministic; vectorised (loops over classes and
    parts only). A vertex moves at most once per class it belongs to.

    Returns:
        ``[N] int64`` the corrected assignment (``assignment`` itself when nothing moves).
    """
    if not is_typed(data) or num_parts == 1:
        return assignment
    assignment = np.asarray(assignment, dtype=np.int64).copy()
    classes = balance_classes(data)
    src, dst = data.edge_index.numpy()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    for c in np.unique(classes):
        members = np.flatnonzero(classes == c)
        counts = np.bincount(assignment[members], minlength=num_parts)
        bound = _bound(members.size, num_parts, epsilon)
        surplus = np.maximum(counts - bound, 0)
        if not surplus.any():
            continue
        same = assignment[src] == assignment[dst]
        inside = np.bincount(src[same], minlength=data.num_nodes) + np.bincount(
            dst[same], minlength=data.num_nodes
        )
        heavy = members[surplus[assignment[members]] > 0]
        order = np.lexsort((heavy, inside[heavy], assignment[heavy]))
        heavy = heavy[order]
        part = assignment[heavy]
        first = np.searchsorted(part, part)
        moving = heavy[np.arange(heavy.size) - first < surplus[part]]
        assignment[moving] = _place(moving, assignment, src, dst, bound - counts, num_parts)
    return assignment


def _place(moving, assignment, src, dst, room, num_parts: int) -> np.ndarray:
    """The new part of each vertex of ``moving``: parts with ``room > 0`` take, in turn (most
    room first), the vertices with the most neighbours in them, up to their room."""
    position = np.full(assignment.size, -1, dtype=np.int64)
    position[moving] = np.arange(moving.size)
    pieces = []
    for a, b in ((src, dst), (dst, src)):  # neighbours of the moving vertices, both directions
        hit = position[a] >= 0
        pieces.append(position[a[hit]] * num_parts + assignment[b[hit]])
    affinity = np.bincount(np.concatenate(pieces), minlength=moving.size * num_parts).reshape(
        moving.size, num_parts
    )
    new_part = np.full(moving.size, -1, dtype=np.int64)
    room = np.maximum(room, 0)
    for q in np.argsort(-room, kind="stable"):
        free = np.flatnonzero(new_part < 0)
        if free.size == 0 or room[q] == 0:
            continue
        take = free[np.argsort(-affinity[free, q], kind="stable")[: room[q]]]
        new_part[take] = q
    return new_part


def relation_metrics(
    data: Data, assignment: np.ndarray, num_parts: int, ranks_per_node: int | None = None
) -> dict[str, PartitionMetrics]:
    """Per relation key, the :class:`~lightning_gnn_dist.partition.metrics.PartitionMetrics` of
    its halo exchange, in its **source** type's id space: ``num_nodes`` and ``part_sizes`` are
    the source type's, ``peer_rows[p, q]`` the distinct source vertices of ``p`` with an edge of
    the relation into ``q`` (the rows ``p`` sends ``q`` per exchange), ``part_nnz`` the distinct
    ``(source, target)`` pairs of the relation ending in each part, ``edge_cut`` its distinct
    undirected cut pairs; with ``ranks_per_node`` also the ``hierarchical`` exchange's rows."""
    schema = data.hetero.schema
    assignment = np.asarray(assignment, dtype=np.int64)
    offsets = schema.node_offsets()
    src_all, dst_all = data.edge_index.numpy()
    edge_type = data[EDGE_TYPE].numpy()
    metrics = {}
    for r, key in enumerate(schema.relation_keys):
        s = schema.type_index(schema.edge_types[r][0])
        in_relation = edge_type == r
        src, dst = src_all[in_relation], dst_all[in_relation]
        source_parts = assignment[offsets[s] : offsets[s + 1]]
        pair = sorted_unique(src * num_parts + assignment[dst])  # (source, part needing it)
        row, needer = pair // num_parts, pair % num_parts
        owner = assignment[row]
        remote = needer != owner
        peer_rows = np.bincount(
            owner[remote] * num_parts + needer[remote], minlength=num_parts * num_parts
        ).reshape(num_parts, num_parts)
        distinct = sorted_unique(dst * data.num_nodes + src)
        cut = assignment[src] != assignment[dst]
        low, high = np.minimum(src[cut], dst[cut]), np.maximum(src[cut], dst[cut])
        hierarchical = None
        if ranks_per_node is not None:
            topology = Topology(num_parts // ranks_per_node, ranks_per_node)
            local_row = _per_type_relabelled(row[remote] - offsets[s], source_parts, num_parts)
            hierarchical = _hierarchical_rows(local_row, owner[remote], needer[remote], topology)
        metrics[key] = PartitionMetrics(
            num_parts=num_parts,
            num_nodes=int(source_parts.size),
            peer_rows=peer_rows.astype(np.int64),
            part_sizes=np.bincount(source_parts, minlength=num_parts).astype(np.int64),
            part_nnz=np.bincount(
                assignment[distinct // data.num_nodes], minlength=num_parts
            ).astype(np.int64),
            edge_cut=int(sorted_unique(low * data.num_nodes + high).size),
            ranks_per_node=ranks_per_node,
            hierarchical_peer_rows=hierarchical,
        )
    return metrics


def _per_type_relabelled(ids: np.ndarray, parts: np.ndarray, num_parts: int) -> np.ndarray:
    """Per-type ids ``ids`` → their relabelled ids among the type's vertices sorted by
    ``(part, id)`` (what a relation view's ``halo_ids`` hold)."""
    order = np.argsort(parts, kind="stable")
    relabelled = np.empty(parts.size, dtype=np.int64)
    relabelled[order] = np.arange(parts.size)
    return relabelled[ids]


def _hierarchical_rows(row, owner, needer, topology: Topology) -> np.ndarray:
    """``[P, P]`` rows of the hierarchical exchange from ``(row, owner, needer)`` pairs with
    ``needer != owner`` (rows relabelled), as
    :func:`~lightning_gnn_dist.partition.placement.hierarchical_peer_rows` counts them."""
    size = topology.world_size
    node = topology.node_of_rank()
    rows = np.zeros((size, size), dtype=np.int64)
    local = node[needer] == node[owner]
    np.add.at(rows, (owner[local], needer[local]), 1)
    row, needer, owner = row[~local], needer[~local], owner[~local]
    gateway = choose_gateways(row, needer, node[needer])
    first = gateway == needer
    np.add.at(rows, (owner[first], needer[first]), 1)
    np.add.at(rows, (gateway[~first], needer[~first]), 1)
    return rows


def typed_store_meta(
    data: Data, assignment: np.ndarray, num_parts: int, topology: Topology | None = None
) -> dict[str, Any]:
    """The store's ``types`` key for a typed graph (``{}`` for any other): the schema, every
    part's vertices per type (``part_type_counts``) and each relation's metrics
    (``metrics``: ``{relation key: PartitionMetrics.to_dict()}``)."""
    if not is_typed(data):
        return {}
    schema = data.hetero.schema
    num_types = len(schema.node_types)
    counts = np.bincount(
        np.asarray(assignment, dtype=np.int64) * num_types + data[NODE_TYPE].numpy(),
        minlength=num_parts * num_types,
    ).reshape(num_parts, num_types)
    per_node = None if topology is None else topology.ranks_per_node
    metrics = relation_metrics(data, assignment, num_parts, per_node)
    return {
        "types": {
            **schema.to_meta(),
            "part_type_counts": counts.tolist(),
            "metrics": {key: value.to_dict() for key, value in metrics.items()},
        }
    }


def stored_relation_metrics(meta: dict[str, Any]) -> dict[str, PartitionMetrics]:
    """Per relation key, the metrics a typed store recorded (``{}`` for an untyped store)."""
    types = meta.get("types") or {}
    return {
        key: PartitionMetrics.from_dict(value) for key, value in types.get("metrics", {}).items()
    }
