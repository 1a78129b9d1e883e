"""The vertex-cut partitioner (Libra), its exact metrics, its parts and its store."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.data.synthetic import rmat_edge_index
from lightning_gnn_dist.data.vertex_cut import VertexCutPart
from lightning_gnn_dist.partition import PARTITIONERS, get_partitioner
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store
from lightning_gnn_dist.partition.vertex_cut import (
    VertexCutMetrics,
    libra_chunked,
    libra_sequential,
    vertex_copies,
    vertex_cut_metrics,
)
from tests.helpers import random_graph


def _rmat(scale, seed=1):
    data = Data(edge_index=rmat_edge_index(scale, 8, seed=seed), num_nodes=2**scale)
    return canonicalize(data)


def _replication(data, edge_parts, num_parts):
    copies = vertex_copies(data.edge_index.numpy(), edge_parts, data.num_nodes, num_parts)
    return copies.vertex.size / data.num_nodes


@pytest.mark.parametrize("num_parts", [2, 4, 8, 16])
@pytest.mark.parametrize("graph", ["rmat", "random"])
def test_chunked_libra_stays_within_5_percent_of_the_sequential_greedy(graph, num_parts):
    data = _rmat(9) if graph == "rmat" else random_graph(400, 3000, 2, directed=False)
    edge_index = data.edge_index.numpy()
    chunked = libra_chunked(edge_index, data.num_nodes, num_parts, seed=0)
    sequential = libra_sequential(edge_index, data.num_nodes, num_parts, seed=0)
    assert _replication(data, chunked, num_parts) <= 1.05 * _replication(
        data, sequential, num_parts
    )
    loads = np.bincount(chunked, minlength=num_parts)
    assert loads.max() / loads.mean() < 1.05  # edges are balanced


@pytest.mark.parametrize("libra", [libra_sequential, libra_chunked])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_libra_rules_on_order_independent_cases(libra, seed):
    # disjoint edges: both ends new → least-loaded part, so they spread over the parts
    assert sorted(libra(np.array([[0, 2], [1, 3]]), 4, 2, seed=seed)) == [0, 1]
    # a path: the second edge joins the part holding the shared endpoint (the chunked variant
    # decides a chunk against the state at its start, so it sees this only across chunks)
    if libra is libra_sequential:
        parts = libra(np.array([[0, 1], [1, 2]]), 3, 2, seed=seed)
        assert parts[0] == parts[1]


def test_partitioner_is_registered_deterministic_and_assigns_every_edge():
    assert PARTITIONERS["vertex-cut"].kind == "vertex-cut"
    data = random_graph(300, 2000, 4, directed=False)
    a = get_partitioner("vertex-cut", seed=3).partition(data, 4)
    b = get_partitioner("vertex-cut", seed=3).partition(data, 4)
    c = get_partitioner("vertex-cut", seed=4).partition(data, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (data.edge_index.size(1),) and a.min() >= 0 and a.max() < 4
    with pytest.raises(ValueError, match="at most 64 parts"):
        libra_chunked(data.edge_index.numpy(), data.num_nodes, 65)


def test_metrics_equal_a_direct_count():
    data = random_graph(60, 300, 5, directed=True)
    num_parts = 3
    edge_parts = get_partitioner("vertex-cut", seed=2).partition(data, num_parts)
    metrics = vertex_cut_metrics(data, edge_parts, num_parts, seed=2)
    src, dst = data.edge_index.numpy()
    parts_of = [set() for _ in range(data.num_nodes)]
    for u, v, p in zip(src, dst, edge_parts, strict=True):
        parts_of[u].add(int(p))
        parts_of[v].add(int(p))
    isolated = [v for v in range(data.num_nodes) if not parts_of[v]]
    copies = sum(len(s) for s in parts_of) + len(isolated)
    assert metrics.replication_factor == pytest.approx(copies / data.num_nodes)
    assert metrics.num_split == sum(len(s) > 1 for s in parts_of)
    np.testing.assert_array_equal(metrics.part_edges, np.bincount(edge_parts, minlength=3))
    root = vertex_copies(data.edge_index.numpy(), edge_parts, data.num_nodes, 3, seed=2).root_part
    leaf_rows = np.zeros((3, 3), dtype=np.int64)
    for v, s in enumerate(parts_of):
        assert not s or root[v] in s
        for p in s - {int(root[v])}:
            leaf_rows[p, root[v]] += 1
    np.testing.assert_array_equal(metrics.leaf_rows, leaf_rows)
    assert metrics.total_volume_rows == 2 * sum(max(len(s) - 1, 0) for s in parts_of)
    assert VertexCutMetrics.from_dict(metrics.to_dict()).to_dict() == metrics.to_dict()


@pytest.mark.parametrize("root_choice", ["random", "balanced"])
def test_parts_hold_every_edge_once_one_root_per_vertex_and_matching_plans(root_choice):
    data = random_graph(80, 500, 6, directed=True, features=4)
    num_parts = 3
    partitioner = get_partitioner("vertex-cut", seed=0, root_choice=root_choice)
    edge_parts = partitioner.partition(data, num_parts)
    parts = list(partitioner.build_parts(data, edge_parts, num_parts))
    metrics = partitioner.metrics(data, edge_parts, num_parts)
    assert [int(p.send_counts.sum()) for p in parts] == metrics.send_rows.tolist()
    edges = np.concatenate(
        [p.global_ids[p.edge_index].numpy() for p in parts], axis=1
    )  # back to dataset ids
    key = lambda e: np.sort(e[0] * 1000 + e[1])  # noqa: E731
    np.testing.assert_array_equal(key(edges), key(data.edge_index.numpy()))
    roots = np.concatenate([p.global_ids[p.is_root].numpy() for p in parts])
    np.testing.assert_array_equal(np.sort(roots), np.arange(data.num_nodes))
    in_degree = torch.bincount(
        data.edge_index[1][data.edge_index[0] != data.edge_index[1]], minlength=80
    )
    for p in parts:
        assert torch.equal(p.in_degree, in_degree[p.global_ids])
        assert not (p.train_mask & ~p.is_root).any()  # labels count once: roots only
        torch.testing.assert_close(p.x, data.x[p.global_ids])  # features replicated
        for q in parts:  # p's leaves rooted on q are q's roots with leaves on p, same order
            leaves = p.global_ids[p.leaf_index].split(p.leaf_counts.tolist())[q.part_id]
            roots_q = q.global_ids[q.root_index].split(q.root_counts.tolist())[p.part_id]
            assert torch.equal(leaves, roots_q)
            assert q.is_root[q.root_index].all()


def test_store_round_trip(tmp_path):
    data = random_graph(50, 200, 7, directed=False, features=3)
    partitioner = get_partitioner("vertex-cut", seed=1)
    store = partition_to_store(data, partitioner, 2, tmp_path / "vc", dataset="tiny")
    reopened = PartitionStore.open(tmp_path / "vc")
    assert reopened.kind == "vertex-cut"
    assert reopened.assignment().shape == (data.edge_index.size(1),)
    metrics = reopened.metrics
    assert isinstance(metrics, VertexCutMetrics)
    assert metrics.total_volume_rows == store.metrics.total_volume_rows
    part = reopened.load_part(1)
    assert isinstance(part, VertexCutPart) and part.part_id == 1
    roots = sum(int(reopened.load_part(p).train_mask.sum()) for p in range(2))
    assert sum(reopened.meta["mask_counts"]["train_mask"]) == roots == int(data.train_mask.sum())


def test_balanced_roots_even_out_the_rows_each_part_sends():
    data = _rmat(11)
    edge_parts = get_partitioner("vertex-cut", seed=0).partition(data, 16)
    by_choice = {
        choice: vertex_cut_metrics(data, edge_parts, 16, seed=0, root_choice=choice)
        for choice in ("random", "balanced")
    }
    random, balanced = by_choice["random"], by_choice["balanced"]
    assert balanced.total_volume_rows == random.total_volume_rows  # roots move no copies
    assert balanced.send_rows.max() < random.send_rows.max()
    with pytest.raises(ValueError, match="root_choice"):
        get_partitioner("vertex-cut", root_choice="central")
