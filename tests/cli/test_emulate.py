"""``python -m lightning_gnn_dist emulate``: the LightningCLI across emulated nodes (bytes measured =
predicted, and at least that many crossed the shaped links), interrupted launchers (SIGINT,
SIGKILL) that leave no namespace, one ``error:`` line for what is missing. The runs need root and
iproute2; they are skipped with the reason elsewhere."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from lightning_gnn_dist.cli import main
from lightning_gnn_dist.cli.emulate import _failure, _with_cluster_shape, node_command
from lightning_gnn_dist.cli.torchrun import _report_killed_ranks
from lightning_gnn_dist.lightning.reports import TERMINATED, FailureReport
from lightning_gnn_dist.testing import cluster as cluster_module
from lightning_gnn_dist.testing.cluster import (
    PREFIX,
    EmulatedCluster,
    emulation_unavailable_reason,
    list_namespaces,
)

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "gcn_digits.yaml"
needs_namespaces = pytest.mark.skipif(
    emulation_unavailable_reason() is not None,
    reason=str(emulation_unavailable_reason()),
)


def _launch(args: list[str], tmp_path: Path) -> subprocess.Popen:
    tmpdir = tmp_path / "tmp"  # torchrun's agent leaves its torchelastic_* folder in TMPDIR
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        [sys.executable, "-m", "lightning_gnn_dist", "emulate", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _namespaces_of(pid: int) -> list[str]:
    return [n for n in list_namespaces() if n.startswith(f"{PREFIX}-{pid}-")]


def _comm_totals(metrics_csv: Path) -> tuple[int, int]:
    """(measured, predicted) halo bytes summed over epochs, layers and directions."""
    measured = predicted = 0
    for row in csv.DictReader(open(metrics_csv)):
        for key, value in row.items():
            if not value or not key.startswith("comm/"):
                continue
            if key.endswith("/predicted_bytes_total"):
                predicted += int(float(value))
            elif key.endswith("/bytes_total"):
                measured += int(float(value))
    return measured, predicted


@needs_namespaces
@pytest.mark.slow
@pytest.mark.parametrize(
    "nproc_per_node",
    [1, pytest.param(2, marks=pytest.mark.skipif("not os.environ.get('LGD_EMULATE_2X2')"))],
)
def test_lightning_cli_trains_across_emulated_nodes(tmp_path, nproc_per_node):
    """2 nodes x R ranks, LightningCLI through ``--trainer.num_nodes 2``: the halo bytes equal
    the partition's prediction and at least that many crossed the shaped links (2 x 2 runs with
    ``LGD_EMULATE_2X2=1``: 4 ranks on 2 cores take twice as long)."""
    args = [
        "--nodes=2",
        "--bandwidth=1gbit",
        "--cpus-per-node=1",
        f"--nproc-per-node={nproc_per_node}",
        "--stats-json=stats.json",
        "--",
        "fit",
        "--config",
        str(CONFIG),
        "--trainer.num_nodes",
        "2",
        "--trainer.devices",
        str(nproc_per_node),
        "--trainer.max_epochs",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger+=CSVLogger",
        "--trainer.logger.save_dir",
        "logs",
        "--data.method",
        "random",
        "--test_after_fit",
        "false",
    ]
    proc = _launch(args, tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-4000:]
    assert "[node 0]" in out and "[node 1]" in out
    measured, predicted = _comm_totals(next((tmp_path / "logs").rglob("metrics.csv")))
    assert measured == predicted > 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["exit_codes"] == [0, 0] and stats["cpu_sets"] == [[0], [1]]
    # Every halo byte between the nodes crossed the shaped links (plus headers, the gradient
    # all-reduce and the rendezvous). With 2 ranks per node, some halo stays inside a node.
    crossed = sum(link["tx_bytes"] for link in stats["links"])
    if nproc_per_node == 1:
        assert crossed >= predicted
    else:
        assert crossed > 0
    assert _namespaces_of(proc.pid) == []


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not path.exists():
        proc.kill()
        raise AssertionError(f"{path.name} never appeared: {proc.communicate()[0][-4000:]}")


COLLECTIVE_TIMEOUT = 10  # seconds: GNNStrategy(timeout=...) of the run whose link is cut


@needs_namespaces
@pytest.mark.slow
def test_a_cut_link_is_told_in_one_line_naming_the_link_and_the_timeout(tmp_path):
    """Issue 29, item 8: node 1's link cut mid-epoch (its switch port down). Each rank used to
    say it "stopped after a peer failed" (no peer failed), torchrun added a ChildFailedError
    traceback per node, and c10d a hostname warning per rendezvous. Now one line names the link
    and the timeout, and the run ends non-zero within the timeout and a few seconds."""
    strategy = {"class_path": "lightning_gnn_dist.GNNStrategy"}
    strategy["init_args"] = {"timeout": COLLECTIVE_TIMEOUT}
    args = ["--nodes=2", "--cpus-per-node=1", "--", "fit", "--config", str(CONFIG)]
    args += ["--trainer.max_epochs", "100000", "--trainer.enable_progress_bar", "false"]
    args += ["--trainer.strategy", json.dumps(strategy), "--data.method", "random"]
    args += ["--test_after_fit", "false"]
    proc = _launch(args, tmp_path)
    # Training runs once the first epoch's checkpoint is written (the config's ModelCheckpoint).
    _wait_for(tmp_path / "checkpoints" / "gcn_digits" / "last.ckpt", proc, 240)
    (switch,) = [name for name in _namespaces_of(proc.pid) if name.endswith("-sw")]
    subprocess.run(["ip", "-n", switch, "link", "set", "p1", "down"], check=True)
    cut = time.monotonic()
    out, _ = proc.communicate(timeout=COLLECTIVE_TIMEOUT + 10 + 120)  # a hang guard only
    ended = time.monotonic() - cut
    assert proc.returncode != 0, out[-4000:]
    for noise in ("Traceback", "ChildFailedError", "stopped after a peer failed", "hostname"):
        assert noise not in out, out[-4000:]
    told = [
        line for line in out.splitlines() if re.search("timed out|stopped answering", line, re.I)
    ]
    assert len(told) == 1, out[-4000:]
    assert told[0].startswith("[emulate] node 1's link stopped answering (")
    assert "down at the switch's end" in told[0]
    assert f"the collective timed out after {COLLECTIVE_TIMEOUT} s on rank" in told[0]
    print(f"ended {ended:.1f} s after the cut (timeout {COLLECTIVE_TIMEOUT} s)")
    assert _namespaces_of(proc.pid) == []


def _report(rank, summary, peer=False, at=0.0, timeout=None, trace=""):
    return FailureReport(rank, summary, trace, peer, at, timeout)


_TIMEOUT = "RuntimeError: [gloo] Timed out waiting 10000ms for recv operation to complete"


@pytest.mark.parametrize(
    "reports, faults, line, traceback",
    [
        # a rank's own error wins over the symptoms, and over emulate's own SIGTERM
        (
            [
                _report(0, "RuntimeError: Connection closed by peer", peer=True, at=2),
                _report(1, "ValueError: bad", at=3, trace="Traceback ...\nValueError: bad\n"),
                _report(0, TERMINATED, at=1),
            ],
            {1: "down at the switch's end"},
            "rank 1 failed: ValueError: bad",
            "Traceback ...\nValueError: bad\n",
        ),
        (
            [_report(1, _TIMEOUT, True, 1, 10.0), _report(0, _TIMEOUT, True, 2, 10.0)],
            {1: "shaped to 1kbit at both ends"},
            "node 1's link stopped answering (shaped to 1kbit at both ends): the collective "
            "timed out after 10 s on ranks 0 and 1",
            "",
        ),
        (
            [_report(0, _TIMEOUT, True, 1, 30.0)],
            {},
            "the collective timed out after 30 s on rank 0; every link is as the cluster made "
            "it: a rank stopped answering (stopped, or too slow for the timeout)",
            "",
        ),
        (
            [],
            {0: "down at the node's end"},
            "node 0's link stopped answering (down at the node's end)",
            "",
        ),
        ([_report(1, "killed by SIGKILL", at=1)], {}, "rank 1 failed: killed by SIGKILL", ""),
        ([_report(0, TERMINATED, at=1)], {}, f"rank 0 failed: {TERMINATED}", ""),
        ([], {}, "", ""),
    ],
)
def test_what_ended_a_run_is_one_line(reports, faults, line, traceback):
    assert _failure(reports, faults) == (line, traceback)


def test_killed_ranks_get_a_report_from_their_node(tmp_path):
    """torchrun's failures: a rank ended by a signal could not write a report; one that
    exited with a code wrote its own (it is kept)."""
    failure = types.SimpleNamespace
    _report(1, "ValueError: bad", at=1).write(tmp_path)
    failures = {0: failure(exitcode=-9, timestamp=5), 1: failure(exitcode=1, timestamp=1)}
    _report_killed_ranks(failures, tmp_path)
    reports = {r.rank: r.summary for r in FailureReport.read_all(tmp_path)}
    assert reports == {0: "killed by SIGKILL", 1: "ValueError: bad"}


def _node_pids(launcher_pid: int) -> list[int]:
    """The processes running inside a launcher's namespaces."""
    return [
        int(pid)
        for name in _namespaces_of(launcher_pid)
        for pid in subprocess.run(
            ["ip", "netns", "pids", name], capture_output=True, text=True
        ).stdout.split()
    ]


