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
