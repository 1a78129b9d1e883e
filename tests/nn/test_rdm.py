"""``exchange="rdm"`` trains exactly like single-process PyG, and moves the bytes its plan predicts.

One forked gloo group per world size (1–4) runs every case: 5 epochs of Adam per order (every
3-layer order: one step, at 3 ranks), the loss of every epoch, the first step's gradients and the
final parameters compared with plain PyG within 1e-5; after every step the
bytes each rank moved per layer and direction (redistributions and panel exchanges) equal the
closed-form prediction of the order's plan. Graphs are multigraphs with repeated self loops,
parallel edges and isolated vertices, directed and undirected; parts are random and uneven (at 3
ranks one owns no row); widths are odd, so column blocks are uneven (and empty when a width is below the ranks).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, GraphConv, SAGEConv
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.rdm_plan import all_orders, plan_network
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, EPOCHS, LR = 36, 5, 0.01
LAYERS = {"gcn": GCNConv, "sage": SAGEConv, "graph": GraphConv}
MODELS = {  # layer kinds and widths (odd, below 4 at the output: empty column blocks at P = 4)
    "gcn": (("gcn", "gcn"), (5, 7, 3)),
    "sage": (("sage", "sage"), (5, 7, 3)),
    "graph": (("graph", "graph"), (5, 7, 3)),
    "gcn3": (("gcn", "gcn", "gcn"), (9, 4, 6, 3)),
    "mixed": (("sage", "gcn", "graph"), (5, 7, 6, 3)),
    "gcn_auto": (("gcn", "gcn"), (5, 4, 3)),  # two Pareto orders: dsds, sdsd
}


def _graph(directed: bool):
    data = random_graph(
        N, 110, seed=4, directed=directed, self_loops=True, features=5, parallel_edges=True
    )
    loops = torch.tensor([[3, 3, 3, 8], [3, 3, 3, 8]])  # repeated self loops
    data.edge_index = torch.cat([data.edge_index, loops], dim=1)
    if data.x.size(1) != 9:  # widest first layer of MODELS
        data.x = torch.cat([data.x, data.x[:, :4].sin()], dim=1)
    return data


class Net(torch.nn.Module):
    def __init__(self, model: str):
        super().__init__()
        kinds, dims = MODELS[model]
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList(
            LAYERS[k](dims[i], dims[i + 1]) for i, k in enumerate(kinds)
        )
        self.width = dims[0]

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return x


@functools.cache
def reference(model_name: str, directed: bool, input_grad: bool, epochs: int = EPOCHS):
    """Plain PyG on one process: losses per epoch, final parameters, first gradients (of the
    parameters and, with ``input_grad``, of the input)."""
    data = _graph(directed)
    model = Net(model_name)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x = data.x[:, : model.width].clone().requires_grad_(input_grad)
    losses, first_grads = [], None
    for _ in range(epochs):
        optimizer.zero_grad()
        out = model(x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        if first_grads is None:
            first_grads = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
            if input_grad:
                first_grads["x"] = x.grad.numpy().copy()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}, first_grads


def _train_case(rank, world_size, case):
    """Every order of ``case`` on this rank; returns losses, parameters, input gradient."""
    data = _graph(case["directed"])
    assignment = np.random.default_rng(world_size).integers(0, world_size, N)
    if world_size == 3:
        assignment[assignment == 1] = 0  # a rank without rows
    part = next(
        p for p in build_local_partitions(data, assignment, world_size) if p.part_id == rank
    )
    model = distribute(Net(case["model"]))
    auto = case["orders"] == ["auto"]
    option = "auto" if auto else "model"
    exchange = make_exchange(
        "rdm", part, rdm_order=option, replication=case["replication"], tuning_steps=1
    )
    context = make_graph_context(part, exchange)
    context.prepare(model)
    orders = case["orders"] if case["orders"] != "all" else all_orders(len(model.convs))
    orders = [exchange.order if o == "model" else o for o in orders]
    shapes = [s.shape for s in context.specs]
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    features = part.x[:, : model.width]
    if case["static"]:
        part.x = features  # the static feature matrix: the context recognises it
    else:
        features = features.clone()  # a new matrix: arrives row-sliced every step
    global_train = int(data.train_mask.sum())
    results = []
    for order in orders:
        model.load_state_dict(initial)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        if not auto:
            exchange.order = order
        losses, first_grads, used = [], None, []
        for epoch in range(case["epochs"]):
            exchange.begin_round(epoch)  # with rdm_order="auto": the order of this step
            used.append(exchange.order)
            optimizer.zero_grad()
            exchange.counter.reset()
            x = features.detach().requires_grad_(case["input_grad"])
            with use_graph_context(context):
                out = model(x, part.edge_index)
            mask = part.train_mask
            loss = F.cross_entropy(out[mask], part.y[mask], reduction="sum") / global_train
            loss.backward()
            params = list(model.parameters())
            flat = torch.cat([p.grad.flatten() for p in params] + [loss.detach().view(1)])
            torch.distributed.all_reduce(flat)  # gradients summed over ranks, and the loss
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
            losses.append(float(flat[-1]))
            if first_grads is None:
                first_grads = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
                if case["input_grad"]:
                    full = torch.zeros(N, model.width)
                    full[part.global_ids] = x.grad
                    torch.distributed.all_reduce(full)
                    first_grads["x"] = full.numpy()
            optimizer.step()
            _check_bytes(exchange, shapes, exchange.order, case["static"], case["input_grad"])
        params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        results.append(
            {
                "order": order,
                "losses": losses,
                "params": params,
                "grads": first_grads,
                "used": used,
                "report": exchange.order_report(),
            }
        )
    return results


def _check_bytes(exchange, shapes, order, static, input_grad):
    """Measured bytes per layer and direction == the closed form of the order's plan."""
    plans = plan_network(
        shapes, order, static_input=static, input_grad=input_grad, grad_to_rows=True
    )
    rank, layout = exchange.rank, exchange.layout
    predicted = {}
    for i, plan in enumerate(plans):
        name = f"convs.{i}"
        for direction, pas in (("forward", plan.forward), ("backward", plan.backward)):
            moved, gathered = layout.pass_elements(pas)
            predicted[(name, direction)] = int(moved[rank].sum()) * 4
            predicted[(name, f"{direction}-panel")] = int(gathered[rank].sum()) * 4
    measured = {(layer, d): t.bytes_sent for layer, d, t in exchange.counter.items()}
    for key in set(predicted) | set(measured):
        assert measured.get(key, 0) == predicted.get(key, 0), (order, key, measured, predicted)
    assert sum(measured.values()) == sum(
        int(b[rank].sum()) for _, _, b in exchange.counter.predicted_items()
    )


