"""Subgraph samplers and per-batch plans (``data.subgraph_sampler``, ``data.subgraph_loader``)."""

import numpy as np
import pytest
import torch

from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.subgraph_sampler import (
    SUBGRAPH_SAMPLERS,
    induced_subgraph,
    make_sampler,
    subgraph_vertices,
)
from lightning_gnn_dist.loaders.subgraph import SubgraphLoader, batch_partition
from lightning_gnn_dist.partition.batch_volume import (
    batch_metrics,
    batch_volume_rows,
    expected_batch_volume,
)
from tests.helpers import random_graph

SAMPLERS = sorted(SUBGRAPH_SAMPLERS)


@pytest.fixture(scope="module")
def graph():
    return random_graph(240, 1200, seed=1, features=4)


@pytest.mark.parametrize("name", SAMPLERS)
def test_same_seed_and_step_give_the_same_batch(name, graph):
    a = make_sampler(name, 240, 48, seed=7, edge_index=graph.edge_index)
    b = make_sampler(name, 240, 48, seed=7, edge_index=graph.edge_index)
    c = make_sampler(name, 240, 48, seed=8, edge_index=graph.edge_index)
    batch = a.sample(3)
    assert torch.equal(batch, b.sample(3))
    assert not torch.equal(batch, a.sample(4))
    assert not torch.equal(batch, c.sample(3))
    assert torch.equal(batch, torch.unique(batch))  # sorted, distinct
    assert 0 <= int(batch.min()) and int(batch.max()) < 240
    assert 1 <= batch.numel() <= 48


def test_uniform_sampler_draws_exactly_size_vertices_uniformly():
    sampler = make_sampler("uniform", 50, 10, seed=0)
    counts = torch.zeros(50)
    for step in range(400):
        batch = sampler.sample(step)
        assert batch.numel() == 10
        counts[batch] += 1
    # Each vertex is in a batch with probability 1/5: 80 of 400 expected (binomial sd ~8).
    assert float(counts.min()) > 50 and float(counts.max()) < 110


def test_edge_sampler_returns_endpoints_of_edges(graph):
    sampler = make_sampler("edge", 240, 40, seed=0, edge_index=graph.edge_index)
    batch = sampler.sample(0)
    sub = induced_subgraph(graph.edge_index, 240, batch)
    # Every vertex of the batch is an endpoint of a sampled (non-loop) edge of the batch.
    touched = torch.unique(sub[:, sub[0] != sub[1]].flatten())
    assert touched.numel() == batch.numel()


def test_random_walks_follow_edges():
    # A directed path 0 -> 1 -> ... -> 9: walks of length 3 from root r visit r..r+3.
    edge_index = torch.stack([torch.arange(9), torch.arange(1, 10)])
    sampler = make_sampler("random-walk", 10, 4, seed=0, edge_index=edge_index, walk_length=3)
    for step in range(20):
        batch = sampler.sample(step)
        root = int(batch.min())
        assert batch.tolist() == list(range(root, min(root + 4, 10)))


def test_structure_samplers_need_edges_and_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="edge_index"):
        make_sampler("edge", 10, 4)
    with pytest.raises(ValueError, match="unknown subgraph sampler 'nope'"):
        make_sampler("nope", 10, 4)
    with pytest.raises(ValueError, match="got 11"):
        make_sampler("uniform", 10, 11)
    assert subgraph_vertices(0.1, 240) == 24
    assert subgraph_vertices(30, 240) == 30
    with pytest.raises(ValueError, match="got 0"):
        subgraph_vertices(0, 240)


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4])
@pytest.mark.parametrize("name", SAMPLERS)
def test_batch_plans_agree_and_equal_the_batch_hypergraph_cut(name, num_parts, graph):
    """Sender and receiver restrict their plans to the batch without talking, and agree; the rows
    equal the connectivity−1 cut of the batch's column-net hypergraph."""
    assignment = np.random.default_rng(num_parts).integers(0, num_parts, graph.num_nodes)
    parts = list(build_local_partitions(graph, assignment, num_parts))
    sampler = make_sampler(name, graph.num_nodes, 60, seed=5, edge_index=graph.edge_index)
    for step in range(3):
        batch = sampler.sample(step)
        views = [batch_partition(part, batch) for part in parts]
        expected = batch_metrics(graph, assignment, num_parts, batch)
        send = np.stack([v.send_counts.numpy() for v in views])
        recv = np.stack([v.recv_counts.numpy() for v in views])
        np.testing.assert_array_equal(send, expected.peer_rows)
        np.testing.assert_array_equal(recv.T, expected.peer_rows)
        assert [v.num_owned for v in views] == expected.part_sizes.tolist()
        sub = induced_subgraph(graph.edge_index, graph.num_nodes, batch)
        assert sum(v.edge_index.size(1) for v in views) == sub.size(1)
        assert batch_volume_rows(graph.edge_index, assignment, batch) == (
            expected.total_volume_rows
        )
        for view in views:  # owned rows carry their own data
            assert torch.equal(view.x, graph.x[view.global_ids])
            assert bool(torch.isin(view.global_ids, batch).all())


def test_single_part_loader_yields_the_induced_subgraph(graph):
    part = next(build_local_partitions(graph, np.zeros(graph.num_nodes, dtype=np.int64), 1))
    sampler = make_sampler("uniform", graph.num_nodes, 50, seed=2)
    loader = SubgraphLoader(part, sampler, steps_per_epoch=2)
    assert len(loader) == 2
    first = [b.global_ids for b in loader]
    second = [b.global_ids for b in loader]
    assert torch.equal(first[0], sampler.sample(0)) and torch.equal(second[1], sampler.sample(3))
    batch = loader.batch(5)
    ids = sampler.sample(5)
    expected = induced_subgraph(graph.edge_index, graph.num_nodes, ids)
    assert sorted(map(tuple, batch.edge_index.t().tolist())) == sorted(
        map(tuple, expected.t().tolist())
    )
    assert batch.num_train_global == int(graph.train_mask[ids].sum())
    loader.load_state_dict({"epoch": 4})
    assert torch.equal(next(iter(loader)).global_ids, sampler.sample(8))


def test_expected_volume_interval_brackets_the_mean(graph):
    assignment = np.arange(graph.num_nodes) % 4
    sampler = make_sampler("uniform", graph.num_nodes, 60, seed=11)
    estimate = expected_batch_volume(graph, assignment, sampler, num_samples=40)
    rows = [batch_volume_rows(graph.edge_index, assignment, sampler.sample(i)) for i in range(40)]
    assert estimate.mean_rows == pytest.approx(np.mean(rows))
    assert estimate.ci_low < estimate.mean_rows < estimate.ci_high
    half = 1.959964 * np.std(rows, ddof=1) / np.sqrt(40)
    assert estimate.ci_high - estimate.mean_rows == pytest.approx(half, rel=1e-4)
