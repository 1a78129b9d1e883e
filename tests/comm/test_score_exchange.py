"""The score exchange: far endpoints' rows from their owners, gradients home, bytes predicted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_gnn_dist.comm.score import ScoreExchange, VertexDirectory
from lightning_gnn_dist.data.links import random_link_split
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.store import PartitionStore, partition_to_store
from tests.distributed import run_ranks
from tests.helpers import random_graph

WIDTH = 5


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    graph = random_graph(70, 260, seed=3, directed=False, parallel_edges=True)
    split = random_link_split(graph, 0.2, 0.2, seed=1)
    mp = split.message_passing_graph(graph)
    path = tmp_path_factory.mktemp("score") / "store"
    partition_to_store(mp, get_partitioner("metis", seed=0), 3, path, link=split)
    return str(path)


def _rows_and_gradients(rank, world_size, path):
    store = PartitionStore.open(path)
    part = store.load_part(rank)
    directory = VertexDirectory.from_owner(store.assignment(), world_size)
    gathered = VertexDirectory.gather(part.global_ids, part.num_nodes_global)
    assert torch.equal(gathered.old_to_new, directory.old_to_new)
    table = torch.arange(70 * WIDTH, dtype=torch.float32).view(70, WIDTH)
    h = table[part.global_ids].clone().requires_grad_()
    exchange = ScoreExchange(directory, rank, world_size)
    pairs = part.link_label_index["train"]
    ids = torch.cat([pairs[0], pairs[1], torch.tensor([0, 69, 0])])  # repeats, any owner
    rows = exchange.rows(h, ids)
    weight = torch.linspace(-1, 1, ids.numel()).unsqueeze(1)
    (rows * weight).sum().backward()
    # every rank's pairs add to the owners' gradients: the sum over ranks of what each asked
    expected = torch.zeros(70).index_add_(0, ids, weight.view(-1))
    torch.distributed.all_reduce(expected)
    expected = expected.unsqueeze(1).expand(-1, WIDTH)
    traffic = {(t["layer"], t["direction"]): t for t in exchange.counter.as_dicts()}
    predicted = {
        (layer, d): float(b.sum(1)[rank]) for layer, d, b in exchange.counter.predicted_items()
    }
    return {
        "rows_equal": bool(torch.equal(rows.detach(), table[ids])),
        "grad_diff": float((h.grad - expected[part.global_ids]).abs().max()),
        "sent": {k: t["bytes_sent"] for k, t in traffic.items()},
        "predicted": predicted,
        "received_rows": traffic[("score", "forward")]["rows_received"],
        "far_targets": np.unique(pairs[1][~torch.isin(pairs[1], part.global_ids)]).size,
        "extra": int((~torch.isin(torch.tensor([0, 69]), part.global_ids)).sum()),
        "extra_in_pairs": int(torch.isin(torch.tensor([0, 69]), pairs[1]).sum()),
    }


def test_far_rows_arrive_gradients_go_home_and_bytes_equal_the_prediction(store):
    meta = PartitionStore.open(store).meta["link"]
    for rank, report in enumerate(run_ranks(_rows_and_gradients, 3, store)):
        assert report["rows_equal"]
        assert report["grad_diff"] < 1e-5
        for key, sent in report["sent"].items():
            assert sent == report["predicted"][key], key
        # the pairs' far rows are the stored prediction (plus the extra ids asked)
        assert report["far_targets"] == sum(meta["far_rows"]["train"][rank])
        assert report["received_rows"] >= report["far_targets"]
        assert report["received_rows"] <= report["far_targets"] + report["extra"]
        assert report["sent"][("score", "forward")] > 0


def test_one_rank_needs_no_process_group():
    directory = VertexDirectory.from_owner(np.zeros(10, dtype=np.int64), 1)
    h = torch.randn(10, 3)
    ids = torch.tensor([3, 3, 9, 0])
    assert torch.equal(ScoreExchange(directory, 0, 1).rows(h, ids), h[ids])
