"""Offline partitioning: vertex→part assignments and the registry of methods.

Importing this package registers every method in :data:`PARTITIONERS`; use
:func:`get_partitioner` to build one by name.
"""

from lightning_gnn_dist.partition.base import (
    PARTITIONERS,
    Partitioner,
    get_partitioner,
    register_partitioner,
)
from lightning_gnn_dist.partition.blocks import GNNBlocksPartitioner
from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph, column_net_hypergraph
from lightning_gnn_dist.partition.hypergraph import (
    HypergraphPartitioner,
    KaHyParPartitioner,
    MtKaHyParPartitioner,
)
from lightning_gnn_dist.partition.kaminpar import KaMinParPartitioner
from lightning_gnn_dist.partition.metis import MetisPartitioner
from lightning_gnn_dist.partition.random import RandomPartitioner
from lightning_gnn_dist.partition.stochastic_hypergraph import StochasticHypergraphPartitioner
from lightning_gnn_dist.partition.vertex_cut import VertexCutPartitioner, vertex_cut_metrics

__all__ = [
    "PARTITIONERS",
    "ColumnNetHypergraph",
    "GNNBlocksPartitioner",
    "HypergraphPartitioner",
    "KaHyParPartitioner",
    "KaMinParPartitioner",
    "MetisPartitioner",
    "MtKaHyParPartitioner",
    "Partitioner",
    "RandomPartitioner",
    "StochasticHypergraphPartitioner",
    "VertexCutPartitioner",
    "column_net_hypergraph",
    "get_partitioner",
    "register_partitioner",
    "vertex_cut_metrics",
]
