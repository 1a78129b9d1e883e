"""Differential matrix (issue 18): every exact mode × every layer configuration its kind accepts
(``nn.layers.LAYER_TABLE``) × {simple graph, multigraph}, at 1–4 ranks, gives the PyG layer's
output and gradients (input and parameters) on the whole graph within 1e-5.

Modes: ``p2p``, ``broadcast`` and ``cached`` at bound 0 (vertex partition), ``cd-0`` (vertex cut),
``subgraph`` (a batch view of a sampled vertex set, against PyG on the induced subgraph) and
``neighbor`` (one batch of every owned vertex with fan-out −1 on every hop, seeds' outputs
against full-graph outputs). The multigraph has parallel edges, repeated self loops and isolated
vertices. One forked gloo run per world size and graph evaluates every cell (fork start-up
dominates); the per-cell tests read its results. ``p2p`` also sends exactly the rows the
partition metrics predict.
"""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import (
    BatchNorm,
    DiffGroupNorm,
    EdgeConv,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GraphConv,
    LEConv,
    LGConv,
    MFConv,
    ResGatedGraphConv,
    SAGEConv,
    SimpleConv,
    TransformerConv,
)
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models import GCN as PyGGCN
from torch_geometric.nn.models import GraphSAGE as PyGGraphSAGE
from torch_geometric.utils import subgraph

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from lightning_gnn_dist.loaders.subgraph import batch_partition, complete_batch_partition
from lightning_gnn_dist.nn import conv as dist_conv
from lightning_gnn_dist.nn import distribute, fused, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.layers import refusal
from lightning_gnn_dist.nn.sampled import SampledBatchContext
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, D_IN, D_OUT, WORLD_SIZES = 26, 5, 4, (1, 2, 3, 4)


class ConvThenNorm(nn.Module):
    def __init__(self, norm: nn.Module):
        super().__init__()
        self.conv, self.norm = SAGEConv(D_IN, D_OUT), norm

    def forward(self, x, edge_index):
        return self.norm(self.conv(x, edge_index))


def _gin(norm: bool = False):
    mlp = nn.Sequential(nn.Linear(D_IN, 8), nn.ReLU(), nn.Linear(8, D_OUT))
    if norm:  # statistics over the owned rows only: GINConv is called bipartite
        mlp.insert(1, nn.BatchNorm1d(8))
    return GINConv(mlp, train_eps=True)


def _edge_conv(aggr):
    return EdgeConv(nn.Sequential(nn.Linear(2 * D_IN, D_OUT), nn.Tanh()), aggr=aggr)


CONFIGS = {
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
    "graphconv-max": lambda: GraphConv(D_IN, D_OUT, aggr="max"),
    "gin": _gin,
    "gin-batchnorm": lambda: _gin(norm=True),
    "simple-sum": lambda: SimpleConv(),
    "simple-mean-cat": lambda: SimpleConv(aggr="mean", combine_root="cat"),
    "simple-max-self-loop": lambda: SimpleConv(aggr="max", combine_root="self_loop"),
    "resgated": lambda: ResGatedGraphConv(D_IN, D_OUT),
    "edgeconv-max": lambda: _edge_conv("max"),
    "edgeconv-mean": lambda: _edge_conv("mean"),
    "leconv": lambda: LEConv(D_IN, D_OUT),
    "mfconv": lambda: MFConv(D_IN, D_OUT, max_degree=3),
    "lgconv": lambda: LGConv(normalize=False),
    "transformer": lambda: TransformerConv(D_IN, D_OUT, heads=2),
    "transformer-mean-no-root": lambda: TransformerConv(
        D_IN, D_OUT, heads=2, concat=False, root_weight=False
    ),
    "transformer-beta": lambda: TransformerConv(D_IN, D_OUT, heads=2, beta=True),
    "sage-batchnorm": lambda: ConvThenNorm(nn.BatchNorm1d(D_OUT)),
    "sage-syncbatchnorm": lambda: ConvThenNorm(nn.SyncBatchNorm(D_OUT)),
    "sage-pyg-batchnorm": lambda: ConvThenNorm(BatchNorm(D_OUT, momentum=None)),
    "sage-diffgroupnorm": lambda: ConvThenNorm(DiffGroupNorm(D_OUT, groups=2)),
    # PyG's own model classes, as a user writes them
    "pyg-graphsage-batchnorm1d": lambda: PyGGraphSAGE(
        D_IN, 6, num_layers=2, out_channels=D_OUT, norm=nn.BatchNorm1d(6)
    ),
    "pyg-gcn-batch-norm": lambda: PyGGCN(
        D_IN, 6, num_layers=2, out_channels=D_OUT, norm="batch_norm"
    ),
    "pyg-gcn": lambda: PyGGCN(D_IN, 6, num_layers=2, out_channels=D_OUT),
}

