"""What tests, benchmarks and users share.

=================== ==========================================================================
module              what it holds
=================== ==========================================================================
:mod:`.cluster`     :class:`EmulatedCluster`: nodes as network namespaces on one Linux machine,
                    joined by a virtual switch, each link shaped to a bandwidth, each node
                    pinned to its own cores; :func:`run_nodes` starts one command per node;
                    :func:`shape_own_link` changes a node's rate from inside it
=================== ==========================================================================
"""

from lightning_gnn_dist.testing.cluster import (
    EmulatedCluster,
    EmulationError,
    emulation_unavailable_reason,
    parse_rate,
    reap_stale_namespaces,
    shape_own_link,
)
from lightning_gnn_dist.testing.node_runs import run_nodes

__all__ = [
    "EmulatedCluster",
    "EmulationError",
    "emulation_unavailable_reason",
    "parse_rate",
    "reap_stale_namespaces",
    "run_nodes",
    "shape_own_link",
]
