"""What a test leaves behind: processes and temporary folders (used by ``tests/conftest.py``).

At import, the test session gets its own temporary folder (``TMPDIR`` and :mod:`tempfile` point
to it; pytest's own ``tmp_path`` folders stay where they were, through
``PYTEST_DEBUG_TEMPROOT``) and a marker in the environment that every process it starts inherits.
A process carrying the marker is the session's even after it was orphaned and re-parented;
a folder of the private temporary folder that a test did not find there is that test's leftover.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import psutil

MARKER = "LGD_TEST_SESSION"
#: Long-lived helpers that Python's multiprocessing starts once per session on purpose.
_INFRASTRUCTURE = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
#: Folders that third-party launchers leave on purpose (torchrun's agent keeps its run folder).
_TOLERATED_FOLDERS = ("torchelastic_",)
#: Hidden siblings of a partition store that a test must not leave in its ``tmp_path``.
_STORE_TEMP_MARKERS = (".tmp-", ".old-")


def start_session() -> Path:
    """Give this test session a private temporary folder and a process marker (idempotent).

    Each pytest-xdist worker is a session of its own: its marker and folder are not its
    siblings', so one worker never takes another's processes or folders for leftovers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if (
        os.environ.get(MARKER)
        and os.environ.get("LGD_TEST_TMPDIR")
        and os.environ.get("LGD_TEST_WORKER") == worker
    ):
        return Path(os.environ["LGD_TEST_TMPDIR"])
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    root = os.environ["PYTEST_DEBUG_TEMPROOT"]
    private = Path(
        tempfile.mkdtemp(prefix=f"lgd-tests-{worker}-" if worker else "lgd-tests-", dir=root)
    )
    os.environ[MARKER] = uuid.uuid4().hex
    os.environ["LGD_TEST_WORKER"] = worker
    os.environ["LGD_TEST_TMPDIR"] = os.environ["TMPDIR"] = str(private)
    tempfile.tempdir = str(private)
    atexit.register(shutil.rmtree, private, True)
    return private


def temp_entries() -> set[str]:
    return {entry.name for entry in Path(os.environ["LGD_TEST_TMPDIR"]).iterdir()}


def _is_infrastructure(process: psutil.Process) -> bool:
    try:
        command = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return True
    return any(name in command for name in _INFRASTRUCTURE)


def _marked_pids(token: str) -> list[int]:
    """Pids whose environment holds ``MARKER=token`` (one read of ``/proc/PID/environ`` each)."""
    needle = f"{MARKER}={token}".encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle in handle.read():
                    pids.append(int(name))
        except OSError:  # gone, or another user's
            continue
    return pids


def session_processes() -> list[psutil.Process]:
    """Live processes of this session other than pytest itself: descendants, and orphans that
    carry the session marker."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    if os.path.isdir("/proc"):
        for pid in _marked_pids(os.environ.get(MARKER, "")):
            if pid != me.pid and pid not in found:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    continue
    alive = []
    for process in found.values():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and not _is_infrastructure(process):
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


def lingering_processes(grace: float) -> list[str]:
    """Describe (and kill) the session's processes still alive after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    processes = session_processes()
    while processes and time.monotonic() < deadline:
        time.sleep(0.05)
        processes = session_processes()
    described = []
    for process in processes:
        try:
            described.append(f"pid {process.pid} {' '.join(process.cmdline())[:200]!r}")
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return described


def store_temp_folders(folder: Path) -> list[Path]:
    """Hidden ``.NAME.tmp-*`` / ``.NAME.old-*`` folders anywhere under ``folder``."""
    return [
        path
        for path in folder.rglob(".*")
        if path.is_dir() and any(marker in path.name for marker in _STORE_TEMP_MARKERS)
    ]


def new_temp_entries(before: set[str]) -> list[str]:
    """Leftovers in the private temporary folder that were not there ``before`` (all removed).

    Returned: every entry of ours (``lgd-*``) and every non-empty folder. Not returned: loose
    files and empty folders that libraries leave on purpose (PyG's generated ``propagate``
    modules, torch's ``pytorch-errorfile-*``, the empty folder of Lightning's spawn/fork
    checkpoint hand-over), nor the run folder that torchrun's agent keeps (``torchelastic_*``).
    """
    private = Path(os.environ["LGD_TEST_TMPDIR"])
    leaked = []
    for name in sorted(temp_entries() - before):
        path = private / name
        if path.is_dir():
            tolerated = name.startswith(_TOLERATED_FOLDERS)
            if name.startswith("lgd-") or (any(path.iterdir()) and not tolerated):
                leaked.append(name)
            shutil.rmtree(path, ignore_errors=True)
        else:
            if name.startswith("lgd-"):
                leaked.append(name)
            path.unlink(missing_ok=True)
    return leaked