def _rank(rank, world_size, cases):
    return [_train_case(rank, world_size, case) for case in cases]


def _cases(world_size: int) -> list[dict]:
    def case(
        model, orders, directed=True, replication=None, input_grad=False, static=True, epochs=EPOCHS
    ):
        return {
            "epochs": epochs,
            "model": model,
            "orders": orders,
            "directed": directed,
            "replication": replication,
            "input_grad": input_grad,
            "static": static,
        }

    cases = [
        case("gcn", "all"),
        case("gcn", "all", directed=False),
        case("gcn3", ["model"]),
        case("sage", "all" if world_size in (1, 2) else ["model", "ssss", "ddsd", "sdds"]),
        case("graph", "all" if world_size in (1, 3) else ["model", "ssss", "dddd", "sdds"], False),
        case("mixed", ["model", "dsssdd", "ddssds"], input_grad=True, static=False),
        case("gcn", ["model", "sssd", "dddd"], input_grad=True),  # static, with its gradient
    ]
    smaller = {2: [1], 3: [1], 4: [2, 1]}.get(world_size, [])
    for r in smaller:
        cases.append(case("gcn", ["model", "dsds", "ssdd", "dddd"], directed=r != 1, replication=r))
    if world_size == 4:
        cases.append(
            case("mixed", ["model", "ssssss"], replication=2, input_grad=True, static=False)
        )
    if world_size in (2, 4):
        cases.append(case("gcn_auto", ["auto"], directed=world_size == 2))
    if world_size == 3:  # every 3-layer order, one step each (loss, gradients, bytes)
        cases.append(case("gcn3", "all", epochs=1))
    return cases


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_rdm_training_equals_single_process_pyg(world_size):
    cases = _cases(world_size)
    results_all = run_ranks(_rank, world_size, cases, timeout=240)
    for case, runs in zip(cases, results_all[0], strict=True):
        ref_losses, ref_params, ref_grads = reference(
            case["model"], case["directed"], case["input_grad"], case["epochs"]
        )
        assert len(runs) >= 1
        for run in runs:
            label = f"{case['model']} directed={case['directed']} R={case['replication']} {run['order']}"
            np.testing.assert_allclose(
                run["losses"], ref_losses, rtol=1e-5, atol=1e-5, err_msg=label
            )
            for key, value in ref_params.items():
                np.testing.assert_allclose(
                    run["params"][key], value, rtol=1e-5, atol=1e-5, err_msg=f"{label} {key}"
                )
            assert set(run["grads"]) == set(ref_grads)
            for key, value in ref_grads.items():  # the first step's gradients
                np.testing.assert_allclose(
                    run["grads"][key], value, rtol=1e-5, atol=1e-6, err_msg=f"{label} grad {key}"
                )
    for case, per_rank in zip(cases, zip(*results_all, strict=True), strict=True):
        if case["orders"] == ["auto"]:
            check_auto([runs[0] for runs in per_rank])


