"""``method="kaminpar"`` and the column-net volume refinement (issue 34)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.datasets import load_dataset
from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.arrays import EdgeView
from lightning_gnn_dist.partition.backends import kaminpar as kaminpar_backend
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.volume import refine_volume
from lightning_gnn_dist.partition.weights import vertex_weights
from tests.helpers import random_graph

pytest.importorskip("kaminpar")


@pytest.fixture(scope="module")
def rmat():
    return load_dataset("rmat?scale=11&edge_factor=8")


def _bound(weights, num_parts, epsilon):
    return (1 + epsilon) * np.ceil(weights.sum() / num_parts)


@pytest.mark.parametrize("num_parts", [2, 4, 5])
def test_kaminpar_is_valid_balanced_deterministic_and_refined(rmat, num_parts):
    partitioner = get_partitioner("kaminpar", seed=3)
    first = partitioner.partition(rmat, num_parts)
    refinement = partitioner.last_refinement
    second = get_partitioner("kaminpar", seed=3).partition(rmat, num_parts)
    np.testing.assert_array_equal(first, second)
    assert first.dtype == np.int64 and set(first.tolist()) == set(range(num_parts))
    weights = vertex_weights(rmat, "work")
    assert np.bincount(first, weights=weights).max() <= _bound(weights, num_parts, 0.03)
    # The refinement's own volume is the exact one, and it only lowered it.
    metrics = partition_metrics(rmat, first, num_parts)
    assert refinement.total_volume_rows_after == metrics.total_volume_rows
    assert refinement.total_volume_rows_after < refinement.total_volume_rows_before
    # The refinement starts from KaMinPar's partition at half the imbalance.
    unrefined = get_partitioner("kaminpar", seed=3, refine=False, epsilon=0.015)
    unrefined = unrefined.partition(rmat, num_parts)
    assert (
        partition_metrics(rmat, unrefined, num_parts).total_volume_rows
        == refinement.total_volume_rows_before
    )


@pytest.mark.parametrize("balance", [None, True, False])
def test_send_volume_balancing_from_eight_parts(rmat, balance):
    """By default the busiest part's send volume is lowered from 8 parts on; the step reports
    exact volumes and the refined assignment is the one returned."""
    partitioner = get_partitioner("kaminpar", seed=1, balance_send_volume=balance)
    assignment = partitioner.partition(rmat, 8)
    send = partitioner.last_send_refinement
    if balance is False:
        assert send is None
        return
    metrics = partition_metrics(rmat, assignment, 8)
    assert send.max_send_rows_after == metrics.send_rows.max() < send.max_send_rows_before
    assert send.total_volume_rows_before == partitioner.last_refinement.total_volume_rows_after
    assert metrics.total_volume_rows <= 1.05 * send.total_volume_rows_before
    two = get_partitioner("kaminpar", seed=1, balance_send_volume=balance)
    two.partition(rmat, 2)
    assert (two.last_send_refinement is None) == (balance is None)


def test_kaminpar_different_seeds_and_edgeless_graph(rmat):
    a = get_partitioner("kaminpar", seed=0).partition(rmat, 4)
    b = get_partitioner("kaminpar", seed=1).partition(rmat, 4)
    assert (a != b).any()
    loops = canonicalize(Data(edge_index=torch.tensor([[0, 3], [0, 3]]), num_nodes=7))
    parts = get_partitioner("kaminpar").partition(loops, 3)
    assert sorted(np.bincount(parts).tolist()) == [2, 2, 3]


@pytest.mark.parametrize("seed", range(8))
def test_volume_refinement_is_exact_on_multigraphs(seed):
    """Random assignments of random multigraphs: km1 never rises, the bound holds, and the
    reported volumes are partition_metrics' exactly."""
    rng = np.random.default_rng(seed)
    data = random_graph(
        60, 400, seed, directed=bool(seed % 2), self_loops=seed % 3 == 0, parallel_edges=True
    )
    num_parts = int(rng.integers(2, 6))
    weights = rng.integers(1, 5, data.num_nodes)
    assignment = rng.integers(0, num_parts, data.num_nodes)
    epsilon = 0.5
    result = refine_volume(
        EdgeView(data.edge_index, data.num_nodes), weights, assignment, num_parts, epsilon
    )
    before = partition_metrics(data, assignment, num_parts).total_volume_rows
    after = partition_metrics(data, result.assignment, num_parts).total_volume_rows
    assert (result.total_volume_rows_before, result.total_volume_rows_after) == (before, after)
    assert after < before and result.moves > 0
    loads = np.bincount(result.assignment, weights=weights, minlength=num_parts)
    moved_into = np.unique(result.assignment[result.assignment != assignment])
    assert (loads[moved_into] <= _bound(weights, num_parts, epsilon)).all()


