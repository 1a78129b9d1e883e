"""Network parameters: the fit of latency and bandwidth to measured transfers, and reading a
probe's JSON."""

import json

import numpy as np
import pytest

from lightning_gnn_dist.costmodel import Network, TwoLevelNetwork
from lightning_gnn_dist.costmodel.network import fit_network

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
    assert Network.from_json(probe) == Network(1e8, 1e-4)
    assert Network.from_json(probe, "all_to_all") == Network(9e7, 2e-4)
    with pytest.raises(ValueError, match="no 'intra_node' level"):
        Network.from_json(probe, "intra_node")
    plain = tmp_path / "net.json"
    plain.write_text(json.dumps(Network(5e9, 3e-6).to_dict()))
    assert Network.from_json(plain) == Network(5e9, 3e-6)
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
