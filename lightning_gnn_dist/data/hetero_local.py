"""A rank's part of a typed graph: per-type contiguous ids, per-relation views and batches.

A typed part is a :class:`~lightning_gnn_dist.data.local.LocalPartition` of the homogeneous
view (:func:`~lightning_gnn_dist.data.hetero.typed_graph`) with the typed fields of the store
format (docs/development.md): owned vertices sorted by ``(node type, id)`` so each type's owned
rows are one range (``node_type_offsets``), local edges sorted by ``(edge type, target)``
(``edge_type_offsets``), the halo's types (``halo_node_type``), every part's vertices per type
(``part_type_counts``) and, per relation, the homogeneous halo plan restricted to it
(``relation_plans``): the positions of the relation's halo rows in the part's halo and of its
send entries in the part's send plan. A type's local id is the homogeneous local id minus its
range's start (DistDGL's convention).

:func:`relation_view` turns one relation into an ordinary ``LocalPartition`` over its source
type's vertices — owned rows of the source type, the relation's halo, its edges and its plan —
so every exchange mode (``p2p``, ``broadcast``, ``hierarchical``) and every distributed layer
runs on a relation unchanged (design §7: one interface). :func:`typed_batch` is the full-batch
``HeteroData`` a model reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from .graph import sorted_unique
from .hetero import EDGE_TYPE, NODE_TYPE, HeteroSchema, attribute_key
from .local import LocalPartition, build_local_partitions, relabel_order

__all__ = ["build_typed_partitions", "is_typed_part", "relation_view", "typed_batch"]


def is_typed_part(part) -> bool:
    """Whether ``part`` is a typed graph's part (it has ``node_type_offsets``)."""
    return getattr(part, "node_type_offsets", None) is not None