@needs_namespaces
def test_interrupted_launchers_leave_no_namespace(tmp_path):
    """Ctrl-C (SIGINT) and SIGTERM stop the nodes and remove the namespaces before the launcher
    exits (exit codes 130, 143); after SIGKILL the reaper removes them, with the processes
    inside, a moment later. The three launchers run side by side."""
    sleeping = ["--nodes=2", "--launcher=none", "--", "sleep", "120"]
    interrupted = _launch(sleeping, tmp_path)
    terminated = _launch(sleeping, tmp_path)
    killed = _launch(sleeping, tmp_path)
    launchers = (interrupted, terminated, killed)
    try:
        # The namespaces appear before the nodes' commands start inside them: wait for both.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(
            len(_namespaces_of(p.pid)) == 3 and len(_node_pids(p.pid)) >= 2 for p in launchers
        ):
            time.sleep(0.1)
        assert all(len(_namespaces_of(p.pid)) == 3 for p in launchers)
        sleepers = _node_pids(killed.pid)
        assert len(sleepers) >= 2  # the nodes' processes of the run about to be killed
    except BaseException:
        for launcher in launchers:
            launcher.send_signal(signal.SIGTERM)
        for launcher in launchers:
            launcher.communicate(timeout=30)
        raise
    time.sleep(0.5)  # the launchers have recorded their nodes
    interrupted.send_signal(signal.SIGINT)
    terminated.send_signal(signal.SIGTERM)
    killed.kill()
    for launcher, code in ((interrupted, 130), (terminated, 143)):
        out, _ = launcher.communicate(timeout=30)
        assert launcher.returncode == code, out
        assert "interrupted: nodes stopped" in out
        assert _namespaces_of(launcher.pid) == []  # gone before the launcher exited
    killed.communicate(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        _namespaces_of(killed.pid) or any(os.path.exists(f"/proc/{p}") for p in sleepers)
    ):
        time.sleep(0.1)
    assert _namespaces_of(killed.pid) == []
    assert not [p for p in sleepers if os.path.exists(f"/proc/{p}")]