REPRESENTATIVES = (
    *("gcn", "gcn-no-self-loops", "sage-max", "graphconv", "gin", "simple-mean-cat"),
    *("resgated", "edgeconv-max", "leconv", "mfconv", "lgconv", "gat-heads-concat", "gatv2"),
    *("transformer", "sage-batchnorm", "sage-syncbatchnorm", "sage-pyg-batchnorm"),
    *("sage-diffgroupnorm", "pyg-gcn-batch-norm"),
)
"""One configuration per layer class (and PyG model): what ``broadcast``, ``cached`` and
``subgraph`` run. Their exchange moves whole rows whatever the layer, so the layer's options
are covered by ``p2p``; ``cd-0`` and ``neighbor``, whose exactness depends on the layer's
aggregation and degrees, run every configuration."""
EVERY_CONFIGURATION = ("p2p", "cd-0", "neighbor")

MODES = {  # mode → kind of the layer table
    "p2p": "vertex",
    "broadcast": "vertex",
    "cached": "vertex",
    "subgraph": "vertex",
    "cd-0": "vertex-cut",
    "neighbor": "neighbor",
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


def simple_graph() -> Data:
    """Random directed graph without parallel edges (single self loops, isolated vertices)."""
    data = random_graph(N, 60, seed=4, features=D_IN)
    return Data(x=data.x, edge_index=data.edge_index, num_nodes=N)


GRAPHS = {"simple": simple_graph, "multigraph": multigraph}
SUBGRAPH = torch.sort(torch.randperm(N, generator=torch.Generator().manual_seed(2))[:17]).values


def assignment(world_size: int) -> np.ndarray:
    parts = np.random.default_rng(world_size).integers(0, world_size, N)
    parts[:world_size] = np.arange(world_size)  # no part left empty
    return parts


def make_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    model = CONFIGS[name]()
    with torch.no_grad():  # non-trivial values for parameters PyG initialises to zero
        for p in model.parameters():
            p.add_(torch.rand(p.shape) * 0.2)
    return model


@functools.cache
def hops(name: str) -> int:
    return sum(isinstance(m, MessagePassing) for m in make_model(name).modules())


@functools.cache
def cells(mode: str) -> list[str]:
    """The configurations ``mode`` runs: accepted by its kind; in ``neighbor`` mode without
    batch norms (their statistics are the batch's, synchronised over ranks, not the graph's:
    ``tests/lightning/test_neighbor_training.py``)."""
    kind = MODES[mode]
    accepted = []
    for name in CONFIGS if mode in EVERY_CONFIGURATION else REPRESENTATIVES:
        modules = list(make_model(name).modules())
        if any(refusal(m, kind) is not None for m in modules):
            continue
        if kind == "neighbor" and any(
            isinstance(m, nn.modules.batchnorm._BatchNorm) for m in modules
        ):
            continue
        accepted.append(name)
    return accepted


def loss_weights(width: int) -> torch.Tensor:
    return torch.arange(N * width, dtype=torch.float32).view(N, width).sin()


@functools.cache
def reference(graph: str, name: str, induced: bool = False):
    """Single-process PyG: output ``[N, d]`` (rows outside the subgraph zero), input gradient
    ``[N, D_IN]`` and parameter gradients of ``Σ out · loss_weights``."""
    data = GRAPHS[graph]()
    model = make_model(name)
    rows, edge_index = torch.arange(N), data.edge_index
    if induced:
        rows = SUBGRAPH
        edge_index, _ = subgraph(SUBGRAPH, data.edge_index, relabel_nodes=True, num_nodes=N)
    x = data.x[rows].clone().requires_grad_()
    out = model(x, edge_index)
    (out * loss_weights(out.size(1))[rows]).sum().backward()
    full_out = torch.zeros(N, out.size(1)).index_copy_(0, rows, out.detach())
    x_grad = torch.zeros(N, D_IN).index_copy_(0, rows, x.grad)
    return full_out.numpy(), x_grad.numpy(), _grads(model)


def _grads(model: nn.Module) -> dict[str, np.ndarray]:
    # A parameter unused by the configuration (e.g. GAT's bias when concat=False) has no grad.
    return {
        k: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy()
        for k, p in model.named_parameters()
    }


def _run_cell(model, context, x, edge_index, x_ids, out_rows, out_ids, out_scale=None):
    """Forward and backward of one cell on this rank; gradients summed over ranks."""
    x = x.clone().requires_grad_()
    counted = mock.Mock(wraps=fused.spmm)  # the CSR products of the fused paths (issue 19)
    attention = mock.Mock(wraps=dist_conv.gat_rows)  # GATConv over a part's CSR
    with (
        use_graph_context(context),
        mock.patch.object(fused, "spmm", counted),
        mock.patch.object(dist_conv, "spmm", counted),
        mock.patch.object(dist_conv, "gat_rows", attention),
    ):
        out = model(x, edge_index)
    out = out[:out_rows]
    weights = loss_weights(out.size(1))[out_ids]
    if out_scale is not None:
        weights = weights * out_scale.unsqueeze(-1)
    (out * weights).sum().backward()
    grads = {k: torch.from_numpy(g) for k, g in _grads(model).items()}
    grads["x"] = torch.zeros(N, D_IN).index_add_(0, x_ids, x.grad)
    flat = torch.cat([g.reshape(-1) for g in grads.values()])
    torch.distributed.all_reduce(flat)  # one collective per cell: they dominate at 4 ranks
    summed = dict(zip(grads, torch.split(flat, [g.numel() for g in grads.values()]), strict=True))
    return {
        "ids": out_ids.numpy(),
        "out": out.detach().numpy(),
        "grads": {k: summed[k].view_as(g).numpy() for k, g in grads.items()},
        "traffic": context.exchange.counter.as_dicts(),
        "csr_products": counted.call_count,
        "gat_rows": attention.call_count,
    }


def _rank(rank, world_size, graph):
    data = GRAPHS[graph]()
    part = list(build_local_partitions(data, assignment(world_size), world_size))[rank]
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    cut = list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))[rank]
    view, _ = complete_batch_partition(batch_partition(part, SUBGRAPH))
    store = PartitionedGraphStore(part)
    results = {}
    for mode in MODES:
        for name in cells(mode):
            model = distribute(make_model(name), (MODES[mode],))
            if mode in ("p2p", "broadcast", "cached"):
                options = {"staleness_bound": 0} if mode == "cached" else {}
                context = make_graph_context(part, make_exchange(mode, part, **options))
                context.exchange.begin_round(0)  # a training round (cached: bound 0 sends)
                args = (part.x, part.edge_index, part.global_ids, part.num_owned, part.global_ids)
                result = _run_cell(model, context, *args)
            elif mode == "subgraph":
                context = make_graph_context(view, make_exchange("p2p", view))
                args = (view.x, view.edge_index, view.global_ids, view.num_owned, view.global_ids)
                result = _run_cell(model, context, *args)
            elif mode == "cd-0":
                context = make_graph_context(cut, make_exchange("cd-0", cut))
                args = (cut.x, cut.edge_index, cut.global_ids, cut.num_owned, cut.global_ids)
                result = _run_cell(model, context, *args, out_scale=cut.is_root.float())
            else:
                mask = torch.ones(part.num_owned, dtype=torch.bool)
                loader = NeighborLoader(store, [-1] * hops(name), mask, batch_size=N, num_steps=1)
                batch = next(iter(loader))
                context = SampledBatchContext.from_batch(batch)
                seeds = batch.n_id[: batch.batch_size]
                args = (batch.x, batch.edge_index, batch.n_id, batch.batch_size, seeds)
                result = _run_cell(model, context, *args)
            results[(mode, name)] = result
    return results


