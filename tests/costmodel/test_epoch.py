"""The cost model's formula against hand computation (exact binary fractions), its inputs
from the exchange modes' predictions, and calibration's shape (no timing asserts)."""

from dataclasses import replace

import numpy as np
import pytest

from lightning_gnn_dist.costmodel import (
    NETWORKS,
    ComputeCosts,
    Network,
    TwoLevelNetwork,
    calibrate,
    gcn_layers,
    predict_epoch,
    rdm_pick,
)
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import PartitionMetrics, partition_metrics
from lightning_gnn_dist.partition.placement import Topology
from tests.helpers import random_graph

# Two parts: part 0 owns 3 rows (7 non-zeros) and sends 2 rows to part 1; part 1 owns 2 rows
# (5 non-zeros) and sends 1 row to part 0.
METRICS = PartitionMetrics(
    num_parts=2,
    num_nodes=5,
    peer_rows=np.array([[0, 2], [1, 0]]),
    part_sizes=np.array([3, 2]),
    part_nnz=np.array([7, 5]),
    edge_cut=2,
)
COSTS = ComputeCosts(aggregate_seconds=1.0, dense_seconds=0.5, elementwise_seconds=0.25)
NET = Network(bandwidth_bytes_per_s=4.0, latency_s=0.5)  # one float32 element per second


def test_gcn_layers_exchange_the_narrower_width_and_skip_a_widening_first_backward():
    assert [(layer.forward_width, layer.backward_width) for layer in gcn_layers([4, 2, 1])] == [
        (2, 2),
        (1, 1),
    ]
    assert [(layer.forward_width, layer.backward_width) for layer in gcn_layers([2, 4, 1])] == [
        (2, 0),
        (1, 1),
    ]
    with pytest.raises(ValueError, match=r"\[8\]"):
        gcn_layers([8])


def test_p2p_epoch_matches_hand_computation():
    estimate = predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p")
    # one layer 4 -> 2, aggregated and exchanged at width 2, both directions
    # compute: nnz·2·1 + rows·8·0.5 + rows·2·0.25
    np.testing.assert_array_equal(
        estimate.compute_seconds, [7 * 2 + 3 * 4 + 3 * 0.5, 5 * 2 + 2 * 4 + 2 * 0.5]
    )
    # forward: rank 0 sends 2 rows, receives 1; rank 1 sends 1, receives 2 (2 columns, one
    # element per second) and one message each way; backward mirrors it: same max per rank.
    halo = 2 * (2 * 2 + 1 * 0.5)
    # gradient all-reduce: 2·(P−1)/P·(8 + 2) elements + 2·(P−1) messages
    allreduce = 10 + 2 * 0.5
    np.testing.assert_array_equal(estimate.comm_seconds, [halo + allreduce] * 2)
    np.testing.assert_array_equal(estimate.bytes_sent, [(2 + 1) * 2 * 4, (1 + 2) * 2 * 4])
    assert estimate.epoch_seconds == 27.5 + halo + allreduce
    assert estimate.epoch_seconds == estimate.rank_seconds.max()


@pytest.mark.parametrize(("codec", "row_bytes"), [("int8", 3), ("int4", 3), ("bf16", 4)])
def test_a_codec_scales_the_halo_bytes_and_seconds(codec, row_bytes):
    """Width 2: int8 2 + 1 bytes per row (codes + a narrow row's header), int4 1 + 2, bf16 2·2
    (fp32: 8)."""
    fp32 = predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p")
    coded = predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p", codec=codec)
    np.testing.assert_array_equal(coded.bytes_sent, fp32.bytes_sent * row_bytes / 8)
    halo = 2 * (2 * row_bytes / 4 + 1 * 0.5)  # the hand computation above, row_bytes per row
    np.testing.assert_array_equal(coded.comm_seconds, [halo + 10 + 2 * 0.5] * 2)
    per_direction = predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p", codec={"backward": codec})
    # both directions move the same rows in total, so half the bytes change
    assert per_direction.bytes_sent.sum() == (fp32.bytes_sent + coded.bytes_sent).sum() / 2
    with pytest.raises(ValueError, match="adaptive"):
        predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p", codec="adaptive")


