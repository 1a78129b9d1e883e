"""CommunicationMonitor's split of the halo bytes into inter- and intra-node levels (several
nodes), without a launch: the per-record helpers and the table."""

from types import SimpleNamespace

import numpy as np
import torch
from rich.console import Console

from lightning_gnn_dist.comm.counters import Traffic
from lightning_gnn_dist.lightning.callbacks import (
    CommunicationMonitor,
    _inter_node_bytes,
    _split,
    _topology,
)
from lightning_gnn_dist.partition.placement import Topology


def test_the_launch_topology_is_known_on_several_nodes_only():
    assert _topology(SimpleNamespace(num_nodes=1, world_size=4)) is None
    assert _topology(SimpleNamespace(num_nodes=2, world_size=4)) == Topology(2, 2)


def test_bytes_are_split_by_the_receivers_node():
    topology = Topology(2, 2)
    traffic = Traffic(bytes_sent_to=[0, 10, 20, 30], width=1, calls=2)
    assert _inter_node_bytes(traffic, 0, topology) == 50  # ranks 2, 3 are on node 1
    assert _inter_node_bytes(traffic, 3, topology) == 10  # rank 1 is on node 0
    assert _inter_node_bytes(Traffic(), 0, topology) == -1  # mode without per-peer bytes
    pair_rows = np.array([[0, 1, 2, 0], [1, 0, 0, 1], [0, 0, 0, 3], [1, 0, 2, 0]])
    per_rank = {
        "inter_node_bytes_sent": torch.tensor([8.0, 4.0, 0.0, 4.0]),
        "bytes_sent": torch.tensor([12.0, 8.0, 12.0, 12.0]),
    }
    split = _split(per_rank, None, pair_rows, Traffic(width=1, calls=1), topology)
    # crossing pairs: 0→2 (2 rows), 1→3 (1), 3→0 (1) = 4 rows of 4 bytes
    assert split == {
        "inter_node_bytes_total": 16,
        "intra_node_bytes_total": 28,
        "predicted_inter_node_bytes_total": 16,
    }
    per_rank["inter_node_bytes_sent"][1] = -1
    assert _split(per_rank, None, None, Traffic(), topology)["intra_node_bytes_total"] == -1


def test_the_table_shows_the_levels_when_the_rows_have_them():
    monitor = CommunicationMonitor()
    row = {
        "epoch": 0,
        "layer": "convs.0",
        "direction": "forward",
        "width": 4,
        "codec": "fp32",
        "bytes_total": 160,
        "fp32_bytes_total": 160,
        "predicted_bytes_total": 160,
        "bytes_max": 64,
        "messages_max": 2,
        "seconds_max": 0.01,
    }
    monitor.history = [dict(row)]
    console = Console(width=250, record=True)
    console.print(monitor.table())
    assert "inter-node" not in console.export_text()
    monitor.history = [
        row
        | {
            "inter_node_bytes_total": 96,
            "intra_node_bytes_total": 64,
            "predicted_inter_node_bytes_total": 96,
        }
    ]
    console.print(monitor.table())
    text = console.export_text()
    assert "inter-node" in text and "predicted inter" in text and "intra-node" in text