def test_too_large_a_refinement_is_refused_or_skipped(rmat, monkeypatch):
    from lightning_gnn_dist.partition import volume

    monkeypatch.setattr(volume, "MAX_TABLE_ENTRIES", rmat.num_nodes * 3)
    view = EdgeView(rmat.edge_index, rmat.num_nodes)
    with pytest.raises(ValueError, match=r"2048 x 4 table.*turn it off \(refine=False\)"):
        refine_volume(view, np.ones(rmat.num_nodes), np.zeros(rmat.num_nodes, int), 4, 0.03)
    with pytest.warns(UserWarning, match="returning KaMinPar's partition unrefined"):
        parts = get_partitioner("kaminpar", seed=3).partition(rmat, 4)
    plain = get_partitioner("kaminpar", seed=3, refine=False, epsilon=0.015).partition(rmat, 4)
    np.testing.assert_array_equal(parts, plain)


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown KaMinPar context 'turbo'"):
        get_partitioner("kaminpar", context="turbo")
    with pytest.raises(ValueError, match="threads must be an integer"):
        get_partitioner("kaminpar", threads=0)
    with pytest.raises(ValueError, match="has no option 'preset'"):
        get_partitioner("kaminpar", preset="fast")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        get_partitioner("kaminpar", timeout=0)
    with pytest.raises(ValueError, match="volume_slack must be in"):
        get_partitioner("kaminpar", volume_slack=-1)
    with pytest.raises(ValueError, match="balance_send_volume must be"):
        get_partitioner("kaminpar", balance_send_volume="yes")


def test_a_failing_child_is_a_runtime_error(rmat, monkeypatch):
    """KaMinPar's readers end their process on bad input: that must reach us as an error."""
    monkeypatch.setattr(
        kaminpar_backend,
        "_worker_command",
        lambda *args: [
            "python3",
            "-c",
            "import sys; print('bad graph', file=sys.stderr); sys.exit(1)",
        ],
    )
    with pytest.raises(RuntimeError, match="KaMinPar failed with exit status 1.*bad graph"):
        get_partitioner("kaminpar").partition(rmat, 2)


def test_parhip_file_round_trips(tmp_path):
    """The file KaMinPar reads holds A + Aᵀ without loops and the vertex weights."""
    import kaminpar

    data = random_graph(30, 90, 4, directed=True, self_loops=True, parallel_edges=True)
    view = EdgeView(data.edge_index, 30)
    weights = np.arange(1, 31)
    path = tmp_path / "g.parhip"
    from lightning_gnn_dist.partition.arrays import symmetric_csr, symmetric_keys

    kaminpar_backend.write_parhip(path, symmetric_keys(None, 30, view), 30, weights)
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP)
    indptr, indices = symmetric_csr(data.edge_index, 30)
    assert (graph.n(), graph.m()) == (30, indices.size)
    for u in range(30):
        assert (
            sorted(v for v, _ in graph.neighbors(u)) == indices[indptr[u] : indptr[u + 1]].tolist()
        )
        assert graph.node_weight(u) == weights[u]
