"""The work of one GCN layer: its widths, the columns it exchanges, and unit costs of compute.

Shared by the partitioners' ``"work"`` vertex weight (:mod:`~lightning_gnn_dist.partition.weights`)
and the cost model (:mod:`lightning_gnn_dist.costmodel`), which sits above the partitioners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ComputeCosts:
    """Seconds per unit of local work, forward and backward together.

    Attributes:
        aggregate_seconds: per non-zero of ``Â`` per aggregated column.
        dense_seconds: per row per ``d_in · d_out`` multiply-add of a layer's weight.
        elementwise_seconds: per row per output column (bias, ReLU, dropout, loss).
        step_seconds: fixed seconds per epoch and rank, whatever the graph's size (the training
            loop's own work, the optimiser step); :func:`calibrate` leaves it 0, measure it with
            a fit on a tiny graph (``python -m benchmarks.cost_model`` does).
    """

    aggregate_seconds: float
    dense_seconds: float
    elementwise_seconds: float = 0.0
    step_seconds: float = 0.0


@dataclass(frozen=True)
class GCNLayer:
    """One ``DistGCNConv``: widths and the columns it exchanges and aggregates."""

    d_in: int
    d_out: int
    forward_width: int
    backward_width: int

    @property
    def aggregate_width(self) -> int:
        """GCN aggregates at the narrower width (X·W first when the layer narrows)."""
        return min(self.d_in, self.d_out)


def gcn_layers(dims: Sequence[int]) -> list[GCNLayer]:
    """Layers of a GCN with widths ``dims = [d_0, ..., d_L]`` (``--widths 64,16,8``).

    ``DistGCNConv`` exchanges ``min(d_in, d_out)`` columns both ways; the first layer has no
    backward exchange when it widens (it then exchanges the raw input, which needs no gradient).

    Raises:
        ValueError: fewer than two widths, or a width below 1.
    """
    dims = [int(d) for d in dims]
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(
            f"widths must be at least two positive integers [d_in, ..., d_out] (got {dims})"
        )
    layers = []
    for k in range(1, len(dims)):
        d_in, d_out = dims[k - 1], dims[k]
        width = min(d_in, d_out)
        backward = 0 if k == 1 and d_out > d_in else width
        layers.append(GCNLayer(d_in, d_out, width, backward))
    return layers
