"""The network probe on a direct gloo group: both levels and the all-to-all measured where the
placement has them, sizes that stop early on a slow link, and a JSON the cost model reads."""

import json

import pytest

from lightning_gnn_dist.costmodel import Network
from lightning_gnn_dist.costmodel.probe import (
    ALL_TO_ALL_MAX_BYTES,
    _pairs,
    _past_cap,
    probe_network,
)
from tests.distributed import run_ranks

SIZES = (64, 1 << 16, 1 << 24)  # 16 MiB: ~10 ms on loopback, above a busy machine's jitter


def _probe(rank, world_size, nodes, sizes, max_seconds, cap=ALL_TO_ALL_MAX_BYTES):
    result = probe_network(
        nodes[rank], sizes, repeats=2, max_seconds=max_seconds, all_to_all_max_bytes=cap
    )
    return result.to_dict()


def test_probe_measures_both_levels_and_the_all_to_all(tmp_path):
    nodes = [0, 0, 1, 1]  # two "nodes" of two ranks (all on loopback here)
    results = run_ranks(_probe, 4, nodes, SIZES, 10.0, timeout=120)
    content = results[0]  # the times are agreed: every rank returns the same
    assert all(r == content for r in results[1:])
    assert content["world_size"] == 4 and content["nodes"] == 2
    assert content["node_of_rank"] == nodes
    levels = content["levels"]
    assert levels["inter_node"]["ranks"] == [0, 2] and levels["intra_node"]["ranks"] == [0, 1]
    assert levels["all_to_all"]["ranks"] is None
    for level in levels.values():
        assert level["sizes"] and level["bandwidth_bytes_per_s"] > 0 and level["latency_s"] >= 0
    assert levels["inter_node"]["sizes"] == list(SIZES)
    # (P − 1) × per-peer bytes; past the all-to-all's 4 MiB only while the bandwidth hides
    a2a = levels["all_to_all"]
    assert a2a["sizes"] == [s // 3 * 3 for s in SIZES[: len(a2a["sizes"])]]
    assert len(a2a["sizes"]) == 3 or a2a["seconds"][-1] >= 10 * a2a["seconds"][0]
    path = tmp_path / "net.json"
    path.write_text(json.dumps(content))
    inter = Network.from_json(path)
    assert inter.bandwidth_bytes_per_s == levels["inter_node"]["bandwidth_bytes_per_s"]


def test_sizes_stop_growing_once_a_transfer_would_take_too_long():
    """With a tiny time limit, sizes grow only until the bandwidth shows (10x the smallest's
    time), never all the way when that came earlier."""
    sizes = (64, 1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24)
    (content, _) = run_ranks(_probe, 2, [0, 1], sizes, 1e-9, timeout=120)
    level = content["levels"]["inter_node"]
    measured, seconds = level["sizes"], level["seconds"]
    assert measured == list(sizes[: len(measured)]) and len(measured) >= 2
    assert all(t < 10 * seconds[0] for t in seconds[1:-1])
    assert seconds[-1] >= 10 * seconds[0] or len(measured) == len(sizes)
    assert content["levels"]["intra_node"] is None


def test_the_all_to_all_stops_past_its_cap_once_the_bandwidth_shows():
    cap = 1 << 22
    assert not _past_cap(1 << 22, [64, 1 << 20], [1e-4, 1e-2], cap)  # at the cap: measured
    assert _past_cap(1 << 24, [64, 1 << 22], [1e-4, 1e-2], cap)  # past it, bandwidth shown
    assert not _past_cap(1 << 24, [64, 1 << 22], [1e-4, 9e-4], cap)  # not shown yet: go on
    assert not _past_cap(1 << 24, [1 << 22], [1e-2], cap)  # a fit needs two sizes


def test_pairs_follow_the_placement():
    assert _pairs([0, 0, 1, 1]) == {"inter_node": (0, 2), "intra_node": (0, 1)}
    assert _pairs([5, 7]) == {"inter_node": (0, 1), "intra_node": None}
    assert _pairs([3, 3, 3]) == {"inter_node": None, "intra_node": (0, 1)}


def test_probe_refuses_bad_sizes_and_a_missing_group():
    with pytest.raises(RuntimeError, match="needs a process group"):
        probe_network(0)
