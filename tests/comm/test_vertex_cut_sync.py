"""Vertex-cut synchronisation: ``cd-0`` reproduces single-process PyG forward and backward (and 5
epochs of training: loss per epoch, final parameters) at 1–4 ranks and moves exactly the rows the
vertex-cut metrics predict; ``cd-r`` moves one bin per epoch and
converges to ``cd-0`` on constant inputs; ``0c`` moves nothing; mismatches are refused."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GraphConv, SAGEConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
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
EXACT_KINDS = ["gcn", "gcn-widening", "sage-mean", "sage-sum", "sage-max", "graphconv"]


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


def _parts(world_size):
    data = _graph()
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    return data, edge_parts, list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))


def _weights(n, width):
    return torch.arange(n * width).view(n, width).float().sin()


def _reference(kind):
    data = _graph()
    model = TwoLayer(kind)
    out = model(data.x, data.edge_index)
    (out * _weights(N, out.size(1))).sum().backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _run_model(part, kind, mode):
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


EPOCHS = 5
TRAINED_KINDS = ["gcn", "sage-mean"]


def _train(model, x, edge_index, y, train_mask, num_train, reduce_grads):
    """Full-batch Adam for EPOCHS epochs; loss = Σ CE over ``train_mask`` ÷ global count."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(x, edge_index)
        loss = F.cross_entropy(out[train_mask], y[train_mask], reduction="sum") / num_train
        loss.backward()
        losses.append(reduce_grads(model, loss.detach()))
        optimizer.step()
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _sum_over_ranks(model, loss):
    for p in model.parameters():
        torch.distributed.all_reduce(p.grad)
    torch.distributed.all_reduce(loss)
    return float(loss)


def _exact_rank(rank, world_size):
    part = _parts(world_size)[2][rank]
    results = {kind: _run_model(part, kind, "cd-0") for kind in EXACT_KINDS}
    num_train = int(_graph().train_mask.sum())
    for kind in TRAINED_KINDS:  # training through the synchronisation: 5 epochs of Adam
        model = distribute(TwoLayer(kind))
        ctx = make_graph_context(part, make_exchange("cd-0", part))
        with use_graph_context(ctx):
            results[kind]["training"] = _train(
                model, part.x, part.edge_index, part.y, part.train_mask, num_train, _sum_over_ranks
            )
    return results


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_cd0_equals_pyg_and_counts_the_predicted_rows(world_size):
    data, edge_parts, _ = _parts(world_size)
    metrics = vertex_cut_metrics(data, edge_parts, world_size, seed=1)
    predicted = metrics.send_rows
    assert (predicted.sum() > 0) == (world_size > 1)
    results = run_ranks(_exact_rank, world_size, timeout=120, pg_timeout=60)
    data = _graph()
    for kind in TRAINED_KINDS:  # loss per epoch and parameters after 5 epochs
        ref_losses, ref_params = _train(
            TwoLayer(kind),
            data.x,
            data.edge_index,
            data.y,
            data.train_mask,
            int(data.train_mask.sum()),
            lambda model, loss: float(loss),
        )
        losses, params = results[0][kind]["training"]
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-5, err_msg=kind)
        for key, value in ref_params.items():
            np.testing.assert_allclose(params[key], value, rtol=1e-5, atol=1e-5, err_msg=key)
    for kind in EXACT_KINDS:
        ref_out, ref_grads = _reference(kind)
        for result in (r[kind] for r in results):  # leaves hold the exact rows too
            np.testing.assert_allclose(
                result["out"], ref_out[result["ids"]].numpy(), rtol=1e-5, atol=1e-5, err_msg=kind
            )
        for key, grad in ref_grads.items():
            np.testing.assert_allclose(
                results[0][kind]["grads"][key], grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=kind
            )
        for rank, result in enumerate(r[kind] for r in results):
            traffic = {(t["layer"], t["direction"]): t for t in result["traffic"]}
            # conv1's backward synchronises only where its aggregate depends on parameters
            assert {("conv1", "forward"), ("conv2", "forward"), ("conv2", "backward")} <= set(
                traffic
            )
            for key, t in traffic.items():
                assert t["rows_sent"] == t["rows_received"] == predicted[rank], (kind, key)
                assert t["bytes_sent"] == predicted[rank] * t["width"] * 4
                assert t["messages_sent"] == metrics.send_messages[rank]