RUNS = [("multigraph", size) for size in WORLD_SIZES] + [("simple", 3)]
"""(graph, world size) of the forked runs: the multigraph at 1–4 ranks, the simple graph at 3."""


@pytest.fixture(scope="module")
def distributed_runs():
    for graph in GRAPHS:  # PyG builds each layer class's code once: do it before forking
        for name in CONFIGS:
            reference(graph, name)
            reference(graph, name, induced=True)
    return {(graph, size): run_ranks(_rank, size, graph, timeout=300) for graph, size in RUNS}


def test_the_graphs_are_what_they_claim():
    data = multigraph()
    keys = data.edge_index[0] * N + data.edge_index[1]
    assert keys.unique().numel() < keys.numel()  # parallel edges survive loading
    loops = data.edge_index[0] == data.edge_index[1]
    assert int(loops.sum()) > int(data.edge_index[0][loops].unique().numel())
    assert set(range(N - 3, N)).isdisjoint(data.edge_index.flatten().tolist())
    simple = simple_graph()
    keys = simple.edge_index[0] * N + simple.edge_index[1]
    assert keys.unique().numel() == keys.numel()
    assert (simple.edge_index[0] == simple.edge_index[1]).any()


def test_every_mode_runs_most_configurations():
    assert len(cells("p2p")) == len(CONFIGS)
    assert set(REPRESENTATIVES) <= set(CONFIGS) and len(cells("cached")) == len(REPRESENTATIVES)
    assert {"gcn", "sage-max", "graphconv-max", "sage-batchnorm"} <= set(cells("cd-0"))
    assert not {"gat-heads-concat", "mfconv", "simple-max-self-loop"} & set(cells("cd-0"))
    assert {"gcn", "pyg-gcn", "gat-heads-concat", "mfconv"} <= set(cells("neighbor"))


