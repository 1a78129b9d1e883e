"""The stochastic hypergraph model and partitioner (paper 000 §4.3.3, Algorithm 3)."""

import math

import numpy as np
import pytest
import torch

from lightning_gnn_dist.data.subgraph_sampler import make_sampler
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.batch_volume import batch_volume_rows
from lightning_gnn_dist.partition.stochastic_hypergraph import (
    coverage_batches,
    hoeffding_nets,
    stochastic_hypergraph,
)
from lightning_gnn_dist.partition.store import PartitionStoreError, partition_to_store
from tests.helpers import random_graph


@pytest.fixture(scope="module")
def graph():
    return random_graph(200, 900, seed=4, features=3)


def test_hoeffding_bound_is_eq_14():
    # (p - 1)^2 / (2 θ^2) · ln(2 / δ) with the paper's θ = 0.1, δ = 0.5.
    assert hoeffding_nets(16, 0.1, 0.5) == math.ceil(225 / 0.02 * math.log(4))
    assert hoeffding_nets(2, 0.5, 0.1) == math.ceil(1 / 0.5 * math.log(20))
    with pytest.raises(ValueError, match="theta must be > 0"):
        hoeffding_nets(4, 0.0, 0.5)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        hoeffding_nets(4, 0.1, 1.0)


def test_merged_hypergraph_cut_is_the_sum_of_the_batch_volumes(graph):
    """Merging keeps the objective: for any partition, the weighted connectivity−1 cut of the
    merged hypergraph equals the summed volumes of the batches it was built from."""
    sampler = make_sampler("uniform", graph.num_nodes, 40, seed=1)
    hypergraph, stats = stochastic_hypergraph(graph, sampler, 0, 25, 25)
    assert stats["batches"] == 25 and stats["sampled_nets"] == 25 * 40
    assert stats["merged_nets"] < stats["sampled_nets"]  # identical nets merged, singletons gone
    assert hypergraph.net_weights.sum() <= stats["sampled_nets"]
    sizes = np.diff(hypergraph.net_offsets)
    assert sizes.min() >= 2
    for seed in range(3):
        assignment = np.random.default_rng(seed).integers(0, 4, graph.num_nodes)
        net = np.repeat(np.arange(hypergraph.num_nets), sizes)
        parts = np.unique(net * 4 + assignment[hypergraph.pins])
        lam = np.bincount(parts // 4, minlength=hypergraph.num_nets)
        merged_cut = int(((lam - 1) * hypergraph.net_weights).sum())
        summed = sum(
            batch_volume_rows(graph.edge_index, assignment, sampler.sample(i)) for i in range(25)
        )
        assert merged_cut == summed


def test_batches_follow_the_hoeffding_count_and_the_cap(graph):
    sampler = make_sampler("uniform", graph.num_nodes, 20, seed=0)
    _, stats = stochastic_hypergraph(graph, sampler, num_nets=101, min_batches=1, max_batches=50)
    assert stats["batches"] == 6  # 6 batches of 20 nets reach 101
    with pytest.warns(UserWarning, match="fewer than the 5000 the Hoeffding bound"):
        _, stats = stochastic_hypergraph(graph, sampler, 5000, 1, 10)
    assert stats["batches"] == 10
    assert coverage_batches(sampler, 8.0) == math.ceil(8.0 / (20 * 19 / (200 * 199)))


def test_partitioner_is_deterministic_and_balanced(graph):
    partitioner = get_partitioner(
        "stochastic-hypergraph", seed=3, subgraph_size=0.2, edge_coverage=2.0
    )
    first = partitioner.partition(graph, 4)
    assert np.array_equal(first, partitioner.partition(graph, 4))
    assert set(first.tolist()) == {0, 1, 2, 3}
    assert partitioner.last_stats["batches"] >= coverage_batches(
        partitioner.make_sampler(graph), 2.0
    )
    settings = partitioner.settings()
    assert settings["sampler"] == "uniform" and settings["subgraph_size"] == 0.2
    assert settings["theta"] == 0.1 and settings["delta"] == 0.5


def test_store_for_another_sampler_is_refused(graph, tmp_path):
    store = tmp_path / "store"
    options = {"seed": 0, "edge_coverage": 1.0, "subgraph_size": 0.2}
    partition_to_store(graph, get_partitioner("stochastic-hypergraph", **options), 2, store)
    other = get_partitioner("stochastic-hypergraph", sampler="edge", **options)
    with pytest.raises(PartitionStoreError, match="sampler: stored 'uniform', requested 'edge'"):
        partition_to_store(graph, other, 2, store)
    bigger = get_partitioner("stochastic-hypergraph", **{**options, "subgraph_size": 0.3})
    with pytest.raises(PartitionStoreError, match="subgraph_size"):
        partition_to_store(graph, bigger, 2, store)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="edge_coverage must be a finite number >= 0"):
        get_partitioner("stochastic-hypergraph", edge_coverage=-1)
    with pytest.raises(ValueError, match="max_batches must be an integer >= 5"):
        get_partitioner("stochastic-hypergraph", min_batches=5, max_batches=2)
    with pytest.raises(ValueError, match="unknown subgraph sampler"):
        get_partitioner("stochastic-hypergraph", sampler="nope").make_sampler(
            random_graph(10, 20, seed=0)
        )
    assert torch.is_tensor(make_sampler("uniform", 10, 3).sample(0))
