"""KaHyPar backend: one isolated child process per call.

KaHyPar (``kahypar`` 1.3) ships no configuration file and ends the calling process on several
misuses (exit 255 on a missing or incomplete ``.ini``, ``exit(0)`` after a stdin prompt when a
``Context`` is reused). Each call therefore runs ``_kahypar_worker.py`` in a fresh Python process
with a fresh ``Context``, no stdin, its output captured, and the arrays exchanged as ``.npy``
files in a temporary folder. Whatever happens to the child, the caller gets an assignment or a
``RuntimeError`` with the exit status and the tail of the child's output.

The configuration is our own ``partition/configs/kahypar_km1.ini`` (direct k-way, km1); its
SHA-256 enters :func:`settings`, so editing it invalidates stored partitions. KaHyPar is
sequential and deterministic for a given seed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_gnn_dist.partition.backends import native_seed

if TYPE_CHECKING:
    from lightning_gnn_dist.partition.hypergraph import ColumnNetHypergraph

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "kahypar_km1.ini"
WORKER = Path(__file__).resolve().with_name("_kahypar_worker.py")
_TAIL_CHARS = 2000


def settings(config: str | Path | None = None) -> dict[str, Any]:
    path = Path(config) if config is not None else DEFAULT_CONFIG
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return {"config": path.name, "config_sha256": digest[:16]}


def _worker_command(
    input_path: Path, output_path: Path, config: Path, num_parts: int, epsilon: float, seed: int
) -> list[str]:
    """The child's command line (a separate function so tests can substitute a failing child)."""
    return [
        sys.executable,
        str(WORKER),
        str(input_path),
        str(output_path),
        str(config),
        str(num_parts),
        repr(float(epsilon)),
        str(seed),
    ]


def _describe(returncode: int) -> str:
    """``-11`` → ``"-11 (killed by SIGSEGV)"``; other codes unchanged."""
    if returncode >= 0:
        return str(returncode)
    try:
        return f"{returncode} (killed by {signal.Signals(-returncode).name})"
    except ValueError:
        return str(returncode)


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _TAIL_CHARS else "..." + text[-_TAIL_CHARS:]


def _deal_by_weight(vertex_weights: np.ndarray, num_parts: int) -> np.ndarray:
    """Balance-only assignment for a hypergraph without a net of two pins.

    KaHyPar 1.3.7 crashes (SIGSEGV) on such input. Nothing can be cut, so vertices are dealt
    round-robin in order of decreasing weight (exactly balanced for unit weights, which is the
    only case the column-net model produces: a graph whose only edges are self loops).
    """
    order = np.argsort(-np.asarray(vertex_weights), kind="stable")
    assignment = np.empty(len(order), dtype=np.int64)
    assignment[order] = np.arange(len(order), dtype=np.int64) % num_parts
    return assignment


def partition_hypergraph(
    hg: ColumnNetHypergraph,
    num_parts: int,
    epsilon: float,
    seed: int,
    *,
    config: str | Path | None = None,
    timeout: float | None = None,
) -> np.ndarray:
    """Partition ``hg`` into ``num_parts`` parts minimising connectivity−1, in a child process.

    Args:
        hg (ColumnNetHypergraph): the hypergraph; vertex weights are ``hg.vertex_weights``, every
            net has weight 1.
        num_parts (int): number of parts, ``2 <= num_parts <= hg.num_vertices``.
        epsilon (float): allowed imbalance of part weights.
        seed (int): KaHyPar's seed (taken modulo ``2**31``).
        config (str or Path, optional): KaHyPar ``.ini`` file; ``None`` uses our
            ``configs/kahypar_km1.ini``. (default: ``None``)
        timeout (float, optional): seconds the child may run before it is killed; ``None``
            waits for it. (default: ``None``)

    Returns:
        ``[num_vertices] int64`` part ids in ``[0, num_parts)``. A hypergraph without a net of
        two or more pins is not passed to KaHyPar (which crashes on it) but dealt round-robin.

    Raises:
        ImportError: the ``kahypar`` package is not installed.
        RuntimeError: the child exited with a non-zero status, ran past ``timeout`` or wrote no
            (or a malformed) assignment. The calling process always survives.
    """
    if importlib.util.find_spec("kahypar") is None:
        raise ImportError(
            "the 'kahypar' backend needs the kahypar package: pip install kahypar "
            "(or pip install 'lightning-gnn-dist[kahypar]'), or use backend='mtkahypar'"
        )
    if np.diff(hg.net_offsets).max(initial=0) < 2:
        return _deal_by_weight(hg.vertex_weights, num_parts)
    config_path = Path(config) if config is not None else DEFAULT_CONFIG
    with tempfile.TemporaryDirectory(prefix="lgd-kahypar-") as folder:
        input_path = Path(folder) / "hypergraph.npz"
        output_path = Path(folder) / "assignment.npy"
        np.savez(
            input_path,
            net_offsets=np.asarray(hg.net_offsets, dtype=np.int64),
            pins=np.asarray(hg.pins, dtype=np.int64),
            vertex_weights=np.asarray(hg.vertex_weights, dtype=np.int64),
        )
        command = _worker_command(
            input_path, output_path, config_path, int(num_parts), epsilon, native_seed(seed)
        )
        try:
            child = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                cwd=folder,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as expired:
            stderr = expired.stderr or b""  # bytes even with text=True
            if isinstance(stderr, bytes):
                stderr = stderr.decode(errors="replace")
            raise RuntimeError(
                f"KaHyPar did not finish within {timeout} s (config {str(config_path)!r}) and was "
                f"killed; raise the timeout or use backend='mtkahypar'. stderr: {_tail(stderr)!r}"
            ) from None
        output = _tail(child.stderr) or _tail(child.stdout)
        if child.returncode != 0:
            raise RuntimeError(
                f"KaHyPar failed with exit status {_describe(child.returncode)} (config "
                f"{str(config_path)!r}); a complete km1 configuration is "
                f"{str(DEFAULT_CONFIG)!r}. Its output: {output!r}"
            )
        if not output_path.is_file():
            raise RuntimeError(
                "KaHyPar exited with status 0 but wrote no partition (it can end its process "
                f"early, e.g. after a stdin prompt). Its output: {output!r}"
            )
        assignment = np.load(output_path)
    if assignment.shape != (hg.num_vertices,):
        raise RuntimeError(
            f"KaHyPar returned {assignment.shape} part ids for {hg.num_vertices} vertices"
        )
    return assignment.astype(np.int64, copy=False)
