"""Differential matrix of edge weights and edge features (issue 30): every mode × every weighted
or edge-featured layer configuration the mode accepts × {simple graph, multigraph} gives the
PyG layer's output and gradients (input and parameters) on the whole graph within 1e-5, at 1–4
ranks; every configuration a mode refuses is refused by name.

The graphs are those of ``test_differential.py`` with an ``edge_weight [E]`` (positive, every
parallel edge and repeated self loop its own value) and an ``edge_attr [E, 3]``, partitioned
with their edges (``LocalPartition.edge_attrs``, ``VertexCutPart.edge_attrs``). Modes: ``p2p``,
``broadcast``, ``hierarchical``, ``cached`` (bound 0), ``rdm`` (its layers only), ``cd-0``,
``subgraph`` (against PyG on the induced subgraph) and ``neighbor`` (one fan-out −1 batch of
every owned vertex). A weighted ``GCNConv`` on a neighbour batch needs the global weighted
degrees: ``neighbor`` runs it with the batch as the loader builds it (refused by name unless the
batch carries ``global_gcn_weight_terms``), ``neighbor+terms`` with the terms every owner computes
(``data.graph.gcn_weight_terms``). Vertex partitions move no byte of an edge attribute: the
forward exchanges are one per layer, of the predicted rows, as wide as the layer input.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import (
    CGConv,
    GATConv,
    GATv2Conv,
    GCNConv,
    GENConv,
    GINEConv,
    GMMConv,
    GraphConv,
    LEConv,
    LGConv,
    NNConv,
    ResGatedGraphConv,
    SimpleConv,
    TransformerConv,
)
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import subgraph

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.graph import gcn_weight_terms
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.loaders.neighbor import NeighborLoader
from lightning_gnn_dist.loaders.subgraph import batch_partition, complete_batch_partition
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.conv import _Distributed
from lightning_gnn_dist.nn.layers import refusal
from lightning_gnn_dist.nn.rdm import layer_spec
from lightning_gnn_dist.nn.sampled import SampledBatchContext
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.vertex_cut import vertex_cut_metrics
from tests.distributed import run_ranks
from tests.nn import test_differential as base

N, D_IN, D_OUT, D_EDGE = base.N, base.D_IN, base.D_OUT, 3


class EdgeModel(nn.Module):
    """``convs`` called in a chain with the graph's edge input (ReLU between them)."""

    def __init__(self, *convs: nn.Module):
        super().__init__()
        self.convs = nn.ModuleList(convs)

    def forward(self, x, edge_index, edge_values):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index, edge_values)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def _mlp(width_in, width_out, norm=False):
    layers = [nn.Linear(width_in, 8), nn.ReLU(), nn.Linear(8, width_out)]
    if norm:
        layers.insert(1, nn.BatchNorm1d(8))
    return nn.Sequential(*layers)


def _nnconv(aggr):
    return NNConv(D_IN, D_OUT, nn.Sequential(nn.Linear(D_EDGE, D_IN * D_OUT)), aggr=aggr)


