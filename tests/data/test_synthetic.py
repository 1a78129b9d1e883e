"""Synthetic generators: determinism, structure (undirected / directed, skew) and labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data.synthetic import (
    add_synthetic_features,
    random_split_masks,
    rmat,
    rmat_edge_index,
    sbm,
)

KEYS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")


def assert_identical(a: Data, b: Data) -> None:
    assert a.num_nodes == b.num_nodes
    for key in KEYS:
        assert torch.equal(a[key], b[key]), key
        assert a[key].dtype == b[key].dtype, key


def edge_keys(edge_index: torch.Tensor, num_nodes: int) -> np.ndarray:
    src, dst = edge_index.numpy()
    return src * num_nodes + dst


def is_symmetric(edge_index: torch.Tensor, num_nodes: int) -> bool:
    src, dst = edge_index.numpy()
    return np.array_equal(np.sort(src * num_nodes + dst), np.sort(dst * num_nodes + src))


# --------------------------------------------------------------------------------------------
# random_split_masks


def test_random_split_masks_partition_the_vertices():
    train, val, test = random_split_masks(101, seed=4)
    assert train.dtype == val.dtype == test.dtype == torch.bool
    assert (train.int() + val.int() + test.int() == 1).all()
    assert (int(train.sum()), int(val.sum()), int(test.sum())) == (61, 20, 20)


def test_random_split_masks_are_seeded():
    first = random_split_masks(50, seed=1)
    again = random_split_masks(50, seed=1)
    other = random_split_masks(50, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


def test_random_split_masks_rejects_bad_shares():
    with pytest.raises(ValueError, match="train=0.9, val=0.2"):
        random_split_masks(10, 0, train=0.9, val=0.2)


# --------------------------------------------------------------------------------------------
# sbm


def test_sbm_is_deterministic_and_seeded():
    assert_identical(sbm(num_nodes=300, seed=3), sbm(num_nodes=300, seed=3))
    assert not torch.equal(
        sbm(num_nodes=300, seed=3).edge_index, sbm(num_nodes=300, seed=4).edge_index
    )


def test_sbm_structure_and_homophily():
    data = sbm(num_nodes=2000, num_classes=4, avg_degree=10, p_ratio=10, features=8, seed=0)
    n = data.num_nodes
    assert data.name == "sbm"
    assert data.x.shape == (n, 8) and data.x.dtype == torch.float32
    assert data.y.shape == (n,) and data.y.dtype == torch.int64
    assert data.y.bincount().tolist() == [500, 500, 500, 500]  # balanced planted classes
    assert is_symmetric(data.edge_index, n)
    assert not (data.edge_index[0] == data.edge_index[1]).any()
    assert 9.0 < data.edge_index.size(1) / n <= 10.0  # average degree, minus merged draws
    src, dst = data.edge_index
    same = (data.y[src] == data.y[dst]).float().mean().item()
    # p_in / p_out = 10 with 500 vertices per class: share of intra edges = 10*500 / (10*500 + 1500)
    assert abs(same - 5000 / 6500) < 0.03
    # Class ids are not laid out in contiguous id ranges (ids are permuted).
    assert (data.y[:500] == data.y[0]).float().mean() < 0.5


def test_sbm_p_ratio_one_has_no_class_structure():
    data = sbm(num_nodes=2000, num_classes=4, p_ratio=1.0, seed=1)
    src, dst = data.edge_index
    assert abs((data.y[src] == data.y[dst]).float().mean().item() - 0.25) < 0.03


def test_sbm_features_are_class_informative():
    data = sbm(num_nodes=2000, num_classes=4, features=32, noise=3.0, seed=0)
    train, test = data.train_mask, data.test_mask
    centroids = torch.stack([data.x[train & (data.y == c)].mean(0) for c in range(4)])
    predicted = torch.cdist(data.x[test], centroids).argmin(1)
    accuracy = (predicted == data.y[test]).float().mean().item()
    assert 0.4 < accuracy < 1.0  # well above chance (0.25), not trivially separable


def test_sbm_is_vectorised_for_large_graphs():
    # An O(N^2) implementation would need 10^10 pair slots here.
    data = sbm(num_nodes=100_000, avg_degree=4, features=2, seed=0)
    assert data.num_nodes == 100_000
    assert data.edge_index.size(1) > 350_000


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_nodes": 0}, "num_nodes must be an integer >= 1 (got 0)"),
        (
            {"num_classes": 20, "num_nodes": 10},
            "num_classes must be an integer in [1, 10] (got 20)",
        ),
        ({"p_ratio": 0.0}, "p_ratio must be > 0 (got 0.0)"),
        ({"seed": -1}, "seed must be an integer >= 0 (got -1)"),
    ],
)
def test_sbm_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as info:
        sbm(**kwargs)
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# rmat


def test_rmat_is_directed_skewed_and_simple():
    scale = 12
    n = 1 << scale
    edge_index = rmat_edge_index(scale, edge_factor=8, seed=0)
    assert edge_index.dtype == torch.int64
    assert 0 < edge_index.size(1) <= 8 * n
    keys = edge_keys(edge_index, n)
    assert np.all(np.diff(keys) > 0)  # coalesced: sorted by (source, target), no duplicates
    assert not (edge_index[0] == edge_index[1]).any()  # no self loops
    src, dst = edge_index.numpy()
    reverse_present = np.isin(dst * n + src, keys)
    assert (~reverse_present).mean() > 0.5  # directed: most edges lack their reverse
    out_degree = np.bincount(src, minlength=n)
    in_degree = np.bincount(dst, minlength=n)
    assert out_degree.max() > 20 * out_degree.mean()
    assert in_degree.max() > 20 * in_degree.mean()
    assert (out_degree + in_degree == 0).sum() > 0.05 * n  # many isolated vertices


def test_rmat_vertex_ids_are_permuted():
    scale = 12
    n = 1 << scale
    src, dst = rmat_edge_index(scale, edge_factor=8, seed=0).numpy()
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    hubs = np.argsort(-degree, kind="stable")[: n // 100]
    # Without the permutation the hubs are the ids with few one-bits (mostly small ids).
    assert 0.3 * n < hubs.mean() < 0.7 * n


def test_rmat_is_deterministic_and_seeded():
    assert torch.equal(rmat_edge_index(10, 4, seed=7), rmat_edge_index(10, 4, seed=7))
    assert not torch.equal(rmat_edge_index(10, 4, seed=7), rmat_edge_index(10, 4, seed=8))
    assert_identical(rmat(scale=9, edge_factor=4, seed=2), rmat(scale=9, edge_factor=4, seed=2))


def test_rmat_data_has_features_labels_and_masks():
    data = rmat(scale=10, edge_factor=8, features=16, classes=5, seed=0)
    assert data.name == "rmat"
    assert data.num_nodes == 1024
    assert data.x.shape == (1024, 16) and data.x.dtype == torch.float32
    assert data.y.shape == (1024,) and data.y.dtype == torch.int64
    assert set(data.y.unique().tolist()) == set(range(5))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scale": 0}, "scale must be an integer in [1, 31] (got 0)"),
        ({"scale": 4, "a": 0.6, "b": 0.3, "c": 0.3}, "a + b + c <= 1 (got a=0.6, b=0.3, c=0.3)"),
    ],
)
def test_rmat_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as info:
        rmat_edge_index(**kwargs)
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# add_synthetic_features


def path_graph(n: int) -> Data:
    src = torch.arange(n - 1)
    return Data(edge_index=torch.stack([src, src + 1]), num_nodes=n)  # directed j -> j+1


def test_teacher_labels_are_argmax_of_two_mean_hops():
    data = add_synthetic_features(path_graph(30), features=6, classes=3, seed=5)
    n = data.num_nodes
    # Independent dense computation: row i averages i and its in-neighbour i-1.
    mean = torch.eye(n, dtype=torch.float64)
    mean[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    mean = mean / mean.sum(1, keepdim=True)
    weight = np.random.default_rng((5, 3)).standard_normal((6, 3))
    projected = torch.from_numpy(data.x.numpy() @ weight.astype(np.float32)).double()
    expected = (mean @ mean @ projected).argmax(1)
    assert torch.equal(data.y, expected)
    assert data.x.shape == (n, 6) and data.x.dtype == torch.float32


def test_existing_features_are_kept_and_masks_skip_unlabelled():
    base = path_graph(20)
    base.x = torch.ones(20, 3)
    base.y = torch.tensor([-1] * 5 + [1] * 15)
    data = add_synthetic_features(base, seed=0)
    assert torch.equal(data.x, base.x)
    assert torch.equal(data.y, base.y)
    labelled = data.train_mask | data.val_mask | data.test_mask
    assert torch.equal(labelled, base.y >= 0)
    assert "train_mask" not in base  # the input is not modified


def test_labels_without_features_get_class_informative_features():
    base = path_graph(400)
    base.y = torch.arange(400) % 2
    data = add_synthetic_features(base, features=16, seed=0, noise=1.0)
    difference = data.x[data.y == 1].mean(0) - data.x[data.y == 0].mean(0)
    assert difference.norm() > 2.0  # centroid distance ~ sqrt(2 * 16) against noise 1


def test_partial_masks_are_refused():
    base = path_graph(10)
    base.train_mask = torch.ones(10, dtype=torch.bool)
    with pytest.raises(ValueError, match="has train_mask but not all of"):
        add_synthetic_features(base)


def test_add_synthetic_features_is_deterministic():
    assert_identical(
        add_synthetic_features(path_graph(50), seed=9),
        add_synthetic_features(path_graph(50), seed=9),
    )
