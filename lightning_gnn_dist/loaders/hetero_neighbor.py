"""Neighbour mini-batches of typed graphs: per-relation fan-outs, PyG's ``HeteroData`` layout.

As PyG's ``NeighborLoader`` on a ``HeteroData``, hop ``k`` samples, for every relation
``(src, rel, dst)``, up to ``num_neighbors[relation][k]`` in-neighbours (of type ``src``) of the
``dst`` vertices first reached at hop ``k − 1`` (the target type's seeds for ``k = 1``). Any
fan-out per relation is allowed — ``-1`` (all), ``0`` (the relation is not sampled at that hop)
or any number, whatever the number of relations (DGL's fan-out lists smaller than the number of
edge types fail, dgl#4003) — and relations a dict leaves out get ``0``.

On a typed part each rank draws seeds from its own target vertices (owner-compute). Every
relation is sampled by the owners of its frontier: remote targets go to their owners in one
request/response per relation and hop (the homogeneous store's messages,
:class:`~lightning_gnn_dist.loaders.graph_store.PartitionedGraphStore`, counted as
``sampling``/``sampling.edges``); rows are fetched per node type in one batched exchange each
(``features``, ``features.ids``, ``features.attrs``): a halo edge is just a remote sample, so no
rank asserts on edges it does not hold (dgl#7473). Randomness is per ``(stream, relation)`` and
dataset ids, so a batch does not depend on the partition: the single-part redraw of the same
stream holds the same vertices and edges.

A batch is a ``HeteroData``: per node type ``x``, ``n_id`` (dataset ids of the type, the seeds
first in the target type), ``num_sampled_nodes`` (per hop; the target type's first entry is the
seeds), every other attribute of the type (``y`` on the target type), and on the target type
``batch_size`` and ``input_id``; per relation ``edge_index`` (local ids of its two types),
``e_id`` (position in the relation's ``edge_index``), its edge attributes and
``num_sampled_edges`` (per hop).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from lightning_gnn_dist.comm import CommCounter
from lightning_gnn_dist.data import _kernels
from lightning_gnn_dist.data.hetero import HeteroSchema, attribute_key, relation_key
from lightning_gnn_dist.data.hetero_local import relation_view, type_range
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.sampler import InEdges, hash_keys, stream_key, use_compiled
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader, NeighborLoaders
from lightning_gnn_dist.loaders.packing import RowLayout
from lightning_gnn_dist.loaders.stepping import SteppedLoader

__all__ = [
    "HeteroNeighborLoader",
    "HeteroNeighborLoaders",
    "TypedGraphStore",
    "check_typed_fanouts",
]


def check_typed_fanouts(
    name: str, num_neighbors: Any, edge_types: Sequence[Sequence[str]] | None = None
) -> dict[str, list[int]] | list[int]:
    """PyG's ``num_neighbors`` of a typed graph: a list of fan-outs per hop (every relation) or
    a dict ``{edge type or "src__rel__dst": [fan-outs per hop]}`` with lists of one length.
    Each fan-out is ``-1`` (all in-neighbours) or ``>= 0``.

    Args:
        name: the option's name, for messages.
        num_neighbors: the value given.
        edge_types: the graph's relations, if known: a dict naming another one is refused.

    Returns:
        The list, or a dict keyed by relation key (``"src__rel__dst"``).

    Raises:
        ValueError: one line naming the bad value (not a list/dict, a fan-out below ``-1`` or
            not an integer, lists of different lengths, an unknown relation).
    """
    example = "e.g. {('paper', 'cites', 'paper'): [15, 10], ('author', 'writes', 'paper'): [0, 5]}"
    if isinstance(num_neighbors, Mapping):
        if not num_neighbors:
            raise ValueError(f"{name} is an empty dict; give fan-outs per relation, {example}")
        out = {}
        for key, values in num_neighbors.items():
            rel = key if isinstance(key, str) else relation_key(key)
            out[rel] = _fanout_list(name, values, f"{name}[{key!r}]")
        lengths = {len(v) for v in out.values()}
        if len(lengths) > 1:
            raise ValueError(
                f"{name} gives relations different numbers of hops ({sorted(lengths)}); give "
                "every relation one fan-out per hop"
            )
        if edge_types is not None:
            known = [relation_key(e) for e in edge_types]
            for rel in out:
                if rel not in known:
                    raise ValueError(
                        f"{name} names relation {rel!r}, which the graph does not have; its "
                        f"relations are {', '.join(known)}"
                    )
        return out
    return _fanout_list(name, num_neighbors, name)


def _fanout_list(name: str, values: Any, where: str) -> list[int]:
    valid = isinstance(values, Sequence) and not isinstance(values, str) and len(values) > 0
    valid = valid and all(
        isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= -1 for k in values
    )
    if not valid:
        raise ValueError(
            f"{where} must be a non-empty list of fan-outs per hop, each -1 (all in-neighbours), "
            f"0 (none) or more (got {values!r})"
        )
    return [int(k) for k in values]


def fanouts_per_relation(num_neighbors, schema: HeteroSchema) -> dict[str, list[int]]:
    """``{relation key: [fan-out per hop]}`` for every relation (``0`` for one a dict leaves
    out)."""
    if isinstance(num_neighbors, Mapping):
        hops = len(next(iter(num_neighbors.values())))
        return {key: list(num_neighbors.get(key, [0] * hops)) for key in schema.relation_keys}
    return {key: list(num_neighbors) for key in schema.relation_keys}


class _RelationSampler(PartitionedGraphStore):
    """One relation's in-edges on a typed part, sampled with the homogeneous store's
    request/response (frontier and routing in its target type's per-type ids, sources in its
    source type's)."""

    def __init__(self, in_edges: InEdges, values, type_offsets, part_id, group, counter, codec):
        self.partition = _Offsets(type_offsets)
        self.group, self.counter, self.codec = group, counter, codec
        self.rank, self.world_size = part_id, int(type_offsets.numel()) - 1
        self.start, self.end = int(type_offsets[part_id]), int(type_offsets[part_id + 1])
        self.in_edges, self._edge_values = in_edges, values
        self._edge_layout = RowLayout.of(values)


class _Offsets:
    def __init__(self, part_offsets: Tensor) -> None:
        self.part_offsets = part_offsets


class TypedGraphStore:
    """Structure and rows of one rank's typed part, for :class:`HeteroNeighborLoader`.

    Routing ids are per node type: the type's vertices sorted by ``(part, id)`` (a relation
    view's ids). Construction is local; sampling and fetching are collective.

    Args:
        partition: this rank's typed part.
        group: process group whose ranks are the parts. (default: the world group)
        codec: the feature fetch's codec (as :class:`PartitionedGraphStore`). (default:
            ``"fp32"``)
    """

    def __init__(self, partition: LocalPartition, group=None, codec="fp32") -> None:
        self.partition, self.group = partition, group
        self.schema = HeteroSchema.from_meta(partition.type_schema)
        self.rank, self.world_size = partition.part_id, partition.num_parts
        self.counter = CommCounter()
        counts = partition.part_type_counts
        self.type_offsets = {
            t: torch.cat([counts.new_zeros(1), torch.cumsum(counts[:, k], 0)])
            for k, t in enumerate(self.schema.node_types)
        }
        self.rows = {t: self._type_rows(k, t, codec) for k, t in enumerate(self.schema.node_types)}
        self.relations = {key: self._relation(key, codec) for key in self.schema.relation_keys}
        self.cache_hit_rows = 0

    @property
    def codec(self):
        return next(iter(self.rows.values())).codec

    @codec.setter
    def codec(self, codec) -> None:
        for store in (*self.rows.values(), *self.relations.values()):
            store.codec = codec

    def _type_rows(self, k: int, node_type: str, codec) -> PartitionedGraphStore:
        """A row store of one node type: its owned rows as a part of the type's id space."""
        part = self.partition
        start, end = type_range(part, k)
        offset = int(self.schema.node_offsets()[k])
        prefix = node_type + "/"
        attrs = {n[len(prefix) :]: v for n, v in part.node_attrs.items() if n.startswith(prefix)}
        x = attrs.pop("x", torch.empty(end - start, 0))
        target = node_type == self.schema.target_type
        empty = torch.empty(0, dtype=torch.long)
        zeros = torch.zeros(self.world_size, dtype=torch.long)
        view = LocalPartition(
            part_id=self.rank,
            num_parts=self.world_size,
            num_nodes_global=int(self.schema.num_nodes[k]),
            part_offsets=self.type_offsets[node_type],
            global_ids=part.global_ids[start:end] - offset,
            edge_index=torch.empty(2, 0, dtype=torch.long),
            halo_ids=empty,
            recv_counts=zeros,
            send_index=empty,
            send_counts=zeros,
            in_degree=torch.zeros(end - start, dtype=torch.long),
            has_self_loop=torch.zeros(end - start, dtype=torch.bool),
            x=x,
            y=part.y[start:end] if target and part.y is not None else None,
            halo_global_ids=empty,
            node_attrs=attrs,
        )
        store = PartitionedGraphStore(view, group=self.group, codec=codec)
        store.counter = self.counter
        return store

    def _relation(self, key: str, codec) -> _RelationSampler:
        part, schema = self.partition, self.schema
        source, _, target = schema.edge_type_of(key)
        view = relation_view(part, schema, key)
        d = schema.type_index(target)
        d_start, d_end = type_range(part, d)
        num_owned_s = view.num_owned
        src_local, dst_local = view.edge_index
        owned = src_local < num_owned_s
        src = torch.empty_like(src_local)
        src_key = torch.empty_like(src_local)
        src[owned] = self.type_offsets[source][self.rank] + src_local[owned]
        src_key[owned] = view.global_ids[src_local[owned]]
        halo = src_local[~owned] - num_owned_s
        src[~owned], src_key[~owned] = view.halo_ids[halo], view.halo_global_ids[halo]
        start = int(self.type_offsets[target][self.rank])
        dst_key = part.global_ids[d_start:d_end] - int(schema.node_offsets()[d])
        in_edges = InEdges.build(src, dst_local + start, src_key, dst_key, start=start)
        values = {"e_id": view.edge_ids} | dict(view.edge_attrs)
        return _RelationSampler(
            in_edges, values, self.type_offsets[target], self.rank, self.group, self.counter, codec
        )

    def seeds(self, mask: Tensor | None = None) -> Tensor:
        """Routing ids of the owned target vertices (those of ``mask``, over the target type's
        owned rows, when given)."""
        k = self.schema.type_index(self.schema.target_type)
        start, end = type_range(self.partition, k)
        local = torch.arange(end - start)
        if mask is not None:
            local = local[mask]
        return local + int(self.type_offsets[self.schema.target_type][self.rank])

    def target_masks(self, split: str) -> Tensor | None:
        """``[num_owned_target] bool`` rows of ``split`` (``None`` without the mask)."""
        mask = getattr(self.partition, f"{split}_mask")
        if mask is None:
            return None
        k = self.schema.type_index(self.schema.target_type)
        start, end = type_range(self.partition, k)
        return mask[start:end]


class HeteroNeighborSampler:
    """Multi-hop typed sampling with per-relation fan-outs (module docstring).

    Args:
        num_neighbors: ``{relation key: [fan-out per hop]}`` for every relation
            (:func:`fanouts_per_relation`).
        schema: the graph's types.
        replace: sample with replacement. (default: ``False``)
    """

    def __init__(self, num_neighbors: dict[str, list[int]], schema, replace: bool = False):
        self.num_neighbors, self.schema, self.replace = num_neighbors, schema, replace
        self.num_hops = len(next(iter(num_neighbors.values())))

    def _tables(self) -> dict[str, Tensor]:
        """Per node type, ``table[id]``: the local index of a vertex already in the batch, else
        ``-1`` (kept between batches, reset after each)."""
        tables = getattr(self, "_position_tables", None)
        if tables is None:
            sizes = dict(zip(self.schema.node_types, self.schema.num_nodes, strict=True))
            tables = self._position_tables = {
                t: torch.full((n,), -1, dtype=torch.long) for t, n in sizes.items()
            }
        return tables

    def sample(self, seeds: Tensor, stream: int, store: TypedGraphStore):
        """``(n_id, edges, num_nodes, num_edges, edge_data)``: per type the routing ids (seeds
        first), per relation the local ``[2, E]`` edges grouped by hop and each sampled edge's
        values, and the per-hop counts. Collective on a partitioned store: every rank samples
        every relation with a non-zero fan-out at every hop."""
        schema = self.schema
        target = schema.target_type
        n_id = {t: seeds if t == target else seeds.new_empty(0) for t in schema.node_types}
        frontier = {t: torch.arange(v.numel()) for t, v in n_id.items()}
        num_nodes = {t: [int(v.numel())] for t, v in n_id.items()}
        edges = {key: [] for key in schema.relation_keys}
        values = {key: [] for key in schema.relation_keys}
        num_edges = {key: [] for key in schema.relation_keys}
        tables = self._tables()
        tables[target][seeds] = frontier[target]
        try:
            for hop in range(self.num_hops):
                sampled = {t: [] for t in schema.node_types}
                for r, key in enumerate(schema.relation_keys):
                    fanout = self.num_neighbors[key][hop]
                    source, _, dst = schema.edge_types[r]
                    if fanout == 0:
                        num_edges[key].append(0)
                        continue
                    relation_stream = int(hash_keys(stream, r))
                    counts, src, edge_data = store.relations[key].sample_hop(
                        n_id[dst][frontier[dst]], fanout, relation_stream, self.replace, hop == 0
                    )
                    targets = torch.repeat_interleave(frontier[dst], counts)
                    sampled[source].append((key, src, targets, edge_data))
                new_frontier = {}
                for t in schema.node_types:
                    pieces = sampled[t]
                    found = torch.cat([src for _, src, _, _ in pieces]) if pieces else n_id[t][:0]
                    new, local = _relabel(tables[t], found, n_id[t])
                    new_frontier[t] = torch.arange(n_id[t].numel(), n_id[t].numel() + new.numel())
                    n_id[t] = torch.cat([n_id[t], new])
                    num_nodes[t].append(int(new.numel()))
                    for (key, src, targets, edge_data), piece in zip(
                        pieces,
                        torch.split(local, [src.numel() for _, src, _, _ in pieces]),
                        strict=True,
                    ):
                        edges[key].append(torch.stack([piece, targets]))
                        values[key].append(edge_data)
                        num_edges[key].append(int(src.numel()))
                frontier = new_frontier
        finally:
            for t, table in tables.items():
                table[n_id[t]] = -1
        edge_index = {
            key: torch.cat(v, dim=1) if v else torch.empty(2, 0, dtype=torch.long)
            for key, v in edges.items()
        }
        edge_data = {  # a relation never sampled keeps empty values of every name
            key: {name: torch.cat([d[name] for d in v]) for name in v[0]}
            if v
            else {name: value[:0] for name, value in store.relations[key]._edge_values.items()}
            for key, v in values.items()
        }
        return n_id, edge_index, num_nodes, num_edges, edge_data


def _relabel(table: Tensor, found: Tensor, known: Tensor) -> tuple[Tensor, Tensor]:
    """``(new, local)``: the ids of ``found`` not in the batch yet, ascending, get the next
    local indices (after ``known``'s) in ``table``; ``local`` is every entry's local index."""
    if use_compiled():
        return _kernels.relabel(table, found, known.numel())
    unseen = found[table[found] < 0]
    new = torch.unique(unseen)
    table[new] = torch.arange(known.numel(), known.numel() + new.numel())
    return new, table[found]


class HeteroNeighborLoader(NeighborLoader):
    """Sampled mini-batches of a typed part's target vertices (module docstring for the batch
    layout). The steps per epoch, shuffling, seeds and prefetching are
    :class:`~lightning_gnn_dist.loaders.neighbor.NeighborLoader`'s.

    Args:
        store: a :class:`TypedGraphStore`.
        num_neighbors: fan-outs, a list (every relation) or a dict per relation
            (:func:`check_typed_fanouts`).
        input_nodes: ``[num_owned_target] bool`` seeds among the rank's target vertices.
        batch_size, shuffle, replace, seed, num_steps, prefetch, device: as
            :class:`~lightning_gnn_dist.loaders.neighbor.NeighborLoader`.
    """

    def __init__(
        self,
        store: TypedGraphStore,
        num_neighbors,
        input_nodes: Tensor,
        batch_size: int = 1,
        shuffle: bool = False,
        replace: bool = False,
        seed: int = 0,
        num_steps: int | None = None,
        prefetch: bool = False,
        device=None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        num_neighbors = check_typed_fanouts("num_neighbors", num_neighbors, store.schema.edge_types)
        fanouts = fanouts_per_relation(num_neighbors, store.schema)
        self.store = store
        self.neighbor_sampler = HeteroNeighborSampler(fanouts, store.schema, replace)
        self._seeds = store.seeds(input_nodes)
        self.input_nodes = self._seeds
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        count = self._seeds.numel()
        self.num_steps = num_steps if num_steps is not None else math.ceil(count / batch_size)
        if self.num_steps > 0 and count == 0:
            raise ValueError(
                f"rank {store.rank} has no seed vertices but {self.num_steps} steps must run; "
                "use fewer parts or a partitioner that balances the training vertices"
            )
        self._start_stepping(prefetch, device)

    # A typed batch is sampled and fetched whole by make_batch: no fetch travels with a hop.
    made_batches = SteppedLoader.made_batches

    def make_batch(self, positions: Tensor, step: int, epoch: int | None = None) -> HeteroData:
        """Sample and fetch one batch (collective on a partitioned store)."""
        seeds = self._seeds[positions]
        epoch = self.epoch if epoch is None else epoch
        stream = stream_key(self.seed, epoch, step, self.store.rank)
        return self.batch_of(seeds, stream, positions)

    def batch_of(self, seeds: Tensor, stream: int, positions: Tensor | None = None) -> HeteroData:
        """The batch of ``seeds`` (target routing ids) drawn from ``stream`` (collective)."""
        store, schema = self.store, self.store.schema
        n_id, edge_index, num_nodes, num_edges, edge_data = self.neighbor_sampler.sample(
            seeds, stream, store
        )
        batch = HeteroData()
        for t in schema.node_types:
            rows = store.rows[t].fetch(n_id[t])
            node = batch[t]
            node.n_id = rows.ids
            if rows.x.size(1):
                node.x = rows.x
            if rows.y is not None:
                node.y = rows.y
            for name, value in rows.attrs.items():
                node[name] = value
            node.num_sampled_nodes = num_nodes[t]
            node.num_nodes = int(n_id[t].numel())
        target = batch[schema.target_type]
        target.batch_size = int(seeds.numel())
        if positions is not None:
            target.input_id = positions
        for key, edge_type in zip(schema.relation_keys, schema.edge_types, strict=True):
            relation = batch[edge_type]
            relation.edge_index = edge_index[key]
            relation.num_sampled_edges = num_edges[key]
            for name, value in edge_data[key].items():
                relation[name] = value
        return batch

    def __repr__(self) -> str:
        return (
            f"HeteroNeighborLoader(num_neighbors={self.neighbor_sampler.num_neighbors}, "
            f"batch_size={self.batch_size}, seeds={self._seeds.numel()}, steps={self.num_steps})"
        )


class HeteroNeighborLoaders(NeighborLoaders):
    """The train/val/test :class:`HeteroNeighborLoader` of one rank over one
    :class:`TypedGraphStore` (arguments as
    :class:`~lightning_gnn_dist.loaders.neighbor.NeighborLoaders`; fan-outs as
    :func:`check_typed_fanouts`)."""

    loader_class = HeteroNeighborLoader

    def seeds(self, split: str) -> tuple[Tensor | None, list[int]]:
        """``(mask, counts)`` over the target type's owned vertices (``"predict"``: ``None``,
        every one of them)."""
        store = self.store
        if split == "predict":
            target = store.schema.type_index(store.schema.target_type)
            return None, store.partition.part_type_counts[:, target].tolist()
        mask = store.target_masks(split)
        if mask is None:
            raise ValueError(f"the dataset has no {split}_mask; cannot serve {split} batches")
        return mask, self.mask_counts.get(f"{split}_mask", [int(mask.sum())])


def typed_edge_attribute(key: str, name: str) -> str:
    """The part's key of relation ``key``'s edge attribute ``name``."""
    return attribute_key(key, name)