def build_typed_partitions(
    data: Data, assignment: np.ndarray, num_parts: int
) -> Iterator[LocalPartition]:
    """Yield every part of a typed graph's homogeneous view, in part order, with the typed
    fields (module docstring). Vectorised; the loops are over parts and relations."""
    typed = data.hetero
    schema = typed.schema
    num_nodes = int(data.num_nodes)
    assignment = np.asarray(assignment, dtype=np.int64)
    node_type = data[NODE_TYPE].numpy()
    num_types = len(schema.node_types)
    part_type_counts = np.bincount(
        assignment * num_types + node_type, minlength=num_parts * num_types
    ).reshape(num_parts, num_types)
    new_to_old, offsets = relabel_order(assignment, num_parts)
    old_to_new = np.empty(num_nodes, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(num_nodes)
    new_part = assignment[new_to_old]
    src, dst = old_to_new[data.edge_index.numpy()]
    edge_type = data[EDGE_TYPE].numpy()
    plans = _relation_plans(src, dst, edge_type, new_part, schema, num_parts, num_nodes)
    type_offsets = schema.node_offsets()

    for part in build_local_partitions(data, assignment, num_parts):
        p = part.part_id
        # Local edges by (edge type, target), stably: each relation's edges are one range.
        local_type = part.edge_attrs[EDGE_TYPE].numpy()
        order = torch.from_numpy(np.lexsort((part.edge_index[1].numpy(), local_type)))
        part.edge_index = part.edge_index[:, order]
        part.edge_ids = part.edge_ids[order]
        part.edge_attrs = {key: value[order] for key, value in part.edge_attrs.items()}
        local_type = local_type[order.numpy()]
        part.node_type_offsets = torch.from_numpy(
            np.concatenate([[0], np.cumsum(part_type_counts[p])]).astype(np.int64)
        )
        part.halo_node_type = torch.from_numpy(node_type[part.halo_global_ids.numpy()])
        part.edge_type_offsets = torch.from_numpy(
            np.searchsorted(local_type, np.arange(len(schema.edge_types) + 1)).astype(np.int64)
        )
        part.part_type_counts = torch.from_numpy(part_type_counts.astype(np.int64))
        part.relation_plans = {key: plan.for_part(p, part) for key, plan in plans.items()}
        part.type_schema = schema.to_meta()
        owned = part.global_ids.numpy()
        for k, t in enumerate(schema.node_types):
            start, end = (int(v) for v in part.node_type_offsets[k : k + 2])
            ids = torch.from_numpy(owned[start:end] - type_offsets[k])
            for name, value in typed.node_attrs[t].items():
                part.node_attrs[attribute_key(t, name)] = value[ids].clone()
        positions = typed.edge_position[part.edge_ids]
        for r, key in enumerate(schema.relation_keys):
            start, end = (int(v) for v in part.edge_type_offsets[r : r + 2])
            within = positions[start:end]
            part.relation_plans[key]["edge_ids"] = within.clone()
            for name, value in typed.edge_attrs[key].items():
                part.edge_attrs[attribute_key(key, name)] = value[within].clone()
        yield part


class _RelationPlan:
    """One relation's halo pairs over all parts: ``(target part, source)`` pairs, sorted."""

    def __init__(self, pair_part, pair_src, send_keys, num_parts, num_nodes, degrees):
        self.pair_part, self.pair_src = pair_part, pair_src
        self.send_keys, self.num_parts, self.num_nodes = send_keys, num_parts, num_nodes
        self.degrees = degrees  # [N, 2] (in-degree, self loops) or None (bipartite relation)

    def for_part(self, p: int, part: LocalPartition) -> dict[str, Tensor]:
        halo = part.halo_ids.numpy()
        mine = slice(*np.searchsorted(self.pair_part, [p, p + 1]))
        halo_position = np.searchsorted(halo, self.pair_src[mine])
        plan = {"halo": torch.from_numpy(halo_position.astype(np.int64))}
        # This part's send entries, keyed (peer, source), sorted as the part's send plan is.
        start, end = np.searchsorted(
            self.send_keys // (self.num_parts * self.num_nodes), [p, p + 1]
        )
        own_keys = self.send_keys[start:end] % (self.num_parts * self.num_nodes)
        part_start = int(part.part_offsets[p])
        peers = np.repeat(np.arange(self.num_parts), part.send_counts.numpy())
        entry_keys = peers * self.num_nodes + (part.send_index.numpy() + part_start)
        plan["send"] = torch.from_numpy(np.searchsorted(entry_keys, own_keys).astype(np.int64))
        if self.degrees is not None:
            plan["halo_degrees"] = torch.from_numpy(self.degrees[halo[halo_position]])
        return plan


def _relation_plans(src, dst, edge_type, new_part, schema: HeteroSchema, num_parts, num_nodes):
    """Per relation key, its :class:`_RelationPlan` (relabelled ids ``src``/``dst``)."""
    plans = {}
    for r, key in enumerate(schema.relation_keys):
        in_relation = edge_type == r
        s, d = src[in_relation], dst[in_relation]
        cross = new_part[s] != new_part[d]
        halo_key = sorted_unique(new_part[d[cross]] * num_nodes + s[cross])
        pair_part, pair_src = halo_key // num_nodes, halo_key % num_nodes
        send_keys = np.sort((new_part[pair_src] * num_parts + pair_part) * num_nodes + pair_src)
        degrees = None
        source_type, _, target_type = schema.edge_types[r]
        if source_type == target_type:  # the relation's global in-degrees of its halo rows
            loop = s == d
            degrees = np.stack(
                [
                    np.bincount(d[~loop], minlength=num_nodes),
                    np.bincount(d[loop], minlength=num_nodes),
                ],
                axis=1,
            ).astype(np.int64)
        plans[key] = _RelationPlan(pair_part, pair_src, send_keys, num_parts, num_nodes, degrees)
    return plans


# -- views -------------------------------------------------------------------------------------
def type_range(part: LocalPartition, node_type: int) -> tuple[int, int]:
    """``(start, end)`` of the owned local rows of node type ``node_type`` (an index)."""
    offsets = part.node_type_offsets
    return int(offsets[node_type]), int(offsets[node_type + 1])


def relation_view(part: LocalPartition, schema: HeteroSchema, key: str) -> LocalPartition:
    """Relation ``key`` of a typed part as a ``LocalPartition`` over its **source** type.

    Owned rows are the part's owned vertices of the source type (``[num_owned_s, ...]``, its
    local type ids); the halo is the relation's (sources of its edges owned elsewhere), in the
    part's halo order (grouped by owner); ``edge_index`` holds the relation's local edges,
    sources over ``[owned_s | halo_r]`` and targets over the owned rows of the **target** type;
    ``part_offsets``, ``halo_ids`` and ``global_ids`` are the source type's per-type relabelled
    and dataset ids; ``in_degree``/``num_self_loops`` the relation's global ones (zero for a
    source type that the relation does not target). The send and receive plans are the part's
    restricted to the relation, so any exchange mode moves exactly the relation's halo rows.
    """
    r = schema.relation_index(key)
    source, _, target = schema.edge_types[r]
    s, d = schema.type_index(source), schema.type_index(target)
    plan = part.relation_plans[key]
    num_parts, p = part.num_parts, part.part_id
    counts = part.part_type_counts
    s_start, s_end = type_range(part, s)
    d_start = int(part.node_type_offsets[d])
    num_owned_s = s_end - s_start

    # Halo rows of the relation: homogeneous relabelled ids -> the source type's per-type ids.
    halo_position = plan["halo"]
    halo = part.halo_ids[halo_position]
    owner = torch.searchsorted(part.part_offsets, halo, right=True) - 1
    before_type = torch.cumsum(counts, 1) - counts  # [P, T] start of each type within a part
    type_offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts[:, s], 0)])  # [P + 1]
    halo_ids = type_offsets[owner] + (halo - part.part_offsets[owner] - before_type[owner, s])

    e_start, e_end = (int(v) for v in part.edge_type_offsets[r : r + 2])
    edge_src, edge_dst = part.edge_index[:, e_start:e_end]
    num_owned = part.num_owned
    is_owned = edge_src < num_owned
    local_src = torch.empty_like(edge_src)
    local_src[is_owned] = edge_src[is_owned] - s_start
    local_src[~is_owned] = num_owned_s + torch.searchsorted(
        halo_position, edge_src[~is_owned] - num_owned
    )
    edge_index = torch.stack([local_src, edge_dst - d_start])

    send_position = plan["send"]
    peers = torch.repeat_interleave(torch.arange(num_parts), part.send_counts)
    in_degree = torch.zeros(num_owned_s + halo.numel(), dtype=torch.long)
    self_loops = torch.zeros_like(in_degree)
    if source == target:
        loop = edge_index[0] == edge_index[1]
        in_degree[:num_owned_s] = torch.bincount(edge_index[1][~loop], minlength=num_owned_s)
        self_loops[:num_owned_s] = torch.bincount(edge_index[1][loop], minlength=num_owned_s)
        in_degree[num_owned_s:] = plan["halo_degrees"][:, 0]
        self_loops[num_owned_s:] = plan["halo_degrees"][:, 1]
    global_offset = int(schema.node_offsets()[s])
    view = LocalPartition(
        part_id=p,
        num_parts=num_parts,
        num_nodes_global=int(schema.num_nodes[s]),
        part_offsets=type_offsets,
        global_ids=part.global_ids[s_start:s_end] - global_offset,
        edge_index=edge_index,
        halo_ids=halo_ids,
        recv_counts=torch.bincount(owner, minlength=num_parts),
        send_index=part.send_index[send_position] - s_start,
        send_counts=torch.bincount(peers[send_position], minlength=num_parts),
        in_degree=in_degree,
        has_self_loop=self_loops > 0,
        num_self_loops=self_loops,
        halo_global_ids=None
        if part.halo_global_ids is None
        else part.halo_global_ids[halo_position] - global_offset,
        edge_ids=plan["edge_ids"],
    )
    # A relation's attributes are stored for its own local edges only (already its range).
    view.edge_attrs = {
        name.split("/", 1)[1]: value
        for name, value in part.edge_attrs.items()
        if name.startswith(key + "/")
    }
    return view


