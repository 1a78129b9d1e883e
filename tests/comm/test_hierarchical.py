"""``exchange="hierarchical"`` at 4 ranks as 2 nodes × 2: PyG's outputs and gradients within 1e-5
on a multigraph, and the rows each rank sends to each peer (so per level: inter- and intra-node)
equal :func:`hierarchical_peer_rows`; fewer inter-node rows than ``p2p``."""

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from lightning_gnn_dist.comm import HierarchicalExchange, make_exchange
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.nn import GraphContext, distribute, use_graph_context
from lightning_gnn_dist.partition.metrics import PartitionMetrics, partition_metrics
from lightning_gnn_dist.partition.placement import (
    Topology,
    choose_gateways,
    hierarchical_peer_rows,
    node_traffic,
)
from tests.comm.test_codec import _count_wire_bytes
from tests.distributed import run_ranks
from tests.helpers import random_graph

N, D_IN, D_OUT, WORLD = 60, 5, 4, 4
TOPOLOGY = Topology(num_nodes=2, ranks_per_node=2)
LAYERS = {
    "gcn": lambda: GCNConv(D_IN, D_OUT),
    "sage-max": lambda: SAGEConv(D_IN, D_OUT, aggr="max"),
    "gat": lambda: GATConv(D_IN, D_OUT, heads=2),
}


def _graph():
    """Directed multigraph: parallel edges, repeated self loops, two isolated vertices."""
    return random_graph(N, 400, seed=5, features=D_IN, parallel_edges=True)


def _assignment() -> np.ndarray:
    parts = np.random.default_rng(3).integers(0, WORLD, N)
    parts[:WORLD] = np.arange(WORLD)
    return parts


def _layer(name: str):
    torch.manual_seed(0)
    return LAYERS[name]()


def _weights(width: int) -> torch.Tensor:
    return torch.arange(N * width, dtype=torch.float32).view(N, width).sin()


def _reference(name: str):
    data = _graph()
    layer = _layer(name)
    x = data.x.clone().requires_grad_()
    out = layer(x, data.edge_index)
    (out * _weights(out.size(1))).sum().backward()
    return out.detach().numpy(), x.grad.numpy()


def _rank(rank, world_size, codec):
    wire = _count_wire_bytes(rank, world_size)
    part = list(build_local_partitions(_graph(), _assignment(), world_size))[rank]
    results = {}
    for name in LAYERS:
        layer = distribute(_layer(name))
        exchange = make_exchange("hierarchical", part, codec=codec, ranks_per_node=2)
        x = part.x.clone().requires_grad_()
        wire[0] = 0
        with use_graph_context(GraphContext(part, exchange)):
            out = layer(x, part.edge_index)
        (out * _weights(out.size(1))[part.global_ids]).sum().backward()
        results[name] = {
            "out": out.detach().numpy(),
            "x_grad": x.grad.numpy(),
            "traffic": exchange.counter.as_dicts(),
            "setup": exchange.setup_counter.as_dicts(),
            "num_halo": part.num_halo,
            "wire": wire[0],  # what the collectives moved, the first step's plan included
        }
    return part.global_ids.numpy(), results


@pytest.fixture(scope="module")
def runs():
    for name in LAYERS:  # PyG generates each layer class's code once: before forking
        _reference(name)
    return {codec: run_ranks(_rank, WORLD, codec, timeout=90) for codec in ("fp32", "bf16")}


