import numpy as np
import pytest
import torch

from lightning_gnn_dist.partition.metrics import (
    paper_gcn_widths,
    partition_metrics,
    projected_epoch_bytes,
)
from tests.helpers import figure2_graph, random_graph


def brute_force(data, assignment, num_parts):
    """Dense, loop-based reference: Â with the diagonal, nets = columns."""
    n = data.num_nodes
    dense = np.eye(n, dtype=bool)
    for j, i in data.edge_index.t().tolist():
        dense[i, j] = True  # message j -> i: row i reads column j
    peer = np.zeros((num_parts, num_parts), dtype=np.int64)
    for j in range(n):
        parts = {assignment[i] for i in range(n) if dense[i, j]}
        for q in parts - {assignment[j]}:
            peer[assignment[j], q] += 1
    undirected = {frozenset((int(a), int(b))) for a, b in data.edge_index.t().tolist() if a != b}
    cut = sum(1 for e in undirected if len({assignment[v] for v in e}) == 2)
    nnz = np.zeros(num_parts, dtype=np.int64)
    for i in range(n):
        nnz[assignment[i]] += dense[i].sum()
    return peer, cut, nnz


@pytest.mark.parametrize("seed", range(40))
def test_metrics_equal_brute_force_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40)) if seed < 36 else 90
    data = random_graph(
        n,
        int(rng.integers(0, 4 * n)),
        seed,
        directed=bool(seed % 2),
        self_loops=seed % 3 == 0,
        parallel_edges=seed % 4 == 1,  # multigraphs: parallel edges count once
    )
    # Up to 64 parts the metrics use one bit mask per net; beyond, distinct (net, part) pairs.
    p = int(rng.integers(1, min(n, 6) + 1)) if seed < 36 else (63, 64, 65, 70)[seed - 36]
    assignment = rng.integers(0, p, n)
    metrics = partition_metrics(data, assignment, p)
    peer, cut, nnz = brute_force(data, assignment, p)
    np.testing.assert_array_equal(metrics.peer_rows, peer)
    assert metrics.edge_cut == cut
    np.testing.assert_array_equal(metrics.part_nnz, nnz)
    np.testing.assert_array_equal(metrics.part_sizes, np.bincount(assignment, minlength=p))
    assert metrics.total_volume_rows == peer.sum()
    np.testing.assert_array_equal(metrics.send_messages, (peer > 0).sum(1))
    np.testing.assert_array_equal(metrics.recv_messages, (peer > 0).sum(0))


def test_paper_figure2_worked_example():
    data, assignment = figure2_graph()
    metrics = partition_metrics(data, np.array(assignment), 3)
    # P3 receives rows v1, v2 from P1 and v4 (once, not twice) from P2.
    assert metrics.peer_rows[0, 2] == 2
    assert metrics.peer_rows[1, 2] == 1
    # λ(n2) = λ(n4) = 3 → each contributes 2; total connectivity−1 = 1+2+0+2+2+2.
    assert metrics.total_volume_rows == 9
    # The graph model counts v4's three cut edges; total cut edges 5 → it predicts 10 rows.
    assert metrics.edge_cut == 5
    assert 2 * metrics.edge_cut > metrics.total_volume_rows
    assert metrics.part_nnz.tolist() == [3 + 4, 2 + 5, 3 + 3]


def test_summary_and_roundtrip():
    data = random_graph(30, 90, 0)
    metrics = partition_metrics(data, np.arange(30) % 3, 3)
    summary = metrics.summary()
    assert summary["total_volume_rows"] == metrics.total_volume_rows
    assert summary["max_send_rows"] == metrics.send_rows.max()
    again = type(metrics).from_dict(metrics.to_dict())
    np.testing.assert_array_equal(again.peer_rows, metrics.peer_rows)
    assert again.edge_cut == metrics.edge_cut


def test_projected_bytes():
    data, assignment = figure2_graph()
    metrics = partition_metrics(data, np.array(assignment), 3)
    layers = projected_epoch_bytes(metrics, paper_gcn_widths([8, 4, 2]))
    assert [(x.forward_bytes_total, x.backward_bytes_total) for x in layers] == [
        (9 * 8 * 4, 9 * 4 * 4),
        (9 * 4 * 4, 9 * 2 * 4),
    ]
    assert layers[0].forward_bytes_max == metrics.send_rows.max() * 8 * 4
    same = projected_epoch_bytes(metrics, [5])
    assert same[0].forward_bytes_total == same[0].backward_bytes_total == 9 * 5 * 4


def test_invalid_assignment():
    data = random_graph(5, 5, 0)
    with pytest.raises(ValueError, match="shape"):
        partition_metrics(data, np.zeros(4, dtype=np.int64), 2)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        partition_metrics(data, np.full(5, 2), 2)
    assert torch.is_tensor(data.edge_index)