WEIGHTED = {  # configurations called with edge_weight [E]
    "gcn": lambda: GCNConv(D_IN, D_OUT),
    "gcn-widening": lambda: GCNConv(D_IN, 2 * D_IN),
    "gcn-improved": lambda: GCNConv(D_IN, D_OUT, improved=True),
    "gcn-no-self-loops": lambda: GCNConv(D_IN, D_OUT, add_self_loops=False),
    "gcn-no-normalize": lambda: GCNConv(D_IN, D_OUT, normalize=False),
    "gcn-2-layers": lambda: (GCNConv(D_IN, 6), GCNConv(6, D_OUT, improved=True)),
    "gcn-graphconv": lambda: (GCNConv(D_IN, 6), GraphConv(6, D_OUT, aggr="mean")),
    "graphconv": lambda: GraphConv(D_IN, D_OUT),
    "graphconv-mean": lambda: GraphConv(D_IN, D_OUT, aggr="mean"),
    "graphconv-max": lambda: GraphConv(D_IN, D_OUT, aggr="max"),
    "leconv": lambda: LEConv(D_IN, D_OUT),
    "lgconv": lambda: LGConv(normalize=False),
    "simple-mean": lambda: SimpleConv(aggr="mean"),
}
FEATURED = {  # configurations called with edge_attr [E, 3]
    "gat": lambda: GATConv(D_IN, D_OUT, heads=2, edge_dim=D_EDGE),
    "gat-no-self-loops": lambda: GATConv(
        D_IN, D_OUT, heads=2, edge_dim=D_EDGE, add_self_loops=False, concat=False
    ),
    "gatv2": lambda: GATv2Conv(D_IN, D_OUT, heads=2, edge_dim=D_EDGE),
    "transformer": lambda: TransformerConv(D_IN, D_OUT, heads=2, edge_dim=D_EDGE, beta=True),
    "gine": lambda: GINEConv(_mlp(D_IN, D_OUT), train_eps=True, edge_dim=D_EDGE),
    "gine-batchnorm": lambda: GINEConv(_mlp(D_IN, D_OUT, norm=True), edge_dim=D_EDGE),
    "nnconv-add": lambda: _nnconv("add"),
    "nnconv-mean": lambda: _nnconv("mean"),
    "nnconv-max": lambda: _nnconv("max"),
    "genconv": lambda: GENConv(D_IN, D_OUT, edge_dim=D_EDGE),  # softmax, MLP with BatchNorm
    "genconv-power-no-norm": lambda: GENConv(
        D_IN, D_OUT, aggr="power", learn_p=True, edge_dim=D_EDGE, norm=None, msg_norm=True
    ),
    "genconv-add": lambda: GENConv(D_IN, D_OUT, aggr="add", edge_dim=D_EDGE, norm=None),
    "cgconv": lambda: CGConv(D_IN, dim=D_EDGE, aggr="mean"),
    "cgconv-batchnorm": lambda: CGConv(D_IN, dim=D_EDGE, batch_norm=True),
    "gmmconv": lambda: GMMConv(D_IN, D_OUT, dim=D_EDGE, kernel_size=2),
    "resgated": lambda: ResGatedGraphConv(D_IN, D_OUT, edge_dim=D_EDGE),
}
CONFIGS = {
    **{f"w:{k}": v for k, v in WEIGHTED.items()},
    **{f"e:{k}": v for k, v in FEATURED.items()},
}

MODES = {  # mode → kind of the layer table
    "p2p": "vertex",
    "broadcast": "vertex",
    "hierarchical": "vertex",
    "cached": "vertex",
    "subgraph": "vertex",
    "rdm": "vertex",
    "cd-0": "vertex-cut",
    "neighbor": "neighbor",
    "neighbor+terms": "neighbor",
}
VERTEX_MODES = ("p2p", "broadcast", "hierarchical", "cached", "subgraph")
SUBSET = ("w:gcn", "w:gcn-2-layers", "w:graphconv-mean", "e:gat", "e:gine", "e:nnconv-mean")
SUBSET += ("e:genconv", "e:genconv-add")
"""What the 1- and 4-rank runs evaluate (2 and 3 ranks run every configuration)."""
RUNS = [("multigraph", 2, None), ("multigraph", 3, None), ("simple", 2, None)]
RUNS += [("multigraph", 1, SUBSET), ("multigraph", 4, SUBSET)]


def with_edge_inputs(data):
    gen = torch.Generator().manual_seed(5)
    num_edges = data.edge_index.size(1)
    data.edge_weight = torch.rand(num_edges, generator=gen) * 2 + 0.25
    data.edge_attr = torch.randn(num_edges, D_EDGE, generator=gen)
    return data


@functools.cache
def graph(name: str):
    return with_edge_inputs(base.GRAPHS[name]())


def edge_key(name: str) -> str:
    return "edge_weight" if name.startswith("w:") else "edge_attr"


def make_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    convs = CONFIGS[name]()
    model = EdgeModel(*(convs if isinstance(convs, tuple) else (convs,)))
    with torch.no_grad():  # non-trivial values for parameters PyG initialises to zero
        for p in model.parameters():
            p.add_(torch.rand(p.shape) * 0.2)
    return model


