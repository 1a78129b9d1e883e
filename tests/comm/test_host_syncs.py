"""Device → host round trips of a training step (issue 35), counted on CPU.

:class:`~lightning_gnn_dist.testing.host_sync.HostSyncCounter` counts every operation that would
make a GPU wait for the host (``.item()``, ``.tolist()``, ``bool(t)``, ``nonzero``, mask
indexing...) on any device, so a CPU run holds the count a GPU step needs: none in the layers'
forward and backward of the exact full-batch modes once the graph's structures are built (the
first step builds them), only the inherent ones where the host must decide who sends, and none in
a neighbour step on a batch copied to the device (its CSR matrices travel with it from the host;
the GCN graph is built there with sizes known on the host).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.data import _kernels
from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.vertex_cut import build_vertex_cut_parts
from lightning_gnn_dist.loaders import NeighborLoader, PartitionedGraphStore
from lightning_gnn_dist.loaders.transfer import caches_of, carry_caches
from lightning_gnn_dist.nn import distribute, use_graph_context
from lightning_gnn_dist.nn.context import make_graph_context
from lightning_gnn_dist.nn.sampled import SampledBatchContext
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


# -- the neighbour step ---------------------------------------------------------------------------
def _multigraph_store():
    """One part of a multigraph with parallel edges, repeated self loops and isolated vertices."""
    data = random_graph(N, 3 * N, 1, features=5, parallel_edges=True)
    loops = torch.tensor([[4, 4, 9, 17, 30, 30], [4, 4, 9, 17, 30, 30]])
    data.edge_index = torch.cat([data.edge_index, loops], dim=1)
    part = next(iter(build_local_partitions(data, np.zeros(N, dtype=np.int64), 1)))
    return data, PartitionedGraphStore(part)


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, -1]])
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_a_neighbour_step_on_a_copied_batch_makes_no_host_round_trip(kind, fanouts):
    """The batch is cloned as a copy to a GPU makes new tensors (the host's caches stay
    behind); ``carry_caches`` (what ``DeviceTransfer`` does) brings the CSR matrices the loader
    built. Inherent round trips left in the step: none. Removed: the GCN graph's degrees
    (bincount, mask indexing), the removal of the batch's own self loops (they stay as entries of
    weight 0), the CSR's entry counts (bincount) and its grouped-or-not check (the caller says,
    or the matrices come built). The outputs still equal PyG's: GCN and SAGE on the batch
    (sampled fan-outs), the full graph's rows of the seeds (fan-out -1)."""
    data, store = _multigraph_store()
    loader = NeighborLoader(store, fanouts, torch.ones(N, dtype=torch.bool), batch_size=8)
    model, plain = distribute(TwoLayer(kind), ("neighbor",)), TwoLayer(kind)
    full = plain(data.x, data.edge_index)
    loops_seen = 0
    for batch in loader:
        moved = batch.clone()  # new tensors, as on a device
        carried = carry_caches(caches_of(batch), moved, torch.clone)
        assert carried, "the loader built the batch's CSR matrices on the host"
        with HostSyncCounter() as counter:
            with use_graph_context(SampledBatchContext.from_batch(moved)):
                out = model(moved.x, moved.edge_index)
            out.backward(torch.ones_like(out))
        assert counter.total == 0, counter.report()["by_site"]
        with torch.no_grad():
            if fanouts[0] == -1:
                expected = full[batch.n_id[: batch.batch_size]]
                out = out[: batch.batch_size]
            else:
                expected = plain(batch.x, batch.edge_index)
        torch.testing.assert_close(out.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
        loops_seen += int((batch.edge_index[0] == batch.edge_index[1]).sum())
    assert loops_seen > 0, "the batches held self loops"


def test_a_csr_build_asks_the_device_only_when_the_caller_does_not_say_grouped():
    edges = torch.tensor([[0, 1, 2, 2], [0, 0, 1, 2]])
    with HostSyncCounter() as counter:
        told = CSRAdjacency.from_edge_index(edges, 3, 3, grouped=True)
        CSRAdjacency.from_edge_index(edges.flip(1), 3, 3, grouped=False).transpose()
    assert counter.total == 0, counter.report()["by_site"]
    with HostSyncCounter() as counter:
        checked = CSRAdjacency.from_edge_index(edges, 3, 3)
    assert counter.counts == {"_local_scalar_dense": 1}  # the check reads one boolean
    assert torch.equal(told.crow, checked.crow) and torch.equal(told.col, checked.col)
    assert told.crow.tolist() == [0, 2, 3, 4]


def test_the_counter_counts_the_device_path_of_the_compiled_kernels():
    """The compiled (host-only) kernels are off while counting, as in a device step, and back
    on after: a transpose built inside the counter makes no round trip either way."""
    from lightning_gnn_dist.data.sampler import use_compiled

    assert use_compiled() == _kernels.AVAILABLE
    edges = torch.tensor([[2, 0, 1, 2], [0, 1, 1, 2]])
    with HostSyncCounter() as counter:
        assert not use_compiled()
        CSRAdjacency.from_edge_index(edges, 3, 3, grouped=True).transpose()
    assert counter.total == 0, counter.report()["by_site"]
    assert use_compiled() == _kernels.AVAILABLE
