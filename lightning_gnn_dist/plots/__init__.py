"""Figures of the communication and the partition (matplotlib, the optional ``plot`` extra).

:mod:`.partition` draws what the partition metrics and the communication counters measure
(rank-pair byte matrices, their inter-/intra-node split on several nodes, per-rank balance,
communication vs compute, partitioner comparisons);
:mod:`.cached` draws the ``cached`` exchange's send log. Importing this package does not import
matplotlib: each function does, and :func:`require_matplotlib` says how to install it.
"""

from lightning_gnn_dist.plots.cached import plot_send_epochs
from lightning_gnn_dist.plots.partition import (
    MAX_TICKS,
    balance_figure,
    comm_compute_figure,
    communication_matrix_figure,
    human_bytes,
    node_traffic_figure,
    partition_comparison_figure,
    require_matplotlib,
    save_figure,
)

__all__ = [
    "MAX_TICKS",
    "balance_figure",
    "comm_compute_figure",
    "communication_matrix_figure",
    "human_bytes",
    "node_traffic_figure",
    "partition_comparison_figure",
    "plot_send_epochs",
    "require_matplotlib",
    "save_figure",
]
