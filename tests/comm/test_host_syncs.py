"""Device → host round trips of a training step (issue 35), counted on CPU.

:class:`~lightning_gnn_dist.testing.host_sync.HostSyncCounter` counts every operation that would
make a GPU wait for the host (``.item()``, ``.tolist()``, ``bool(t)``, ``nonzero``, mask
indexing...) on any device, so a CPU run holds the count a GPU step needs: none in the layers'
forward and backward of the exact full-batch modes once the graph's structures are built (the
first step builds them), and only the inherent ones where the host must decide who sends.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.testing.host_sync import HostSyncCounter
from tests.distributed import run_ranks
from tests.helpers import random_graph

N = 40
#: case → (exchange, options, layer kind, vertex cut)
CASES = {
    "p2p": ("p2p", {}, "gcn", False),
    "p2p-sage": ("p2p", {}, "sage", False),
    "broadcast": ("broadcast", {}, "gcn", False),
    "hierarchical": ("hierarchical", {"ranks_per_node": 1}, "gcn", False),
    "cached-fixed": ("cached", {"staleness_bound": 1}, "gcn", False),
    "cached-clip": ("cached", {"staleness_bound": 0, "grad_clip": 0.01}, "gcn", False),
    "cd-0": ("cd-0", {}, "sage", True),
    # the host decides who sends from the agreed flags and, here, from two norms per layer
    "cached-variation": ("cached", {"staleness": "variation-gap"}, "gcn", False),
}


class TwoLayer(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        torch.manual_seed(0)
        make = GCNConv if kind == "gcn" else SAGEConv
        self.conv1, self.conv2 = make(5, 8), make(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def _rank(rank: int, world_size: int, cases: list[str]) -> dict:
    data = random_graph(N, 3 * N, 1, features=5, parallel_edges=True)
    vertex_part = list(build_local_partitions(data, np.arange(N) % world_size, world_size))[rank]
    edge_parts = get_partitioner("vertex-cut", seed=1).partition(data, world_size)
    cut_part = list(build_vertex_cut_parts(data, edge_parts, world_size, seed=1))[rank]
    reports = {}
    for case in cases:
        mode, options, kind, vertex_cut = CASES[case]
        part = cut_part if vertex_cut else vertex_part
        model = distribute(TwoLayer(kind))
        exchange = make_exchange(mode, part, **options)
        context = make_graph_context(part, exchange)
        steps = []
        for epoch in range(3):
            exchange.begin_round(epoch)
            with HostSyncCounter() as counter:  # the layers' forward and backward
                with use_graph_context(context):
                    out = model(part.x, part.edge_index)
                out.backward(torch.ones_like(out))
            steps.append(counter.report())
        reports[case] = steps
    return reports


@pytest.fixture(scope="module")
def reports() -> dict:
    return run_ranks(_rank, 2, list(CASES), timeout=120)


@pytest.mark.parametrize("case", [c for c in CASES if c != "cached-variation"])
def test_exact_steps_make_no_host_round_trip(reports, case):
    for rank, steps in enumerate(r[case] for r in reports):
        for epoch, step in enumerate(steps[1:], start=1):  # the first step builds the caches
            assert step["total"] == 0, f"rank {rank}, epoch {epoch}: {step['by_site']}"


def test_the_variation_gap_cache_reads_its_norms_and_the_agreed_flags_only(reports):
    for steps in (r["cached-variation"] for r in reports):
        for step in steps[1:]:
            functions = {site.rsplit("(", 1)[-1].rstrip(")") for site in step["by_site"]}
            assert functions <= {"_relative_change", "_agree"}, step["by_site"]
            # per layer: 2 norms and one read of the agreed flags (.cpu() then .numpy())
            assert step["by_op"] == {"_local_scalar_dense": 4, "cpu": 2, "numpy": 2}


def test_the_counter_sees_what_waits_for_the_device():
    x = torch.arange(6.0)
    with HostSyncCounter() as counter:
        x.sum().item()
        x.tolist()
        _ = x[x > 2]  # mask indexing: a nonzero inside
        torch.repeat_interleave(x.long(), x.long())  # output size from the values
        torch.repeat_interleave(x.long(), x.long(), output_size=15)  # given: no wait
        x.index_select(0, torch.tensor([1, 2]))
    assert counter.counts == {
        "_local_scalar_dense": 1,
        "tolist": 1,
        "index": 1,
        "repeat_interleave": 1,
    }
    with HostSyncCounter("cuda") as counter:  # only CUDA tensors count
        x.sum().item()
    assert counter.total == 0
