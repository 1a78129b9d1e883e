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
  collective timeout for its children before killing them;
* when a child fails while rank 0 waits where no error can reach it (a store rendezvous, a
  collective whose peer is gone), rank 0's watcher reports after a grace period and ends rank 0;
* a child that finished its work and then ends with a non-zero code (an abort in the
  interpreter's shutdown) is not a failure: it marked itself done first; a child rank 0 kills
  itself (an interrupt) is not blamed;
* a frozen rank 0 (``SIGSTOP``): the first child whose collective times out reports it and ends
  it, so the job ends within the timeout;
* ``SIGTERM`` (coreutils ``timeout``, a SLURM time limit, preemption) ends every rank at once,
  even one blocked inside a gloo wait, with one line ``rank 0 failed: terminated by SIGTERM``
  and exit code 143 (:class:`Termination`). Where Lightning's SLURM auto-requeue is configured,
  ``SIGTERM`` keeps Lightning's meaning (ignored: the requeue signal saved and requeued).

Under torchrun or SLURM (processes started externally) there is no rank 0 to report for the
others: each rank prints its own single line instead.

The report folder is ``$TMPDIR/lightning-gnn-dist-ranks-<host>-<pid>-<random>``; the next run
removes those whose owner is gone (a killed rank 0).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_fabric.utilities.distributed import _set_num_threads_if_needed

from lightning_gnn_dist.lightning.compat import LightningNeutral
from lightning_gnn_dist.lightning.reports import (  # FailureReport, is_peer_failure: also here
    ENV_JOB_REPORT_DIR,
    TERMINATED,
    FailureReport,
    is_peer_failure,  # noqa: F401
)
from lightning_gnn_dist.utils.tempdirs import (
    make_owned_dir,
    remove_process_temp_files,
    remove_stale,
    remove_stale_generated_modules,
)

ENV_REPORT_DIR = "LIGHTNING_GNN_DIST_FAILURE_DIR"
ENV_PARENT_PID = "LIGHTNING_GNN_DIST_PARENT_PID"
REPORT_PREFIX = "lightning-gnn-dist-ranks-"
EXIT_SIGTERM = 128 + signal.SIGTERM
_STOPPED_LINE = "process stopped (SIGSTOP or a debugger) and missed the collective timeout"
_TERMINATED = TERMINATED
_REPORTED = "reported"  # a child already printed the job's line (rank 0 was stopped)


class RankFailedError(RuntimeError):
    """A rank of a multi-process run failed; ``str()`` is the one-line report.

    Attributes:
        report (FailureReport): which rank failed, with what, and its traceback.
    """

    def __init__(self, report: FailureReport) -> None:
        super().__init__(report.line)
        self.report = report


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


def _done_file(folder: Path, rank: int) -> Path:
    """Marker a child writes when its Trainer call returned (or it was interrupted on purpose):
    a non-zero exit afterwards (an abort in the interpreter's shutdown) is not a failure."""
    return folder / f"done-{rank}"


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
        self.expected = False  # rank 0 ends the children itself (an interrupt, SIGTERM)
        self._own: FailureReport | None = None  # rank 0's own failure, seen by the watcher too
        threading.Thread(target=self._watch, name="lightning-gnn-dist-ranks", daemon=True).start()
        atexit.register(self.finish)

    def _failed(self) -> list[int]:
        """Children that ended with a non-zero code without having finished their work."""
        return [
            rank
            for rank, proc in self.procs.items()
            if proc.poll() not in (None, 0) and not _done_file(self.report_dir, rank).exists()
        ]

    def _watch(self) -> None:
        while not self._killed:
            if self._failed() and not self.expected:
                failure = self.decide(None)
                self.kill()
                self._escalate(failure)
                return
            if all(proc.poll() is not None for proc in self.procs.values()):
                return
            time.sleep(0.1)

    def _escalate(self, failure: FailureReport) -> None:
        """A child failed: rank 0's main thread normally hits the error at its next collective
        and reports. If it still has not after the grace period, it waits where no error reaches
        it (a rendezvous, a peer's socket): report here and end rank 0."""
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            if self._printed or self.expected:
                return
            time.sleep(0.05)
        self.report(failure)
        shutil.rmtree(self.report_dir, ignore_errors=True)
        end_process(EXIT_SIGTERM if failure.summary == _TERMINATED else 1)

    def _reports(self) -> list[FailureReport]:
        return FailureReport.read_all(self.report_dir)

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
            for rank in self._failed():
                code = self.procs[rank].poll()
                if code is not None and code < 0 and rank not in reported:
                    return FailureReport(rank, f"killed by {signal.Signals(-code).name}")
            for rank, proc in self.procs.items():
                if _process_state(proc.pid) in ("T", "t"):
                    return FailureReport(rank, _STOPPED_LINE)
            running = [proc for proc in self.procs.values() if proc.poll() is None]
            if not running or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for rank in self._failed():
            if rank not in reported:
                code = self.procs[rank].returncode
                return FailureReport(rank, f"exited with code {code} and no report")
        if own is not None:
            return own
        if reports:
            return min(reports, key=lambda r: r.time)
        return FailureReport(0, "a child rank failed without a report")

    def report(self, failure: FailureReport | None) -> None:
        """Print ``failure`` (once per job; never when a child already reported for rank 0)."""
        with self._lock:
            if not self._printed:
                self._printed = True
                if failure is not None and not (self.report_dir / _REPORTED).exists():
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

    def stop(self, own: FailureReport, signum: int = signal.SIGTERM) -> None:
        """Rank 0 ends the job itself (SIGTERM): its own line, no child blamed. The children get
        ``signum`` first and a moment to clean up after themselves, then ``SIGKILL``. ``own`` is
        the job's failure unless one came before it: the main thread, whose collectives fail as
        the children end, must not diagnose their ends as a failure of their own (exit code 1
        instead of 143, seen once in CI)."""
        self.expected = True
        self.decide(own)
        self.report(own)
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.02)
        self.kill()
        shutil.rmtree(self.report_dir, ignore_errors=True)

    def finish(self) -> None:
        """At rank 0's exit: kill stopped children at once, give running ones up to ``wait_s``
        (at least a minute) to finish their own exit, then kill whatever is left."""
        deadline = time.monotonic() + max(self.wait_s, 60.0)
        leftovers: dict[int, str] = {}
        while time.monotonic() < deadline and not self.expected:
            running = {r: p for r, p in self.procs.items() if p.poll() is None}
            leftovers = {r: _process_state(p.pid) for r, p in running.items()}
            if all(state in ("T", "t") for state in leftovers.values()):
                break  # nothing left but stopped ranks, which will never finish
            time.sleep(0.1)
        if not self.expected and (self.failure is not None or self._failed()):
            self.report(self.decide(None))  # a child failed after rank 0's last collective
        for rank, state in leftovers.items():
            sys.stderr.write(f"rank {rank} had not ended when rank 0 did (state {state}); killed\n")
        self.kill()
        shutil.rmtree(self.report_dir, ignore_errors=True)