class OneSum(nn.Module):
    """One sum aggregation without parameters: its output is the synchronised sum."""

    def __init__(self):
        super().__init__()
        self.conv = GraphConv(D_IN, D_IN, aggr="add", bias=False)
        with torch.no_grad():
            self.conv.lin_rel.weight.copy_(torch.eye(D_IN))
            self.conv.lin_root.weight.zero_()

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def _approximate_rank(rank, world_size, delay):
    part = _parts(world_size)[2][rank]
    model = distribute(OneSum())
    exact_ctx = make_graph_context(part, make_exchange("cd-0", part))
    with use_graph_context(exact_ctx), torch.no_grad():
        exact = model(part.x, part.edge_index)
    none_ctx = make_graph_context(part, make_exchange("0c", part))
    with use_graph_context(none_ctx):
        local = model(part.x, part.edge_index).detach()
    result = {"exact": exact.numpy(), "local": local.numpy(), "root": part.is_root.numpy()}
    result["0c_traffic"] = none_ctx.exchange.counter.as_dicts()

    delayed = make_exchange(f"cd-{delay}", part)
    ctx = make_graph_context(part, delayed)
    outs, planned = [], []
    with use_graph_context(ctx):
        for step in range(3 * delay):
            if step == delay + 1:  # checkpoint mid-flight and resume on a fresh exchange
                state = delayed.state_dict()
                delayed = make_exchange(f"cd-{delay}", part)
                delayed.load_state_dict(state)
                delayed.counter = ctx.exchange.counter
                ctx.exchange = delayed
            outs.append(model(part.x, part.edge_index).detach().numpy())
            planned.append(delayed.planned_rows_sent(step))
        with torch.no_grad():  # evaluation: nothing moves, latest contributions apply
            evaluated = model(part.x, part.edge_index).numpy()
    delayed.close()  # bins still in flight complete before any rank leaves the group
    torch.distributed.barrier()
    traffic = ctx.exchange.counter.as_dicts()
    result.update(outs=outs, planned=planned, traffic=traffic, evaluated=evaluated)
    return result


@pytest.mark.parametrize("delay", [1, 2])
def test_cd_r_moves_one_bin_per_epoch_and_converges_and_0c_moves_nothing(delay):
    world_size = 3
    results = run_ranks(_approximate_rank, world_size, delay, timeout=120, pg_timeout=60)
    assert any(not np.allclose(r["local"], r["exact"]) for r in results)  # a cut matters
    for r in results:
        assert r["0c_traffic"] == []
        # roots see nothing remote for r epochs, leaves for 2r: the first outputs are 0c's
        np.testing.assert_allclose(r["outs"][0], r["local"], atol=1e-6)
        # constant inputs: once every bin went round trip, cd-r equals cd-0 exactly
        np.testing.assert_allclose(r["outs"][-1], r["exact"], atol=1e-5)
        np.testing.assert_allclose(r["evaluated"], r["exact"], atol=1e-5)
        (traffic,) = r["traffic"]
        assert traffic["direction"] == "forward" and traffic["calls"] == 3 * delay
        assert traffic["rows_sent"] == sum(r["planned"])
    data, edge_parts, _ = _parts(world_size)
    per_epoch = sum(sum(r["planned"]) for r in results) / (3 * delay)
    cd0_epoch = 2 * vertex_cut_metrics(data, edge_parts, world_size, seed=1).send_rows.sum()
    assert per_epoch <= cd0_epoch / (2 * delay) + 1e-9  # forward only, one bin of r


def test_mode_and_partition_kind_must_match():
    data, edge_parts, parts = _parts(1)
    vertex_part = next(build_local_partitions(data, np.zeros(N, dtype=np.int64), 1))
    with pytest.raises(ValueError, match="runs on a vertex-cut partition"):
        make_exchange("cd-0", vertex_part)
    with pytest.raises(ValueError, match="runs on a vertex partition"):
        make_exchange("p2p", parts[0])
    with pytest.raises(
        ValueError, match=r"exchange 'cd-x': the delay r of cd-<r> must be an integer"
    ):
        make_exchange("cd-x", parts[0])


def test_attention_and_foreign_edges_are_refused():
    _, _, (part,) = _parts(1)
    ctx = make_graph_context(part, make_exchange("cd-0", part))
    model = distribute(TwoLayer("gat"))
    with use_graph_context(ctx), pytest.raises(NotImplementedError, match="attention"):
        model(part.x, part.edge_index)
    model = distribute(TwoLayer("sage-sum"))
    loops = torch.arange(part.num_owned).repeat(2, 1)
    with use_graph_context(ctx), pytest.raises(NotImplementedError, match="other edges"):
        model(part.x, torch.cat([part.edge_index, loops], dim=1))


