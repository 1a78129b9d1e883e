"""Fault injection under the popen launcher (issue 8, items 3 and 5): a rank raises, is killed or
is frozen mid-training. Every rank ends within the timeout, the user sees one line naming the
failing rank (and its traceback once), survivors stay quiet, and no process or temp folder is left.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SCRIPT = Path(__file__).parent / "scripts" / "train_script.py"
REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path, *flags, timeout=180):
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(key, None)
    env["TMPDIR"] = str(tmp_path / "tmp")
    env["FAILURE_TIME_FILE"] = str(tmp_path / "failed_at")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "pids").mkdir()
    args = [sys.executable, str(SCRIPT), "--root", str(tmp_path / "parts")]
    args += ["--pid-dir", str(tmp_path / "pids"), *flags]
    proc = subprocess.run(
        args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    return proc, time.time()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("how", "rank", "summary", "flags"),
    [
        ("raise", 0, "RuntimeError: deliberate failure on rank 0", ["--timeout", "15"]),
        ("raise", 1, "RuntimeError: deliberate failure on rank 1", ["--timeout", "15"]),
        ("kill", 1, "killed by SIGKILL", ["--timeout", "15"]),
        # Rank 1 also starts late (its imports, then 4 s): with timeout=4 bounding start-up
        # too, the launch itself would fail ("1/2 clients joined"); startup_timeout lets it join.
        ("stop", 1, "process stopped", ["--timeout", "4", "--delay-rank", "1", "--delay", "4"]),
    ],
)
def test_failing_rank_gives_one_line_and_leaves_nothing(tmp_path, how, rank, summary, flags):
    proc, ended = _run(tmp_path, "--fail-rank", str(rank), "--fail-how", how, *flags)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]

    failure_lines = [line for line in output.splitlines() if " failed: " in line]
    assert len(failure_lines) == 1, output[-3000:]
    assert failure_lines[0].startswith(f"rank {rank} failed: {summary}")
    # The failing rank's traceback once (none for a killed or frozen rank), nothing from the
    # survivors: no gloo errors, no torch "[rankN]:" traceback prefixes.
    assert output.count("Traceback (most recent call last)") == (how == "raise")
    assert "Connection closed by peer" not in output and not re.search(r"\[rank\d+\]:", output)

    if how == "stop":  # ended within the collective timeout (+ a few seconds to decide and exit)
        assert ended - float((tmp_path / "failed_at").read_text()) < 4 + 20
    pids = [int(file.read_text()) for file in (tmp_path / "pids").glob("rank-*.pid")]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]
    assert list((tmp_path / "tmp").glob("lightning-gnn-dist-*")) == []  # the failure reports


def test_rank_frozen_after_training_is_killed_when_rank_0_ends(tmp_path):
    """A successful job whose rank 1 freezes after the last collective: rank 0 exits normally
    and takes the stopped rank with it instead of leaving it behind."""
    flags = ["--fail-rank", "1", "--fail-how", "stop-after-fit", "--epochs", "2"]
    proc, _ = _run(tmp_path, *flags)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "rank 1 had not ended when rank 0 did (state T); killed" in output
    pids = [int(file.read_text()) for file in (tmp_path / "pids").glob("rank-*.pid")]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize("name", ["timeout", "startup_timeout"])
def test_timeouts_must_be_positive(name):
    from lightning_gnn_dist import GNNStrategy

    with pytest.raises(
        ValueError, match=rf"{name} must be positive seconds, at most 1e8 \(got 0\)"
    ):
        GNNStrategy(**{name: 0})


@pytest.mark.parametrize(
    ("error", "symptom"),
    [
        (RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer"), True),
        (RuntimeError("Timed out waiting 4000ms for recv operation to complete"), True),
        (RuntimeError("deliberate failure on rank 1"), False),
        (ValueError("bad value: gloo"), False),
    ],
)
def test_communication_errors_are_symptoms_not_causes(error, symptom):
    from lightning_gnn_dist.lightning.launcher import FailureReport, is_peer_failure

    assert is_peer_failure(error) is symptom
    report = FailureReport.from_exception(3, error)
    assert report.line == f"rank 3 failed: {type(error).__name__}: {error}"