@functools.cache
def hops(name: str) -> int:
    return sum(isinstance(m, MessagePassing) for m in make_model(name).modules())


def refused_by(mode: str, name: str) -> str | None:
    """Why ``mode`` refuses configuration ``name`` before it runs (``None``: accepted)."""
    model = make_model(name)
    for qualified, module in model.named_modules():
        reason = refusal(module, MODES[mode])
        if reason is not None:
            return f"{type(module).__name__} {reason}"
        if mode == "rdm" and isinstance(module, MessagePassing):
            try:
                layer_spec(module, qualified)
            except NotImplementedError as error:
                return str(error)
    return None


def has_batch_norm(name: str) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in make_model(name).modules())


@functools.cache
def cells(mode: str, subset: tuple | None = None) -> list[str]:
    """The configurations ``mode`` runs (neighbour modes: without batch norms, whose statistics
    are the batch's; ``neighbor+terms``: the weighted GCNs only)."""
    names = [n for n in (subset or CONFIGS) if refused_by(mode, n) is None]
    if MODES[mode] == "neighbor":
        names = [n for n in names if not has_batch_norm(n)]
    if mode == "neighbor+terms":
        names = [n for n in names if n.startswith("w:gcn")]
    return names


def refused_cells(mode: str) -> list[str]:
    return [n for n in CONFIGS if refused_by(mode, n) is not None]


@functools.cache
def reference(graph_name: str, name: str, induced: bool = False):
    """Single-process PyG: output ``[N, d]`` (rows outside the subgraph zero), input gradient
    and parameter gradients of ``Σ out · loss_weights``."""
    data = graph(graph_name)
    model = make_model(name)
    rows, edge_index, values = torch.arange(N), data.edge_index, data[edge_key(name)]
    if induced:
        rows = base.SUBGRAPH
        edge_index, values = subgraph(
            rows, data.edge_index, values, relabel_nodes=True, num_nodes=N
        )
    x = data.x[rows].clone().requires_grad_()
    out = model(x, edge_index, values)
    (out * base.loss_weights(out.size(1))[rows]).sum().backward()
    full_out = torch.zeros(N, out.size(1)).index_copy_(0, rows, out.detach())
    x_grad = torch.zeros(N, D_IN).index_copy_(0, rows, x.grad)
    return full_out.numpy(), x_grad.numpy(), base._grads(model)


def _view_edges(part, batch: torch.Tensor) -> torch.Tensor:
    """``[E_part] bool``: the part's edges a subgraph batch view keeps, in order (the rule of
    ``loaders.subgraph.batch_partition``)."""
    owned_in = torch.isin(part.global_ids, batch)
    halo_in = torch.isin(part.halo_global_ids, batch)
    src, dst = part.edge_index
    return torch.cat([owned_in, halo_in])[src] & owned_in[dst]


def _batch_edge_ids(batch, data) -> torch.Tensor:
    """Dataset edge ids of a fan-out −1 neighbour batch's edges: ``batch.e_id`` when the loader
    sets it, else matched by endpoints (every parallel edge of a pair is in the batch once, and
    a layer's output does not depend on which of a pair's parallel edges holds which value)."""
    e_id = getattr(batch, "e_id", None)
    if e_id is not None:
        return e_id
    keys = data.edge_index[0] * N + data.edge_index[1]
    order = torch.argsort(keys, stable=True)
    sorted_keys = keys[order]
    b_src, b_dst = batch.n_id[batch.edge_index]
    batch_keys = b_src * N + b_dst
    batch_order = torch.argsort(batch_keys, stable=True)
    ordered = batch_keys[batch_order]
    first = torch.searchsorted(ordered, ordered)
    rank_in_pair = torch.arange(ordered.numel()) - first
    ids = torch.empty_like(batch_keys)
    ids[batch_order] = order[torch.searchsorted(sorted_keys, ordered) + rank_in_pair]
    return ids