def test_broadcast_waits_for_every_root_and_cached_predicts_its_base():
    broadcast = predict_epoch(METRICS, [4, 2], COSTS, NET, "broadcast")
    # P = 2: forward, a tree of ⌈log2 2⌉ = 1 round: N rows of 2 columns + P·1 messages;
    # backward, the reduce: half the rows in the ring, half in the gather, P·(P−1) messages each
    forward = 1 * 5 * 2 + 2 * 1 * 0.5
    backward = 2 * (5 * 2 / 2 + 2 * 1 * 0.5)
    np.testing.assert_array_equal(broadcast.comm_seconds, [forward + backward + 11] * 2)
    # forward: its own block to the peer; backward: a partial gradient of the other block
    np.testing.assert_array_equal(broadcast.bytes_sent, [(3 + 2) * 2 * 4, (2 + 3) * 2 * 4])
    cached = predict_epoch(METRICS, [4, 2], COSTS, NET, "cached")
    p2p = predict_epoch(METRICS, [4, 2], COSTS, NET, "p2p")
    np.testing.assert_array_equal(cached.comm_seconds, p2p.comm_seconds)


# One float32 per second one way, half that while every link is busy both ways (the probe's
# all-to-all on the emulated cluster's tbf links).
DUPLEX = Network(bandwidth_bytes_per_s=4.0, latency_s=0.5, duplex_bandwidth_bytes_per_s=2.0)


def test_exchanges_and_the_all_reduce_run_at_the_duplex_bandwidth():
    """Every rank sends and receives at once: the hand computation of the p2p test with the
    rows that travel both ways at once at half the rate, the latency unchanged. Per direction
    each rank sends 2 rows and receives 1 (or the reverse): 1 row of 2 floats both ways at
    2 s a float, the other row alone at 1 s a float. The all-reduce (a ring) at half the rate."""
    estimate = predict_epoch(METRICS, [4, 2], COSTS, DUPLEX, "p2p")
    halo = 2 * (1 * 2 * 2 + 1 * 2 * 1 + 1 * 0.5)
    allreduce = 2 * 10 + 2 * 0.5
    np.testing.assert_array_equal(estimate.comm_seconds, [halo + allreduce] * 2)
    one_way = predict_epoch(
        METRICS, [4, 2], COSTS, replace(DUPLEX, duplex_bandwidth_bytes_per_s=None)
    )
    np.testing.assert_array_equal(one_way.comm_seconds, [2 * (2 * 2 + 0.5) + 10 + 1] * 2)


def test_broadcast_is_priced_as_gloo_runs_it_a_binomial_tree_and_a_ring_reduce():
    """P = 4 (``PLACED``: 2 rows a part), one layer 4 → 2: every root's block is 2 rows of
    2 floats, 4 blocks = 16 floats. Forward: the root's link carries ⌈log2 4⌉ = 2 blocks (a
    flat tree: P − 1 = 3, which over-predicted the 4-node broadcast 1.5× on the emulated
    cluster). Backward: the ring reduce-scatter moves 3/4 of each block both ways at the duplex
    rate, the gather 3/4 more into the root one way."""
    estimate = predict_epoch(PLACED, [4, 2], COSTS, DUPLEX, "broadcast")
    forward = 2 * 16 + 4 * 2 * 0.5
    backward = (12 * 2 + 4 * 3 * 0.5) + (12 + 4 * 3 * 0.5)  # 2 s per float at the duplex rate
    allreduce = 2 * 3 / 4 * 10 * 2 + 2 * 3 * 0.5
    np.testing.assert_array_equal(estimate.comm_seconds, [forward + backward + allreduce] * 4)
    flat = 2 * (3 * 16 + 4 * 3 * 0.5)  # the old formula, both directions
    assert estimate.comm_seconds[0] < flat + allreduce
    # a lossy codec's backward: every peer's encoded block into the root (int8: 2 + 1 B a row)
    int8 = predict_epoch(PLACED, [4, 2], COSTS, DUPLEX, "broadcast", codec={"backward": "int8"})
    np.testing.assert_array_equal(
        int8.comm_seconds, [forward + (3 * 2 * 3 + 4 * 3 * 0.5) + allreduce] * 4
    )
    # one rank per node: the two-level formula is the one-level one
    placed = predict_epoch(
        PLACED, [4, 2], COSTS, TwoLevelNetwork(NET, DUPLEX), "broadcast", topology=Topology(4, 1)
    )
    np.testing.assert_array_equal(placed.comm_seconds, estimate.comm_seconds)