def typed_batch(part: LocalPartition, schema: HeteroSchema) -> HeteroData:
    """The full-batch ``HeteroData`` of a typed part: per node type its owned rows
    (``x`` and every other attribute of the type, ``global_ids`` its dataset ids of the type,
    ``num_nodes``; the target type also ``y`` and the masks); per relation ``edge_index`` (its
    :func:`relation_view`'s: sources over ``[owned_s | halo_r]``, which the halo exchange
    completes, targets over the owned rows of the target type), its edge attributes and
    ``e_id`` (position in the relation's ``edge_index``); and the homogeneous view RGCN-style
    layers read: ``node_type [num_owned]``, ``edge_type [E_local]`` and
    ``homogeneous_edge_index [2, E_local]`` (sources over the part's ``[owned | halo]``)."""
    batch = HeteroData()
    offsets = schema.node_offsets()
    target = schema.type_index(schema.target_type)
    for k, t in enumerate(schema.node_types):
        start, end = type_range(part, k)
        store = batch[t]
        store.num_nodes = end - start
        store.global_ids = part.global_ids[start:end] - int(offsets[k])
        for name, value in part.node_attrs.items():
            if name.startswith(t + "/"):
                store[name.split("/", 1)[1]] = value
        if k == target:
            for key in ("y", "train_mask", "val_mask", "test_mask"):
                value = getattr(part, key)
                if value is not None:
                    store[key] = value[start:end]
    for key, edge_type in zip(schema.relation_keys, schema.edge_types, strict=True):
        view = relation_view(part, schema, key)
        store = batch[edge_type]
        store.edge_index = view.edge_index
        store.e_id = view.edge_ids
        for name, value in view.edge_attrs.items():
            store[name] = value
    batch[NODE_TYPE] = torch.repeat_interleave(
        torch.arange(len(schema.node_types)), torch.diff(part.node_type_offsets)
    )
    batch[EDGE_TYPE] = part.edge_attrs[EDGE_TYPE]
    batch.homogeneous_edge_index = part.edge_index
    return batch