def end_process(code: int) -> None:
    """Flush, remove this process's temporary files, and exit at once with ``code`` (no
    waiting for threads or collectives: a rank blocked in one would never get there)."""
    with contextlib.suppress(Exception):
        remove_process_temp_files()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


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
        done = self._done_marker()
        if done is not None:
            done.unlink(missing_ok=True)  # working again (a second Trainer call)
        try:
            result = function(*args, **kwargs)
        except KeyboardInterrupt:
            if done is not None:  # interrupted on purpose (Ctrl-C reaches every rank)
                with contextlib.suppress(OSError):
                    done.touch()
            raise  # Lightning's handler kills the children and exits
        except BaseException as error:
            replacement = self._handle(error)
            if replacement is error:
                raise
            raise replacement from None
        if done is not None:
            with contextlib.suppress(OSError):
                done.touch()
        return result

    def _done_marker(self) -> Path | None:
        """This child's done marker, or ``None`` when this process is not a popen child."""
        report_dir = os.environ.get(ENV_REPORT_DIR)
        if GNNSubprocessLauncher._children is not None or not report_dir:
            return None
        return _done_file(Path(report_dir), self._rank())

    def kill(self, signum) -> None:
        # Lightning calls this on an interrupt: the children end because rank 0 ends them, so
        # none of them is to blame for it.
        children = GNNSubprocessLauncher._children
        if children is not None:
            children.expected = True
        super().kill(signum)

    def _start_children(self) -> None:
        remove_stale(tempfile.gettempdir(), REPORT_PREFIX)  # folders of killed rank-0 processes
        remove_stale_generated_modules()  # and the modules PyG generated in them
        report_dir = str(make_owned_dir(tempfile.gettempdir(), REPORT_PREFIX, mode=0o700))
        # The children's temporary files (PyG's generated modules, torch's caches) go into the
        # job's folder, which rank 0 removes, however the children end.
        child_tmp = Path(report_dir, "tmp")
        child_tmp.mkdir()
        saved_tmp = os.environ.get("TMPDIR")
        os.environ[ENV_REPORT_DIR], os.environ[ENV_PARENT_PID] = report_dir, str(os.getpid())
        os.environ["TMPDIR"] = str(child_tmp)
        try:
            self._call_children_scripts()  # the children inherit these variables
        except BaseException:
            shutil.rmtree(report_dir, ignore_errors=True)
            raise
        finally:  # nothing else this process starts should take itself for a rank
            del os.environ[ENV_REPORT_DIR], os.environ[ENV_PARENT_PID]
            if saved_tmp is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = saved_tmp
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
        own = FailureReport.from_exception(self._rank(), error, self.wait_s)
        children = GNNSubprocessLauncher._children
        if children is not None:  # rank 0 of the popen launcher: report for everyone
            failure = children.decide(own)
            children.kill()
            children.report(failure)
            if failure.summary == _TERMINATED:  # the job was terminated (SIGTERM reached a
                shutil.rmtree(children.report_dir, ignore_errors=True)  # child first)
                end_process(EXIT_SIGTERM)
            return _mark_reported(RankFailedError(failure))
        report_dir = os.environ.get(ENV_REPORT_DIR)
        if report_dir and ENV_PARENT_PID in os.environ:  # a child: rank 0 reports
            with contextlib.suppress(OSError):
                own.write(Path(report_dir))
            if own.peer_failure:
                _report_stopped_parent(Path(report_dir), int(os.environ[ENV_PARENT_PID]))
            return _mark_reported(error)
        job_dir = os.environ.get(ENV_JOB_REPORT_DIR)
        if job_dir:  # torchrun under `emulate`: it reports for the job, with the links' state
            with contextlib.suppress(OSError):
                own.write(Path(job_dir))
                return _mark_reported(error)
        if own.timed_out:  # torchrun/SLURM: each rank speaks for itself, survivors briefly
            sys.stderr.write(
                f"rank {own.rank} stopped: its collective timed out after {self.wait_s:g} s (a "
                f"peer or the network stopped answering): {own.summary}\n"
            )
        elif own.peer_failure:
            sys.stderr.write(f"rank {own.rank} stopped after a peer failed: {own.summary}\n")
        else:
            own.print()
        return _mark_reported(error)