def check_auto(rank_runs):
    """rdm_order="auto": warm-up, one timed step per Pareto order, then the fastest, on every rank."""
    reports = [run["report"] for run in rank_runs]
    candidates = [c["order"] for c in reports[0]["pareto"]]  # sorted by the calibrated model
    assert sorted(candidates) == ["dsds", "sdsd"]
    used = rank_runs[0]["used"]
    assert used[:3] == [candidates[0], *candidates]
    times = {c["order"]: c["measured_seconds"] for c in reports[0]["pareto"]}
    assert all(len(t) == 1 and t[0] > 0 for t in times.values())
    fastest = min(candidates, key=lambda o: times[o][0])
    assert used[3:] == [fastest] * (EPOCHS - 3)
    assert all(r == reports[0] for r in reports)  # every rank measured and chose the same
    assert not reports[0]["tuning"] and reports[0]["order"] == fastest


class _Wrap(torch.nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x, edge_index):
        for layer in self.layers:
            x = layer(x, edge_index) if isinstance(layer, MessagePassing) else layer(x)
        return x


def _one_rank_context(model):
    data = _graph(True)
    part = next(build_local_partitions(data, np.zeros(N, dtype=np.int64), 1))
    context = make_graph_context(part, make_exchange("rdm", part, rdm_order="model"))
    return context, distribute(model), part


@pytest.mark.parametrize(
    ("layers", "match"),
    [
        ((GATConv(9, 3),), "GATConv .*layers.0.* is not a layer RDM can run exactly"),
        ((SAGEConv(9, 3, normalize=True),), "normalize=True"),
        ((SAGEConv(9, 3, aggr="max"),), "aggregates with 'max'"),
        ((GraphConv(9, 3, aggr="max"),), "aggregates with 'max'"),
        ((SAGEConv(9, 3, project=True),), "project=True"),
        ((GCNConv(-1, 3),), "lazy"),
        (
            (GCNConv(9, 4), torch.nn.BatchNorm1d(4), GCNConv(4, 3)),
            "BatchNorm .*layers.1.*batch norm",
        ),
    ],
)
def test_rdm_refuses_what_it_cannot_run_exactly(layers, match):
    context, model, _ = _one_rank_context(_Wrap(*layers))
    with pytest.raises((NotImplementedError, ValueError), match=match):
        context.prepare(model)


def test_rdm_refuses_models_it_cannot_chain():
    context, model, part = _one_rank_context(_Wrap(GCNConv(9, 4), GCNConv(5, 3)))
    with pytest.raises(ValueError, match="chain of convolutions: layers.0 returns 4 columns"):
        context.prepare(model)
    context, model, part = _one_rank_context(_Wrap(GCNConv(9, 4), GCNConv(4, 3)))
    context.prepare(model)
    with use_graph_context(context), pytest.raises(RuntimeError, match="ran out of order"):
        model.layers[1](torch.zeros(N, 4), part.edge_index)
    other = distribute(_Wrap(GCNConv(9, 4)))
    with use_graph_context(context), pytest.raises(RuntimeError, match="not one of the layers"):
        other.layers[0](part.x, part.edge_index)
    unprepared, model, part = _one_rank_context(_Wrap(GCNConv(9, 4)))
    with use_graph_context(unprepared), pytest.raises(RuntimeError, match="prepare"):
        model(part.x, part.edge_index)
