"""The whole graph in one process as a graph store (single-process neighbour batches, and the
reference the partitioned store is tested against), and what both stores return.

Routing ids are dataset ids; a sampled edge's ``e_id`` is its position in ``data.edge_index``.
See :mod:`~lightning_gnn_dist.loaders.graph_store` for the two questions a store answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.comm import CommCounter
from lightning_gnn_dist.data.attributes import graph_attributes
from lightning_gnn_dist.data.graph import gcn_weight_terms
from lightning_gnn_dist.data.sampler import InEdges

TERMS_PREFIX = "gcn_weight_terms/"
"""The packed name of an edge attribute's weighted-GCN terms among a fetched row's attributes."""


def weight_terms(
    edge_index: Tensor, edge_attrs: dict[str, Tensor], num_rows: int, order: Tensor | None = None
) -> dict[str, Tensor]:
    """``{name: [num_rows, 3]}``: :func:`~lightning_gnn_dist.data.graph.gcn_weight_terms` of every
    1-D floating edge attribute (one a ``GCNConv`` may take as ``edge_weight``), from the
    in-edges of rows ``[0, num_rows)`` (``order``: the edges' order in the whole graph)."""
    return {
        key: gcn_weight_terms(edge_index, value, num_rows, order)
        for key, value in edge_attrs.items()
        if value.dim() == 1 and value.is_floating_point()
    }


@dataclass
class FetchedRows:
    """Rows of a batch's vertices: ``x [n, d]``, ``y [n]`` or ``[n, k]`` (or ``None``), ``ids [n]``
    dataset ids, ``attrs`` every other node attribute ``[n, ...]`` by name; with
    ``degrees=True`` also ``in_degree [n]`` (global, self loops excluded),
    ``num_self_loops [n]`` (in the whole graph) and ``weight_terms``: for every 1-D floating edge
    attribute (an ``edge_weight``), the rows' global weighted-GCN terms ``[n, 3]``
    (:func:`~lightning_gnn_dist.data.graph.gcn_weight_terms`, computed by each row's owner)."""

    x: Tensor
    y: Tensor | None
    ids: Tensor
    in_degree: Tensor | None = None
    num_self_loops: Tensor | None = None
    attrs: dict[str, Tensor] = field(default_factory=dict)
    weight_terms: dict[str, Tensor] = field(default_factory=dict)


class LocalGraphStore:
    """A whole graph in one process; routing ids are dataset ids, ``e_id`` positions in
    ``data.edge_index``.

    Args:
        data: a PyG ``Data`` with ``edge_index`` and ``x`` (``y`` and any node or edge
            attribute optional, see :func:`~lightning_gnn_dist.data.attributes.graph_attributes`).
    """

    rank, world_size = 0, 1

    def __init__(self, data: Data) -> None:
        self.data = data
        self.num_routing_ids = int(data.num_nodes)
        self.in_edges = InEdges.from_edge_index(data.edge_index, data.num_nodes)
        self.counter = CommCounter()
        self.attributes = graph_attributes(data)
        self._weight_terms: dict[str, Tensor] | None = None  # built on the first exact fetch

    def sample_hop(
        self,
        frontier: Tensor,
        fanout: int,
        stream: int,
        replace: bool = False,
        owned: bool = False,
        from_halo: bool = False,
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        counts, src, edge = self.in_edges.sample_edges(frontier, fanout, stream, replace)
        edge_data = {"e_id": edge}
        edge_data |= {key: self.data[key].index_select(0, edge) for key in self.attributes.edge}
        return counts, src, edge_data

    def fetch(self, n_id: Tensor, degrees: bool = False) -> FetchedRows:
        y = self.data.y
        y = None if y is None else y.index_select(0, n_id)
        rows = FetchedRows(self.data.x.index_select(0, n_id), y, n_id)
        rows.attrs = {key: self.data[key].index_select(0, n_id) for key in self.attributes.node}
        if degrees:
            src, dst = self.data.edge_index
            loop = src == dst
            num_nodes = self.data.num_nodes
            rows.in_degree = torch.bincount(dst[~loop], minlength=num_nodes)[n_id]
            rows.num_self_loops = torch.bincount(dst[loop], minlength=num_nodes)[n_id]
            if self._weight_terms is None:
                weights = {key: self.data[key] for key in self.attributes.edge}
                self._weight_terms = weight_terms(self.data.edge_index, weights, num_nodes)
            rows.weight_terms = {
                key: v.index_select(0, n_id) for key, v in self._weight_terms.items()
            }
        return rows

    def to_routing(self, ids: Tensor) -> Tensor:
        """Dataset ids → routing ids (the identity here)."""
        return ids

    def dataset_ids(self, mask: Tensor) -> Tensor:
        """Dataset ids of the vertices a ``[num_nodes] bool`` mask selects."""
        return mask.nonzero().view(-1)
