"""The ``cached`` exchange (SANCUS): exact at bound 0, skips and reuses rows within a bound,
counts feature and control bytes, returns or drops gradients, and round-trips its state."""

import io

import numpy as np
import pytest
import torch

from lightning_gnn_dist.comm import make_exchange
from lightning_gnn_dist.comm.cached import CachedExchange
from lightning_gnn_dist.data.local import build_local_partitions
from tests.distributed import run_ranks
from tests.helpers import random_graph

WIDTH, NODES = 3, 40


def _parts(world_size, seed=1):
    data = random_graph(NODES, 140, seed, directed=True, features=WIDTH)
    assignment = np.random.default_rng(seed).integers(0, world_size, NODES)
    return list(build_local_partitions(data, assignment, world_size))


def _x(part, epoch, scale):
    """The layer input of ``epoch``: it changes by a relative ``scale`` per epoch."""
    return part.x * (1.0 + scale * epoch)


def _weight(part):
    return torch.arange(part.num_halo * WIDTH, dtype=torch.float32).view(-1, WIDTH) + 1


def _rounds(rank, world_size, mode, options, epochs, scale, state=None, evaluate=False):
    part = _parts(world_size)[rank]
    exchange = make_exchange(mode, part, **options)
    if state is not None:  # bytes: tensors do not travel through the result queue
        exchange.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    out = []
    for epoch in epochs:
        exchange.counter.reset()
        exchange.begin_round(epoch)
        x = _x(part, epoch, scale).requires_grad_()
        halo = exchange(x, "layer0")
        (halo * _weight(part)).sum().backward()
        out.append(
            {
                "halo": halo.detach().numpy(),
                "grad": x.grad.numpy(),
                "traffic": {t["direction"]: t for t in exchange.counter.as_dicts()},
            }
        )
    result = {"rounds": out}
    if isinstance(exchange, CachedExchange):
        result["send_log"] = exchange.send_log
        result["stats"] = exchange.statistics_rows()
        buffer = io.BytesIO()
        torch.save(exchange.state_dict(), buffer)
        result["state"] = buffer.getvalue()
        if evaluate:  # an evaluation round is exact and leaves the cache alone
            before = {k: v.clone() for k, v in exchange._cache.items()}
            exchange.begin_round(None)
            x = _x(part, 100, scale)
            result["eval_halo"] = exchange(x, "layer0").numpy()
            assert all(torch.equal(before[k], exchange._cache[k]) for k in before)
    return result


def _global_x(parts, epoch, scale):
    return torch.cat([_x(p, epoch, scale) for p in parts])


@pytest.mark.parametrize("base", ["p2p", "broadcast"])
@pytest.mark.parametrize("staleness", ["epoch-fixed", "epoch-adaptive", "variation-gap"])
def test_bound_zero_equals_exact_mode(base, staleness):
    world_size, epochs = 3, [0, 1, 2]
    options = {"cache_base": base, "staleness": staleness, "staleness_bound": 0.0}
    exact = run_ranks(_rounds, world_size, base, {}, epochs, 0.1)
    cached = run_ranks(_rounds, world_size, "cached", options, epochs, 0.1)
    for e, c in zip(exact, cached, strict=True):
        for re_, rc in zip(e["rounds"], c["rounds"], strict=True):
            np.testing.assert_allclose(rc["halo"], re_["halo"], rtol=1e-6)
            np.testing.assert_allclose(rc["grad"], re_["grad"], rtol=1e-6)
            for direction in ("forward", "backward"):
                for key in ("bytes_sent", "bytes_received", "messages_sent"):
                    assert rc["traffic"][direction][key] == re_["traffic"][direction][key]
            # control bytes: one all-reduce of P int32 flags, only for the bounds that agree
            control = rc["traffic"].get("control", {}).get("bytes_sent", 0)
            assert control == (0 if staleness == "epoch-fixed" else world_size * 4)
        assert all(s["rounds_skipped"] == 0 and s["bytes_avoided"] == 0 for s in c["stats"])


@pytest.mark.parametrize("base", ["p2p", "broadcast"])
@pytest.mark.parametrize("backward", ["fresh", "drop"])
@pytest.mark.parametrize("staleness", ["epoch-fixed", "epoch-adaptive"])
def test_epoch_bounds_skip_and_reuse_cached_rows(base, backward, staleness):
    """ε = 1: every rank sends on epochs 0, 2, 4; epochs 1, 3 reuse the previous copy."""
    world_size, epochs, scale = 3, [0, 1, 2, 3, 4], 0.1
    options = {
        "cache_base": base,
        "staleness": staleness,
        "staleness_bound": 1,
        "cache_backward": backward,
    }
    exact = run_ranks(_rounds, world_size, base, {}, epochs, scale)
    cached = run_ranks(_rounds, world_size, "cached", options, epochs, scale, None, True)
    parts = _parts(world_size)
    for part, e, c in zip(parts, exact, cached, strict=True):
        assert [entry[0] for entry in c["send_log"]] == epochs
        for epoch, (re_, rc) in enumerate(zip(e["rounds"], c["rounds"], strict=True)):
            fresh = epoch % 2 == 0
            version = epoch if fresh else epoch - 1
            expected = _global_x(parts, version, scale)[part.halo_ids].numpy()
            np.testing.assert_allclose(rc["halo"], expected, rtol=1e-6)
            sent = rc["traffic"]["forward"]["bytes_sent"]
            assert sent == (re_["traffic"]["forward"]["bytes_sent"] if fresh else 0)
            back = rc["traffic"]["backward"]
            if backward == "fresh" or fresh:
                np.testing.assert_allclose(rc["grad"], re_["grad"], rtol=1e-6)
                assert back["bytes_sent"] == re_["traffic"]["backward"]["bytes_sent"]
            else:
                assert back["bytes_sent"] == 0 and back["bytes_received"] == 0
                assert not rc["grad"].any()
        np.testing.assert_allclose(
            c["eval_halo"], _global_x(parts, 100, scale)[part.halo_ids].numpy(), rtol=1e-6
        )
        stats = {s["direction"]: s for s in c["stats"]}
        forward = stats["forward"]
        exact_forward = sum(r["traffic"]["forward"]["bytes_sent"] for r in e["rounds"])
        if exact_forward:
            assert (forward["rounds_sent"], forward["rounds_skipped"]) == (3, 2)
            assert forward["bytes_avoided"] == exact_forward * 2 // 5
        if part.num_halo:
            assert forward["age_max"] == 1
            assert forward["age_mean"] == pytest.approx(2 / 5)