def _run_cell(model, context, x, edge_index, values, x_ids, out_rows, out_ids, scale=None):
    x = x.clone().requires_grad_()
    with use_graph_context(context):
        out = model(x, edge_index, values)
    out = out[:out_rows]
    weights = base.loss_weights(out.size(1))[out_ids]
    if scale is not None:
        weights = weights * scale.unsqueeze(-1)
    (out * weights).sum().backward()
    grads = {k: torch.from_numpy(g) for k, g in base._grads(model).items()}
    grads["x"] = torch.zeros(N, D_IN).index_add_(0, x_ids, x.grad)
    flat = torch.cat([g.reshape(-1) for g in grads.values()])
    torch.distributed.all_reduce(flat)
    summed = dict(zip(grads, torch.split(flat, [g.numel() for g in grads.values()]), strict=True))
    return {
        "ids": out_ids.numpy(),
        "out": out.detach().numpy(),
        "grads": {k: summed[k].view_as(g).numpy() for k, g in grads.items()},
        "traffic": context.exchange.counter.as_dicts(),
        "setup": context.setup_counter.as_dicts(),
    }


def _rank(rank, world_size, graph_name, subset):
    data = graph(graph_name)
    part = list(build_local_partitions(data, base.assignment(world_size), world_size))[rank]
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    cut = list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))[rank]
    view, _ = complete_batch_partition(batch_partition(part, base.SUBGRAPH))
    kept = _view_edges(part, base.SUBGRAPH)
    store = PartitionedGraphStore(part)
    results = {}
    for mode in MODES:
        for name in cells(mode, subset):
            key = edge_key(name)
            model = distribute(make_model(name), (MODES[mode],))
            owned = (part.x, part.edge_index, part.edge_attrs[key], part.global_ids)
            owned += (part.num_owned, part.global_ids)
            try:
                if mode in ("p2p", "broadcast", "cached", "hierarchical", "rdm"):
                    options = {"staleness_bound": 0} if mode == "cached" else {}
                    if mode == "hierarchical":
                        options["ranks_per_node"] = 2 if world_size % 2 == 0 else 1
                    context = make_graph_context(part, make_exchange(mode, part, **options))
                    context.prepare(model)
                    context.exchange.begin_round(0)
                    result = _run_cell(model, context, *owned)
                elif mode == "subgraph":
                    context = make_graph_context(view, make_exchange("p2p", view))
                    args = (view.x, view.edge_index, part.edge_attrs[key][kept], view.global_ids)
                    result = _run_cell(model, context, *args, view.num_owned, view.global_ids)
                elif mode == "cd-0":
                    context = make_graph_context(cut, make_exchange("cd-0", cut))
                    args = (cut.x, cut.edge_index, cut.edge_attrs[key], cut.global_ids)
                    args += (cut.num_owned, cut.global_ids)
                    result = _run_cell(model, context, *args, scale=cut.is_root.float())
                else:
                    mask = torch.ones(part.num_owned, dtype=torch.bool)
                    loader = NeighborLoader(store, [-1] * hops(name), mask, batch_size=N)
                    batch = next(iter(loader))
                    batch[key] = data[key][_batch_edge_ids(batch, data)]
                    if mode == "neighbor+terms":  # what every vertex's owner computes
                        terms = gcn_weight_terms(data.edge_index, data.edge_weight, N)
                        batch.global_gcn_weight_terms = {key: terms[batch.n_id]}
                    context = SampledBatchContext.from_batch(batch)
                    seeds = batch.n_id[: batch.batch_size]
                    args = (batch.x, batch.edge_index, batch[key], batch.n_id)
                    result = _run_cell(model, context, *args, batch.batch_size, seeds)
            except NotImplementedError as error:  # refused at the call (a neighbour batch)
                torch.distributed.barrier()
                result = {"refused": str(error)}
            results[(mode, name)] = result
        for name in [] if subset else refused_cells(mode):
            try:
                model = distribute(make_model(name), (MODES[mode],))
                if mode == "rdm":  # refused while binding the layers (before any collective)
                    make_graph_context(part, make_exchange("rdm", part)).prepare(model)
                results[(mode, name)] = {"refused": None}
            except (ValueError, NotImplementedError) as error:
                results[(mode, name)] = {"refused": str(error)}
    return results


