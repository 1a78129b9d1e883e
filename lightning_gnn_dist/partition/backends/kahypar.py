"""KaHyPar backend: one isolated child process per call.

KaHyPar (``kahypar`` 1.3) ships no configuration file and ends the calling process on several
misuses (exit 255 on a missing or incomplete ``.ini``, ``exit(0)`` after a stdin prompt when a
``Context`` is reused). Each call therefore runs in a fresh Python process with a fresh
``Context`` (``_worker.py`` through :func:`~._child.partition_in_child`), so whatever happens to
the child, the caller gets an assignment or a ``RuntimeError``.

The configuration is our own ``partition/configs/kahypar_km1.ini`` (direct k-way, km1); its
SHA-256 enters :func:`settings`, so editing it invalidates stored partitions. KaHyPar is
sequential and deterministic for a given seed.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_gnn_dist.partition.backends._child import partition_in_child, worker_command
from lightning_gnn_dist.partition.base import native_seed

if TYPE_CHECKING:
    from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "kahypar_km1.ini"


def settings(config: str | Path | None = None) -> dict[str, Any]:
    path = Path(config) if config is not None else DEFAULT_CONFIG
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return {"config": path.name, "config_sha256": digest[:16]}


def _worker_command(
    input_path: Path, output_path: Path, config: Path, num_parts: int, epsilon: float, seed: int
) -> list[str]:
    """The child's command line (a separate function so tests can substitute a failing child)."""
    return worker_command(
        "kahypar", input_path, output_path, num_parts, repr(float(epsilon)), seed, config
    )


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
    return partition_in_child(
        "KaHyPar",
        hg,
        lambda input_path, output_path: _worker_command(
            input_path, output_path, config_path, int(num_parts), epsilon, native_seed(seed)
        ),
        timeout,
        f"config {str(config_path)!r} (a complete km1 configuration is "
        f"{str(DEFAULT_CONFIG)!r}); raise the timeout or use backend='mtkahypar'",
    )
