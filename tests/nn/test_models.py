"""Reference models: per-layer trimming on sampled batches gives the untrimmed seeds' rows."""

import pytest
import torch

from lightning_gnn_dist.loaders import NeighborLoader
from lightning_gnn_dist.loaders.graph_store import LocalGraphStore
from lightning_gnn_dist.nn import build_model
from tests.helpers import random_graph


@pytest.mark.parametrize("kind", ["sage", "gat", "gcn"])
def test_trimmed_forward_and_gradients_equal_untrimmed_on_the_seeds(kind):
    data = random_graph(300, 1500, seed=4, features=6, parallel_edges=True)
    loader = NeighborLoader(LocalGraphStore(data), [4, 3], torch.arange(0, 300, 7), batch_size=16)
    batch = next(iter(loader))
    b = batch.batch_size
    torch.manual_seed(0)
    model = build_model(kind, 6, 8, 3, dropout=0.0)
    results = []
    for counts in (
        {},
        {
            "num_sampled_nodes": batch.num_sampled_nodes,
            "num_sampled_edges": batch.num_sampled_edges,
        },
    ):
        model.zero_grad()
        out = model(batch.x, batch.edge_index, **counts)
        assert out.size(0) == (b if counts and kind != "gcn" else batch.num_nodes)
        out[:b].sin().sum().backward()
        results.append((out[:b].detach(), [p.grad.clone() for p in model.parameters()]))
    (full, full_grads), (trimmed, trimmed_grads) = results
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-5)
    for a, g in zip(trimmed_grads, full_grads, strict=True):
        torch.testing.assert_close(a, g, rtol=1e-5, atol=1e-5)


def test_hop_count_mismatch_is_refused():
    model = build_model("sage", 6, 8, 3)
    with pytest.raises(ValueError, match="2-layer model needs a batch sampled with 2 hops"):
        model(torch.ones(5, 6), torch.zeros(2, 0, dtype=torch.long), [1, 2, 1, 1], [1, 1, 1])


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_trimmed_models_run_in_a_sampled_batch_context(kind):
    """Issue 29, item 3: a neighbour step runs in the batch's complete context (what
    ``GNNStrategy`` enters); a model trimmed per hop passes bipartite inputs there, which the
    layers refused. Trimmed and untrimmed, the seeds' rows equal the context-free model's."""
    from lightning_gnn_dist.nn import use_graph_context
    from lightning_gnn_dist.nn.sampled import SampledBatchContext

    data = random_graph(300, 1500, seed=4, features=6)
    loader = NeighborLoader(LocalGraphStore(data), [4, 3], torch.arange(0, 300, 7), batch_size=16)
    batch = next(iter(loader))
    b, counts = batch.batch_size, (batch.num_sampled_nodes, batch.num_sampled_edges)
    torch.manual_seed(0)
    model = build_model(kind, 6, 8, 3, dropout=0.0)
    expected = model(batch.x, batch.edge_index)[:b]
    with use_graph_context(SampledBatchContext.from_batch(batch)):
        for trim in ((), counts):
            torch.testing.assert_close(model(batch.x, batch.edge_index, *trim)[:b], expected)


def test_trimmed_models_are_refused_where_layers_exchange_halo_rows():
    """A bipartite input cannot take halo rows (the edges index ``[owned | halo]`` rows of one
    tensor): refused by name instead of running PyG's layer on the owned rows."""
    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data.local import build_local_partitions
    from lightning_gnn_dist.nn import GraphContext, use_graph_context

    data = random_graph(30, 90, seed=1, features=6)
    (part,) = build_local_partitions(data, torch.zeros(30, dtype=torch.long).numpy(), 1)
    model = build_model("gat", 6, 8, 3)
    with use_graph_context(GraphContext(part, make_exchange("p2p", part))):
        with pytest.raises(NotImplementedError, match=r"GATConv \(convs.0\).*complete batches"):
            model(part.x, part.edge_index, [10, 10, 10], [30, 30])
