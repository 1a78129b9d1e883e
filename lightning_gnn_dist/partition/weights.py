"""Vertex weights that partitioners balance (issue 13: work-balanced parts).

Paper 000 weighs each vertex by the non-zeros of its row of ``Â`` (the SpMM work). A GCN layer
also does work per *row*: the dense transform ``X·W`` (``d_in · d_out`` multiply-adds per row)
and the element-wise bias, activation and dropout (``d_out`` per row). On a power-law graph the
parts that balance non-zeros differ several-fold in rows, and the slowest rank sets the pace of
every layer. The ``"work"`` weight is the cost model's per-rank compute
(:func:`lightning_gnn_dist.costmodel.predict_epoch`) written per vertex::

    work_i = Σ_k  nnz_i · w_k · aggregate_seconds
                + d_in_k · d_out_k · dense_seconds + d_out_k · elementwise_seconds

with fixed reference costs (:func:`reference_costs`, so an assignment never depends on the
machine that made it), in integer units of ``1 / RESOLUTION`` of one non-zero's aggregation
over all layers (fewer when the total would pass ``2**31 − 1``: the partitioners' weights are
32-bit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.targets import infer_task, target_info
from lightning_gnn_dist.partition.arrays import row_nnz
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers

#: The weights a partitioner can balance; ``"nnz+rows"`` is two constraints (METIS only).
VERTEX_WEIGHTS: tuple[str, ...] = ("nnz", "rows", "work", "nnz+rows")
#: The weight ``hypergraph`` and ``metis`` balance by default: ``"work"``. In four runs of
#: ``python -m benchmarks.full_batch`` (c) (R-MAT, 4 ranks) the busiest rank's step CPU time was
#: 0.92-1.01× random's busiest rank for hypergraph and 0.93-1.02× for METIS (``"nnz"``:
#: 1.23-1.33× and 1.05-1.22×, their busiest parts owning 2.4× and 1.6× the mean rows; METIS
#: ``"nnz+rows"``: 0.95-1.02×), and max/mean CPU time 1.02-1.12 and 1.06-1.10 (``"nnz"``:
#: 1.36-1.41 and 1.21-1.29).
DEFAULT_VERTEX_WEIGHT = "work"
#: Integer units of the ``"work"`` weight per non-zero: the per-row work is rounded to 1/16 of
#: one non-zero's aggregation (1.6% of a row's weight on the benchmark's widths).
RESOLUTION = 16
#: Largest total weight the partitioners take (32-bit weights in Mt-KaHyPar and KaHyPar).
MAX_TOTAL_WEIGHT = 2**31 - 1
#: Hidden width of the GCN the ``"work"`` weight assumes when ``widths`` is not given
#: (``NodeClassifier``'s default: two layers, 16 hidden channels).
DEFAULT_HIDDEN = 16


def reference_costs() -> ComputeCosts:
    """The :class:`~lightning_gnn_dist.partition.work.ComputeCosts` behind the ``"work"`` weight.

    Fitted to the training step itself: a least-squares fit of the CPU seconds of each rank's
    training step in ``python -m benchmarks.full_batch`` section (c) (R-MAT, 131,072 vertices, GCN
    64 → 16 → 8, six partitions × four ranks × two runs on the 2-core development machine) as
    ``a · nnz_p + b · rows_p + c`` gives ``a = 2.9e-7`` s per non-zero and ``b = 1.12e-6`` s per
    row (residual 4.5 ms of 112 ms on average): a row costs as much as 3.9 non-zeros. ``a`` is
    within 6% of what ``costmodel.calibrate`` measures for the aggregation (``1.12e-8`` s per
    non-zero and column, kept here); ``b`` is 2× what the isolated ``Linear`` and bias/ReLU/dropout take, because the
    step also does per-row work those leave out (the ``[owned | halo]`` concatenation, the loss,
    autograd's bookkeeping); the difference is put in ``elementwise_seconds`` (per row and
    output column) next to ``calibrate``'s dense cost. Only the ratios matter. Fixed, so that
    equal graphs and settings give equal partitions on every machine."""
    return ComputeCosts(
        aggregate_seconds=1.12e-8, dense_seconds=1.27e-10, elementwise_seconds=3.9e-8
    )


def weight_settings(kind: str, widths: Sequence[int] | None) -> dict[str, Any]:
    """The ``settings()`` entries of a partitioner's weight: ``vertex_weight``, ``widths`` and,
    for ``"work"``, ``work_costs`` (the reference costs, so that stores made with other costs
    are told apart)."""
    settings: dict[str, Any] = {"vertex_weight": kind, "widths": widths}
    if kind == "work":
        costs = reference_costs()
        settings["work_costs"] = [
            costs.aggregate_seconds,
            costs.dense_seconds,
            costs.elementwise_seconds,
            RESOLUTION,
        ]
    return settings


def default_widths(data: Data) -> tuple[int, ...]:
    """``(num_features, 16, num_outputs)`` of ``data`` (classes, or tasks of a multi-label or
    regression ``y``): the GCN ``NodeClassifier`` builds by
    default. A graph without features ``x`` (or labels ``y``) counts ``16`` for them: its
    partition is made before its model is known, and at equal widths a row weighs about as much
    as 4 non-zeros either way."""
    x, y = getattr(data, "x", None), getattr(data, "y", None)
    d_in = int(x.size(1)) if x is not None and x.dim() == 2 else DEFAULT_HIDDEN
    classes = DEFAULT_HIDDEN
    if y is not None and y.numel():  # multilabel and regression: one output per task
        task = getattr(data, "task", None)
        task = task if isinstance(task, str) else infer_task(y)
        classes = max(1, target_info(y, task).num_outputs)
    return (d_in, DEFAULT_HIDDEN, classes)


def check_widths(widths: Sequence[int] | None) -> list[int] | None:
    """``widths`` as a list of ints (``None`` stays ``None``: read from the graph).

    Raises:
        ValueError: fewer than two widths, or a width below 1.
    """
    if widths is None:
        return None
    gcn_layers(widths)
    return [int(w) for w in widths]


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
    kind: str = DEFAULT_VERTEX_WEIGHT,
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
        ValueError: unknown ``kind`` or bad ``widths``.
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
    layers = gcn_layers(default_widths(data) if widths is None else widths)
    costs = reference_costs()
    per_nnz = sum(layer.aggregate_width for layer in layers) * costs.aggregate_seconds
    per_row = sum(
        layer.d_in * layer.d_out * costs.dense_seconds + layer.d_out * costs.elementwise_seconds
        for layer in layers
    )
    row_in_nnz = per_row / per_nnz  # a row's work in non-zeros
    total = float(nnz.sum()) + num_nodes * row_in_nnz
    resolution = max(1, min(RESOLUTION, int(MAX_TOTAL_WEIGHT // max(total, 1.0))))
    return resolution * nnz + int(round(resolution * row_in_nnz))
