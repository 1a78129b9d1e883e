"""Fault injection under the popen launcher (issue 8, items 3 and 5): a rank raises, is killed or
is frozen mid-training. Every rank ends within the timeout, the user sees one line naming the
failing rank (and its traceback once), survivors stay quiet, and no process or temp folder is left.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lightning_gnn_dist.utils.tempdirs import _host

SCRIPT = Path(__file__).parent / "scripts" / "train_script.py"
REPO = Path(__file__).resolve().parents[2]
LOADED = 20  # seconds a loaded 2-core machine may add (quiet: SIGTERM ~1 s, frozen rank 0 ~1 s)


def _run(tmp_path, *flags, timeout=180):
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(key, None)
    env["TMPDIR"] = str(tmp_path / "tmp")
    env["FAILURE_TIME_FILE"] = str(tmp_path / "failed_at")
    (tmp_path / "tmp").mkdir(exist_ok=True)
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
        ("kill", 1, "killed by SIGKILL", ["--timeout", "15"]),
        # Rank 1 also starts late (its imports, then 4 s): with timeout=4 bounding start-up
        # too, the launch itself would fail ("1/2 clients joined"); startup_timeout lets it join.
        ("stop", 1, "process stopped", ["--timeout", "4", "--delay-rank", "1", "--delay", "4"]),
        # issue 18, item 11: the prefetch thread's group waited 30 minutes (torch's default)
        ("stop", 1, "process stopped", ["--timeout", "4", "--mode", "neighbor", "--prefetch"]),
        # item 13: exchange.close() at teardown raised on top of the failure (3 tracebacks);
        # also the plain "rank 1 raises" case
        (
            "raise",
            1,
            "RuntimeError: deliberate failure on rank 1",
            ["--timeout", "15", "--mode", "cd-2"],
        ),
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
        assert ended - float((tmp_path / "failed_at").read_text()) < 4 + LOADED
    pids = [int(file.read_text()) for file in (tmp_path / "pids").glob("rank-*.pid")]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]
    assert list((tmp_path / "tmp").iterdir()) == []  # the failure reports, PyG's and torch's files


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
        (RuntimeError("Application timeout caused pair closure"), True),
        (RuntimeError("deliberate failure on rank 1"), False),
        (ValueError("bad value: gloo"), False),
    ],
)
def test_communication_errors_are_symptoms_not_causes(error, symptom):
    from lightning_gnn_dist.lightning.launcher import FailureReport, is_peer_failure

    assert is_peer_failure(error) is symptom
    report = FailureReport.from_exception(3, error)
    assert report.line == f"rank 3 failed: {type(error).__name__}: {error}"
    assert report.timed_out is ("time" in str(error).lower())


# -- issue 18, items 10-13: SIGTERM, a frozen rank 0, a child that aborts after success -------
SBM = "sbm?num_nodes=4000&avg_degree=10&features=16"  # big enough for ranks to wait in gloo


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return tmp_path_factory.mktemp("parts")  # one store per method, shared by the runs


def _launch(tmp_path, parts, *flags) -> subprocess.Popen:
    """The script in a session of its own (as coreutils' ``timeout`` or a SLURM step runs it),
    training until signalled; ``tmp_path/started`` appears once every rank trains."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(key, None)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "pids").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), TRAINING_STARTED_FILE=str(tmp_path / "started"))
    args = [sys.executable, str(SCRIPT), "--root", str(parts), "--pid-dir", str(tmp_path / "pids")]
    args += ["--dataset", SBM, "--epochs", "100000", *flags]
    log = open(tmp_path / "out.log", "w")  # noqa: SIM115 - closed by the process's end
    return subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _wait_started(tmp_path, proc: subprocess.Popen) -> subprocess.Popen:
    deadline = time.monotonic() + 240
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, (
            tmp_path / "out.log"
        ).read_text()[-3000:]
        time.sleep(0.1)
    return proc


def _start(tmp_path, parts, *flags) -> subprocess.Popen:
    return _wait_started(tmp_path, _launch(tmp_path, parts, *flags))


def _pids(tmp_path) -> dict[int, int]:
    return {
        int(f.stem.split("-")[1]): int(f.read_text()) for f in (tmp_path / "pids").glob("*.pid")
    }


def _ended(tmp_path, proc, seconds: float) -> float:
    """Seconds until rank 0 and every child are gone (fails past ``seconds``, with each rank's
    state and Python stacks: the script dumps them on ``SIGUSR1``)."""
    start, pids = time.monotonic(), _pids(tmp_path)
    while proc.poll() is None or any(_alive(pid) for pid in pids.values()):
        if time.monotonic() - start > seconds:
            pytest.fail(f"still running after {seconds} s:\n{_stuck(tmp_path, pids)}")
        time.sleep(0.05)
    return time.monotonic() - start


def _stuck(tmp_path, pids: dict[int, int]) -> str:
    """Where each rank still alive is: its process state, then its threads' stacks."""
    states = []
    for rank, pid in sorted(pids.items()):
        with contextlib.suppress(psutil.NoSuchProcess):
            states.append(f"rank {rank} (pid {pid}): {psutil.Process(pid).status()}")
            os.kill(pid, signal.SIGUSR1)
    time.sleep(2.0)
    return "\n".join(states) + "\n" + (tmp_path / "out.log").read_text()[-6000:]


def _lines(tmp_path) -> list[str]:
    output = (tmp_path / "out.log").read_text()
    assert "Traceback" not in output and not re.search(r"\[rank\d+\]:", output), output[-3000:]
    return [line for line in output.splitlines() if " failed: " in line or "SIGTERM" in line]


@pytest.mark.slow
def test_sigterm_ends_every_rank_at_once_with_one_line(tmp_path):
    """Item 10: ranks blocked in gloo waits stayed until the 1800 s timeout; now every rank ends
    within seconds (the timeout here is 300 s), with one line, leaving no file. Every mode runs
    side by side (each with its own stores: concurrent runs must not build one store twice)."""
    runs = {}
    for mode in ("full", "cd-2", "cached", "neighbor", "subgraph"):
        path = tmp_path / mode
        (path / "parts").mkdir(parents=True)
        flags = ["--mode", mode, "--timeout", "300"]
        runs[mode] = (
            path,
            _launch(path, path / "parts", *flags, *(["--prefetch"] * (mode == "neighbor"))),
        )
    for path, proc in runs.values():
        _wait_started(path, proc)
    for _, proc in runs.values():
        os.killpg(proc.pid, signal.SIGTERM)  # every rank, as `timeout` and SLURM send it
    for mode, (path, proc) in runs.items():
        # not the 300 s timeout (nor 1800 s: it waited for it)
        _ended(path, proc, 10 + LOADED)
        assert proc.returncode == 143, (mode, (path / "out.log").read_text()[-3000:])
        (line,) = _lines(path)  # rank 0's, or a child's that rank 0 saw first
        assert re.fullmatch(r"rank [01] failed: terminated by SIGTERM", line), (mode, line)
        assert list((path / "tmp").iterdir()) == [], mode


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags", [[], ["--mode", "neighbor", "--prefetch"]], ids=["full", "neighbor-prefetch"]
)
def test_a_frozen_rank_0_is_reported_and_ended(tmp_path, parts, flags):
    """Item 13: a SIGSTOP of rank 0 left the launcher stopped and the children silent; the
    first child whose collective times out reports it and ends it, within the timeout."""
    proc = _start(tmp_path, parts, "--timeout", "4", *flags)
    os.kill(_pids(tmp_path)[0], signal.SIGSTOP)
    _ended(tmp_path, proc, 4 + 10 + LOADED)
    lines = _lines(tmp_path)
    assert lines == [f"rank 0 failed: {_STOPPED}"], lines
    assert list((tmp_path / "tmp").iterdir()) == []


