"""Differential test: every layer configuration the README lists as supported, distributed at 1–4
ranks on a random multigraph (parallel edges, parallel self loops, isolated vertices), gives the
PyG layer's output and gradients (input and parameters) on the whole graph within 1e-5, and each
rank sends exactly the rows the partition metrics predict.

One forked gloo run per world size evaluates every configuration (fork start-up dominates);
the per-configuration tests read its results.
"""

import functools

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import (
    APPNP,
    BatchNorm,
    ChebConv,
    DiffGroupNorm,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GraphConv,
    LGConv,
    SAGEConv,
    SGConv,
    TransformerConv,
)
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models import GCN as PyGGCN
from torch_geometric.nn.models import GraphSAGE as PyGGraphSAGE

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.nn import GraphContext, distribute, use_graph_context
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.distributed import run_ranks

N, D_IN, D_OUT, WORLD_SIZES = 26, 5, 4, (1, 2, 3, 4)


class SageThenNorm(nn.Module):
    def __init__(self, norm: nn.Module):
        super().__init__()
        self.conv, self.norm = SAGEConv(D_IN, D_OUT), norm

    def forward(self, x, edge_index):
        return self.norm(self.conv(x, edge_index))


def _gin():
    mlp = nn.Sequential(nn.Linear(D_IN, 8), nn.ReLU(), nn.Linear(8, D_OUT))
    return GINConv(mlp, train_eps=True)


LAYERS = {
    "gcn": lambda: GCNConv(D_IN, D_OUT),
    "gcn-widening": lambda: GCNConv(D_IN, 2 * D_IN),
    "gcn-improved": lambda: GCNConv(D_IN, D_OUT, improved=True),
    "gcn-no-self-loops": lambda: GCNConv(D_IN, D_OUT, add_self_loops=False),
    "gcn-improved-no-self-loops": lambda: GCNConv(D_IN, D_OUT, improved=True, add_self_loops=False),
    "gcn-no-normalize": lambda: GCNConv(D_IN, D_OUT, normalize=False),
    "sage-mean": lambda: SAGEConv(D_IN, D_OUT),
    "sage-max": lambda: SAGEConv(D_IN, D_OUT, aggr="max"),
    "sage-sum": lambda: SAGEConv(D_IN, D_OUT, aggr="sum"),
    "sage-mean-no-root": lambda: SAGEConv(D_IN, D_OUT, root_weight=False),
    "sage-max-no-root": lambda: SAGEConv(D_IN, D_OUT, aggr="max", root_weight=False),
    "sage-sum-normalize": lambda: SAGEConv(D_IN, D_OUT, aggr="sum", normalize=True),
    "sage-mean-normalize-no-root": lambda: SAGEConv(D_IN, D_OUT, normalize=True, root_weight=False),
    "gat-heads-concat": lambda: GATConv(D_IN, D_OUT, heads=3),
    "gat-heads-mean": lambda: GATConv(D_IN, D_OUT, heads=3, concat=False),
    "gat-no-self-loops": lambda: GATConv(D_IN, D_OUT, heads=2, add_self_loops=False),
    "gatv2": lambda: GATv2Conv(D_IN, D_OUT, heads=2),
    "gatv2-no-self-loops-mean": lambda: GATv2Conv(
        D_IN, D_OUT, heads=2, concat=False, add_self_loops=False
    ),
    "graphconv": lambda: GraphConv(D_IN, D_OUT),
    "graphconv-mean": lambda: GraphConv(D_IN, D_OUT, aggr="mean"),
    "gin": _gin,
    "transformer": lambda: TransformerConv(D_IN, D_OUT, heads=2),
    "transformer-mean-no-root": lambda: TransformerConv(
        D_IN, D_OUT, heads=2, concat=False, root_weight=False
    ),
    "transformer-beta": lambda: TransformerConv(D_IN, D_OUT, heads=2, beta=True),
    "sage-batchnorm": lambda: SageThenNorm(nn.BatchNorm1d(D_OUT)),
    "sage-pyg-batchnorm": lambda: SageThenNorm(BatchNorm(D_OUT, momentum=None)),
    "sage-diffgroupnorm": lambda: SageThenNorm(DiffGroupNorm(D_OUT, groups=2)),
    # PyG's own model classes, as a user writes them (the GraphSAGE with BatchNorm)
    "pyg-graphsage-batchnorm1d": lambda: PyGGraphSAGE(
        D_IN, 6, num_layers=2, out_channels=D_OUT, norm=nn.BatchNorm1d(6)
    ),
    "pyg-gcn-batch-norm": lambda: PyGGCN(
        D_IN, 6, num_layers=2, out_channels=D_OUT, norm="batch_norm"
    ),
}


