"""One clear line when a rank fails, and no process left behind (issue 8, item 3).

Under Lightning's subprocess launcher (``start_method="popen"``) the launching process is rank 0
and ranks ``1..n-1`` are its children. Without help, a failing rank prints its traceback, every
survivor prints a gloo traceback of its own ("Connection closed by peer"), and a frozen
(``SIGSTOP``) child outlives the job. :class:`GNNSubprocessLauncher` changes that:

* every rank catches its own exception; a child writes a :class:`FailureReport` into a folder the
  launcher shares with it and exits quietly (exit code 1, nothing printed);
* rank 0 decides which rank failed first — a rank whose error is not a communication error
  caused by a peer, else a child killed by a signal, else a stopped child, else the earliest
  report — prints ``rank R failed: ExcType: message`` and that rank's traceback once, kills every
  child (``SIGKILL`` also ends stopped ones) and raises :class:`RankFailedError`, whose default
  printing is suppressed because it was already reported;
* children die with rank 0 (``PR_SET_PDEATHSIG`` on Linux), and at exit rank 0 waits at most the
  collective timeout for its children before killing them.

Under torchrun or SLURM (processes started externally) there is no rank 0 to report for the
others: each rank prints its own single line instead.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from lightning_fabric.utilities.distributed import _set_num_threads_if_needed

from lightning_gnn_dist.lightning.compat import LightningNeutral

ENV_REPORT_DIR = "LIGHTNING_GNN_DIST_FAILURE_DIR"
ENV_PARENT_PID = "LIGHTNING_GNN_DIST_PARENT_PID"
_PEER_FAILURE_TEXT = ("gloo", "nccl", "connection closed by peer", "connection reset by peer")


class RankFailedError(RuntimeError):
    """A rank of a multi-process run failed; ``str()`` is the one-line report.

    Attributes:
        report (FailureReport): which rank failed, with what, and its traceback.
    """

    def __init__(self, report: FailureReport) -> None:
        super().__init__(report.line)
        self.report = report


@dataclass(frozen=True)
class FailureReport:
    """Why one rank stopped.

    Args:
        rank: global rank.
        summary: ``"ExcType: message"`` (or what happened to the process).
        traceback: the rank's formatted traceback (``""`` when it has none, e.g. killed).
        peer_failure: the error is a communication error, most likely a symptom of another rank's
            failure.
        time: ``time.time()`` when the rank caught it.
    """

    rank: int
    summary: str
    traceback: str = ""
    peer_failure: bool = False
    time: float = 0.0

    @property
    def line(self) -> str:
        return f"rank {self.rank} failed: {self.summary}"

    @classmethod
    def from_exception(cls, rank: int, error: BaseException) -> FailureReport:
        message = str(error).strip().splitlines()
        summary = type(error).__name__ + (f": {message[0]}" if message else "")
        return cls(
            rank,
            summary,
            "".join(traceback.format_exception(error)),
            is_peer_failure(error),
            time.time(),
        )

    def write(self, folder: Path) -> None:
        tmp = folder / f".rank-{self.rank}.json.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, folder / f"rank-{self.rank}.json")  # a reader never sees half a report

    def print(self) -> None:
        sys.stderr.write(self.line + "\n" + self.traceback)
        sys.stderr.flush()


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` is a communication error (a peer died, froze or closed its sockets)
    rather than the cause of the failure."""
    if isinstance(error, dist.DistError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and (
        any(part in text for part in _PEER_FAILURE_TEXT) or "timed out" in text
    )


def _mark_reported(error: BaseException) -> BaseException:
    """Make the interpreter's last-resort printing skip ``error``: it has been reported."""
    error._lightning_gnn_dist_reported = True  # type: ignore[attr-defined]
    previous = sys.excepthook
    if not getattr(previous, "_skips_reported", False):

        def excepthook(kind, value, tb):
            if not getattr(value, "_lightning_gnn_dist_reported", False):
                previous(kind, value, tb)

        excepthook._skips_reported = True  # type: ignore[attr-defined]
        sys.excepthook = excepthook
    return error


def _process_state(pid: int) -> str:
    """One-letter state from ``/proc`` (``T``: stopped), ``""`` when unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent (rank 0) ends, however it ends."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


class _Children:
    """Rank 0's record of the child ranks it started: reports, a watcher, kill and reap."""

    def __init__(
        self, procs: list[subprocess.Popen], first_rank: int, report_dir: Path, wait_s: float
    ) -> None:
        self.procs = {first_rank + i: proc for i, proc in enumerate(procs)}
        self.report_dir, self.wait_s, self.grace_s = report_dir, wait_s, 3.0
        self.failure: FailureReport | None = None
        self._lock = threading.Lock()
        self._killed = self._printed = False
        self._own: FailureReport | None = None  # rank 0's own failure, seen by the watcher too
        threading.Thread(target=self._watch, name="lightning-gnn-dist-ranks", daemon=True).start()
        atexit.register(self.finish)

    def _watch(self) -> None:
        while not self._killed:
            codes = [proc.poll() for proc in self.procs.values()]
            if any(code not in (None, 0) for code in codes):
                self.decide(None)
                self.kill()
                return
            if all(code == 0 for code in codes):
                return
            time.sleep(0.1)

    def _reports(self) -> list[FailureReport]:
        reports = []
        for file in self.report_dir.glob("rank-*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError):
                reports.append(FailureReport(**json.loads(file.read_text())))
        return reports

    def decide(self, own: FailureReport | None) -> FailureReport:
        """The first failure of the job (decided once; later calls return the same report)."""
        if own is not None:
            self._own = own
        with self._lock:
            if self.failure is None:
                self.failure = self._diagnose()
            return self.failure

    def _diagnose(self) -> FailureReport:
        deadline = time.monotonic() + self.grace_s
        while True:
            own = self._own
            reports = self._reports() + ([own] if own is not None else [])
            causes = [r for r in reports if not r.peer_failure]
            if causes:
                return min(causes, key=lambda r: r.time)
            reported = {r.rank for r in reports}
            for rank, proc in self.procs.items():
                code = proc.poll()
                if code is not None and code < 0 and rank not in reported:
                    return FailureReport(rank, f"killed by {signal.Signals(-code).name}")
            for rank, proc in self.procs.items():
                if _process_state(proc.pid) in ("T", "t"):
                    return FailureReport(
                        rank,
                        "process stopped (SIGSTOP or a debugger) and missed the collective timeout",
                    )
            running = [proc for proc in self.procs.values() if proc.poll() is None]
            if not running or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for rank, proc in self.procs.items():
            if proc.poll() not in (None, 0) and rank not in reported:
                return FailureReport(rank, f"exited with code {proc.returncode} and no report")
        if own is not None:
            return own
        if reports:
            return min(reports, key=lambda r: r.time)
        return FailureReport(0, "a child rank failed without a report")

    def report(self, failure: FailureReport) -> None:
        """Print ``failure`` (once per job)."""
        with self._lock:
            if not self._printed:
                self._printed = True
                failure.print()

    def kill(self) -> None:
        """SIGKILL every child still there (stopped ones included) and reap it."""
        self._killed = True
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def finish(self) -> None:
        """At rank 0's exit: kill stopped children at once, give running ones up to ``wait_s``
        (at least a minute) to finish their own exit, then kill whatever is left."""
        deadline = time.monotonic() + max(self.wait_s, 60.0)
        leftovers: dict[int, str] = {}
        while time.monotonic() < deadline:
            running = {r: p for r, p in self.procs.items() if p.poll() is None}
            leftovers = {r: _process_state(p.pid) for r, p in running.items()}
            if all(state in ("T", "t") for state in leftovers.values()):
                break  # nothing left but stopped ranks, which will never finish
            time.sleep(0.1)
        if self.failure is not None or any(p.returncode for p in self.procs.values()):
            self.report(self.decide(None))  # a child failed after rank 0's last collective
        for rank, state in leftovers.items():
            sys.stderr.write(f"rank {rank} had not ended when rank 0 did (state {state}); killed\n")
        self.kill()
        shutil.rmtree(self.report_dir, ignore_errors=True)


class GNNSubprocessLauncher(
    LightningNeutral, lightning_base="strategies.launchers._SubprocessScriptLauncher"
):
    """Lightning's subprocess launcher with one-line failure reports and no leftover children.

    Args:
        cluster_environment: where the ranks run (Lightning's ``ClusterEnvironment``).
        num_processes: processes on this node.
        num_nodes: nodes.
        wait_s: seconds rank 0 waits at exit for children still running before killing them;
            the strategy passes its collective timeout. (default: ``60``)
    """

    _children: _Children | None = None  # one per process: a second Trainer reuses the ranks

    def __init__(
        self,
        cluster_environment,
        num_processes: int,
        num_nodes: int,
        wait_s: float = 60,
        check: Callable[[tuple], None] | None = None,
    ):
        super().__init__(cluster_environment, num_processes, num_nodes)
        self.wait_s = wait_s
        self.check = check

    def launch(self, function: Callable, *args: Any, trainer=None, **kwargs: Any) -> Any:
        if self.check is not None:  # bad combinations end here, before any process starts
            self.check(args)
        env = self.cluster_environment
        env.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not env.creates_processes_externally:
            self._start_children()
        elif ENV_PARENT_PID in os.environ and GNNSubprocessLauncher._children is None:
            _die_with_parent(int(os.environ[ENV_PARENT_PID]))
        _set_num_threads_if_needed(num_processes=self.num_processes)
        try:
            return function(*args, **kwargs)
        except KeyboardInterrupt:
            raise  # Lightning's handler kills the children and exits
        except BaseException as error:
            replacement = self._handle(error)
            if replacement is error:
                raise
            raise replacement from None

    def _start_children(self) -> None:
        report_dir = tempfile.mkdtemp(prefix="lightning-gnn-dist-ranks-")
        os.environ[ENV_REPORT_DIR], os.environ[ENV_PARENT_PID] = report_dir, str(os.getpid())
        try:
            self._call_children_scripts()  # the children inherit both variables
        except BaseException:
            shutil.rmtree(report_dir, ignore_errors=True)
            raise
        finally:  # nothing else this process starts should take itself for a rank
            del os.environ[ENV_REPORT_DIR], os.environ[ENV_PARENT_PID]
        first_rank = self.cluster_environment.node_rank() * self.num_processes + 1
        GNNSubprocessLauncher._children = _Children(
            self.procs, first_rank, Path(report_dir), self.wait_s
        )

    def _rank(self) -> int:
        env = self.cluster_environment
        return env.node_rank() * self.num_processes + env.local_rank()

    def _handle(self, error: BaseException) -> BaseException:
        """Report ``error`` the way this process's role requires; return what to raise."""
        if getattr(error, "_lightning_gnn_dist_reported", False):
            return error
        own = FailureReport.from_exception(self._rank(), error)
        children = GNNSubprocessLauncher._children
        if children is not None:  # rank 0 of the popen launcher: report for everyone
            failure = children.decide(own)
            children.kill()
            children.report(failure)
            return _mark_reported(RankFailedError(failure))
        report_dir = os.environ.get(ENV_REPORT_DIR)
        if report_dir and ENV_PARENT_PID in os.environ:  # a child: rank 0 reports
            with contextlib.suppress(OSError):
                own.write(Path(report_dir))
            return _mark_reported(error)
        if own.peer_failure:  # torchrun/SLURM: each rank speaks for itself, survivors briefly
            sys.stderr.write(f"rank {own.rank} stopped after a peer failed: {own.summary}\n")
        else:
            own.print()
        return _mark_reported(error)


class GNNMultiProcessingLauncher(
    LightningNeutral, lightning_base="strategies.launchers._MultiProcessingLauncher"
):
    """Lightning's spawn/fork launcher that first runs the strategy's ``check_launch`` on the
    entry point's arguments, so a datamodule the strategy refuses fails before any process
    starts."""

    def launch(self, function: Callable, *args: Any, trainer=None, **kwargs: Any) -> Any:
        self._strategy.check_launch(args)
        return super().launch(function, *args, trainer=trainer, **kwargs)
