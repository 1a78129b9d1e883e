"""cd-0 on a vertex cut reproduces single-process PyG forward and backward, and moves exactly the
rows the vertex-cut metrics predict; cd-r moves its bins; 0c moves nothing."""

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GraphConv, SAGEConv

from lightning_gnn_dist.comm.exchange import make_exchange
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.vertex_cut import vertex_cut_metrics
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, D_IN, D_HID, D_OUT = 40, 6, 8, 3
LAYERS = {
    "gcn": lambda a, b: GCNConv(a, b),
    "gcn-widening": lambda a, b: GCNConv(a, 3 * b),
    "sage-mean": lambda a, b: SAGEConv(a, b),
    "sage-sum": lambda a, b: SAGEConv(a, b, aggr="sum"),
    "sage-max": lambda a, b: SAGEConv(a, b, aggr="max"),
    "graphconv": lambda a, b: GraphConv(a, b),
    "gat": lambda a, b: GATConv(a, b, heads=2, concat=False),
}


class TwoLayer(nn.Module):
    def __init__(self, kind):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = LAYERS[kind](D_IN, D_HID)
        self.conv2 = LAYERS[kind](self.conv1.out_channels, D_OUT)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def _graph():
    return random_graph(N, 4 * N, 3, directed=True, self_loops=True, features=D_IN)


def _weights(n, width):
    return torch.arange(n * width).view(n, width).float().sin()


def _reference(kind):
    data = _graph()
    model = TwoLayer(kind)
    out = model(data.x, data.edge_index)
    (out * _weights(N, out.size(1))).sum().backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _rank(rank, world_size, kind, mode):
    data = _graph()
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    part = list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))[rank]
    model = distribute(TwoLayer(kind))
    ctx = make_graph_context(part, make_exchange(mode, part))
    with use_graph_context(ctx):
        out = model(part.x, part.edge_index)
    # every copy computes its vertex's row; the loss counts root copies only
    root = part.is_root.unsqueeze(-1)
    (out * _weights(N, out.size(1))[part.global_ids] * root).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    for g in grads.values():
        torch.distributed.all_reduce(g)
    return {
        "ids": part.global_ids.numpy(),
        "out": out.detach().numpy(),
        "grads": {k: v.numpy() for k, v in grads.items()},
        "traffic": ctx.exchange.counter.as_dicts(),
    }


@pytest.mark.parametrize(
    "kind", ["gcn", "gcn-widening", "sage-mean", "sage-sum", "sage-max", "graphconv"]
)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_cd0_equals_pyg_and_counts_the_predicted_rows(kind, world_size):
    ref_out, ref_grads = _reference(kind)
    results = run_ranks(_rank, world_size, kind, "cd-0")
    for result in results:  # every copy, root or leaf, holds its vertex's exact output row
        np.testing.assert_allclose(
            result["out"], ref_out[result["ids"]].numpy(), rtol=1e-5, atol=1e-5
        )
    for key, grad in ref_grads.items():
        np.testing.assert_allclose(results[0]["grads"][key], grad.numpy(), rtol=1e-5, atol=1e-5)
    data = _graph()
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    predicted = vertex_cut_metrics(data, edge_parts, world_size, seed=1).send_rows
    if world_size > 1:
        assert predicted.sum() > 0
    for rank, result in enumerate(results):
        traffic = {(t["layer"], t["direction"]): t for t in result["traffic"]}
        # conv1's backward synchronises only when its aggregate depends on parameters
        assert {("conv1", "forward"), ("conv2", "forward"), ("conv2", "backward")} <= set(traffic)
        for (layer, direction), t in traffic.items():
            assert t["rows_sent"] == predicted[rank], (layer, direction)
            assert t["bytes_sent"] == predicted[rank] * t["width"] * 4