@pytest.fixture(scope="module")
def runs():
    for graph_name in base.GRAPHS:  # PyG builds each layer class's code once: before forking
        for name in CONFIGS:
            reference(graph_name, name)
            reference(graph_name, name, induced=True)
    return {(g, size): run_ranks(_rank, size, g, subset, timeout=300) for g, size, subset in RUNS}


def test_the_edge_inputs_are_what_they_claim():
    data = graph("multigraph")
    loops = data.edge_index[0] == data.edge_index[1]
    looped = data.edge_index[0][loops]
    repeated = looped[torch.bincount(looped).gt(1)[looped]]
    assert repeated.numel() > 0  # repeated self loops, each with its own weight
    assert data.edge_weight[loops].unique().numel() == int(loops.sum())
    assert data.edge_attr.shape == (data.edge_index.size(1), D_EDGE)


def test_each_mode_runs_and_refuses_what_the_issue_says():
    assert set(cells("p2p")) == set(CONFIGS)
    assert {"w:gcn", "w:gcn-2-layers", "w:graphconv-max", "e:gine", "e:nnconv-mean"} <= set(
        cells("cd-0")
    )
    assert {"e:genconv-add", "e:gmmconv", "e:cgconv-batchnorm"} <= set(cells("cd-0"))
    assert not {"e:gat", "e:gatv2", "e:transformer", "e:genconv"} & set(cells("cd-0"))
    assert set(cells("rdm")) == {
        f"w:{k}" for k in WEIGHTED if k.startswith(("gcn", "graphconv")) and k != "graphconv-max"
    }
    assert {"e:gat", "e:genconv-add", "w:gcn"} <= set(cells("neighbor"))


def _mismatches(mode, name, graph_name, results) -> list[str]:
    ref_out, ref_x_grad, ref_grads = reference(graph_name, name, induced=mode == "subgraph")
    checks = [
        (f"output rank {r}", res["out"], ref_out[res["ids"]]) for r, res in enumerate(results)
    ]
    grads = results[0]["grads"]
    checks.append(("input grad", grads["x"], ref_x_grad))
    checks += [(key, grads[key], grad) for key, grad in ref_grads.items()]
    problems = []
    for what, actual, expected in checks:
        if actual.shape != expected.shape or not np.allclose(
            actual, expected, rtol=1e-5, atol=1e-5
        ):
            error = np.abs(actual - expected).max() if actual.shape == expected.shape else "shape"
            problems.append(f"{mode} {name}: {what} differs (max {error})")
    return problems


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("graph_name", "world_size", "subset"), RUNS, ids=[f"{g}-{w}" for g, w, _ in RUNS]
)
def test_every_accepted_configuration_equals_pyg(mode, graph_name, world_size, subset, runs):
    results = runs[(graph_name, world_size)]
    problems = []
    for name in cells(mode, subset):
        outcome = [r[(mode, name)] for r in results]
        if "refused" in outcome[0]:
            # Refused at the call: a weighted GCN on a neighbour batch without the terms.
            assert mode == "neighbor" and name.startswith("w:gcn"), outcome[0]
            assert all(
                "GCNConv: a weighted GCN on a neighbour batch" in o["refused"] for o in outcome
            )
            continue
        problems += _mismatches(mode, name, graph_name, outcome)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_refused_configuration_is_refused_by_name(mode, runs):
    """Every configuration a mode does not accept fails before it runs, with a message that
    names the layer class and the reason."""
    results = runs[("multigraph", 2)]
    for name in refused_cells(mode):
        reason = refused_by(mode, name)
        layer = reason.split(" ")[0]
        for rank_results in results:
            message = rank_results[(mode, name)]["refused"]
            assert message is not None and message.startswith(layer), (mode, name, message)


