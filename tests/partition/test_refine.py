import numpy as np
import pytest

from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.column_net import column_net_hypergraph
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.refine import _NetPartCounts, refine_max_send_volume
from tests.helpers import random_graph


def capacity(weights, num_parts, epsilon):
    return (1 + epsilon) * np.ceil(weights.sum() / num_parts)


def refine(data, assignment, num_parts, epsilon=0.03, **options):
    hg = column_net_hypergraph(data)
    return refine_max_send_volume(
        hg.net_offsets, hg.pins, hg.vertex_weights, assignment, num_parts, epsilon, **options
    )


def skewed_assignment(data, num_parts, seed):
    """Random assignment that puts the highest-out-degree vertices into part 0 (within the
    weight bound), so part 0 sends far more than the rest."""
    hg = column_net_hypergraph(data)
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, num_parts, data.num_nodes)
    out_degree = np.diff(hg.net_offsets)
    bound = capacity(hg.vertex_weights, num_parts, 0.03)
    hubs = np.argsort(-out_degree)
    load = np.bincount(assignment, weights=hg.vertex_weights, minlength=num_parts)
    for v in hubs[: data.num_nodes // 10]:  # test set-up, not library code
        if assignment[v] != 0 and load[0] + hg.vertex_weights[v] <= bound:
            load[assignment[v]] -= hg.vertex_weights[v]
            load[0] += hg.vertex_weights[v]
            assignment[v] = 0
    return assignment


@pytest.mark.parametrize("seed", range(12))
def test_reported_volumes_equal_metrics_and_bounds_hold(seed):
    directed = seed % 2 == 0
    data = random_graph(60 + 17 * seed, 400 + 50 * seed, seed=seed, directed=directed)
    num_parts = 2 + seed % 5
    assignment = skewed_assignment(data, num_parts, seed)
    before = partition_metrics(data, assignment, num_parts)
    result = refine(data, assignment, num_parts, volume_slack=0.1)
    after = partition_metrics(data, result.assignment, num_parts)

    assert result.total_volume_rows_before == before.total_volume_rows
    assert result.max_send_rows_before == before.send_rows.max()
    assert result.total_volume_rows_after == after.total_volume_rows
    assert result.max_send_rows_after == after.send_rows.max()
    assert result.max_send_rows_after <= result.max_send_rows_before
    assert result.total_volume_rows_after <= 1.1 * result.total_volume_rows_before
    weights = column_net_hypergraph(data).vertex_weights
    loads = np.bincount(result.assignment, weights=weights, minlength=num_parts)
    assert loads.max() <= max(capacity(weights, num_parts, 0.03), before.part_nnz.max())
    assert result.moves >= int((result.assignment != assignment).sum())  # a vertex may move twice


def test_lowers_the_busiest_part_of_a_skewed_partition():
    data = load_dataset("rmat?scale=11&edge_factor=12")
    assignment = skewed_assignment(data, 8, seed=0)
    result = refine(data, assignment, 8)
    assert result.moves > 0
    mean_after = result.total_volume_rows_after / 8
    # Before: part 0 sends 14% more than the mean; after: within 4% of the mean.
    assert result.max_send_rows_before > 1.1 * result.total_volume_rows_before / 8
    assert result.max_send_rows_after < 1.04 * mean_after
    assert result.total_volume_rows_after <= 1.05 * result.total_volume_rows_before


def test_dense_and_sparse_counts_give_the_same_refinement():
    data = load_dataset("rmat?scale=10&edge_factor=8")
    assignment = skewed_assignment(data, 6, seed=1)
    dense = refine(data, assignment, 6)
    sparse = refine(data, assignment, 6, dense_limit=0)
    assert dense.moves > 0
    np.testing.assert_array_equal(dense.assignment, sparse.assignment)


@pytest.mark.parametrize("dense_limit", [0, 1 << 30])
def test_net_part_counts_follow_moves(dense_limit):
    rng = np.random.default_rng(0)
    num_nets, num_parts = 50, 5
    pin_net = np.repeat(np.arange(num_nets), rng.integers(1, 8, num_nets))
    pin_part = rng.integers(0, num_parts, pin_net.size)
    counts = _NetPartCounts(pin_net, pin_part, num_nets, num_parts, dense_limit, merge_at=3)
    table = np.zeros((num_nets, num_parts), dtype=np.int64)
    np.add.at(table, (pin_net, pin_part), 1)
    for _ in range(200):
        source, target = rng.choice(num_parts, 2, replace=False)
        nets = np.flatnonzero(table[:, source] > 0)
        nets = rng.choice(nets, min(nets.size, 4), replace=False)
        counts.move(nets, source, target)
        table[nets, source] -= 1
        table[nets, target] += 1
        every = np.arange(num_nets)
        for part in range(num_parts):
            np.testing.assert_array_equal(counts.get(every, part), table[:, part])
        np.testing.assert_array_equal(counts.connectivity, (table > 0).sum(axis=1))


def test_zero_slack_never_raises_the_total_and_max_moves_is_respected():
    data = load_dataset("rmat?scale=10&edge_factor=8")
    assignment = skewed_assignment(data, 4, seed=2)
    strict = refine(data, assignment, 4, volume_slack=0.0)
    assert strict.total_volume_rows_after <= strict.total_volume_rows_before
    capped = refine(data, assignment, 4, max_moves=3)
    assert capped.moves == 3


def test_input_assignment_is_not_modified():
    data = random_graph(80, 500, seed=3)
    assignment = skewed_assignment(data, 4, seed=3)
    copy = assignment.copy()
    refine(data, assignment, 4)
    np.testing.assert_array_equal(assignment, copy)


def test_hypergraph_partitioner_refines_by_default_and_reports_it():
    data = load_dataset("rmat?scale=10&edge_factor=8")
    refined = get_partitioner("hypergraph", seed=0)
    assignment = refined.partition(data, 8)
    report = refined.last_refinement
    assert report is not None
    # The km1 step balances to epsilon / 2, leaving the rest as room for the refinement.
    plain = get_partitioner("hypergraph", seed=0, epsilon=0.015, balance_send_volume=False)
    raw = plain.partition(data, 8)
    assert plain.last_refinement is None
    raw_metrics = partition_metrics(data, raw, 8)
    assert report.max_send_rows_before == raw_metrics.send_rows.max()
    assert report.total_volume_rows_before == raw_metrics.total_volume_rows
    assert partition_metrics(data, assignment, 8).send_rows.max() == report.max_send_rows_after
    assert refined.settings()["balance_send_volume"] is True
    assert plain.settings()["balance_send_volume"] is False
    assert refined.partition(data, 1).max() == 0 and refined.last_refinement is None


def test_bad_volume_slack_is_rejected():
    with pytest.raises(ValueError, match=r"volume_slack must be in \[0, 10\] \(got -0.1\)"):
        get_partitioner("hypergraph", volume_slack=-0.1)
