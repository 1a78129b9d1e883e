"""Vectorised neighbour sampler and single-process ``NeighborLoader`` (PyG layout)."""

import pytest
import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import k_hop_subgraph, trim_to_layer

from lightning_gnn_dist.data import _kernels
from lightning_gnn_dist.data.sampler import InEdges, NeighborSampler, use_compiled
from lightning_gnn_dist.loaders.graph_store import LocalGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from tests.helpers import random_graph


class SAGE(torch.nn.Module):
    """Two or three SAGE layers; ``trim`` uses PyG's ``trim_to_layer`` like its examples."""

    def __init__(self, widths, trim=False):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            SAGEConv(a, b) for a, b in zip(widths, widths[1:], strict=False)
        )
        self.trim = trim

    def forward(self, x, edge_index, num_nodes=None, num_edges=None):
        for i, conv in enumerate(self.convs):
            if self.trim and num_nodes is not None:
                x, edge_index, _ = trim_to_layer(i, num_nodes, num_edges, x, edge_index)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


@pytest.fixture(scope="module")
def graph():
    return random_graph(300, 1500, seed=4, features=6)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_full_fanout_is_the_exact_k_hop_neighbourhood(graph, hops):
    loader = NeighborLoader(LocalGraphStore(graph), [-1] * hops, graph.train_mask, batch_size=20)
    for batch in loader:
        seeds = batch.n_id[: batch.batch_size]
        subset, _, _, edge_mask = k_hop_subgraph(seeds, hops, graph.edge_index, num_nodes=300)
        assert sorted(batch.n_id.tolist()) == sorted(subset.tolist())
        assert batch.n_id.unique().numel() == batch.n_id.numel()
        # Every edge into a vertex at distance < hops, and nothing else.
        inner, *_ = k_hop_subgraph(seeds, hops - 1, graph.edge_index, num_nodes=300)
        expected = graph.edge_index[:, edge_mask]
        expected = expected[:, torch.isin(expected[1], inner)]
        got = batch.n_id[batch.edge_index]
        assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, expected.t().tolist()))
        assert batch.num_sampled_nodes[0] == batch.batch_size == batch.input_id.numel()
        assert sum(batch.num_sampled_nodes) == batch.num_nodes
        assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)
        assert torch.equal(batch.x, graph.x[batch.n_id]) and torch.equal(
            batch.y, graph.y[batch.n_id]
        )


@pytest.mark.parametrize("trim", [False, True])
def test_seed_outputs_equal_full_graph_outputs(graph, trim):
    torch.manual_seed(0)
    model = SAGE([6, 16, 16, 3], trim=trim)
    full = model(graph.x, graph.edge_index)
    loader = NeighborLoader(LocalGraphStore(graph), [-1, -1, -1], graph.train_mask, batch_size=32)
    seen = 0
    for batch in loader:
        out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
        assert torch.allclose(
            out[: batch.batch_size], full[batch.n_id[: batch.batch_size]], atol=1e-5
        )
        seen += batch.batch_size
    assert seen == int(graph.train_mask.sum())


def test_trim_to_layer_works_with_finite_fanout(graph):
    torch.manual_seed(0)
    plain, trimmed = SAGE([6, 8, 3]), SAGE([6, 8, 3], trim=True)
    trimmed.load_state_dict(plain.state_dict())
    batch = next(
        iter(NeighborLoader(LocalGraphStore(graph), [4, 3], graph.train_mask, batch_size=25))
    )
    args = (batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    n = batch.batch_size
    assert torch.allclose(plain(*args)[:n], trimmed(*args)[:n], atol=1e-6)
    # The first hop's edges all end at seeds.
    assert int(batch.edge_index[1, : batch.num_sampled_edges[0]].max()) < n


def _inclusion_z_scores(graph, fanout, replace, draws=400):
    """Per in-edge: (observed − expected) / sd of how often it is sampled over ``draws`` streams."""
    num_nodes = graph.num_nodes
    in_edges = InEdges.from_edge_index(graph.edge_index, num_nodes)
    targets = torch.arange(num_nodes).repeat(draws)
    streams = torch.arange(draws).repeat_interleave(num_nodes)
    counts, src = in_edges.sample(targets, fanout, streams, replace)
    dst = torch.repeat_interleave(targets, counts)
    picked = torch.bincount(dst * num_nodes + src, minlength=num_nodes * num_nodes).double()
    src_all, dst_all = graph.edge_index
    degree = torch.bincount(dst_all, minlength=num_nodes).double()[dst_all]
    observed = picked[dst_all * num_nodes + src_all]
    if replace:  # fanout independent draws, each uniform over the in-edges
        p, n = 1.0 / degree, draws * fanout
    else:  # each in-edge kept with probability min(1, fanout / degree)
        p, n = (fanout / degree).clamp(max=1.0), draws
    sd = (n * p * (1 - p)).sqrt()
    certain = sd == 0
    assert torch.equal(observed[certain], (n * p)[certain])
    return ((observed - n * p) / sd)[~certain], counts, dst, src


@pytest.mark.parametrize(("fanout", "replace"), [(2, False), (4, False), (10, False), (4, True)])
def test_each_neighbour_is_drawn_with_the_right_probability(fanout, replace):
    # In-degrees 8..25: the all-neighbour, key-sort and distinct-draw paths are all used.
    graph = random_graph(60, 900, seed=7, self_loops=False)
    z, counts, dst, src = _inclusion_z_scores(graph, fanout=fanout, replace=replace)
    assert z.numel() > 100
    # Fixed seeds make this deterministic; a biased sampler shifts the mean or widens the spread.
    assert abs(float(z.mean())) < 0.2
    assert 0.8 < float(z.std()) < 1.2
    assert float(z.abs().max()) < 4.5
    if not replace:  # a subset: no in-edge twice per draw
        keys = torch.repeat_interleave(torch.arange(counts.numel()), counts) * 10_000 + src
        assert keys.unique().numel() == keys.numel()
        assert int(counts.max()) <= fanout
    else:
        assert set(counts.unique().tolist()) <= {0, fanout}


def test_draws_are_reproducible_per_seed_epoch_and_rank(graph):
    store = LocalGraphStore(graph)

    def edges(seed, epoch):
        loader = NeighborLoader(
            store, [3, 2], graph.train_mask, batch_size=40, shuffle=True, seed=seed
        )
        loader.set_epoch(epoch)
        return [b.n_id[b.edge_index] for b in loader]

    first = edges(0, 0)
    assert all(torch.equal(a, b) for a, b in zip(first, edges(0, 0), strict=True))
    assert not all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, edges(0, 1), strict=True)
    )
    assert not all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, edges(1, 0), strict=True)
    )