def test_vertex_partitions_move_no_edge_attribute_and_the_predicted_rows(runs):
    """p2p sends, per layer, exactly the rows the partition metrics predict, as wide as the
    layer's input rows (an edge attribute adds no byte); every vertex-partition mode makes one
    forward exchange per layer; a weighted GCN adds one width-1 exchange of the predicted rows
    per weight tensor and configuration, in ``setup_counter``; cd-0 synchronises the rows the
    vertex-cut metrics predict, the weighted degrees' set-up included."""
    for (graph_name, world_size), results in runs.items():
        data = graph(graph_name)
        metrics = partition_metrics(data, base.assignment(world_size), world_size)
        edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
        cut_rows = vertex_cut_metrics(data, edge_parts, world_size, seed=1).send_rows
        for rank, rank_results in enumerate(results):
            for (mode, name), result in rank_results.items():
                if "refused" in result or world_size == 1:
                    continue
                sent = [t for t in result["traffic"] if t["direction"] == "forward"]
                if mode in VERTEX_MODES:
                    assert len(sent) == hops(name), (mode, name, sent)
                if mode == "p2p":
                    widths = _input_widths(name)
                    for t, width in zip(sent, widths, strict=True):
                        assert t["rows_sent"] == int(metrics.send_rows[rank]), (name, t)
                        assert t["bytes_sent"] == t["rows_sent"] * width * 4, (name, t, width)
                    setup = result["setup"]
                    gcn_configs = _weighted_gcn_configs(name)
                    assert len(setup) == (1 if gcn_configs else 0), (name, setup)
                    for t in setup:
                        assert t["calls"] == gcn_configs and t["width"] == 1
                        assert t["rows_sent"] == int(metrics.send_rows[rank]) * gcn_configs
                if mode == "cd-0":
                    for t in sent + result["setup"]:
                        assert t["rows_sent"] == int(cut_rows[rank]) * t["calls"], (name, t)
                    calls = {t["layer"]: t["calls"] for t in result["setup"]}
                    assert calls.get("gcn weighted degree", 0) == _weighted_gcn_configs(name)
                    assert calls.get("gcn self loop", 0) == _weighted_gcn_configs(name, True)


def _input_widths(name: str) -> list[int]:
    """Width of the rows each message-passing layer of ``name`` exchanges, in call order (the
    layer input's width: the distributed layers say it, the hooked ones exchange ``x``)."""
    model = distribute(make_model(name))
    return [
        module.exchange_width if isinstance(module, _Distributed) else D_IN
        for module in model.modules()
        if isinstance(module, MessagePassing)
    ]


def _weighted_gcn_configs(name: str, self_loops_only: bool = False) -> int:
    """Distinct ``(add_self_loops, improved)`` normalising configurations of the weighted
    ``GCNConv`` layers of ``name`` (one degree exchange each; on a vertex cut those adding self
    loops also find each vertex's kept loop, ``self_loops_only``)."""
    if not name.startswith("w:"):
        return 0
    return len(
        {
            (m.add_self_loops, m.improved)
            for m in make_model(name).modules()
            if isinstance(m, GCNConv) and m.normalize and (m.add_self_loops or not self_loops_only)
        }
    )


def _one_part_context():
    data = graph("multigraph")
    part = next(build_local_partitions(data, np.zeros(N, dtype=np.int64), 1))
    return data, part, make_graph_context(part, make_exchange("p2p", part))


def test_one_part_needs_no_process_group():
    """A weighted GCN in a one-part context (no process group) equals PyG."""
    data, part, context = _one_part_context()
    model = make_model("w:gcn-2-layers")
    expected = model(data.x, data.edge_index, data.edge_weight)
    distribute(model)
    with use_graph_context(context):
        out = model(part.x, part.edge_index, part.edge_attrs["edge_weight"])
    order = torch.argsort(part.global_ids)
    torch.testing.assert_close(out[order], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("weight", "error", "message"),
    [
        (lambda w: w[:-1], ValueError, r"^GCNConv: edge_weight must be a float tensor of shape \["),
        (lambda w: w.long(), ValueError, r"got \(\d+,\)"),
        (lambda w: w.unsqueeze(1), ValueError, r"got \(\d+, 1\)"),
        (lambda w: w.clone().requires_grad_(), NotImplementedError, "requires grad"),
    ],
)
def test_a_bad_edge_weight_is_refused_by_value(weight, error, message):
    _, part, context = _one_part_context()
    model = distribute(make_model("w:gcn"))
    with use_graph_context(context), pytest.raises(error, match=message):
        model(part.x, part.edge_index, weight(part.edge_attrs["edge_weight"]))
