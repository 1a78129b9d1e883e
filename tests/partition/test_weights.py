"""Vertex weights (``partition.weights``) and the partitioners that balance them."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.weights import (
    RESOLUTION,
    VERTEX_WEIGHTS,
    reference_costs,
    vertex_weights,
)
from tests.helpers import random_graph

EPSILON, PARTS = 0.03, 4
#: R-MAT: power-law degrees, so balancing non-zeros and balancing rows give different parts.
RMAT = "rmat?scale=10&edge_factor=8&features=16&classes=4"


@functools.cache
def rmat():
    return load_dataset(RMAT)


def brute_force(data, kind: str, widths: tuple[int, ...]) -> np.ndarray:
    """Per vertex, in Python: distinct in-neighbours plus the diagonal, and the layer work."""
    in_neighbours = [set() for _ in range(data.num_nodes)]
    for j, i in data.edge_index.t().tolist():
        if i != j:
            in_neighbours[i].add(j)
    costs = reference_costs()
    layers = list(zip(widths[:-1], widths[1:], strict=True))
    per_nnz = sum(min(d_in, d_out) for d_in, d_out in layers) * costs.aggregate_seconds
    per_row = sum(
        d_in * d_out * costs.dense_seconds + d_out * costs.elementwise_seconds
        for d_in, d_out in layers
    )
    out = []
    for neighbours in in_neighbours:
        nnz = len(neighbours) + 1
        work = nnz * per_nnz + per_row
        out.append(
            {
                "nnz": [nnz],
                "rows": [1],
                "nnz+rows": [nnz, 1],
                "work": [round(RESOLUTION * work / per_nnz)],
            }[kind]
        )
    return np.array(out, dtype=np.int64).squeeze(1) if kind != "nnz+rows" else np.array(out)


@pytest.mark.parametrize("kind", VERTEX_WEIGHTS)
@pytest.mark.parametrize("widths", [(8, 16, 3), (32, 64, 64, 5)])
def test_weights_equal_a_per_vertex_computation(kind, widths):
    data = random_graph(60, 400, seed=1, features=8, classes=3)
    weights = vertex_weights(data, kind, widths)
    assert weights.dtype == np.int64
    np.testing.assert_array_equal(weights, brute_force(data, kind, widths))


def test_work_weight_reads_the_widths_from_the_graph():
    data = random_graph(60, 400, seed=1, features=8, classes=3)
    np.testing.assert_array_equal(
        vertex_weights(data, "work"), vertex_weights(data, "work", (8, 16, 3))
    )
    # at the benchmark's widths a row weighs 4 non-zeros (see reference_costs)
    row = vertex_weights(data, "work", (64, 16, 8)) - RESOLUTION * vertex_weights(data, "nnz")
    np.testing.assert_array_equal(row, np.full(data.num_nodes, 4 * RESOLUTION))
    bare = random_graph(60, 400, seed=1)  # no features, no labels: 16 wide
    np.testing.assert_array_equal(
        vertex_weights(bare, "work"), vertex_weights(bare, "work", (16, 16, 16))
    )


@pytest.mark.parametrize(
    "method, options, match",
    [
        ("hypergraph", {"vertex_weight": "edges"}, "unknown vertex_weight 'edges'"),
        ("metis", {"vertex_weight": "edges"}, "choose one of nnz, rows, work, nnz\\+rows"),
        ("hypergraph", {"vertex_weight": "nnz+rows"}, "vertex_weight='work'.*method='metis'"),
        ("hypergraph-kahypar", {"vertex_weight": "nnz+rows"}, "cannot"),
        ("metis", {"widths": (8,)}, "at least two positive"),
        ("hypergraph", {"widths": (8, 0, 3)}, "at least two positive"),
        ("random", {"vertex_weight": "work"}, "'random' partitioner has no option"),
    ],
)
def test_bad_weights_are_refused(method, options, match):
    with pytest.raises(ValueError, match=match):
        get_partitioner(method, **options)


@pytest.mark.parametrize("method", ["hypergraph", "metis"])
def test_settings_and_store_paths_differ_by_weight(method, tmp_path):
    kinds = ["nnz", "rows", "work"] + (["nnz+rows"] if method == "metis" else [])
    settings = [get_partitioner(method, vertex_weight=k).settings() for k in kinds]
    settings.append(get_partitioner(method, vertex_weight="work", widths=(8, 16, 3)).settings())
    assert len({repr(s) for s in settings}) == len(settings)
    assert settings[2] == get_partitioner(method).settings()  # work is the default
    paths = {
        GraphPartitionDataModule(
            RMAT,
            method=method,
            num_parts=2,
            root=str(tmp_path),
            partition_options={"vertex_weight": k},
        ).store_path
        for k in kinds
    }
    assert len(paths) == len(kinds)


CASES = [
    ("hypergraph", "nnz"),
    ("hypergraph", "rows"),
    ("hypergraph", "work"),
    ("hypergraph-kahypar", "work"),
    ("metis", "nnz"),
    ("metis", "rows"),
    ("metis", "work"),
    ("metis", "nnz+rows"),
]


@pytest.mark.parametrize("method, kind", CASES)
def test_every_part_respects_the_bound_of_its_weight(method, kind):
    """Every part weighs at most ``(1 + ε)·⌈W/P⌉`` of each constraint: exactly for the
    hypergraph tools and their send-volume refinement (on by default, it moves vertices after
    the partitioner), within one vertex for METIS (its bound is a target)."""
    data = rmat()
    partitioner = get_partitioner(method, epsilon=EPSILON, vertex_weight=kind)
    assignment = partitioner.partition(data, PARTS)
    weights = vertex_weights(data, kind).reshape(data.num_nodes, -1)
    for column in weights.T:
        part_weights = np.bincount(assignment, weights=column, minlength=PARTS)
        bound = (1 + EPSILON) * math.ceil(column.sum() / PARTS)
        slack = column.max() if method == "metis" else 0
        assert part_weights.max() <= bound + slack, (part_weights, bound)
    if method.startswith("hypergraph"):
        assert partitioner.last_refinement is not None


def test_balancing_rows_balances_rows_and_work_sits_between():
    """On R-MAT, nnz-balanced parts differ in rows; rows and nnz+rows balance them; work is a
    compromise between the two constraints it sums."""
    data = rmat()

    def rows_imbalance(method, kind):
        parts = get_partitioner(method, vertex_weight=kind).partition(data, PARTS)
        metrics = get_partitioner(method).metrics(data, parts, PARTS)
        return metrics.rows_imbalance, metrics.imbalance

    for method in ("hypergraph", "metis"):
        nnz_rows, _ = rows_imbalance(method, "nnz")
        rows_rows, _ = rows_imbalance(method, "rows")
        assert rows_rows <= 1 + EPSILON < nnz_rows
    both_rows, both_nnz = rows_imbalance("metis", "nnz+rows")
    assert both_rows <= 1 + EPSILON + 0.01 and both_nnz <= 1 + EPSILON + 0.01


def test_multi_constraint_weights_combine_with_masks():
    """``vertex_weight="nnz+rows"`` and ``balance_masks=True``: five METIS constraints."""
    data = rmat()
    assignment = get_partitioner("metis", vertex_weight="nnz+rows", balance_masks=True).partition(
        data, PARTS
    )
    columns = np.column_stack(
        [vertex_weights(data, "nnz+rows")]
        + [
            getattr(data, k).numpy().astype(np.int64)
            for k in ("train_mask", "val_mask", "test_mask")
        ]
    )
    for column in columns.T:
        part_weights = np.bincount(assignment, weights=column, minlength=PARTS)
        assert part_weights.max() <= (1 + EPSILON) * math.ceil(column.sum() / PARTS) + column.max()


def test_work_weights_are_deterministic():
    data = rmat()
    first = get_partitioner("hypergraph", vertex_weight="work", seed=2).partition(data, PARTS)
    again = get_partitioner("hypergraph", vertex_weight="work", seed=2).partition(data, PARTS)
    np.testing.assert_array_equal(first, again)
    nnz = get_partitioner("hypergraph", vertex_weight="nnz", seed=2).partition(data, PARTS)
    assert not np.array_equal(first, nnz)


def test_datamodule_forwards_partition_options(tmp_path):
    dm = GraphPartitionDataModule(
        RMAT,
        method="metis",
        num_parts=2,
        root=str(tmp_path),
        partition_options={"vertex_weight": "nnz+rows"},
    )
    assert dm.partitioner.settings()["vertex_weight"] == "nnz+rows"
    with pytest.raises(ValueError, match="no option 'vertex_wight'"):
        GraphPartitionDataModule(RMAT, method="metis", partition_options={"vertex_wight": "rows"})


def test_work_weight_keeps_the_total_within_32_bits(monkeypatch):
    """Large graphs get fewer units per non-zero so that the total weight fits the tools."""
    from lightning_gnn_dist.partition import weights

    data = random_graph(60, 400, seed=1, features=8, classes=3)
    full, nnz = vertex_weights(data, "work"), vertex_weights(data, "nnz")
    limit = int(full.sum()) // 4
    monkeypatch.setattr(weights, "MAX_TOTAL_WEIGHT", limit)
    reduced = vertex_weights(data, "work")
    assert reduced.sum() <= limit
    i, j = np.argmax(nnz), np.argmin(nnz)
    units = (reduced[i] - reduced[j]) // (nnz[i] - nnz[j])  # per non-zero
    assert 1 <= units < RESOLUTION
    assert np.unique(reduced - units * nnz).size == 1  # still non-zeros plus a row constant