@pytest.mark.parametrize(
    ("count", "steps", "sizes"), [(10, None, [4, 3, 3]), (10, 5, [2] * 5), (3, 5, [1] * 5)]
)
def test_steps_rule_uses_every_seed_once(count, steps, sizes):
    graph = random_graph(20, 40, seed=1, features=2)
    loader = NeighborLoader(
        LocalGraphStore(graph),
        [2],
        torch.arange(count),
        batch_size=4,
        shuffle=True,
        num_steps=steps,
    )
    batches = loader.batches()
    assert [b.numel() for b in batches] == sizes == [b.batch_size for b in loader]
    used = torch.cat(batches)
    assert set(used.tolist()) == set(range(count))
    if count >= len(sizes):
        assert used.numel() == count


def test_bad_arguments_are_refused(graph):
    with pytest.raises(ValueError, match="num_neighbors"):
        NeighborSampler([0])
    with pytest.raises(ValueError, match="batch_size"):
        NeighborLoader(LocalGraphStore(graph), [2], graph.train_mask, batch_size=0)
    with pytest.raises(ValueError, match="no seed vertices"):
        NeighborLoader(LocalGraphStore(graph), [2], torch.zeros(300, dtype=torch.bool), num_steps=2)


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("fanouts", [[2, 2], [5, 3], [40, 4], [-1, 3]])
@pytest.mark.parametrize("replace", [False, True])
def test_compiled_kernels_give_the_torch_samples(fanouts, replace):
    # A multigraph (parallel edges, repeated loops) with some vertices of in-degree > 4 · fanout
    # (the distinct-draws path), some between fanout and 4 · fanout (the key path) and isolated ones.
    data = random_graph(200, 4000, seed=9, parallel_edges=True)
    in_edges = InEdges.from_edge_index(data.edge_index, 200)
    sampler = NeighborSampler(fanouts, replace)
    seeds = torch.arange(0, 200, 3)
    runs = []
    for compiled in (True, False):
        use_compiled(compiled)
        try:
            runs.append(
                sampler.sample(
                    seeds, 99, lambda f, k, s: in_edges.sample(f, k, s, replace), num_ids=200
                )
            )
        finally:
            use_compiled(True)
    (a, b) = runs
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert a.num_sampled_nodes == b.num_sampled_nodes
    # the table relabelling equals the sort-based one
    plain = sampler.sample(seeds, 99, lambda f, k, s: in_edges.sample(f, k, s, replace))
    assert torch.equal(plain.n_id, a.n_id) and torch.equal(plain.edge_index, a.edge_index)


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("fanout", [2, 5, 40])
def test_the_compiled_edge_draw_reads_sources_and_edges_in_one_pass(fanout):
    """``sample_edges`` reads each chosen in-edge's source and edge position inside the kernel:
    the draw of the positions, then both gathered; every edge leads from its source to its
    target."""
    data = random_graph(200, 4000, seed=9, parallel_edges=True)
    in_edges = InEdges.from_edge_index(data.edge_index, 200)
    targets = torch.arange(0, 200, 3)
    counts, src, edge = in_edges.sample_edges(targets, fanout, 99)
    positions = torch.arange(in_edges.src.numel())
    expected_counts, chosen = in_edges._select(targets, fanout, 99, False, positions)
    assert torch.equal(counts, expected_counts)
    assert torch.equal(src, in_edges.src[chosen]) and torch.equal(edge, in_edges.edge[chosen])
    assert torch.equal(data.edge_index[0][edge], src)
    assert torch.equal(data.edge_index[1][edge], torch.repeat_interleave(targets, counts))


_KERNEL_RUN = """
import torch
from lightning_gnn_dist.data import _kernels
colptr, src = torch.tensor([0, 2, 5]), torch.tensor([0, 1, 0, 1, 1])
_kernels.sample_without_replacement(colptr, src, torch.arange(5), torch.arange(2), 0,
                                    torch.tensor([0, 1]), 3, 2, 4)
print(len(_kernels._SAMPLE.stats.cache_hits))
"""


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not installed")
def test_compiled_kernels_load_from_the_disk_cache_in_the_next_process(tmp_path):
    """Issue 31: the sampler's kernel was a closure over its helpers, so numba keyed its cache
    on the pickled helper dispatchers, which differ in every process: every process compiled
    it again (seconds of every run's first epoch) and added a cache entry. A second process
    now loads it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", _KERNEL_RUN], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs == [["0"], ["1"]]