def _report_stopped_parent(report_dir: Path, parent_pid: int) -> None:
    """A child's collective failed and rank 0 is stopped (``SIGSTOP``): nobody else can report.
    The first child to get here says so in one line and ends rank 0: ``SIGTERM`` then
    ``SIGCONT``, so rank 0 ends its children and removes its files quietly (the report is
    marked as made), ``SIGKILL`` if it is still there after a few seconds."""
    if _process_state(parent_pid) not in ("T", "t"):
        return
    try:
        os.close(os.open(report_dir / _REPORTED, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return  # another child reports
    FailureReport(0, _STOPPED_LINE).print()
    with contextlib.suppress(ProcessLookupError):
        os.kill(parent_pid, signal.SIGTERM)
        os.kill(parent_pid, signal.SIGCONT)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _process_state(parent_pid) not in ("", "Z"):
            time.sleep(0.05)
        os.kill(parent_pid, signal.SIGKILL)  # this child dies with it (PDEATHSIG)


class GNNMultiProcessingLauncher(
    LightningNeutral, lightning_base="strategies.launchers._MultiProcessingLauncher"
):
    """Lightning's spawn/fork launcher that first runs the strategy's ``check_launch`` on the
    entry point's arguments, so a datamodule the strategy refuses fails before any process
    starts."""

    def launch(self, function: Callable, *args: Any, trainer=None, **kwargs: Any) -> Any:
        self._strategy.check_launch(args)
        return super().launch(function, *args, trainer=trainer, **kwargs)


class Termination:
    """Ends this rank at once on ``SIGTERM``, even while its main thread waits inside a gloo
    collective (a Python signal handler only runs when that wait returns, which for a peer that
    also stopped is the collective timeout; Lightning's own handler even starts a broadcast).

    CPython's C-level handler writes every signal to the wakeup fd at once; a daemon thread
    reading it does what the job needs: rank 0 of the popen launcher prints
    ``rank 0 failed: terminated by SIGTERM`` and kills its children, a child leaves a report
    (rank 0 speaks for it), a rank started by torchrun or SLURM prints the line on rank 0 only;
    then the process exits with code 143 after removing its temporary files. Where Lightning's
    SLURM auto-requeue is configured nothing happens (Lightning ignores ``SIGTERM`` there: the
    requeue signal has saved and requeued the job).

    Not installed when another part of the process uses the wakeup fd (an asyncio loop), when
    ``SIGTERM`` is ignored, or off the main thread.
    """

    _installed: Termination | None = None

    def __init__(self, rank: int, requeue: bool, read_fd: int) -> None:
        self.rank, self.requeue, self._read_fd = rank, requeue, read_fd
        threading.Thread(target=self._wait, name="lightning-gnn-dist-sigterm", daemon=True).start()

    @classmethod
    def take_over(cls) -> None:
        """Replace the ``SIGTERM`` handler Lightning registered when a stage started (it logs on
        every rank and broadcasts inside the handler, which can pair with another collective):
        this class's thread does the work."""
        installed = cls._installed
        if installed is not None and not installed.requeue:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, _sigterm_noted)

    @classmethod
    def install(cls, rank: int, requeue: bool = False) -> Termination | None:
        """Install once per process (later calls update the rank)."""
        if cls._installed is not None:
            cls._installed.rank, cls._installed.requeue = rank, requeue
            return cls._installed
        if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
            return None
        if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
            return None
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:  # someone else's wakeup fd: leave it
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return None
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _sigterm_noted)  # the C handler writes to the fd
        cls._installed = cls(rank, requeue, read_fd)
        return cls._installed

    def _wait(self) -> None:
        while True:
            try:
                received = os.read(self._read_fd, 512)
            except OSError:
                return
            if signal.SIGTERM in received and not self.requeue:
                self.terminate()

    def terminate(self) -> None:
        line = FailureReport(self.rank, _TERMINATED, time=time.time())
        children = GNNSubprocessLauncher._children
        report_dir = os.environ.get(ENV_REPORT_DIR)
        if children is not None:  # popen rank 0: one line for the job, children ended
            children.stop(line)
        elif report_dir and ENV_PARENT_PID in os.environ:  # a popen child: rank 0 speaks
            with contextlib.suppress(OSError):
                line.write(Path(report_dir))
        elif os.environ.get(ENV_JOB_REPORT_DIR):  # torchrun under `emulate`: emulate speaks
            with contextlib.suppress(OSError):
                line.write(Path(os.environ[ENV_JOB_REPORT_DIR]))
        elif self.rank == 0:
            sys.stderr.write(line.line + "\n")
        end_process(EXIT_SIGTERM)


def _sigterm_noted(signum, frame) -> None:
    """Python-level ``SIGTERM`` handler: the work happens in :class:`Termination`'s thread."""
