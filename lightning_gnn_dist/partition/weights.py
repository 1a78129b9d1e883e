"""Vertex weights that partitioners balance (issue 13: work-balanced parts).

Paper 000 weighs each vertex by the non-zeros of its row of ``Â`` (the SpMM work). A GCN layer
also does work per *row*: the dense transform ``X·W`` (``d_in · d_out`` multiply-adds per row)
and the element-wise bias, activation and dropout (``d_out`` per row). On a power-law graph the
parts that balance non-zeros differ several-fold in rows, and the slowest rank sets the pace of
every layer. The ``"work"`` weight is the cost model's per-rank compute
(:func:`lightning_gnn_dist.costmodel.predict_epoch`) written per vertex::

    work_i = Σ_k  nnz_i · w_k · aggregate_seconds
                + d_in_k · d_out_k · dense_seconds + d_out_k · elementwise_seconds

with fixed reference costs (:data:`REFERENCE_COSTS`, so an assignment never depends on the
machine that made it), in integer units of ``1 / RESOLUTION`` of one non-zero's aggregation
over all layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import row_nnz

#: The weights a partitioner can balance; ``"nnz+rows"`` is two constraints (METIS only).
VERTEX_WEIGHTS: tuple[str, ...] = ("nnz", "rows", "work", "nnz+rows")
#: Integer units of the ``"work"`` weight per non-zero: the per-row work is rounded to 1/16 of
#: one non-zero's aggregation (1.5% of a row's weight on the benchmark's widths).
RESOLUTION = 16
#: Hidden width of the GCN the ``"work"`` weight assumes when ``widths`` is not given
#: (``NodeClassifier``'s default: two layers, 16 hidden channels).
DEFAULT_HIDDEN = 16


def reference_costs():
    """The :class:`~lightning_gnn_dist.costmodel.ComputeCosts` behind the ``"work"`` weight:
    ``costmodel.calibrate([64, 16, 8])`` on the 2-core development machine (seconds per non-zero
    per column 1.12e-8, per row per multiply-add 1.27e-10, per row per output column 1.52e-8).
    Only their ratios matter. Fixed, so that equal graphs and settings give equal partitions."""
    from lightning_gnn_dist.costmodel import ComputeCosts

    return ComputeCosts(
        aggregate_seconds=1.12e-8, dense_seconds=1.27e-10, elementwise_seconds=1.52e-8
    )


def default_widths(data: Data) -> tuple[int, ...]:
    """``(num_features, 16, num_classes)`` of ``data``: the GCN ``NodeClassifier`` builds by
    default.

    Raises:
        ValueError: ``data`` has no features ``x`` or labels ``y`` to read the widths from.
    """
    x, y = getattr(data, "x", None), getattr(data, "y", None)
    if x is None or y is None or y.numel() == 0:
        raise ValueError(
            "vertex_weight='work' reads the GCN widths from data.x and data.y, which this graph "
            "lacks; pass widths=(d_in, hidden, ..., num_classes), e.g. widths=(64, 16, 8)"
        )
    return (int(x.size(1)), DEFAULT_HIDDEN, int(y.max()) + 1)


def check_vertex_weight(kind: str, multi_constraint: bool = True) -> str:
    """Return ``kind`` if it names a weight in :data:`VERTEX_WEIGHTS` that the partitioner can
    balance (``multi_constraint=False``: one constraint only).

    Raises:
        ValueError: unknown kind, or ``"nnz+rows"`` for a single-constraint partitioner.
    """
    if kind not in VERTEX_WEIGHTS:
        raise ValueError(
            f"unknown vertex_weight {kind!r}; choose one of {', '.join(VERTEX_WEIGHTS)}"
        )
    if "+" in kind and not multi_constraint:
        raise ValueError(
            f"vertex_weight={kind!r} balances two constraints, which (Mt-)KaHyPar cannot; use "
            "vertex_weight='work' (non-zeros and rows in one weight) here, or "
            "method='metis' for multi-constraint balance"
        )
    return kind


def vertex_weights(
    data: Data,
    kind: str = "nnz",
    widths: Sequence[int] | None = None,
) -> np.ndarray:
    """The weight of every vertex of ``data`` under ``kind``.

    Args:
        data: canonical graph (``data.graph.canonicalize``).
        kind: ``"nnz"`` non-zeros of the vertex's row of ``Â`` (paper 000); ``"rows"`` 1 per
            vertex; ``"work"`` its layer work for a GCN of ``widths`` (module docstring);
            ``"nnz+rows"`` both of the first two, as two constraints.
        widths: GCN widths ``[d_0, ..., d_L]`` for ``"work"``; ``None`` reads
            :func:`default_widths` from ``data``. Ignored by the other kinds.

    Returns:
        ``[num_nodes] int64`` weights, or ``[num_nodes, 2] int64`` (non-zeros, rows) for
        ``"nnz+rows"``.

    Raises:
        ValueError: unknown ``kind``, bad ``widths``, or ``"work"`` without widths on a graph
            without features and labels.
    """
    check_vertex_weight(kind)
    num_nodes = data.num_nodes
    rows = np.ones(num_nodes, dtype=np.int64)
    if kind == "rows":
        return rows
    nnz = row_nnz(data.edge_index, num_nodes)
    if kind == "nnz":
        return nnz
    if kind == "nnz+rows":
        return np.column_stack([nnz, rows])
    from lightning_gnn_dist.costmodel import gcn_layers

    layers = gcn_layers(default_widths(data) if widths is None else widths)
    costs = reference_costs()
    per_nnz = sum(layer.aggregate_width for layer in layers) * costs.aggregate_seconds
    per_row = sum(
        layer.d_in * layer.d_out * costs.dense_seconds + layer.d_out * costs.elementwise_seconds
        for layer in layers
    )
    return RESOLUTION * nnz + int(round(RESOLUTION * per_row / per_nnz))
