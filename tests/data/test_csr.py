"""CSR adjacencies: structure of a multigraph (parallel edges, repeated self loops, isolated
vertices), its transpose, prefixes, resizing and the per-tensor cache."""

import pytest
import torch

from lightning_gnn_dist.data import _kernels
from lightning_gnn_dist.data.csr import CSRAdjacency, adjacency_of, resized, tensor_cache


def multigraph_edges() -> torch.Tensor:
    """Sources → targets over 7 vertices: a doubled edge 0→1, a tripled loop at 2, a loop at 3,
    vertex 5 isolated, vertex 6 only a source."""
    return torch.tensor([[0, 0, 2, 2, 2, 3, 6, 1, 4, 6], [1, 1, 2, 2, 2, 3, 0, 4, 0, 1]])


def dense(adj: CSRAdjacency, values: torch.Tensor | None = None) -> torch.Tensor:
    values = torch.ones(adj.num_entries) if values is None else values
    out = torch.zeros(adj.shape, dtype=values.dtype)
    return out.index_put_((adj.row, adj.col.long()), values, accumulate=True)


def test_structure_counts_every_parallel_edge_and_loop():
    edges = multigraph_edges()
    adj = CSRAdjacency.from_edge_index(edges, 7, 7)
    expected = torch.zeros(7, 7).index_put_((edges[1], edges[0]), torch.ones(10), accumulate=True)
    assert torch.equal(dense(adj), expected)
    assert adj.degree().tolist() == [2, 3, 3, 1, 1, 0, 0]
    assert torch.equal(edges[1][adj.perm], adj.row)  # perm maps entries back to edges
    assert torch.equal(edges[0][adj.perm], adj.col.long())
    assert adj.crow.dtype == torch.int32


def test_entry_values_follow_the_edges():
    edges = multigraph_edges()
    weight = torch.arange(1.0, 11.0)
    adj = CSRAdjacency.from_edge_index(edges, 7, 7)
    expected = torch.zeros(7, 7).index_put_((edges[1], edges[0]), weight, accumulate=True)
    assert torch.equal(dense(adj, adj.entry_values(weight)), expected)


def test_transpose_is_the_transposed_matrix_and_maps_entries():
    adj = CSRAdjacency.from_edge_index(multigraph_edges(), 7, 8)
    values = torch.rand(adj.num_entries)
    transpose = adj.transpose()
    assert transpose.shape == (8, 7)
    assert torch.equal(dense(transpose, values[transpose.perm]), dense(adj, values).t())
    assert adj.transpose() is transpose  # built once


def test_row_prefix_and_resize():
    adj = CSRAdjacency.from_edge_index(multigraph_edges(), 7, 7)
    prefix = adj.row_prefix(3, 7)
    assert torch.equal(dense(prefix), dense(adj)[:3])
    bigger = resized(adj, 9, 10)
    assert bigger.shape == (9, 10)
    assert torch.equal(dense(bigger)[:7, :7], dense(adj))
    with pytest.raises(ValueError, match="rows beyond it hold entries"):
        resized(adj, 2, 7)
    with pytest.raises(ValueError, match="source 6"):
        resized(adj, 7, 5)


def test_cache_lives_on_the_tensor_and_is_dropped_after_an_in_place_change():
    edges = multigraph_edges()
    first = adjacency_of(edges, 7, 7)
    assert adjacency_of(edges, 7, 7) is first
    assert adjacency_of(edges, 9, 7).shape == (9, 7)  # resized from the same sort
    assert adjacency_of(edges.clone(), 7, 7) is not first
    edges[0, 0] = 3
    assert adjacency_of(edges, 7, 7) is not first
    assert "csr" in tensor_cache(edges)


def test_grouping_is_stable_and_skipped_for_grouped_edges():
    # Unsorted edges: a stable sort by row; edges grouped by row already: none.
    edges = multigraph_edges()
    adj = CSRAdjacency.from_edge_index(edges, 7, 7)
    order = torch.argsort(edges[1], stable=True)
    assert torch.equal(adj.perm.long(), order)
    grouped = CSRAdjacency.from_edge_index(edges[:, order], 7, 7)
    assert torch.equal(grouped.perm.long(), torch.arange(10))
    assert torch.equal(grouped.col, adj.col) and torch.equal(grouped.crow, adj.crow)


def test_cache_and_products_work_on_inference_tensors():
    # Lightning's test/predict loops build batches under torch.inference_mode: no version counter.
    with torch.inference_mode():
        edges = multigraph_edges()
        first = adjacency_of(edges, 7, 7)
        assert adjacency_of(edges, 7, 7) is first
        assert first.num_entries == edges.size(1)


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_counting_order_is_the_stable_sort(dtype):
    keys = torch.randint(0, 50, (1000,), generator=torch.Generator().manual_seed(3)).to(dtype)
    offsets, order = _kernels.counting_order(keys, 60)  # keys 50..59 absent: empty runs
    assert torch.equal(order, torch.sort(keys, stable=True).indices)
    counts = torch.bincount(keys.long(), minlength=60)
    assert torch.equal(offsets, torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not installed")
def test_the_counting_transpose_equals_the_sorted_one(monkeypatch):
    """Once a sampler's kernels are loaded, unsorted edges are ordered by a counting pass
    instead of ``torch.sort``: the same structure, entry for entry."""
    built = {}
    for loaded in (False, True):
        monkeypatch.setattr(_kernels, "loaded", lambda loaded=loaded: loaded)
        edges = multigraph_edges()[
            :, torch.randperm(10, generator=torch.Generator().manual_seed(1))
        ]
        adj = CSRAdjacency.from_edge_index(edges, 7, 8, grouped=False)
        built[loaded] = (adj, adj.transpose())
    for sorted_one, counted in zip(built[False], built[True], strict=True):
        for name in ("crow", "col", "perm"):
            assert torch.equal(getattr(sorted_one, name), getattr(counted, name)), name
            assert getattr(sorted_one, name).dtype == getattr(counted, name).dtype, name