def test_one_rank_has_no_communication_and_oversubscription_scales_compute():
    one = PartitionMetrics(1, 5, np.zeros((1, 1), int), np.array([5]), np.array([12]), 0)
    estimate = predict_epoch(one, [4, 2], COSTS, NET)
    assert estimate.comm_seconds.tolist() == [0.0]
    assert estimate.epoch_seconds == 12 * 2 + 5 * 4 + 5 * 0.5
    fixed = ComputeCosts(1.0, 0.5, 0.25, step_seconds=2.0)
    assert predict_epoch(one, [4, 2], fixed, NET).epoch_seconds == estimate.epoch_seconds + 2
    shared = predict_epoch(METRICS, [4, 2], COSTS, NET, cores=1)
    alone = predict_epoch(METRICS, [4, 2], COSTS, NET)
    np.testing.assert_array_equal(shared.compute_seconds, 2 * alone.compute_seconds)


def test_bytes_equal_the_partition_metrics_on_a_real_partition():
    data = random_graph(60, 240, seed=3)
    metrics = partition_metrics(data, get_partitioner("metis").partition(data, 4), 4)
    estimate = predict_epoch(metrics, [16, 8, 4], COSTS, "infiniband")
    # widths 8 and 4 (both layers narrow): forward sends the send rows, backward the halo rows
    expected = (metrics.send_rows + metrics.recv_rows) * (8 + 4) * 4
    np.testing.assert_array_equal(estimate.bytes_sent, expected)
    assert estimate.bytes_sent.sum() == 2 * metrics.total_volume_rows * (8 + 4) * 4


def test_unknown_network_and_vertex_cut_modes_are_refused():
    with pytest.raises(ValueError, match="'ethernet'.*infiniband, loopback"):
        predict_epoch(METRICS, [4, 2], COSTS, "ethernet")
    with pytest.raises(ValueError, match="'cd-0'"):
        predict_epoch(METRICS, [4, 2], COSTS, NET, "cd-0")
    assert set(NETWORKS) == {"infiniband", "loopback"}


def test_rdm_epoch_matches_hand_computation():
    """One layer 4 → 2 (order ``sd``: SpMM first, then GEMM first backward, which needs no
    communication with the static input): compute is the SpMM on the rank's column block of
    all 12 non-zeros, the GEMM and the element-wise work; the only move is Â·X back to rows."""
    estimate = predict_epoch(METRICS, [4, 2], COSTS, NET, "rdm", rdm_order="sd")
    # SpMM of width 4, columns split 2/2, half of aggregate_seconds (one of the two products)
    spmm = 12 * 2 * 0.5
    np.testing.assert_array_equal(
        estimate.compute_seconds, [spmm + 3 * 4 + 3 * 0.5, spmm + 2 * 4 + 2 * 0.5]
    )
    # V → H of width 4: rank 0 sends the other's 2 rows × its 2 columns (4 elements) and
    # receives 3 × 2 = 6; rank 1 sends 6 and receives 4: one message each
    allreduce = 10 + 2 * 0.5
    np.testing.assert_array_equal(estimate.comm_seconds, [6 + 0.5 + allreduce] * 2)
    np.testing.assert_array_equal(estimate.bytes_sent, [4 * 4, 6 * 4])
    assert rdm_pick(METRICS, [4, 2], COSTS, NET) == "sd"
    with pytest.raises(ValueError, match="exchange='rdm' sends fp32 only"):
        predict_epoch(METRICS, [4, 2], COSTS, NET, "rdm", codec="bf16")
    # one panel per rank (replication 1, CAGNET 1D): no redistribution, whole X gathered
    one_d = predict_epoch(METRICS, [4, 2], COSTS, NET, "rdm", rdm_order="sd", replication=1)
    np.testing.assert_array_equal(one_d.bytes_sent, [3 * 4 * 4, 2 * 4 * 4])


def test_calibrate_returns_positive_costs_for_the_model_widths():
    costs = calibrate([16, 8, 4], num_rows=500, nnz_per_row=4, repeats=1)
    assert costs.aggregate_seconds > 0 and costs.dense_seconds > 0
    assert costs.elementwise_seconds > 0


