"""DistBatchNorm on a forked gloo group equals one process's BatchNorm on all rows: outputs, input
and parameter gradients, running statistics on every rank (every option), eval without messages;
graph-level norms are refused."""

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import norm as pyg_norm

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.nn import DistBatchNorm, GraphContext, distribute, use_graph_context
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, C, STEPS = 40, 5, 3

CONFIGS = {
    "default": lambda: nn.BatchNorm1d(C),
    "cumulative": lambda: nn.BatchNorm1d(C, momentum=None),
    "no-running-stats": lambda: nn.BatchNorm1d(C, track_running_stats=False),
    "no-affine": lambda: nn.BatchNorm1d(C, affine=False),
    "3d-input": lambda: nn.BatchNorm1d(C),
    "pyg": lambda: pyg_norm.BatchNorm(C, momentum=0.3),
    "sync": lambda: nn.SyncBatchNorm(C),
}


def _inputs(config):
    gen = torch.Generator().manual_seed(3)
    shape = (STEPS, N, C, 2) if config == "3d-input" else (STEPS, N, C)
    # Offset and scale: a large mean is where raw sums of squares lose precision.
    return torch.randn(*shape, generator=gen) * 3 + 50, torch.randn(*shape, generator=gen)


def _make(config):
    torch.manual_seed(0)
    norm = CONFIGS[config]()
    with torch.no_grad():
        for p in norm.parameters():
            p.uniform_(0.5, 1.5)
    return norm


def _run(norm, xs, grads, rows, context=None):
    """STEPS training steps then one eval step on ``rows``; returns what a test compares."""
    outs, x_grads = [], []
    for x, g in zip(xs, grads, strict=True):
        x = x[rows].clone().requires_grad_()
        norm.train()
        if context is None:
            out = norm(x)
        else:
            with use_graph_context(context):
                out = norm(x)
        (out * g[rows]).sum().backward()
        outs.append(out.detach().numpy())
        x_grads.append(x.grad.numpy())
    norm.eval()
    with torch.no_grad():
        if context is None:
            evaluated = norm(xs[0][rows])
        else:
            with use_graph_context(context):
                evaluated = norm(xs[0][rows])
    param_grads = {k: p.grad.clone() for k, p in norm.named_parameters()}
    return (
        outs,
        x_grads,
        evaluated.numpy(),
        param_grads,
        {k: v.numpy().copy() for k, v in norm.state_dict().items()},
    )


def _rank(rank, world_size):
    """Every configuration on this rank's rows (one fork per world size)."""
    data = random_graph(N, 3 * N, seed=1, features=C)
    assignment = np.random.default_rng(5).integers(0, world_size, N)
    assignment[:world_size] = np.arange(world_size)  # no empty part
    part = list(build_local_partitions(data, assignment, world_size))[rank]
    return {config: _rank_config(part, config) for config in CONFIGS}


def _rank_config(part, config):
    context = GraphContext(part, make_exchange("p2p", part))
    norm = _make(config)
    distribute(norm)
    assert isinstance(norm.module if config == "pyg" else norm, DistBatchNorm)
    xs, grads = _inputs(config)
    outs, x_grads, evaluated, param_grads, state = _run(norm, xs, grads, part.global_ids, context)
    for grad in param_grads.values():
        torch.distributed.all_reduce(grad)
    return {
        "ids": part.global_ids.numpy(),
        "outs": outs,
        "x_grads": x_grads,
        "eval": evaluated,
        "param_grads": {k: v.numpy() for k, v in param_grads.items()},
        "state": state,
        "traffic": context.exchange.counter.as_dicts(),
    }


@pytest.fixture(scope="module")
def distributed_runs():
    return {size: run_ranks(_rank, size) for size in (2, 3)}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("world_size", [2, 3])
def test_dist_batchnorm_equals_single_process(config, world_size, distributed_runs):
    xs, grads = _inputs(config)
    reference = _make(config)
    if config == "sync":  # single-process SyncBatchNorm is BatchNorm (and needs no group)
        reference.__class__ = nn.BatchNorm1d
    outs, x_grads, evaluated, param_grads, state = _run(reference, xs, grads, torch.arange(N))
    results = [by_config[config] for by_config in distributed_runs[world_size]]
    tol = {"rtol": 1e-5, "atol": 1e-5}
    for r in results:
        ids = r["ids"]
        for step in range(STEPS):
            np.testing.assert_allclose(r["outs"][step], outs[step][ids], **tol)
            np.testing.assert_allclose(r["x_grads"][step], x_grads[step][ids], **tol)
        np.testing.assert_allclose(r["eval"], evaluated[ids], **tol)
        assert set(r["state"]) == set(state)  # same state dict as the original layer
        for key, value in state.items():
            np.testing.assert_allclose(r["state"][key], value, **tol, err_msg=key)
            np.testing.assert_array_equal(r["state"][key], results[0]["state"][key])
        for key, value in param_grads.items():
            np.testing.assert_allclose(r["param_grads"][key], value.numpy(), **tol)
        assert r["traffic"] == []  # the norm moves no halo rows
    if config != "no-running-stats":
        assert int(state[next(k for k in state if k.endswith("num_batches_tracked"))]) == STEPS


def test_outside_a_context_it_is_batchnorm():
    reference, dist_norm = _make("default"), distribute(_make("default"))
    x = torch.randn(N, C)
    torch.testing.assert_close(dist_norm(x), reference(x))
    torch.testing.assert_close(dist_norm.running_var, reference.running_var)


@pytest.mark.parametrize(
    "norm",
    [
        pyg_norm.GraphNorm(C),
        pyg_norm.PairNorm(),
        pyg_norm.LayerNorm(C),  # mode="graph" is PyG's default
        pyg_norm.InstanceNorm(C),
        pyg_norm.MeanSubtractionNorm(),
        pyg_norm.GraphSizeNorm(),
        nn.BatchNorm2d(C),
    ],
    ids=lambda n: type(n).__name__,
)
def test_graph_level_norms_are_refused(norm):
    model = nn.Sequential(nn.Linear(C, C), norm)
    with pytest.raises(ValueError, match=rf"{type(norm).__name__} \(1\).*not be exact"):
        distribute(model)


@pytest.mark.parametrize(
    "norm", [pyg_norm.LayerNorm(C, mode="node"), nn.LayerNorm(C), pyg_norm.DiffGroupNorm(C, 2)]
)
def test_node_level_norms_are_accepted(norm):
    distribute(nn.Sequential(norm))
