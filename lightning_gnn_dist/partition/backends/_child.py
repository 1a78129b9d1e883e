"""Run one hypergraph partition in a child process (``_worker.py``) and collect its assignment.

Whatever happens to the child (an exit, a crash, a hang past ``timeout``), the caller gets the
assignment or a ``RuntimeError`` naming the partitioner, the exit status and the tail of the
child's output; the calling process always survives. Arrays travel as ``.npz``/``.npy`` files in
a temporary folder that is removed afterwards.

If the calling process is killed (``SIGKILL`` included), the child dies with it (Linux
``PR_SET_PDEATHSIG``, set by the worker itself) and the next call removes the orphaned temporary
folder (its name carries the dead process's id, see :mod:`lightning_gnn_dist.utils.tempdirs`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph

from lightning_gnn_dist.utils.tempdirs import make_owned_dir, remove_stale

WORKER = Path(__file__).resolve().with_name("_worker.py")
#: Prefix of the temporary folders in :func:`tempfile.gettempdir`.
TEMP_PREFIX = "lgd-partition-"
#: Environment variable telling the worker which process must outlive it.
PARENT_PID_ENV = "LGD_PARTITION_PARENT_PID"
_TAIL_CHARS = 2000


def worker_command(backend: str, *args: object) -> list[str]:
    """``python _worker.py BACKEND ARGS...`` with this interpreter."""
    return [sys.executable, str(WORKER), backend, *(str(a) for a in args)]


def _describe(returncode: int) -> str:
    """``-11`` → ``"-11 (killed by SIGSEGV)"``; other codes unchanged."""
    if returncode >= 0:
        return str(returncode)
    try:
        return f"{returncode} (killed by {signal.Signals(-returncode).name})"
    except ValueError:
        return str(returncode)


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):  # TimeoutExpired carries bytes even with text=True
        text = text.decode(errors="replace")
    text = (text or "").strip()
    return text if len(text) <= _TAIL_CHARS else "..." + text[-_TAIL_CHARS:]


def partition_in_child(
    label: str,
    hg: ColumnNetHypergraph,
    command: Callable[[Path, Path], list[str]],
    timeout: float | None,
    advice: str,
) -> np.ndarray:
    """Write ``hg``, run ``command(input_path, output_path)``, read the assignment.

    Args:
        label: the partitioner's name in error messages (``"KaHyPar"``).
        hg: the hypergraph (``net_offsets``, ``pins``, ``vertex_weights``, ``net_weights`` are
            written).
        command: builds the child's command line from the input and output paths.
        timeout: seconds before the child is killed; ``None`` waits.
        advice: what to do after a failure, appended to error messages.

    Returns:
        ``[num_vertices] int64`` part ids.

    Raises:
        RuntimeError: non-zero exit, timeout, no output or an output of the wrong shape.
    """

    def write(folder: Path) -> Path:
        input_path = folder / "hypergraph.npz"
        np.savez(
            input_path,
            net_offsets=np.asarray(hg.net_offsets, dtype=np.int64),
            pins=np.asarray(hg.pins, dtype=np.int64),
            vertex_weights=np.asarray(hg.vertex_weights, dtype=np.int64),
            net_weights=np.asarray(
                hg.net_weights if hg.net_weights is not None else np.ones(hg.num_nets),
                dtype=np.int64,
            ),
        )
        return input_path

    return run_in_child(label, write, command, timeout, advice, hg.num_vertices)


def run_in_child(
    label: str,
    write: Callable[[Path], Path],
    command: Callable[[Path, Path], list[str]],
    timeout: float | None,
    advice: str,
    num_vertices: int,
) -> np.ndarray:
    """Write the input with ``write(folder)`` (returns its path), run
    ``command(input_path, output_path)`` in a child process, read the assignment.

    The input and output live in a temporary folder owned by this process, removed afterwards
    (also after a failure). Arguments and errors as :func:`partition_in_child`.
    """
    remove_stale(tempfile.gettempdir(), TEMP_PREFIX)
    folder = make_owned_dir(tempfile.gettempdir(), TEMP_PREFIX, mode=0o700)
    try:
        input_path = write(folder)
        output_path = folder / "assignment.npy"
        try:
            child = subprocess.run(
                command(input_path, output_path),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                cwd=folder,
                timeout=timeout,
                check=False,
                env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
            )
        except subprocess.TimeoutExpired as expired:
            raise RuntimeError(
                f"{label} did not finish within {timeout} s and was killed; {advice}. "
                f"stderr: {_tail(expired.stderr)!r}"
            ) from None
        output = _tail(child.stderr) or _tail(child.stdout)
        if child.returncode != 0:
            raise RuntimeError(
                f"{label} failed with exit status {_describe(child.returncode)}; {advice}. "
                f"Its output: {output!r}"
            )
        if not output_path.is_file():
            raise RuntimeError(
                f"{label} exited with status 0 but wrote no partition (it can end its process "
                f"early, e.g. after a stdin prompt). Its output: {output!r}"
            )
        assignment = np.load(output_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if assignment.shape != (num_vertices,):
        raise RuntimeError(
            f"{label} returned {assignment.shape} part ids for {num_vertices} vertices"
        )
    return assignment.astype(np.int64, copy=False)