@functools.cache
def _metrics(graph: str, world_size: int):
    return partition_metrics(GRAPHS[graph](), assignment(world_size), world_size)


def _mismatches(mode, name, graph, world_size, results) -> list[str]:
    """What differs from PyG in one cell (empty when exact)."""
    ref_out, ref_x_grad, ref_grads = reference(graph, name, induced=mode == "subgraph")
    checks = [
        (f"output rank {r}", res["out"], ref_out[res["ids"]]) for r, res in enumerate(results)
    ]
    grads = results[0]["grads"]  # summed over ranks: the same on every rank
    checks.append(("input grad", grads["x"], ref_x_grad))
    checks += [(key, grads[key], grad) for key, grad in ref_grads.items()]
    problems = []
    for what, actual, expected in checks:
        if actual.shape != expected.shape or not np.allclose(
            actual, expected, rtol=1e-5, atol=1e-5
        ):
            error = np.abs(actual - expected).max() if actual.shape == expected.shape else "shape"
            problems.append(f"{name}: {what} differs (max {error})")
    if mode == "p2p":  # each rank sends exactly the rows the partition predicts
        metrics = _metrics(graph, world_size)
        for rank, result in enumerate(results):
            sent = [t for t in result["traffic"] if t["direction"] == "forward"]
            if sum(t["rows_sent"] for t in sent) != int(metrics.send_rows[rank]) * len(sent):
                problems.append(f"{name}: rank {rank} sent other rows than predicted")
            if world_size > 1 and len(sent) != hops(name):  # one exchange per layer
                problems.append(f"{name}: {len(sent)} forward exchanges, {hops(name)} layers")
    return problems


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("graph", "world_size"), RUNS, ids=[f"{g}-{w}" for g, w in RUNS])
def test_every_accepted_layer_equals_pyg(mode, graph, world_size, distributed_runs):
    """One cell per configuration ``cells(mode)`` lists: output, input and parameter gradients
    within 1e-5 of single-process PyG."""
    runs = distributed_runs[(graph, world_size)]
    problems = []
    for name in cells(mode):
        problems += _mismatches(mode, name, graph, world_size, [r[(mode, name)] for r in runs])
    assert not problems, "\n".join(problems)


def fused_configuration(name: str) -> bool:
    """Whether ``name`` holds a layer whose aggregation has a CSR fast path (``DistGCNConv``,
    ``DistSAGEConv`` with sum/mean, and the unchanged layers of ``fused.FUSED_LAYERS``)."""
    return any(
        isinstance(m, MessagePassing)
        and fused._fused_base(type(m)) is not None
        and m.aggr in ("sum", "add", "mean")
        for m in make_model(name).modules()
    )


@pytest.mark.parametrize("mode", ["p2p", "broadcast", "cached", "subgraph"])
def test_whole_part_gat_layers_run_on_the_csr(mode, distributed_runs):
    """The GAT cells above compare ``gat_rows`` (``[E, heads]`` attention over a part's CSR,
    no ``[E, heads, C]`` messages) with PyG's ``GATConv``: every ``GATConv`` configuration ran
    it on every rank, and no other configuration did."""
    names = [name for name in cells(mode) if type(make_model(name)) is GATConv]
    every = {"gat-heads-concat", "gat-heads-mean", "gat-no-self-loops"}
    assert (every if mode == "p2p" else {"gat-heads-concat"}) <= set(names), names
    _assert_only_these_ran(mode, names, "gat_rows", distributed_runs)


@pytest.mark.parametrize("mode", list(MODES))
def test_the_matrix_runs_the_fused_paths(mode, distributed_runs):
    """The cells compare the CSR-product paths (distributed models) with PyG's scatter path
    (the reference models are plain PyG): every configuration with a fusable layer ran at least
    one CSR product on every rank that holds vertices, and the others none."""
    names = [name for name in cells(mode) if fused_configuration(name)]
    assert {"gcn", "graphconv", "gin"} <= set(names), names
    _assert_only_these_ran(mode, names, "csr_products", distributed_runs)


def _assert_only_these_ran(mode: str, names: list[str], calls: str, distributed_runs) -> None:
    """Every cell of ``names`` made ``calls`` (a counted function) on every rank of every run,
    and every other cell of ``mode`` none."""
    for (graph, size), runs in distributed_runs.items():
        for name in cells(mode):
            counts = [run[(mode, name)][calls] for run in runs]
            if name in names:
                assert min(counts) > 0, (mode, name, graph, size, counts)
            else:
                assert max(counts) == 0, (mode, name, graph, size, counts)
