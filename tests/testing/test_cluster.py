"""The emulated cluster: names, rates, CPU sets and requirements everywhere; namespaces, shaped
links, streaming, exit codes, cleanup and the host left as it was where namespaces can be made
(root, ``ip``, ``tc``, ``taskset``; skipped with the reason elsewhere)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import pytest

from lightning_gnn_dist.testing import cluster as cluster_module
from lightning_gnn_dist.testing.cluster import (
    PREFIX,
    EmulatedCluster,
    EmulationError,
    emulation_unavailable_reason,
    list_namespaces,
    missing_requirements,
    parse_rate,
    reap_stale_namespaces,
    shape_own_link,
)
from lightning_gnn_dist.testing.node_runs import run_nodes

needs_namespaces = pytest.mark.skipif(
    emulation_unavailable_reason() is not None,
    reason=str(emulation_unavailable_reason()),
)


@pytest.mark.parametrize(
    "text, bits",
    [("100mbit", 1e8), ("1gbit", 1e9), ("2.5GBit", 2.5e9), ("800kbit", 8e5), ("125mbps", 1e9)],
)
def test_rates_read_like_tc(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["1g", "fast", "0mbit", "-1gbit", "1 gigabit"])
def test_bad_rate_says_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"e\.g\. 100mbit, 1gbit"):
        parse_rate(text)


def test_cpu_sets_are_dealt_round_robin_and_sharing_is_reported(monkeypatch):
    monkeypatch.setattr(cluster_module.os, "sched_getaffinity", lambda pid: {0, 1})
    assert cluster_module._cpu_sets(2, 1) == ([[0], [1]], False)
    assert cluster_module._cpu_sets(4, 1) == ([[0], [1], [0], [1]], True)
    assert cluster_module._cpu_sets(1, 2) == ([[0, 1]], False)


def test_missing_requirements_are_named(monkeypatch):
    monkeypatch.setattr(cluster_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(cluster_module, "_effective_capabilities", lambda: 0)
    missing = " ".join(missing_requirements())
    for needed in ("`ip`", "`tc`", "`taskset`", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "sudo"):
        assert needed in missing
    assert "`tc`" not in " ".join(missing_requirements(shaping=False))


def test_names_of_other_owners_are_not_ours():
    assert cluster_module._owner_of(f"{PREFIX}-12-345-0-n0") == (12, 345)
    assert cluster_module._owner_of(f"{PREFIX}-12-345-3-sw") == (12, 345)
    for name in ("lgd-emu-12-0-n0", "other-12-345-0-n0", f"{PREFIX}-12-345-0-n0x", "netns0"):
        assert cluster_module._owner_of(name) is None


@pytest.mark.parametrize("nodes", [0, 251, 1.5])
def test_bad_node_count(nodes):
    with pytest.raises(ValueError, match="nodes="):
        EmulatedCluster(nodes)


# -- with namespaces -----------------------------------------------------------------------


def _host_network() -> list[str]:
    """The host's interfaces, addresses and routes (what the cluster must never change)."""
    return [
        subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
        for args in (["addr"], ["route"], ["-6", "route"], ["rule"])
    ]


def _qdisc(namespace: str, device: str) -> dict:
    out = subprocess.run(
        ["tc", "-n", namespace, "-j", "qdisc", "show", "dev", device],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)[0]


SEND = """
import os, socket, sys
node, size = int(os.environ["LGD_EMULATED_NODE"]), int(sys.argv[1])
if node == 0:
    server = socket.create_server(("10.77.0.1", 5001))
    print("listening", flush=True)
    connection, _ = server.accept()
    got = 0
    while chunk := connection.recv(1 << 16):
        got += len(chunk)
    print(f"received {got}")
else:
    import time
    for _ in range(100):
        try:
            connection = socket.create_connection(("10.77.0.1", 5001))
            break
        except OSError:
            time.sleep(0.05)
    connection.sendall(bytes(size))
    connection.close()
    sys.exit(3)
"""


@needs_namespaces
def test_nodes_talk_over_shaped_links_and_everything_goes_away():
    host = _host_network()
    out = io.StringIO()
    size = 300_000
    with EmulatedCluster(2, bandwidth="100mbit", cpus_per_node=1) as cluster:
        names = {cluster.switch, *cluster.namespaces}  # only ours: others may run beside us
        assert names <= set(list_namespaces())
        for namespace in cluster.namespaces:  # the upload of each node ...
            qdisc = _qdisc(namespace, "eth0")
            assert qdisc["kind"] == "tbf" and qdisc["options"]["rate"] == 12_500_000  # bytes/s
        for port in ("p0", "p1"):  # ... and its download, on the switch
            assert _qdisc(cluster.switch, port)["kind"] == "tbf"
        before = cluster.link_bytes()
        commands = [
            cluster.exec_prefix(i) + [sys.executable, "-c", SEND, str(size)] for i in range(2)
        ]
        codes = run_nodes(cluster, commands, out=out)
        after = cluster.link_bytes()
        assert _host_network() == host  # nothing outside the namespaces changed
    assert codes == [0, 3]
    lines = out.getvalue().splitlines()
    assert "[node 0] listening" in lines and f"[node 0] received {size}" in lines
    assert after[1]["tx_bytes"] - before[1]["tx_bytes"] >= size  # it crossed node 1's link
    assert after[0]["rx_bytes"] - before[0]["rx_bytes"] >= size
    assert not names & set(list_namespaces())
    assert _host_network() == host


@needs_namespaces
def test_two_clusters_of_one_process_do_not_share_names():
    with EmulatedCluster(1) as first, EmulatedCluster(1) as second:
        assert first.namespaces != second.namespaces and first.switch != second.switch
        first.destroy()
        assert second.namespaces[0] in list_namespaces()
    assert not {*first.namespaces, *second.namespaces} & set(list_namespaces())


