"""KaMinPar backend: the graph written as a ParHIP binary file, partitioned in a child process.

KaMinPar's Python binding (``kaminpar`` 3.7) reads graphs only from files (``load_graph``,
METIS text or ParHIP binary). The binary format is written here straight from the sorted keys of
``A + Aᵀ`` (:func:`~lightning_gnn_dist.partition.arrays.symmetric_keys`), chunk by chunk:

====================  ==========================================================
header (24 bytes)     ``version, n, m`` as ``uint64``; ``version = 0b001001``:
                      no edge weights, vertex weights, 64-bit edge offsets,
                      32-bit vertex ids, 64-bit vertex weights
offsets ``[n + 1]``   ``uint64`` byte address of each vertex's first neighbour
neighbours ``[m]``    ``uint32``
vertex weights        ``[n] int64``
====================  ==========================================================

(``m`` counts both directions of every edge.) KaMinPar's readers end the process on some inputs
(``std::exit(1)``), and a context is reproducible only in a fresh process, so the call runs in a
child (``_worker.py`` through :func:`~._child.run_in_child`), like the hypergraph backends.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from lightning_gnn_dist.partition.arrays import CHUNK, EdgeView, symmetric_keys
from lightning_gnn_dist.partition.backends._child import run_in_child, worker_command
from lightning_gnn_dist.partition.base import native_seed

#: KaMinPar's contexts that the partitioner offers (``kaminpar.context_names()`` has more).
CONTEXTS: tuple[str, ...] = ("default", "fast", "eco", "strong", "terapart", "largek")
#: ParHIP version bits: no edge weights (1), vertex weights (0 << 1), 64-bit edge ids (0 << 2),
#: 32-bit vertex ids (1 << 3), 64-bit vertex weights (0 << 4).
PARHIP_VERSION = 0b001001
_HEADER_BYTES = 24
#: ParHIP's 32-bit vertex ids: graphs up to this many vertices.
MAX_VERTICES = 2**32 - 1


def write_parhip(path: Path, keys: np.ndarray, num_nodes: int, vertex_weights: np.ndarray) -> None:
    """Write the graph whose sorted distinct adjacency keys ``u * N + v`` are ``keys`` (both
    directions of every edge, no self loops) in ParHIP's binary format, chunk by chunk.

    Args:
        path: the file.
        keys: ``[m] int64`` sorted keys.
        num_nodes: ``N``.
        vertex_weights: ``[N]`` positive integers.
    """
    degrees = np.zeros(num_nodes, dtype=np.int64)
    for start in range(0, keys.size, CHUNK):
        degrees += np.bincount(keys[start : start + CHUNK] // num_nodes, minlength=num_nodes)
    with open(path, "wb") as file:
        np.array([PARHIP_VERSION, num_nodes, keys.size], dtype=np.uint64).tofile(file)
        offsets = np.empty(num_nodes + 1, dtype=np.uint64)
        offsets[0] = 0
        np.cumsum(degrees, out=offsets[1:])
        del degrees
        offsets *= np.uint64(4)
        offsets += np.uint64(_HEADER_BYTES + 8 * (num_nodes + 1))
        offsets.tofile(file)
        del offsets
        for start in range(0, keys.size, CHUNK):
            (keys[start : start + CHUNK] % num_nodes).astype(np.uint32).tofile(file)
        np.asarray(vertex_weights, dtype=np.int64).tofile(file)


def _worker_command(
    input_path: Path,
    output_path: Path,
    num_parts: int,
    epsilon: float,
    seed: int,
    context: str,
    threads: int,
) -> list[str]:
    """The child's command line (a separate function so tests can substitute a failing child)."""
    return worker_command(
        "kaminpar", input_path, output_path, num_parts, repr(float(epsilon)), seed, context, threads
    )


def check_installed() -> None:
    """Raise ``ImportError`` with the install command unless ``kaminpar`` is importable."""
    if importlib.util.find_spec("kaminpar") is None:
        raise ImportError(
            "method='kaminpar' needs the kaminpar package: pip install kaminpar "
            "(or pip install 'lightning-gnn-dist[kaminpar]'), or use method='metis'"
        )


def partition_graph(
    view: EdgeView,
    vertex_weights: np.ndarray,
    num_parts: int,
    epsilon: float,
    seed: int,
    *,
    context: str = "default",
    threads: int = 1,
    timeout: float | None = None,
) -> np.ndarray:
    """Partition the undirected graph ``A + Aᵀ`` (no self loops, unit edge weights) of ``view``
    with KaMinPar, minimising the edge cut with parts of at most ``(1 + epsilon)`` times the
    average vertex weight.

    The adjacency keys (16 bytes per directed edge) exist only while the file is written; the
    child process then holds KaMinPar's own 32-bit graph.

    Args:
        view: the graph's distinct off-diagonal edges.
        vertex_weights: ``[N]`` positive integers.
        num_parts: ``2 <= num_parts <= N``.
        epsilon: allowed imbalance.
        seed: KaMinPar's seed (mapped by :func:`native_seed`).
        context: a KaMinPar context name (:data:`CONTEXTS`).
        threads: KaMinPar's threads.
        timeout: seconds the child may run; ``None`` waits.

    Returns:
        ``[N] int64`` part ids.

    Raises:
        ImportError: ``kaminpar`` is not installed.
        RuntimeError: the child failed, ran past ``timeout`` or wrote no assignment.
    """
    check_installed()
    num_nodes = view.num_nodes
    if num_nodes > MAX_VERTICES:
        raise ValueError(
            f"KaMinPar's file format takes at most {MAX_VERTICES} vertices (got {num_nodes}); "
            "use method='metis'"
        )
    return run_in_child(
        "KaMinPar",
        lambda folder: _write(folder, view, vertex_weights),
        lambda input_path, output_path: _worker_command(
            input_path,
            output_path,
            int(num_parts),
            epsilon,
            native_seed(seed),
            context,
            threads,
        ),
        timeout,
        "raise the timeout, or use method='metis'",
        num_nodes,
    )


def _write(folder: Path, view: EdgeView, vertex_weights: np.ndarray) -> Path:
    """Write the file; the keys are freed when this returns, before the child starts."""
    path = folder / "graph.parhip"
    write_parhip(path, symmetric_keys(None, view.num_nodes, view), view.num_nodes, vertex_weights)
    return path