@pytest.mark.parametrize("base", ["p2p", "broadcast"])
def test_variation_gap_sends_only_changed_rows(base):
    """Rows that change by 1 % stay cached under ε_H = 0.05 until the drift exceeds 5 %."""
    world_size, epochs, scale = 2, list(range(8)), 0.01
    options = {"cache_base": base, "staleness": "variation-gap", "staleness_bound": 0.05}
    cached = run_ranks(_rounds, world_size, "cached", options, epochs, scale)
    parts = _parts(world_size)
    # relative change since the send at epoch v: (1 + .01 e)/(1 + .01 v) − 1 > .05 → e − v ≥ 6
    senders = {entry[0]: entry[2] for entry in cached[0]["send_log"]}
    assert senders == {0: [0, 1], **{e: [] for e in range(1, 6)}, 6: [0, 1], 7: []}
    for part, c in zip(parts, cached, strict=True):
        for epoch, rc in enumerate(c["rounds"]):
            version = 0 if epoch < 6 else 6
            expected = _global_x(parts, version, scale)[part.halo_ids].numpy()
            np.testing.assert_allclose(rc["halo"], expected, rtol=1e-6)
            assert rc["traffic"]["control"]["bytes_sent"] == world_size * 4


@pytest.mark.parametrize("base", ["p2p", "broadcast"])
def test_state_round_trip_continues_like_uninterrupted(base):
    world_size, scale = 2, 0.01
    options = {"cache_base": base, "staleness": "variation-gap", "staleness_bound": 0.03}
    whole = run_ranks(_rounds, world_size, "cached", options, list(range(6)), scale)
    first = run_ranks(_rounds, world_size, "cached", options, [0, 1, 2], scale)
    states = [r["state"] for r in first]
    rest = run_ranks(_resume, world_size, options, [3, 4, 5], scale, states)
    for w, f, r in zip(whole, first, rest, strict=True):
        for rw, rr in zip(w["rounds"], f["rounds"] + r["rounds"], strict=True):
            np.testing.assert_array_equal(rw["halo"], rr["halo"])
            np.testing.assert_array_equal(rw["grad"], rr["grad"])
            for direction, traffic in rw["traffic"].items():  # all but the wait time
                assert {**traffic, "seconds": 0} == {**rr["traffic"][direction], "seconds": 0}
        assert w["send_log"] == r["send_log"]


def _resume(rank, world_size, options, epochs, scale, states):
    return _rounds(rank, world_size, "cached", options, epochs, scale, states[rank])


def test_gradient_clipping_scales_threshold_by_sqrt_p():
    world_size = 2
    options = {"staleness_bound": 0, "grad_clip": 1e-3}
    clipped = run_ranks(_rounds, world_size, "cached", options, [0], 0.0)
    exact = run_ranks(_rounds, world_size, "p2p", {}, [0], 0.0)
    parts = _parts(world_size)
    limit = np.sqrt(world_size) * 1e-3
    # rank r's owned gradient is the sum of the clipped halo gradients its peer returned
    for part, c, e in zip(parts, clipped, exact, strict=True):
        peer = 1 - part.part_id
        scale = limit / np.linalg.norm(_weight(parts[peer]).numpy())
        np.testing.assert_allclose(
            c["rounds"][0]["grad"], e["rounds"][0]["grad"] * scale, rtol=1e-5
        )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("cache_base", "ring"),
        ("staleness", "fixed"),
        ("staleness_bound", -1),
        ("cache_backward", "keep"),
        ("grad_clip", 0.0),
    ],
)
def test_bad_options_are_refused_with_the_value(option, value):
    with pytest.raises(ValueError, match=repr(value) if isinstance(value, str) else str(value)):
        CachedExchange(_parts(1)[0], **{option: value})


def test_send_epoch_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    from lightning_gnn_dist.plots.cached import plot_send_epochs

    logs = {"epoch-fixed 1": [(0, "l0", [0, 1]), (1, "l0", []), (2, "l0", [0, 1])]}
    path = plot_send_epochs(logs, tmp_path / "sends.png")
    assert path.stat().st_size > 0
    with pytest.raises(ValueError, match="empty"):
        plot_send_epochs({}, tmp_path / "none.png")