@needs_namespaces
def test_a_node_that_fails_ends_the_others_after_the_grace_period():
    out = io.StringIO()
    with EmulatedCluster(2) as cluster:
        commands = [cluster.exec_prefix(0) + ["sleep", "60"], cluster.exec_prefix(1) + ["false"]]
        codes = run_nodes(cluster, commands, out=out, grace_s=0.2)
    assert codes == [128 + 15, 1]  # node 0 ended by SIGTERM
    assert "node 1 exited with code 1" in out.getvalue()


@needs_namespaces
def test_stop_early_ends_the_others_at_once_without_a_word():
    out = io.StringIO()
    with EmulatedCluster(2) as cluster:
        commands = [cluster.exec_prefix(0) + ["sleep", "60"], cluster.exec_prefix(1) + ["false"]]
        start = time.monotonic()
        codes = run_nodes(cluster, commands, out=out, grace_s=60, stop_early=lambda: True)
    assert codes == [128 + 15, 1] and time.monotonic() - start < 30  # not the grace period
    assert out.getvalue() == ""


@needs_namespaces
def test_links_not_as_made_are_named():
    """Issue 29, item 8: a link that is down, or shaped otherwise than the cluster made it, is
    named with its end (what emulate says when a run ends by a collective timeout)."""
    with EmulatedCluster(3, bandwidth="1gbit") as cluster:
        assert cluster.link_faults() == {}
        cluster.set_bandwidth("100mbit")  # the cluster's own change: as made
        assert cluster.link_faults() == {}
        subprocess.run(["ip", "-n", cluster.switch, "link", "set", "p1", "down"], check=True)
        for namespace, device in ((cluster.namespaces[2], "eth0"), (cluster.switch, "p2")):
            subprocess.run(
                ["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf"]
                + ["rate", "1kbit", "burst", "1600", "latency", "200ms"],
                check=True,
            )
        assert cluster.link_faults() == {
            1: "without carrier at the node's end, down at the switch's end",
            2: "shaped to 1kbit at both ends",
        }


def test_nodes_log_torch_errors_only_unless_told_otherwise():
    """c10d's "hostname of the client socket cannot be retrieved" warning (a namespace resolves
    no names) is a C++ warning: the nodes run at torch's C++ log level ERROR."""
    cluster = EmulatedCluster(2)  # not created: the environment only
    assert cluster.node_environment(0, {})["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    mine = cluster.node_environment(0, {"TORCH_CPP_LOG_LEVEL": "INFO"})
    assert mine["TORCH_CPP_LOG_LEVEL"] == "INFO"


@needs_namespaces
def test_stale_namespaces_of_dead_owners_are_removed_with_their_processes():
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"{PREFIX}-{gone.pid}-1-0-n0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "60"])
    with EmulatedCluster(1) as live:  # the next cluster removes it first
        assert orphan.wait(timeout=10) == -9
        assert stale not in list_namespaces()
        reaped = reap_stale_namespaces()  # a live owner's namespaces are left alone
        assert not {live.switch, *live.namespaces} & set(reaped)
        assert live.namespaces[0] in list_namespaces()
    subprocess.run(["ip", "netns", "add", stale], check=True)
    # (another test run beside this one may have stale namespaces of its own)
    assert stale in reap_stale_namespaces() and stale not in list_namespaces()


def test_without_privileges_creation_fails_before_making_anything(monkeypatch):
    monkeypatch.setattr(cluster_module, "_effective_capabilities", lambda: 0)
    with pytest.raises(EmulationError, match="CAP_NET_ADMIN and CAP_SYS_ADMIN"):
        EmulatedCluster(2).create()
    assert not [n for n in list_namespaces() if n.startswith(f"{PREFIX}-{os.getpid()}-")]


@needs_namespaces
def test_rates_change_on_a_running_cluster_and_from_inside_a_node(monkeypatch):
    with EmulatedCluster(2, bandwidth="100mbit") as cluster:
        cluster.set_bandwidth("1gbit")
        for namespace in cluster.namespaces:
            assert _qdisc(namespace, "eth0")["options"]["rate"] == 125_000_000
        for variable, value in cluster.node_environment(1).items():
            if variable.startswith("LGD_EMULATED_"):
                monkeypatch.setenv(variable, value)
        shape_own_link("10mbit")  # node 1's link, both ends; node 0's untouched
        assert _qdisc(cluster.namespaces[1], "eth0")["options"]["rate"] == 1_250_000
        assert _qdisc(cluster.switch, "p1")["options"]["rate"] == 1_250_000
        assert _qdisc(cluster.switch, "p0")["options"]["rate"] == 125_000_000
        shape_own_link(None)
        assert _qdisc(cluster.namespaces[1], "eth0")["kind"] != "tbf"
        cluster.set_bandwidth(None)
        assert _qdisc(cluster.switch, "p0")["kind"] != "tbf"


def test_shaping_outside_a_node_is_refused(monkeypatch):
    for variable in ("LGD_EMULATED_NODE", "LGD_EMULATED_NAMESPACE", "LGD_EMULATED_SWITCH"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(EmulationError, match="inside a node of an emulated cluster"):
        shape_own_link("1gbit")
    monkeypatch.setenv("LGD_EMULATED_NODE", "0")
    monkeypatch.setenv("LGD_EMULATED_NAMESPACE", "host-ns")  # not one of ours: refused
    monkeypatch.setenv("LGD_EMULATED_SWITCH", f"{PREFIX}-1-2-0-sw")
    with pytest.raises(EmulationError, match="inside a node"):
        shape_own_link("1gbit")
