"""Mini-batch loaders: they draw batches with the samplers of :mod:`lightning_gnn_dist.data` and
fetch what a rank does not hold through :mod:`lightning_gnn_dist.comm`.

============================== ==================================================================
loader                         what one step is
============================== ==================================================================
:class:`NeighborLoader`        DistDGL's owner-compute mini-batch: the rank's own seeds, sampled
                               neighbourhoods, remote structure and features fetched from owners
                               (through a :class:`PartitionedGraphStore`)
:class:`SubgraphLoader`        paper 000's shared sampled subgraph, split by the vertex partition,
                               with a per-batch halo plan
:class:`HeteroNeighborLoader`  the neighbour loader on a typed graph: per-relation fan-outs,
                               PyG's ``HeteroData`` batches (:class:`TypedGraphStore`)
============================== ==================================================================
"""

from lightning_gnn_dist.loaders.graph_store import LocalGraphStore, PartitionedGraphStore
from lightning_gnn_dist.loaders.hetero_neighbor import (
    HeteroNeighborLoader,
    HeteroNeighborLoaders,
    TypedGraphStore,
)
from lightning_gnn_dist.loaders.neighbor import NeighborLoader, NeighborLoaders
from lightning_gnn_dist.loaders.subgraph import SubgraphLoader

__all__ = [
    "HeteroNeighborLoader",
    "HeteroNeighborLoaders",
    "LocalGraphStore",
    "NeighborLoader",
    "NeighborLoaders",
    "PartitionedGraphStore",
    "SubgraphLoader",
    "TypedGraphStore",
]
