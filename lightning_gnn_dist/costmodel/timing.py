"""Time the best predicted plans for a few steps and keep the fastest (the plan's ``top_k``).

The cost model ranks candidates that differ by a few percent; how a machine schedules ranks,
collectives and copies decides between them. Like ``exchange="rdm"``'s ``rdm_order="auto"``,
:func:`time_top_k` trains each of the ``top_k`` best predictions for a few steps on every rank
and picks the fastest: the best prediction of each of the ``top_k`` best exchange modes (and
the mode's next partition when predicted within 5 %, :data:`~.plan.NEAR_TIE`), since
the model's bytes are exact (it ranks one mode's partitions well) while what a mode costs beyond
its bytes is what timing tells. A step is the forward and backward of a GCN with the plan's
widths on the rank's part of the candidate's partition (its features, or random ones of width
``d_0``, a sum-of-squares loss, the gradient all-reduce): the work and messages the prediction
models, independent of the user's module. It is collective: every rank calls it with the same
plan, and the step time is the slowest rank's, so every rank reaches the same decision.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from lightning_gnn_dist.costmodel.plan import Candidate, Plan, select, timed_indices
from lightning_gnn_dist.data.local import LocalPartition

DEFAULT_TIMED_STEPS = 3
"""Timed steps per candidate and round (after an untimed step of each)."""

DEFAULT_TIMED_ROUNDS = 3
"""Rounds over the candidates: each round times every candidate's steps in a row."""


def exchange_options(candidate: Candidate, ranks_per_node: int | None = None) -> dict[str, Any]:
    """Keyword arguments of :func:`~lightning_gnn_dist.comm.make_exchange` for ``candidate``
    (``hierarchical`` also gets ``ranks_per_node``, as ``GNNStrategy`` gives it)."""
    options = candidate.strategy_options()
    options.pop("exchange")
    if candidate.exchange == "hierarchical":
        options["ranks_per_node"] = ranks_per_node
    return options


def _gcn(dims) -> torch.nn.Module:
    from torch_geometric.nn import GCNConv

    from lightning_gnn_dist.nn import distribute

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.convs = torch.nn.ModuleList(GCNConv(a, b) for a, b in zip(dims, dims[1:], strict=False))
    torch.random.set_rng_state(generator_state)  # the user's stream stays where it was
    return distribute(model)


def _step_input(part: LocalPartition, width: int) -> torch.Tensor:
    """The first layer's input of a timed step: the part's own features where they have the
    plan's width (``[num_owned, width]`` float32), as training passes them, else random ones.
    ``rdm`` recognises the part's features as static and redistributes them once, not every
    step: random features timed an ``rdm`` step at 80–88 ms where training ran it at 56–64 ms
    (SBM, 2 emulated nodes, 200 Mbit/s, three runs)."""
    x = part.x
    if x is not None and x.dtype == torch.float32 and tuple(x.shape) == (part.num_owned, width):
        return x
    return torch.randn(part.num_owned, width, generator=torch.Generator().manual_seed(part.part_id))


def time_candidates(
    candidates: Sequence[Candidate],
    parts: Mapping[str, LocalPartition],
    dims: Sequence[int],
    steps: int = DEFAULT_TIMED_STEPS,
    ranks_per_node: int | None = None,
    rounds: int = DEFAULT_TIMED_ROUNDS,
) -> dict[str, float]:
    """Seconds of one GCN training step of each candidate (by ``name``): the median of
    ``rounds × steps`` timed steps, each the slowest rank's. First every candidate runs one
    step (the processes settle: a candidate timed first right after start-up measured 1.18×
    and 3.7× slow on the emulated cluster); then, in each of ``rounds`` rounds, each candidate
    runs one more untimed step and its ``steps`` timed ones in a row, as training runs them.
    Candidates that took turns step by step were timed in links that had just carried another
    candidate's messages: on 200 Mbit/s links ``rdm`` after ``p2p`` measured 126–130 ms against
    78–84 ms in a row, in both runs, and the pick missed the fastest plan by 1.17× and 1.34×.
    The rounds spread each candidate's steps over the whole timing, so a passing burst of load
    on a shared machine does not land on one candidate only. The median, not the fastest step:
    ranks that share cores make some modes' steps vary several-fold, and the epoch a user waits
    for is the typical one. Collective when a process group exists. ``parts``: partition label
    (:attr:`Candidate.partition`) → this rank's part; ``ranks_per_node``: the launch's, for
    ``hierarchical`` candidates.
    """
    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.nn import use_graph_context
    from lightning_gnn_dist.nn.context import make_graph_context

    distributed = dist.is_available() and dist.is_initialized()
    runs = []
    for candidate in candidates:
        part = parts[candidate.partition]
        model = _gcn(dims)
        options = exchange_options(candidate, ranks_per_node)
        exchange = make_exchange(candidate.exchange, part, **options)
        context = make_graph_context(part, exchange)
        context.prepare(model)
        runs.append((candidate.name, model, context, part, _step_input(part, dims[0])))

    def step(run, number: int) -> float:
        _, model, context, part, x = run
        if distributed:
            dist.barrier()
        start = time.perf_counter()
        context.exchange.begin_round(number)
        model.zero_grad()
        with use_graph_context(context):
            h = x
            for i, conv in enumerate(model.convs):
                h = conv(h, part.edge_index)
                h = torch.relu(h) if i < len(model.convs) - 1 else h
        h.square().sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        if distributed:
            dist.all_reduce(grads)
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        if distributed:
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
        return float(took[0])

    samples: dict[str, list[float]] = {run[0]: [] for run in runs}
    try:
        for run in runs:
            step(run, 0)  # every candidate once, while the processes settle
        for round_index in range(rounds):
            first = 1 + round_index * (steps + 1)
            for run in runs:
                step(run, first)  # the links adapt to this candidate's messages
                for number in range(first + 1, first + steps + 1):
                    samples[run[0]].append(step(run, number))
    finally:
        for run in runs:
            run[2].exchange.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def timed_partitions(plan: Plan, top_k: int) -> list[str]:
    """The partitions (labels, :attr:`Candidate.partition`) whose parts :func:`time_top_k`
    needs."""
    rows = [plan.rows[i] for i in timed_indices(plan.rows, top_k, per_mode=True)]
    return sorted({row.candidate.partition for row in rows})


def time_top_k(
    plan: Plan,
    parts: Mapping[str, LocalPartition],
    top_k: int,
    steps: int = DEFAULT_TIMED_STEPS,
) -> Plan:
    """``plan`` with the best prediction of each of its ``top_k`` best exchange modes timed,
    with each mode's near tie (:func:`~.plan.timed_indices`; :func:`time_candidates`;
    ``select(per_mode=True)``) and the fastest measured picked (ties:
    the better prediction).

    Args:
        plan: an untimed plan (its ``settings["widths"]`` are the GCN's).
        parts: partition label → this rank's part of that partition.
        top_k: candidates to time.
        steps: timed steps per candidate.
    """
    timed = [plan.rows[i].candidate for i in timed_indices(plan.rows, top_k, per_mode=True)]
    topology = plan.topology
    per_node = topology.ranks_per_node if topology is not None else None
    seconds = time_candidates(timed, parts, plan.settings["widths"], steps, per_node)

    def measure(candidate: Candidate) -> float:
        return seconds[candidate.name]

    return select(plan.rows, measure, top_k, {**plan.settings, "top_k": top_k}, per_mode=True)