_STOPPED = "process stopped (SIGSTOP or a debugger) and missed the collective timeout"


def test_a_child_that_aborts_after_a_successful_fit_is_not_a_failure(tmp_path):
    """Item 13: a child dying in its shutdown (SIGABRT: "terminate called without an active
    exception") after the last collective printed "rank 1 failed" with exit code 0. Item 12:
    nothing of ours, PyG's or torch's is left in the temp folder, and what a SIGKILLed rank 0
    left there (its report folder, the modules PyG generated in it: issue 29, item 15) is removed
    by the next run."""
    killed, _ = _run(tmp_path, "--fail-rank", "0", "--fail-how", "kill", "--epochs", "2")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout + killed.stderr)[-3000:]
    left = [path.name for path in (tmp_path / "tmp").iterdir()]
    assert [name for name in left if name.startswith(f"lightning-gnn-dist-ranks-{_host()}-")]
    assert [name for name in left if "_propagate_" in name]  # rank 0's, in the temp folder
    shutil.rmtree(tmp_path / "pids")
    proc, _ = _run(tmp_path, "--fail-rank", "1", "--fail-how", "abort-after-fit", "--epochs", "2")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert " failed: " not in output and "SIGABRT" not in output, output[-3000:]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_interrupt_of_rank_0_blames_no_rank(tmp_path, parts):
    """Item 13: SIGINT to rank 0 printed a failure line for the child it killed itself."""
    proc = _start(tmp_path, parts, "--timeout", "30")
    os.kill(proc.pid, signal.SIGINT)
    _ended(tmp_path, proc, 30)
    output = (tmp_path / "out.log").read_text()
    assert proc.returncode != 0 and " failed: " not in output, output[-3000:]


def test_reports_of_a_report_folder_removed_while_read_are_none(tmp_path, monkeypatch):
    """The watcher removes the report folder when it ends rank 0 itself; rank 0's main thread,
    diagnosing a SIGTERM at that moment, got FileNotFoundError from Python 3.11's glob (the
    folder existed when the glob started): a traceback instead of one line, seen once in CI."""
    from lightning_gnn_dist.lightning.launcher import _Children

    children = _Children([], 1, tmp_path, wait_s=0.0)
    children.expected = True  # nothing to wait for at exit

    def removed_meanwhile(self, pattern):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", removed_meanwhile)
    assert children._reports() == []


def test_a_job_rank_0_stops_is_decided_as_its_termination(tmp_path):
    """Rank 0's SIGTERM thread ends the children; its main thread, whose collective fails as
    they end, asked for the job's failure meanwhile and got a child "killed by SIGTERM" (exit
    code 1 where the job must end with 143, seen once in CI)."""
    from lightning_gnn_dist.lightning.launcher import _TERMINATED, FailureReport, _Children

    child = subprocess.Popen(["sleep", "30"])
    children = _Children([child], 1, tmp_path, wait_s=0.0)
    children.stop(FailureReport(0, _TERMINATED, time=time.time()))
    peer = FailureReport(0, "RuntimeError: Connection closed by peer", peer_failure=True)
    assert child.returncode == -signal.SIGTERM
    assert children.decide(peer).summary == _TERMINATED
