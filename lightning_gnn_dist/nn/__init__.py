"""Distributed layers, reference models and :func:`distribute` for existing PyG models.

Importing the package registers every graph context in
:data:`~lightning_gnn_dist.nn.context.CONTEXTS` (the vertex-cut context registers itself from
:mod:`~lightning_gnn_dist.nn.vertex_cut`, RDM's from :mod:`~lightning_gnn_dist.nn.rdm`; the base
module imports none of them; a typed graph's, from :mod:`~lightning_gnn_dist.nn.hetero`).
"""

from lightning_gnn_dist.nn.context import GraphContext, current_graph_context, use_graph_context
from lightning_gnn_dist.nn.conv import DistGATConv, DistGCNConv, DistGraphConv, DistSAGEConv
from lightning_gnn_dist.nn.distribute import distribute
from lightning_gnn_dist.nn.fused import use_sparse_aggregation
from lightning_gnn_dist.nn.hetero import HeteroGraphContext, ShardedEmbedding
from lightning_gnn_dist.nn.hetero_models import HeteroRGCN, HeteroSAGE, TypeEncoder
from lightning_gnn_dist.nn.layers import LAYER_TABLE, declare_exact_layer
from lightning_gnn_dist.nn.models import GAT, GCN, DeeperGCN, GraphSAGE, build_model
from lightning_gnn_dist.nn.norm import DistBatchNorm
from lightning_gnn_dist.nn.rdm import RDMContext
from lightning_gnn_dist.nn.vertex_cut import VertexCutContext

__all__ = [
    "GAT",
    "GCN",
    "DeeperGCN",
    "DistBatchNorm",
    "DistGATConv",
    "DistGCNConv",
    "DistGraphConv",
    "DistSAGEConv",
    "GraphContext",
    "GraphSAGE",
    "HeteroGraphContext",
    "HeteroRGCN",
    "HeteroSAGE",
    "LAYER_TABLE",
    "RDMContext",
    "ShardedEmbedding",
    "TypeEncoder",
    "VertexCutContext",
    "build_model",
    "current_graph_context",
    "declare_exact_layer",
    "distribute",
    "use_graph_context",
    "use_sparse_aggregation",
]