def multigraph() -> Data:
    """Random directed multigraph: every third edge doubled, self loops (some doubled), and the
    last three vertices isolated."""
    gen = torch.Generator().manual_seed(11)
    edges = torch.randint(0, N - 3, (2, 70), generator=gen)
    loops = torch.tensor([0, 1, 2, 2, 5]).repeat(2, 1)
    edge_index = torch.cat([edges, edges[:, ::3], loops], dim=1)
    data = canonicalize(Data(edge_index=edge_index, num_nodes=N))
    data.x = torch.randn(N, D_IN, generator=gen)
    return data


def assignment(world_size: int) -> np.ndarray:
    parts = np.random.default_rng(world_size).integers(0, world_size, N)
    parts[:world_size] = np.arange(world_size)  # no part left empty
    return parts


def make_layer(name: str) -> nn.Module:
    torch.manual_seed(0)
    layer = LAYERS[name]()
    with torch.no_grad():  # non-trivial values for parameters PyG initialises to zero
        for p in layer.parameters():
            p.add_(torch.rand(p.shape) * 0.2)
    return layer


def loss_weights(width: int) -> torch.Tensor:
    return torch.arange(N * width, dtype=torch.float32).view(N, width).sin()


@functools.cache
def reference(name: str):
    data = multigraph()
    layer = make_layer(name)
    x = data.x.clone().requires_grad_()
    out = layer(x, data.edge_index)
    (out * loss_weights(out.size(1))).sum().backward()
    return out.detach().numpy(), x.grad.numpy(), _grads(layer)


def _grads(layer: nn.Module) -> dict[str, np.ndarray]:
    # A parameter unused by the configuration (e.g. GAT's bias when concat=False) has no grad.
    return {
        k: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy()
        for k, p in layer.named_parameters()
    }


def _rank(rank, world_size):
    data = multigraph()
    part = list(build_local_partitions(data, assignment(world_size), world_size))[rank]
    results = {}
    for name in LAYERS:
        layer = distribute(make_layer(name))
        context = GraphContext(part, make_exchange("p2p", part))
        x = part.x.clone().requires_grad_()
        with use_graph_context(context):
            out = layer(x, part.edge_index)
        (out * loss_weights(out.size(1))[part.global_ids]).sum().backward()
        grads = {k: torch.from_numpy(g.copy()) for k, g in _grads(layer).items()}
        for grad in grads.values():
            torch.distributed.all_reduce(grad)
        results[name] = {
            "out": out.detach().numpy(),
            "x_grad": x.grad.numpy(),
            "grads": {k: g.numpy() for k, g in grads.items()},
            "traffic": context.exchange.counter.as_dicts(),
        }
    return part.global_ids.numpy(), results


@pytest.fixture(scope="module")
def distributed_runs():
    for name in LAYERS:  # PyG builds each layer class's code once: do it before forking
        reference(name)
    return {size: run_ranks(_rank, size, timeout=120) for size in WORLD_SIZES}


def test_the_graph_is_a_multigraph_with_isolated_vertices():
    data = multigraph()
    keys = data.edge_index[0] * N + data.edge_index[1]
    assert keys.unique().numel() < keys.numel()  # parallel edges survive loading
    loops = data.edge_index[0] == data.edge_index[1]
    assert int(loops.sum()) > int(data.edge_index[0][loops].unique().numel())
    assert set(range(N - 3, N)).isdisjoint(data.edge_index.flatten().tolist())


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_distributed_layer_equals_pyg(name, world_size, distributed_runs):
    ref_out, ref_x_grad, ref_grads = reference(name)
    metrics = partition_metrics(multigraph(), assignment(world_size), world_size)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    for rank, (ids, results) in enumerate(distributed_runs[world_size]):
        result = results[name]
        np.testing.assert_allclose(result["out"], ref_out[ids], **tol, err_msg="output")
        np.testing.assert_allclose(result["x_grad"], ref_x_grad[ids], **tol, err_msg="input grad")
        for key, grad in ref_grads.items():
            np.testing.assert_allclose(result["grads"][key], grad, **tol, err_msg=key)
        sent = [t for t in result["traffic"] if t["direction"] == "forward"]
        assert sum(t["rows_sent"] for t in sent) == int(metrics.send_rows[rank]) * len(sent)
        if world_size > 1:  # one forward exchange per message-passing layer
            layers = sum(isinstance(m, MessagePassing) for m in make_layer(name).modules())
            assert len(sent) == layers


@pytest.mark.parametrize(
    ("layer", "option"),
    [
        (lambda: ChebConv(D_IN, D_OUT, K=2), "normalization='sym'"),
        (lambda: SGConv(D_IN, D_OUT, K=2), "K=2"),
        (lambda: APPNP(K=3, alpha=0.1), "K=3"),
        (lambda: LGConv(), "normalize=True"),
    ],
)
def test_layers_that_cannot_be_exact_are_refused(layer, option):
    model = nn.ModuleDict({"hop": layer()})
    with pytest.raises(ValueError, match=r"\(hop\) .*cannot be exact"):
        distribute(model)


def test_layers_without_the_refused_option_are_accepted():
    distribute(LGConv(normalize=False))
