"""Distributed layers on a direct gloo group reproduce single-process PyG forward and backward."""

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GraphConv, SAGEConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.nn import GraphContext, distribute, use_graph_context
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, D_IN, D_HID, D_OUT = 50, 6, 8, 3


class TwoLayer(nn.Module):
    def __init__(self, kind):
        super().__init__()
        torch.manual_seed(0)
        make = {
            "gcn": lambda a, b: GCNConv(a, b),
            "gcn-widening": lambda a, b: GCNConv(a, 2 * b),
            "sage": lambda a, b: SAGEConv(a, b),
            "gat": lambda a, b: GATConv(a, b, heads=2, concat=False),
            "graphconv": lambda a, b: GraphConv(a, b),
        }[kind]
        self.conv1 = make(D_IN, D_HID)
        hidden = self.conv1.out_channels
        self.conv2 = make(hidden, D_OUT)
        self.kind = kind

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def _graph(seed):
    data = random_graph(N, 4 * N, seed, directed=True, self_loops=True, features=D_IN)
    assignment = np.random.default_rng(seed).integers(0, 3, N)
    return data, assignment


def _reference(kind, seed):
    data, _ = _graph(seed)
    model = TwoLayer(kind)
    out = model(data.x, data.edge_index)
    (out * torch.arange(out.numel()).view_as(out).float().sin()).sum().backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _rank(rank, world_size, kind, seed):
    data, assignment = _graph(seed)
    assignment = assignment % world_size
    part = list(build_local_partitions(data, assignment, world_size))[rank]
    model = distribute(TwoLayer(kind))
    ctx = GraphContext(part, make_exchange("p2p", part))
    with use_graph_context(ctx):
        out = model(part.x, part.edge_index)
    # same loss as the reference restricted to owned rows (global row order via global_ids)
    full = torch.arange(N * out.size(1)).view(N, -1).float().sin()
    (out * full[part.global_ids]).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    for g in grads.values():
        torch.distributed.all_reduce(g)
    return {
        "ids": part.global_ids.numpy(),
        "out": out.detach().numpy(),
        "grads": {k: v.numpy() for k, v in grads.items()},
        "traffic": ctx.exchange.counter.as_dicts(),
    }


@pytest.mark.parametrize("kind", ["gcn", "gcn-widening", "sage", "gat", "graphconv"])
@pytest.mark.parametrize("world_size", [1, 3])
def test_distributed_forward_backward_equals_pyg(kind, world_size):
    seed = 7
    ref_out, ref_grads = _reference(kind, seed)
    results = run_ranks(_rank, world_size, kind, seed)
    for result in results:
        np.testing.assert_allclose(
            result["out"], ref_out[result["ids"]].numpy(), rtol=1e-5, atol=1e-5
        )
    for key, grad in ref_grads.items():
        np.testing.assert_allclose(results[0]["grads"][key], grad.numpy(), rtol=1e-5, atol=1e-5)
    if world_size > 1:
        layers = {t["layer"] for t in results[0]["traffic"]}
        assert layers == {"conv1", "conv2"}


def test_layers_are_plain_pyg_without_context():
    data, _ = _graph(1)
    ref = TwoLayer("gcn")
    dist_model = distribute(TwoLayer("gcn"))
    assert type(dist_model.conv1).__name__ == "DistGCNConv"
    assert set(ref.state_dict()) == set(dist_model.state_dict())
    torch.testing.assert_close(ref(data.x, data.edge_index), dist_model(data.x, data.edge_index))