def test_missing_privileges_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setattr(cluster_module, "_effective_capabilities", lambda: 0)
    assert main(["emulate", "--nodes", "2", "--", "fit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the emulated cluster needs root")
    monkeypatch.setattr(cluster_module.shutil, "which", lambda name: None)
    assert main(["emulate", "--nodes", "2", "--bandwidth", "1gbit", "--", "fit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the `ip` command" in err[0] and "the `tc` command" in err[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--", "fit"], "--nodes is required"),
        (["--nodes", "2"], "give the command to run after --"),
        (["--nodes", "2", "--bandwidth", "fast", "--", "fit"], "bandwidth 'fast'"),
        (["--nodes", "0", "--", "fit"], "nodes=0"),
        (["--nodes", "2", "--", "hostname"], "command 'hostname'"),
        (["--nodes", "2", "--nproc-per-node", "0", "--", "fit"], "--nproc-per-node 0"),
    ],
)
def test_usage_errors(capsys, args, message):
    try:
        code = main(["emulate", *args])
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_node_commands_rendezvous_on_node_zero():
    cluster = EmulatedCluster(3)  # not created: only the names and addresses
    command = node_command(["fit", "--config", "x.yaml"], cluster, 2, 4, "torchrun")
    assert command[:3] == [sys.executable, "-m", "lightning_gnn_dist.cli.torchrun"]
    for option in ("--nnodes=3", "--nproc-per-node=4", "--node-rank=2", "--master-addr=10.77.0.1"):
        assert option in command
    assert command[-5:] == ["-m", "lightning_gnn_dist", "fit", "--config", "x.yaml"]
    assert node_command(["train.py", "-x"], cluster, 0, 1, "torchrun")[-2:] == ["train.py", "-x"]
    assert node_command(["sleep", "1"], cluster, 0, 1, "none") == ["sleep", "1"]
    assert cluster.exec_prefix(1) == ["ip", "netns", "exec", cluster.namespaces[1]]


def test_lightning_commands_get_the_cluster_shape_unless_given():
    command, note = _with_cluster_shape(["fit", "--trainer.devices=3"], 2, 1)
    assert command == ["fit", "--trainer.devices=3", "--trainer.num_nodes", "2"]
    assert "--trainer.num_nodes 2" in note
    assert _with_cluster_shape(["probe"], 2, 1) == (["probe"], "")
