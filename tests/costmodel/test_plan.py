"""The automatic plan: the menu (exact by default, approximate only with ``allow_stale``), a
deterministic pick with a fixed tie order, timed top-k, the table, the stored form and the
option checks."""

import json

import numpy as np
import pytest

from lightning_gnn_dist.costmodel import ComputeCosts, Network
from lightning_gnn_dist.costmodel.plan import (
    Candidate,
    Plan,
    check_plan_options,
    memory_per_rank,
    plan_from_metrics,
    resolve_network,
    select,
    timed_indices,
)
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.helpers import random_graph

COSTS = ComputeCosts(aggregate_seconds=1e-9, dense_seconds=2e-10, elementwise_seconds=1e-9)
SLOW = Network(bandwidth_bytes_per_s=1e6, latency_s=1e-4)
DIMS = [8, 16, 4]


@pytest.fixture(scope="module")
def metrics():
    data = random_graph(300, 1500, seed=3, features=8, parallel_edges=True)
    out = {}
    for method in ("metis", "random"):
        assignment = get_partitioner(method, seed=0).partition(data, 3)
        out[method] = partition_metrics(data, assignment, 3)
    return out


def test_same_inputs_give_the_same_plan_and_the_pick_is_the_fastest(metrics):
    first = plan_from_metrics(metrics, DIMS, COSTS, SLOW)
    again = plan_from_metrics(dict(metrics), DIMS, COSTS, SLOW)
    assert first.to_dict() == again.to_dict()
    seconds = [row.epoch_seconds for row in first.rows]
    assert first.chosen == 0 and seconds == sorted(seconds)
    # on a 1 MB/s link the better cut wins: METIS moves fewer halo rows than random
    assert first.pick.method == "metis"
    assert {r.candidate.exchange for r in first.rows} == {"p2p", "rdm", "broadcast"}
    assert all(r.candidate.rdm_order for r in first.rows if r.candidate.exchange == "rdm")


def test_ties_follow_the_fixed_order(metrics):
    same = {"b": metrics["metis"], "a": metrics["metis"]}  # identical partitions: every row ties
    plan = plan_from_metrics(same, DIMS, COSTS, SLOW, exchanges=["p2p"])
    assert [r.candidate.method for r in plan.rows] == ["b", "a"]  # the order given, not sorted
    flipped = plan_from_metrics(dict(reversed(same.items())), DIMS, COSTS, SLOW, exchanges=["p2p"])
    assert flipped.pick.method == "a"


def test_approximate_candidates_only_with_allow_stale(metrics):
    exact = plan_from_metrics(metrics, DIMS, COSTS, SLOW)
    assert all(r.candidate.exact for r in exact.rows) and len(exact.rows) == 6
    stale = plan_from_metrics(metrics, DIMS, COSTS, SLOW, allow_stale=True)
    kinds = {(r.candidate.exchange, r.candidate.codec) for r in stale.rows}
    assert {("cached", "fp32"), ("p2p", "int8"), ("broadcast", "bf16")} <= kinds
    assert ("rdm", "int8") not in kinds  # rdm refuses lossy codecs
    # comm-bound: an approximate plan is faster, and the reason says it is approximate
    assert not stale.pick.exact and "allow_stale" in stale.reason
    cached = next(r for r in stale.rows if r.candidate.name == "metis + cached")
    p2p = next(r for r in stale.rows if r.candidate.name == "metis + p2p")
    assert cached.bytes_per_rank == pytest.approx(p2p.bytes_per_rank / 2)
    assert cached.candidate.strategy_options() == {
        "exchange": "cached",
        "codec": "fp32",
        "staleness": "epoch-fixed",
        "staleness_bound": 1.0,
    }
    with pytest.raises(ValueError, match="allow_stale=True"):
        check_plan_options({"widths": DIMS, "exchanges": ["cached"]})


def test_timed_top_k_picks_the_fastest_measured(metrics):
    predicted = plan_from_metrics(metrics, DIMS, COSTS, SLOW)
    second = predicted.rows[1].candidate
    plan = plan_from_metrics(
        metrics, DIMS, COSTS, SLOW, measure=lambda c: 1.0 if c == second else 2.0, top_k=3
    )
    assert plan.pick == second and plan.chosen == 1 and "timed" in plan.reason
    assert [r.measured_seconds for r in plan.rows[:4]] == [2.0, 1.0, 2.0, None]
    # per mode: the best prediction of each of the 2 best modes, here p2p and rdm
    timed = select(predicted.rows, lambda c: 1.0 if c.exchange == "rdm" else 2.0, 2, per_mode=True)
    measured = [(r.candidate.exchange, r.measured_seconds) for r in timed.rows]
    assert [m for m in measured if m[1] is not None] == [("p2p", 2.0), ("rdm", 1.0)]
    assert timed.pick.exchange == "rdm" and "exchange modes' best predictions" in timed.reason
    assert timed.rows.index(timed.rows[timed.chosen]) == timed_indices(timed.rows, 2, True)[1]


def test_table_lists_every_candidate_and_marks_the_pick(metrics):
    plan = plan_from_metrics(metrics, DIMS, COSTS, SLOW, sources={"metis": "store"})
    text = plan.text("title")
    for header in ("pred. epoch ms", "MB sent/rank", "memory MB/rank", "partition", "exact"):
        assert header in text
    for row in plan.rows:
        assert row.candidate.name in text
    assert text.count("◀") == 1 and plan.reason.split(":")[0] in text
    assert "store" in text and "given" in text  # random's metrics were passed in
    lines = [line for line in text.splitlines() if "◀" in line]
    assert plan.pick.name in lines[0]
    stored = json.loads(json.dumps(plan.to_dict()))
    assert Plan.from_dict(stored) == plan
    with pytest.raises(ValueError, match="not a stored plan"):
        Plan.from_dict({"format": 1, "rows": []})


def test_memory_model_orders_the_modes(metrics):
    m = metrics["random"]
    p2p, broadcast = memory_per_rank(m, DIMS, "p2p"), memory_per_rank(m, DIMS, "broadcast")
    cached = memory_per_rank(m, DIMS, "cached")
    assert np.all(broadcast > p2p) and np.all(cached > p2p) and p2p.shape == (3,)


def test_plan_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"unknown plan option\(s\) \['widht'\]; valid: widths"):
        check_plan_options({"widht": DIMS})
    with pytest.raises(ValueError, match="needs the model's layer widths"):
        check_plan_options({})
    with pytest.raises(ValueError, match="at least two positive"):
        check_plan_options({"widths": [8]})
    with pytest.raises(ValueError, match="neither a preset"):
        check_plan_options({"widths": DIMS, "network": "ethernet"})
    with pytest.raises(ValueError, match="choose among p2p, rdm, broadcast, cached"):
        check_plan_options({"widths": DIMS, "exchanges": ["cd-0"]})
    options = check_plan_options({"widths": DIMS, "costs": COSTS.__dict__})
    assert options["costs"] == COSTS and options["network"] == "loopback"
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"levels": {"inter_node": SLOW.to_dict()}}))
    assert resolve_network(str(probe)) == SLOW
    duplex = Network(SLOW.bandwidth_bytes_per_s, SLOW.latency_s, SLOW.bandwidth_bytes_per_s / 2)
    assert resolve_network(duplex.to_dict()) == duplex  # a dictionary keeps the duplex rate
    assert Candidate("metis", "rdm", rdm_order="dsds").strategy_options()["rdm_order"] == "dsds"