def test_partition_compare_prints_the_predicted_epoch(capsys):
    import json

    from lightning_gnn_dist.cli import main

    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = ["partition-compare", "--dataset", spec, "-p", "3", "--methods", "metis", "random"]
    assert main(args + ["--widths", "8,4,3", "--network", "loopback", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(row["predicted_epoch_seconds"] > 0 for row in rows)
    assert all(
        set(row["predicted_epoch_seconds_by_exchange"]) == {"p2p", "broadcast", "rdm"}
        and len(row["rdm_order"]) == 4
        for row in rows
    )
    assert main(args + ["--widths", "8,4,3"]) == 0
    printed = capsys.readouterr().out
    assert "pred. epoch ms" in printed and "pred. rdm ms" in printed
    assert main(args + ["--widths", "8,x"]) == 2
    assert "--widths '8,x'" in capsys.readouterr().err


# 2 nodes x 2 ranks; ranks 0, 1 on node 0 and 2, 3 on node 1.
PLACED = PartitionMetrics(
    num_parts=4,
    num_nodes=8,
    peer_rows=np.array([[0, 2, 3, 0], [1, 0, 0, 1], [1, 0, 0, 4], [0, 0, 0, 0]]),
    part_sizes=np.array([2, 2, 2, 2]),
    part_nnz=np.array([4, 4, 4, 4]),
    edge_cut=5,
    ranks_per_node=2,
    hierarchical_peer_rows=np.array([[0, 2, 3, 0], [1, 0, 0, 1], [1, 0, 0, 4], [0, 0, 0, 0]]),
)
LEVELS = TwoLevelNetwork(
    intra_node=Network(bandwidth_bytes_per_s=8.0, latency_s=0.25),  # 2 float32 per second
    inter_node=Network(bandwidth_bytes_per_s=4.0, latency_s=0.5),  # 1 float32 per second
)


@pytest.mark.parametrize("exchange", ["p2p", "hierarchical"])
def test_two_level_network_by_hand(exchange):
    """One layer of width 1 (4-byte rows), no compute: per direction (the backward is the
    transpose, same maxima) intra-node rows max(sent, received) = 2, 2, 4, 4 → 1, 1, 2, 2 s
    + one message 0.25 s; the inter-node rows share a node's link: node 0 sends 3 + 1 = 4 rows
    and receives 1, node 1 sends 1 and receives 3 + 1 = 4 → 4 s + one message 0.5 s on every
    rank. p2p overlaps the levels (max), hierarchical runs them in turn (sum). The gradient
    all-reduce (2 parameters, ring on the inter-node link): 2·3/4·2·4 B / 4 B/s + 6 · 0.5 s = 6 s."""
    free = ComputeCosts(0.0, 0.0, 0.0)
    estimate = predict_epoch(
        PLACED, [1, 1], free, LEVELS, exchange=exchange, topology=Topology(2, 2)
    )
    intra, inter = np.array([1.25, 1.25, 2.25, 2.25]), np.full(4, 4.5)
    per_direction = np.maximum(intra, inter) if exchange == "p2p" else intra + inter
    np.testing.assert_allclose(estimate.comm_seconds, 2 * per_direction + 6.0)
    # inter-node bytes: forward 3, 1, 1, 0 rows; backward (transposed) 1, 0, 3, 1 rows
    np.testing.assert_array_equal(estimate.inter_node_bytes, [16, 4, 16, 4])
    # without a topology: as before, one network for every pair
    flat = predict_epoch(PLACED, [1, 1], free, LEVELS.inter_node, exchange="p2p")
    assert flat.inter_node_bytes is None
    single = predict_epoch(
        PLACED, [1, 1], free, LEVELS.inter_node, exchange="p2p", topology=Topology(1, 4)
    )
    np.testing.assert_allclose(single.comm_seconds, flat.comm_seconds)


def test_two_level_inputs_are_checked():
    free = ComputeCosts(0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="needs the topology"):
        predict_epoch(PLACED, [1, 1], free, LEVELS)
    with pytest.raises(ValueError, match="no hierarchical rows for 1 ranks per node"):
        predict_epoch(
            PLACED, [1, 1], free, LEVELS, exchange="hierarchical", topology=Topology(4, 1)
        )
    with pytest.raises(ValueError, match="has 2 ranks"):
        predict_epoch(PLACED, [1, 1], free, LEVELS, topology=Topology(1, 2))
