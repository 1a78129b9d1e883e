"""Distributed layers, reference models and :func:`distribute` for existing PyG models."""

from lightning_gnn_dist.nn.context import GraphContext, current_graph_context, use_graph_context
from lightning_gnn_dist.nn.conv import DistGATConv, DistGCNConv, DistSAGEConv
from lightning_gnn_dist.nn.distribute import distribute
from lightning_gnn_dist.nn.models import GAT, GCN, GraphSAGE, build_model
from lightning_gnn_dist.nn.norm import DistBatchNorm

__all__ = [
    "GAT",
    "GCN",
    "DistBatchNorm",
    "DistGATConv",
    "DistGCNConv",
    "DistSAGEConv",
    "GraphContext",
    "GraphSAGE",
    "build_model",
    "current_graph_context",
    "distribute",
    "use_graph_context",
]
