"""Bytes per (sending rank, receiving rank) that each exchange mode records equal its per-pair
prediction from the partition metrics, whose row sums are the per-rank prediction."""

import numpy as np
import pytest

from lightning_gnn_dist.comm import EXCHANGE_MODES
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.comm.test_exchange import WIDTH, _rank, _setup
from tests.distributed import run_ranks


@pytest.mark.parametrize("mode", ["p2p", "broadcast"])
def test_bytes_per_rank_pair_equal_the_prediction(mode):
    world_size, seed = 3, 5
    results = run_ranks(_rank, world_size, seed, mode)
    data, assignment, _ = _setup(seed, world_size)
    metrics = partition_metrics(data, assignment, world_size)
    exchange = EXCHANGE_MODES[mode]
    for direction in ("forward", "backward"):
        measured = np.array(
            [
                next(t for t in r["traffic"] if t["direction"] == direction)["bytes_sent_to"]
                for r in results
            ]
        )
        predicted = exchange.predicted_peer_rows(metrics, direction)
        np.testing.assert_array_equal(measured, predicted * WIDTH * 4)
        np.testing.assert_array_equal(
            predicted.sum(1), exchange.predicted_rows_sent(metrics, direction)
        )
        assert measured.sum() > 0
