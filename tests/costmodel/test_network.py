"""Network parameters: the fit of latency and bandwidth to measured transfers, and reading a
probe's JSON."""

import json

import numpy as np
import pytest

from lightning_gnn_dist.costmodel import Network, TwoLevelNetwork
from lightning_gnn_dist.costmodel.network import fit_network
from lightning_gnn_dist.costmodel.probe import LevelMeasurement, NetworkProbe

SIZES = np.array([64, 1024, 16384, 262144, 4194304], dtype=float)


def test_fit_recovers_latency_and_bandwidth_exactly():
    truth = Network(bandwidth_bytes_per_s=25e6, latency_s=80e-6)
    fitted = fit_network(SIZES, truth.seconds(SIZES, 1))
    assert fitted.bandwidth_bytes_per_s == pytest.approx(25e6, rel=1e-9)
    assert fitted.latency_s == pytest.approx(80e-6, rel=1e-9)


def test_noisy_small_transfers_do_not_bend_the_bandwidth():
    truth = Network(bandwidth_bytes_per_s=25e6, latency_s=80e-6)
    seconds = truth.seconds(SIZES, 1)
    seconds[1:3] += 2e-3  # scheduling hiccups of a busy machine on two small sizes
    fitted = fit_network(SIZES, seconds)
    assert fitted.bandwidth_bytes_per_s == pytest.approx(25e6, rel=0.01)
    assert fitted.latency_s == pytest.approx(80e-6, rel=0.05)


@pytest.mark.parametrize(
    "sizes, seconds, message",
    [
        ([64], [1e-3], "at least two distinct sizes"),
        ([64, 64], [1e-3, 1e-3], "at least two distinct sizes"),
        ([64, 128], [1e-3, 0.0], "positive times"),
        ([64, 1 << 20], [1e-2, 1e-3], "do not grow with the sizes"),
    ],
)
def test_fit_refuses_what_it_cannot_fit(sizes, seconds, message):
    with pytest.raises(ValueError, match=message):
        fit_network(sizes, seconds)


def test_network_from_a_probe_json_or_a_plain_dict(tmp_path):
    probe = tmp_path / "probe.json"
    levels = {
        "inter_node": {"bandwidth_bytes_per_s": 1e8, "latency_s": 1e-4, "sizes": [], "seconds": []},
        "intra_node": None,
        "all_to_all": {"bandwidth_bytes_per_s": 9e7, "latency_s": 2e-4},
    }
    probe.write_text(json.dumps({"world_size": 2, "levels": levels}))
    # one rank per node: the all-to-all's bandwidth is the link's duplex bandwidth
    assert Network.from_json(probe) == Network(1e8, 1e-4, duplex_bandwidth_bytes_per_s=9e7)
    assert Network.from_json(probe, "all_to_all") == Network(9e7, 2e-4)
    with pytest.raises(ValueError, match="no 'intra_node' level"):
        Network.from_json(probe, "intra_node")
    plain = tmp_path / "net.json"
    plain.write_text(json.dumps(Network(5e9, 3e-6).to_dict()))
    assert Network.from_json(plain) == Network(5e9, 3e-6)
    plain.write_text(json.dumps(Network(5e9, 3e-6, 2e9).to_dict()))
    assert Network.from_json(plain) == Network(5e9, 3e-6, 2e9)
    plain.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a network description"):
        Network.from_json(plain)


def test_two_level_network_from_a_probe_json_or_its_own_dict(tmp_path):
    probe = tmp_path / "probe.json"
    levels = {
        "inter_node": {"bandwidth_bytes_per_s": 1e8, "latency_s": 1e-4},
        "intra_node": {"bandwidth_bytes_per_s": 5e9, "latency_s": 2e-5},
    }
    probe.write_text(json.dumps({"world_size": 4, "levels": levels}))
    both = TwoLevelNetwork.from_json(probe)
    assert both == TwoLevelNetwork(Network(5e9, 2e-5), Network(1e8, 1e-4))
    own = tmp_path / "levels.json"
    own.write_text(json.dumps(both.to_dict()))
    assert TwoLevelNetwork.from_json(own) == both
    levels["intra_node"] = None  # a probe of one rank per node
    probe.write_text(json.dumps({"world_size": 2, "levels": levels}))
    with pytest.raises(ValueError, match="no 'intra_node' level"):
        TwoLevelNetwork.from_json(probe)


def _level(ranks, truth: Network, per_message: float = 0.0) -> LevelMeasurement:
    seconds = truth.seconds(SIZES, 1) + per_message
    return LevelMeasurement(
        ranks, SIZES.astype(int).tolist(), seconds.tolist(), fit_network(SIZES, seconds)
    )


def test_calibration_from_synthetic_probe_numbers():
    """The probe's ping-pong and all-to-all, generated from known links, give back the one-way
    bandwidth, the per-message latency and the duplex bandwidth (with the all-to-all's own
    per-collective cost kept out of the per-message latency)."""
    one_way = Network(bandwidth_bytes_per_s=6e6, latency_s=60e-6)
    everyone = Network(bandwidth_bytes_per_s=3e6, latency_s=60e-6)  # half: acks behind data
    levels = {
        "inter_node": _level((0, 1), one_way),
        "intra_node": None,
        "all_to_all": _level(None, everyone, per_message=2e-3),
    }
    network = NetworkProbe(2, [0, 1], levels).network
    assert network.bandwidth_bytes_per_s == pytest.approx(6e6, rel=1e-9)
    assert network.latency_s == pytest.approx(60e-6, rel=1e-6)
    assert network.duplex_bandwidth == pytest.approx(3e6, rel=1e-9)
    # an exchange of 1 MB each way with one message takes the duplex time; 3 MB out and 1 MB
    # in: 1 MB both ways at once, the other 2 MB alone
    assert network.seconds(1e6, 1, duplex=True) == pytest.approx(1e6 / 3e6 + 60e-6)
    assert network.seconds(1e6, 1) == pytest.approx(1e6 / 6e6 + 60e-6)
    assert network.exchange_seconds(1e6, 1e6, 1) == pytest.approx(1e6 / 3e6 + 60e-6)
    assert network.exchange_seconds([3e6, 1e6], [1e6, 3e6], 2) == pytest.approx(
        [1e6 / 3e6 + 2e6 / 6e6 + 120e-6] * 2
    )
    # two ranks per node: the all-to-all mixes both levels, so no duplex bandwidth from it
    levels["intra_node"] = _level((0, 1), Network(1e9, 10e-6))
    shared = NetworkProbe(4, [0, 0, 1, 1], {**levels, "inter_node": _level((0, 2), one_way)})
    assert shared.network.duplex_bandwidth_bytes_per_s is None
    assert Network().duplex_bandwidth == Network().bandwidth_bytes_per_s
