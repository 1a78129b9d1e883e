"""The memory-lean graph arrays equal the reference helpers of ``data.graph`` exactly."""

import numpy as np
import pytest
import torch

from lightning_gnn_dist.data import graph as reference
from lightning_gnn_dist.partition import arrays
from tests.helpers import random_graph


def _graphs():
    for seed in range(6):
        yield random_graph(
            37, 150, seed, directed=bool(seed % 2), self_loops=seed % 3 == 0, parallel_edges=True
        )


@pytest.fixture(params=[False, True], ids=["sorted", "unsorted"])
def shuffled(request):
    return request.param


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(arrays, "CHUNK", 7)  # every array crosses many chunk boundaries


def _edge_index(data, shuffled):
    edge_index = data.edge_index
    if shuffled:
        order = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(0))
        edge_index = edge_index[:, order]
    return edge_index


@pytest.mark.parametrize("data", list(_graphs()))
def test_row_nnz_and_symmetric_csr_equal_reference(data, shuffled):
    n = data.num_nodes
    edge_index = _edge_index(data, shuffled)
    assert arrays.is_sorted(edge_index) == (not shuffled or edge_index.size(1) < 2)
    np.testing.assert_array_equal(
        arrays.row_nnz(edge_index, n), reference.row_nnz(data.edge_index, n)
    )
    indptr, indices = reference.symmetric_csr(data.edge_index, n)
    for dtype in (np.int32, np.int64):
        got_indptr, got_indices = arrays.symmetric_csr(edge_index, n, dtype)
        assert got_indices.dtype == dtype
        np.testing.assert_array_equal(got_indptr, indptr)
        np.testing.assert_array_equal(got_indices, indices)
    src, dst = arrays.EdgeView(edge_index, n).arrays()
    assert src.dtype == np.int32
    ref_src, ref_dst = reference.distinct_edges(*data.edge_index.numpy(), n)
    off_diagonal = ref_src != ref_dst
    np.testing.assert_array_equal(src, ref_src[off_diagonal])
    np.testing.assert_array_equal(dst, ref_dst[off_diagonal])


@pytest.mark.parametrize("data", list(_graphs()))
def test_net_part_masks_are_the_connectivity_sets(data, shuffled):
    n, num_parts = data.num_nodes, 5
    assignment = np.random.default_rng(1).integers(0, num_parts, n)
    nets, pins = reference.column_net_pins(data.edge_index, n)
    expected = np.zeros(n, dtype=np.uint64)
    np.bitwise_or.at(expected, nets, np.uint64(1) << assignment[pins].astype(np.uint64))
    view = arrays.EdgeView(_edge_index(data, shuffled), n)
    np.testing.assert_array_equal(arrays.net_part_masks(view, assignment, num_parts), expected)
    np.testing.assert_array_equal(
        arrays.popcount(expected), [bin(int(m)).count("1") for m in expected]
    )


@pytest.mark.parametrize("data", list(_graphs()))
def test_column_net_csr_equals_the_hypergraph(data, shuffled):
    nets, expected_pins = reference.column_net_pins(data.edge_index, 37)
    expected_offsets = np.r_[0, np.cumsum(np.bincount(nets, minlength=37))]
    offsets, pins = arrays.column_net_csr(arrays.EdgeView(_edge_index(data, shuffled), 37))
    np.testing.assert_array_equal(offsets, expected_offsets)
    np.testing.assert_array_equal(pins, expected_pins)
    assert pins.dtype == np.int64