@pytest.mark.parametrize("name", list(LAYERS))
def test_hierarchical_equals_pyg(name, runs):
    ref_out, ref_grad = _reference(name)
    for ids, results in runs["fp32"]:
        result = results[name]
        np.testing.assert_allclose(result["out"], ref_out[ids], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result["x_grad"], ref_grad[ids], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("codec", ["fp32", "bf16"])
def test_bytes_per_peer_and_level_are_predicted(codec, runs):
    data, assignment = _graph(), _assignment()
    predicted = hierarchical_peer_rows(data, assignment, TOPOLOGY)
    row_bytes = {"fp32": 4, "bf16": 2}[codec]
    for direction, rows in (("forward", predicted), ("backward", predicted.T)):
        measured = np.zeros((WORLD, WORLD), dtype=np.int64)
        for rank, (_, results) in enumerate(runs[codec]):
            for t in results["gcn"]["traffic"]:
                if t["direction"] == direction:
                    measured[rank] += np.asarray(t["bytes_sent_to"]) // (row_bytes * t["width"])
        np.testing.assert_array_equal(measured, rows)
    p2p = partition_metrics(data, assignment, WORLD).peer_rows
    levels, p2p_levels = node_traffic(predicted, TOPOLOGY), node_traffic(p2p, TOPOLOGY)
    assert levels.total_inter_rows < p2p_levels.total_inter_rows  # rows shared inside a node
    # the rows saved on the inter-node link travel the intra-node hop instead
    saved = p2p_levels.total_inter_rows - levels.total_inter_rows
    assert levels.total_intra_rows == p2p_levels.total_intra_rows + saved


@pytest.mark.parametrize("codec", ["fp32", "bf16"])
def test_every_byte_on_the_wire_is_counted(codec, runs):
    """The first exchange builds the plan from the halo ids of the node's ranks: those bytes go
    to ``setup_counter`` (they went uncounted: 160-1,136 bytes per rank), so wire = counted."""
    for rank, (_, results) in enumerate(runs[codec]):
        for name, result in results.items():
            layers = sum(t["bytes_sent"] for t in result["traffic"])
            (setup,) = result["setup"]
            assert (setup["layer"], setup["direction"]) == ("node halo ids", "setup")
            # to the node's other rank (2 per node): this rank's halo size and ids, int64
            assert setup["bytes_sent"] == 8 * (1 + result["num_halo"])
            assert setup["bytes_sent_to"][rank ^ 1] == setup["bytes_sent"]
            assert result["wire"] == layers + setup["bytes_sent"], (rank, name)


def test_metrics_record_the_placement_and_the_exchange_predicts_from_them():
    data, assignment = _graph(), _assignment()
    metrics = partition_metrics(data, assignment, WORLD, ranks_per_node=2)
    again = PartitionMetrics.from_dict(metrics.to_dict())
    np.testing.assert_array_equal(again.hierarchical_peer_rows, metrics.hierarchical_peer_rows)
    part = next(build_local_partitions(data, assignment, WORLD))
    exchange = HierarchicalExchange(part, ranks_per_node=2)
    np.testing.assert_array_equal(
        exchange.predicted_rows_sent(again, "backward"), metrics.hierarchical_peer_rows.sum(0)
    )
    plain = partition_metrics(data, assignment, WORLD)  # no placement: no prediction
    assert "ranks_per_node" not in plain.to_dict()
    assert exchange.predicted_peer_rows(plain, "forward") is None
    one_node = HierarchicalExchange(part, ranks_per_node=4)  # one node: the p2p rows
    np.testing.assert_array_equal(one_node.predicted_peer_rows(plain, "forward"), plain.peer_rows)
    with pytest.raises(ValueError, match="positive divisor of the world size 4"):
        HierarchicalExchange(part, ranks_per_node=3)


def test_gateways_are_spread_over_the_ranks_that_need_a_row():
    vertex = np.array([7, 7, 8, 8, 8, 9])
    rank = np.array([3, 2, 2, 3, 4, 5])
    gateway = choose_gateways(vertex, rank, np.zeros(6, dtype=np.int64))
    # row 7: ranks (2, 3), 7 mod 2 = 1 → 3; row 8: (2, 3, 4), 8 mod 3 = 2 → 4; row 9 → 5
    np.testing.assert_array_equal(gateway, [3, 3, 4, 4, 4, 5])
    # per node: the same row needed on two nodes has a gateway on each
    np.testing.assert_array_equal(choose_gateways([7, 7], [2, 3], [0, 1]), [2, 3])
