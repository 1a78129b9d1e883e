"""NCCL's message rules, checked on gloo for every exchange mode (issue 35).

Each rank runs every mode's training rounds (forward and backward, several epochs where the mode
changes over epochs) under :class:`~lightning_gnn_dist.testing.nccl.MessageRecorder`; the records
of all ranks are compared pairwise (:func:`~lightning_gnn_dist.testing.nccl.check_records`): what
rank ``a`` posts to ``b`` must be what ``b`` posts from ``a``, batches symmetric, collectives and
``all_to_all_single`` splits consistent. The graph is a multigraph with isolated vertices and the
partition leaves some pairs of ranks without messages, so zero-size cases occur.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.p2p import P2PExchange
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.subgraph_sampler import make_sampler
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders import NeighborLoader, PartitionedGraphStore, SubgraphLoader
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.testing.nccl import (
    MessageRecorder,
    assert_nccl_safe,
    check_records,
    run_threaded,
    threaded_unavailable_reason,
)
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, D_IN, D_HID, D_OUT = 48, 5, 6, 3
EPOCHS = 3

#: mode name → (exchange, options); all run a 2-layer GCN full-batch for EPOCHS rounds.
FULL_BATCH = {
    "p2p": ("p2p", {}),
    "p2p-int8": ("p2p", {"codec": "int8"}),
    "p2p-adaptive": ("p2p", {"codec": "adaptive"}),  # all_gather + all_reduce per epoch
    "broadcast": ("broadcast", {}),
    "broadcast-int4": ("broadcast", {"codec": "int4"}),  # lossy backward: p2p to each root
    "hierarchical": ("hierarchical", {}),
    "cached-fixed": ("cached", {"staleness_bound": 1}),
    "cached-variation": ("cached", {"staleness": "variation-gap", "staleness_bound": 0.01}),
    "cached-broadcast": (
        "cached",
        {"cache_base": "broadcast", "staleness": "epoch-adaptive", "cache_backward": "fresh"},
    ),
    "cached-clip-int8": ("cached", {"grad_clip": 0.01, "codec": "int8"}),
    "rdm": ("rdm", {"rdm_order": "model"}),
    "rdm-panels": ("rdm", {"rdm_order": "dsds", "replication": 2}),
}
VERTEX_CUT = {
    "cd-0": ("cd-0", {}),
    "cd-2": ("cd-2", {}),
    "0c": ("0c", {}),
    "cd-0-bf16": ("cd-0", {"codec": "bf16"}),
}
LOADERS = ("subgraph", "neighbor", "neighbor-exact-int8", "neighbor-cache")
MODES = [*FULL_BATCH, *VERTEX_CUT, *LOADERS]


class TwoLayer(nn.Module):
    def __init__(self, kind: str = "gcn"):
        super().__init__()
        torch.manual_seed(0)
        make = GCNConv if kind == "gcn" else SAGEConv
        self.conv1, self.conv2 = make(D_IN, D_HID), make(D_HID, D_OUT)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def _assignment(world_size: int) -> np.ndarray:
    """A block of vertices per rank."""
    return (np.arange(N) * world_size) // N


def _graph(world_size: int):
    """A multigraph (parallel edges, repeated self loops, isolated vertices) without edges from
    the first rank's block into the last one's: the first rank sends the last nothing forward
    (the last sends nothing backward), while the other direction carries rows."""
    data = random_graph(N, 3 * N, 7, directed=True, features=D_IN, parallel_edges=True)
    loops = torch.tensor([[4, 4, 9], [4, 4, 9]])
    edge_index = torch.cat([data.edge_index, loops], dim=1)
    block = torch.from_numpy(_assignment(world_size))
    keep = ~((block[edge_index[0]] == 0) & (block[edge_index[1]] == world_size - 1))
    data.edge_index = edge_index[:, keep]
    return data


def _full_batch(part, mode: str, options: dict, world_size: int) -> None:
    options = dict(options)
    if mode == "hierarchical":
        options["ranks_per_node"] = 2 if world_size % 2 == 0 else 1
    if mode == "rdm" and options.get("replication", 0) > world_size:
        options["replication"] = world_size
    if options.get("replication") and world_size % options["replication"]:
        options["replication"] = world_size
    exchange = make_exchange(mode, part, **options)
    model = distribute(TwoLayer())
    context = make_graph_context(part, exchange)
    context.prepare(model)
    for epoch in range(EPOCHS):
        exchange.begin_round(epoch)
        with use_graph_context(context):
            out = model(part.x, part.edge_index)
        out.square().sum().backward()
    exchange.begin_round(None)  # an evaluation round: exact, fp32
    with use_graph_context(context), torch.no_grad():
        model(part.x, part.edge_index)
    exchange.close()


def _vertex_cut(part, mode: str, options: dict) -> None:
    exchange = make_exchange(mode, part, **options)
    model = distribute(TwoLayer("sage"))
    context = make_graph_context(part, exchange)
    for epoch in range(2 * EPOCHS):  # cd-2 answers from epoch 2 on
        exchange.begin_round(epoch)
        with use_graph_context(context):
            out = model(part.x, part.edge_index)
        out.square().sum().backward()
    exchange.close()


def _subgraph(part) -> None:
    sampler = make_sampler("uniform", N, N // 2, seed=3)
    model = distribute(TwoLayer())
    for batch in SubgraphLoader(part, sampler, steps_per_epoch=2):
        view = batch.local_partition
        exchange = make_exchange("p2p", view)
        with use_graph_context(make_graph_context(view, exchange)):
            out = model(batch.x, batch.edge_index)
        out.square().sum().backward()


def _neighbor(part, mode: str) -> None:
    exact = mode == "neighbor-exact-int8"
    store = PartitionedGraphStore(
        part,
        cache_size=4 if mode == "neighbor-cache" else 0,
        codec="int8" if exact else "fp32",
    )
    fanouts = [-1, -1] if exact else [3, 2]
    # replace=True: the same messages without the compiled sampler's first-call compilation
    loader = NeighborLoader(
        store, fanouts, part.train_mask, batch_size=4, shuffle=True, replace=True, num_steps=3
    )
    for _ in loader:
        pass


def _rank(rank: int, world_size: int, modes: list[str]) -> dict:
    data = _graph(world_size)
    part = list(build_local_partitions(data, _assignment(world_size), world_size))[rank]
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    cut_part = list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))[rank]
    records = {}
    for mode in modes:
        with MessageRecorder() as recorder:
            if mode in FULL_BATCH:
                _full_batch(part, *FULL_BATCH[mode], world_size)
            elif mode in VERTEX_CUT:
                _vertex_cut(cut_part, *VERTEX_CUT[mode])
            elif mode == "subgraph":
                _subgraph(part)
            else:
                _neighbor(part, mode)
        records[mode] = recorder.records
    return records


@functools.cache
def _records(world_size: int) -> dict[str, list]:
    results = run_ranks(_rank, world_size, MODES, timeout=180)
    return {mode: [r[mode] for r in results] for mode in MODES}


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_every_exchange_mode_posts_nccl_safe_patterns(world_size):
    records = _records(world_size)
    problems = {mode: check_records(per_rank) for mode, per_rank in records.items()}
    broken = {mode: p for mode, p in problems.items() if p}
    assert not broken, "\n\n".join(f"== {m}\n" + "\n".join(p[:3]) for m, p in broken.items())
    # The recorder saw what each mode is made of (a recorder seeing nothing would pass).
    kinds = {
        mode: {op.kind for ops in per_rank for op in ops} for mode, per_rank in records.items()
    }
    expected = {
        "p2p": {"send", "recv"},
        "p2p-adaptive": {"send", "recv", "all_gather", "all_reduce"},
        "broadcast": {"broadcast", "reduce"},
        "broadcast-int4": {"broadcast", "send", "recv"},
        "hierarchical": {"send", "recv"},
        "cached-variation": {"all_reduce"},
        "rdm": {"all_to_all_single", "all_reduce"},
        "cd-0": {"send", "recv"},
        "cd-2": {"send", "recv", "all_gather"},
        "0c": set(),
        "subgraph": {"all_gather", "send", "recv"},
        "neighbor": {"all_to_all_single"},
    }
    for mode, needed in expected.items():
        assert needed <= kinds[mode], f"{mode}: recorded {sorted(kinds[mode])}"
    assert kinds["0c"] == set(), "0c moves nothing"
    # Zero-size point-to-point messages are skipped on both sides in every mode (the rule each
    # exchange's docstring states).
    zero = {
        mode: [
            op.describe() for ops in per_rank for op in ops if op.peer is not None and not op.numel
        ]
        for mode, per_rank in records.items()
    }
    assert not any(zero.values()), {mode: ops[:3] for mode, ops in zero.items() if ops}
    # Rank 0 sends the last rank nothing forward but receives from it: a zero-size message
    # that both sides skip.
    parts = list(build_local_partitions(_graph(world_size), _assignment(world_size), world_size))
    assert parts[0].send_counts[-1] == 0 and parts[0].recv_counts[-1] > 0


# -- the recorder fails a zero-size message one side skips ------------------------------------
def _skewed_rank(rank: int, world_size: int, skew: str) -> list:
    """A p2p exchange where every rank posts zero-size messages too (``skew="both"``), or only
    rank 0 does and the others skip them (``"one"``). Recorded without posting: on gloo as on
    NCCL, the unmatched message would hang."""
    data = _graph(world_size)
    part = list(build_local_partitions(data, _assignment(world_size), world_size))[rank]
    original = P2PExchange._post

    def post(self, send, send_counts, recv, recv_counts, send_to=None, recv_from=None):
        if skew == "both" or self.rank == 0:  # zero counts become zero-size messages
            ops, offset = [], 0
            for peer, count in enumerate(send_counts):
                if peer != self.rank:
                    chunk = send[offset : offset + count]
                    ops.append(dist.P2POp(dist.isend, chunk, self._peer(peer), self.group))
                offset += count
            offset = 0
            for peer, count in enumerate(recv_counts):
                if peer != self.rank:
                    chunk = recv[offset : offset + count]
                    ops.append(dist.P2POp(dist.irecv, chunk, self._peer(peer), self.group))
                offset += count
            from lightning_gnn_dist.comm.messages import start_messages

            return start_messages(ops)
        return original(self, send, send_counts, recv, recv_counts, send_to, recv_from)

    P2PExchange._post = post
    try:
        with MessageRecorder(post_point_to_point=False) as recorder:
            x = part.x.clone().requires_grad_()
            make_exchange("p2p", part)(x, "layer").sum().backward()
    finally:
        P2PExchange._post = original
    return recorder.records


def test_the_recorder_fails_a_zero_size_message_that_one_side_skips():
    world_size = 3
    both = run_ranks(_skewed_rank, world_size, "both", timeout=60)
    assert any(op.numel == 0 for ops in both for op in ops)  # zero-size messages were posted
    assert_nccl_safe(both)  # on both sides alike: allowed
    one = run_ranks(_skewed_rank, world_size, "one", timeout=60)
    problems = check_records(one)
    assert problems, "rank 0's zero-size messages have no receiver"
    assert any("rank 0 posts" in p and "0xfloat32" in p for p in problems), problems
    with pytest.raises(AssertionError, match="NCCL rule"):
        assert_nccl_safe(one)


# -- the NCCL branch of each code path, on torch's threaded process group ----------------------
threaded = pytest.mark.skipif(
    threaded_unavailable_reason() is not None, reason=str(threaded_unavailable_reason())
)


def _collective_rank(rank: int, world_size: int, nccl_branch: bool) -> dict:
    """Exchanges without point-to-point messages (the threaded group has none): RDM's
    redistributions and panel exchange, the neighbour store's fetch (int8 rows) and sampling. On the threaded group
    they take the branch NCCL takes (``messages.all_to_all`` is ``all_to_all_single`` itself)."""
    assert (dist.get_backend() != "gloo") == nccl_branch
    data = _graph(world_size)
    part = list(build_local_partitions(data, _assignment(world_size), world_size))[rank]
    # The exchange itself: the layers' graph context is per process, not per thread.
    exchange = make_exchange(
        "rdm", part, rdm_order="dsds", replication=1 if world_size > 2 else None
    )
    exchange.calibrate(sparse_op_seconds=1e-9, repeats=1)  # all-to-alls and an all-reduce
    x = part.x.clone().requires_grad_()
    columns = exchange.redistribute(x, "V", "layer")
    panels = exchange.gather_panels(columns, "layer", "forward")
    out = exchange.redistribute(columns * 2, "H", "layer", width=D_IN)
    (out.sin().sum() + panels.sum()).backward()
    store = PartitionedGraphStore(part, codec="int8")
    rows = store.fetch(torch.arange(N), degrees=True)  # every vertex: remote rows of each peer
    counts, sources, edges = store.sample_hop(torch.arange(N), -1, stream=5)
    tensors = {
        "out": out.detach(),
        "panels": panels,
        "grad": x.grad,
        "ids": rows.ids,
        "y": rows.y,
        "in_degree": rows.in_degree,
        "x": rows.x,
        "counts": counts,
        "sources": sources,
        "e_id": edges["e_id"],
    }
    return {key: value.numpy().copy() for key, value in tensors.items()}


@threaded
def test_the_nccl_branch_moves_the_same_data_as_gloo():
    """RDM's redistributions and the neighbour store's fetch and sampling on the threaded group
    (NCCL's branch: ``all_to_all_single`` for every all-to-all) equal the gloo run, and keep
    NCCL's rules."""
    world_size = 3
    with MessageRecorder() as recorder:
        threaded = run_threaded(_collective_rank, world_size, True, timeout=120)
    assert_nccl_safe(recorder.by_rank(world_size))
    assert {op.kind for op in recorder.records} >= {"all_to_all_single", "all_reduce"}
    gloo = run_ranks(_collective_rank, world_size, False, timeout=120)
    for t, g in zip(threaded, gloo, strict=True):
        assert t.keys() == g.keys()
        for key in t:
            np.testing.assert_allclose(t[key], g[key], rtol=1e-6, atol=1e-6, err_msg=key)
    data = _graph(world_size)  # the fetched rows are the graph's (ids tell which row each is)
    for result in threaded:
        np.testing.assert_array_equal(result["y"], data.y[result["ids"]].numpy())
        assert np.abs(result["x"] - data.x[result["ids"]].numpy()).max() < 0.05  # int8's step


# -- every exchange states its rule -------------------------------------------------------------
def test_every_exchange_states_its_nccl_rule_in_its_docstring():
    """Each exchange class (every registered mode, the subgraph loader's batch exchange, the
    neighbour loader's store) says in its own docstring which operations it posts to each peer
    and how zero-size messages are handled: a new mode without the paragraph fails here."""
    from lightning_gnn_dist.comm.base import EXCHANGE_MODES

    classes = {*EXCHANGE_MODES.values(), SubgraphLoader, PartitionedGraphStore}
    assert len(EXCHANGE_MODES) >= 8
    missing = [
        cls.__qualname__
        for cls in classes
        if "NCCL rule:" not in (cls.__dict__.get("__doc__") or "")
    ]
    assert not missing, f"no 'NCCL rule:' paragraph in the docstring of {sorted(missing)}"


def _empty_part_rank(rank: int, world_size: int) -> list:
    """``broadcast`` (lossless and int4) where rank 1 owns no vertex: its block has no rows."""
    data = _graph(world_size)
    assignment = np.where(np.arange(N) < N // 2, 0, world_size - 1)
    part = list(build_local_partitions(data, assignment, world_size))[rank]
    with MessageRecorder() as recorder:
        for codec in ("fp32", "int4"):
            x = part.x.clone().requires_grad_()
            make_exchange("broadcast", part, codec=codec)(x, "layer").sum().backward()
    return recorder.records


def test_broadcast_skips_a_root_without_rows_on_every_rank():
    records = run_ranks(_empty_part_rank, 3, timeout=60)
    assert_nccl_safe(records)
    kinds = {op.kind for ops in records for op in ops}
    assert {"broadcast", "reduce", "send", "recv"} <= kinds, kinds
    zero = [op.describe() for ops in records for op in ops if op.numel == 0]
    assert not zero, zero