# -- issue 18, items 1 and 2: multigraph corner cases of cd-0, with the edge → part assignment fixed
def _graph_of(edges, num_nodes):
    from torch_geometric.data import Data

    from lightning_gnn_dist.data.graph import canonicalize

    data = canonicalize(Data(edge_index=torch.tensor(edges).t(), num_nodes=num_nodes))
    data.x = torch.arange(num_nodes * D_IN, dtype=torch.float32).view(num_nodes, D_IN).cos()
    return data


def _cd0_layer_rank(rank, world_size, edges, num_nodes, edge_parts, make, codec=None):
    data = _graph_of(edges, num_nodes)
    part = list(build_vertex_cut_parts(data, np.asarray(edge_parts), world_size, seed=0))[rank]
    torch.manual_seed(0)
    layer = distribute(make())
    ctx = make_graph_context(part, make_exchange("cd-0", part, codec=codec))
    x = part.x.clone().requires_grad_()
    with use_graph_context(ctx):
        out = layer(x, part.edge_index)
    root = part.is_root.unsqueeze(-1)
    (out * _weights(num_nodes, out.size(1))[part.global_ids] * root).sum().backward()
    grads = {k: p.grad.clone() for k, p in layer.named_parameters()}
    for g in grads.values():
        torch.distributed.all_reduce(g)
    # features are replicated: a vertex's input gradient is the sum over its copies
    x_grad = torch.zeros(num_nodes, D_IN).index_add_(0, part.global_ids, x.grad)
    torch.distributed.all_reduce(x_grad)
    grads["x"] = x_grad
    grads.update({k: b for k, b in layer.named_buffers() if b.is_floating_point()})
    return part.global_ids.numpy(), out.detach().numpy(), {k: g.numpy() for k, g in grads.items()}


def _check_cd0_layer(edges, num_nodes, edge_parts, make, world_size, codec=None):
    data = _graph_of(edges, num_nodes)
    assert data.edge_index.size(1) == len(edges)  # canonical order kept the multigraph
    torch.manual_seed(0)
    layer = make()
    x = data.x.clone().requires_grad_()
    out = layer(x, data.edge_index)
    (out * _weights(num_nodes, out.size(1))).sum().backward()
    expected = {"x": x.grad.numpy(), **{k: p.grad.numpy() for k, p in layer.named_parameters()}}
    expected.update({k: b.numpy() for k, b in layer.named_buffers() if b.is_floating_point()})
    args = (edges, num_nodes, edge_parts, make, codec)
    for ids, dist_out, grads in run_ranks(_cd0_layer_rank, world_size, *args, pg_timeout=30):
        np.testing.assert_allclose(dist_out, out.detach().numpy()[ids], rtol=1e-5, atol=1e-5)
        for key, grad in expected.items():
            np.testing.assert_allclose(grads[key], grad, rtol=1e-5, atol=1e-5, err_msg=key)


def test_cd0_mean_counts_every_repeated_self_loop():
    """Item 1: vertex 1 has two self loops; the mean divides by all of its in-edges (1 rank)."""
    edges = sorted([(0, 1), (1, 1), (1, 1), (2, 1), (1, 0), (2, 2)])
    _check_cd0_layer(edges, 3, [0] * len(edges), lambda: SAGEConv(D_IN, D_OUT), 1)


@pytest.mark.parametrize("codec", [None, "int8"])
def test_cd0_max_splits_the_gradient_between_ties_on_different_parts(codec):
    """Item 2: two parallel edges 0 → 1 on different parts tie for the maximum; PyG (torch)
    gives each half the gradient, so must the synchronisation (3 ranks). ``max``
    synchronisations travel as fp32 whatever the codec, the backward's tie counts included (a
    lossy codec rounded them; issue 29), so with ``int8`` the layer is still exact."""
    edges = sorted([(0, 1), (0, 1), (2, 1), (1, 2), (0, 2), (2, 0), (0, 1)])
    parts = [0, 1, 2, 0, 1, 2, 2]  # the three copies of 0 → 1 sit on three parts
    make = lambda: GraphConv(D_IN, D_OUT, aggr="max")  # noqa: E731
    _check_cd0_layer(edges, 3, parts, make, 3, codec)


class SageThenBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = SAGEConv(D_IN, D_OUT), nn.BatchNorm1d(D_OUT)

    def forward(self, x, edge_index):
        return self.norm(self.conv(x, edge_index))


@pytest.mark.parametrize("world_size", [2, 4])
def test_cd0_batchnorm_counts_each_split_vertex_once(world_size):
    """Item 3: batch statistics over root copies only (outputs, gradients, running stats)."""
    data = _graph()
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    edges = data.edge_index.t().tolist()
    _check_cd0_layer(edges, N, edge_parts.tolist(), SageThenBatchNorm, world_size)
