"""Mt-KaHyPar backend: our tuned configuration, one thread, one isolated child process per call.

Each call runs Mt-KaHyPar (km1 objective, ``mtkahypar.set_seed(seed)``) in a fresh Python process
(``_worker.py`` through :func:`~._child.partition_in_child`). That is what makes it reproducible:
in a fresh process the same input and seed gave the same assignment every time (R-MAT and mesh
graphs, P = 16 and 64), while a second call inside one process returned a different partition;
different seeds give different partitions. The child also keeps Mt-KaHyPar's thread pool and any
crash out of the caller's process, and makes ``timeout`` possible.

Presets (``preset=``):

* ``"tuned"`` (default): for hypergraphs with heavy-tailed net sizes (:func:`is_skewed`:
  power-law graphs), ``configs/mtkahypar_tuned.ini``, Mt-KaHyPar's default preset with six
  settings changed (the file says which and why): on the 1 M-edge R-MAT graph at P = 64 it
  partitions 2.5x faster than ``"default"`` at the same connectivity−1
  (``python -m benchmarks.partition_speed``). Other hypergraphs (meshes, where those settings cost
  2–4 %) get ``"default"``. The file's SHA-256 enters :func:`settings`, so editing it
  invalidates stored partitions.
* ``"fast"``: the same rule with ``configs/mtkahypar_fast.ini``: about 1 % more volume than
  ``"tuned"`` in 60 % of its time on that graph (with ``threads=2``: 3.4–3.8x METIS's time).
* Mt-KaHyPar's own presets: ``"default"``, ``"quality"``, ``"highest_quality"``, ``"large_k"``,
  ``"deterministic"``, ``"deterministic_quality"``.

``threads`` (default 1): Mt-KaHyPar's threads. With one thread every preset above is reproducible
for a given seed; with more, the non-deterministic presets (all but ``deterministic*``) may return
a different partition on every call: opt in only when bit-for-bit reproducibility does not matter.
On this project's 2-core machines the ``deterministic`` preset on several threads was 2.3–3.8x
slower than the default preset on one thread and no better (within 2 %), and it ignores
``set_seed``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_gnn_dist.partition.backends._child import partition_in_child, worker_command
from lightning_gnn_dist.partition.base import native_seed

if TYPE_CHECKING:
    from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph

_CONFIGS = Path(__file__).resolve().parent.parent / "configs"
TUNED_CONFIG = _CONFIGS / "mtkahypar_tuned.ini"
FAST_CONFIG = _CONFIGS / "mtkahypar_fast.ini"
#: A hypergraph is skewed when nets of more than ``SKEW_SIZE_FACTOR`` times the mean net size
#: hold at least ``SKEW_PIN_SHARE`` of the pins (R-MAT, 1 M edges: 38 %; meshes and SBM: 0 %).
SKEW_SIZE_FACTOR = 10
SKEW_PIN_SHARE = 0.25
#: Preset name -> Mt-KaHyPar ``PresetType`` member, or our configuration file.
PRESETS: dict[str, str | Path] = {
    "tuned": TUNED_CONFIG,
    "fast": FAST_CONFIG,
    "default": "DEFAULT",
    "quality": "QUALITY",
    "highest_quality": "HIGHEST_QUALITY",
    "large_k": "LARGE_K",
    "deterministic": "DETERMINISTIC",
    "deterministic_quality": "DETERMINISTIC_QUALITY",
}
#: Our presets: their file on skewed hypergraphs (:func:`is_skewed`), ``"plain"`` otherwise.
SKEW_PRESETS = ("tuned", "fast")
#: What the child reads for each preset name it is given.
_SOURCES: dict[str, str | Path] = {**PRESETS, "plain": "DEFAULT"}
DEFAULT_PRESET = "tuned"


def check_options(preset: str = DEFAULT_PRESET, threads: int = 1) -> None:
    """Raise ``ValueError`` for an unknown ``preset`` or a ``threads`` count below 1."""
    if preset not in PRESETS:
        raise ValueError(
            f"unknown Mt-KaHyPar preset {preset!r}; choose one of: {', '.join(PRESETS)}"
        )
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(
            f"threads must be a positive integer (got {threads!r}); 1 keeps the partition "
            f"reproducible, up to {os.cpu_count()} use every core of this machine"
        )


def is_skewed(hg: ColumnNetHypergraph) -> bool:
    """Whether nets of more than ``SKEW_SIZE_FACTOR`` x the mean size hold at least
    ``SKEW_PIN_SHARE`` of the pins (the ``"tuned"`` and ``"fast"`` presets then read their file)."""
    sizes = hg.net_sizes()
    if not sizes.size or not hg.num_pins:
        return False
    large = sizes > SKEW_SIZE_FACTOR * sizes.mean()
    return bool(sizes[large].sum() >= SKEW_PIN_SHARE * hg.num_pins)


def settings(preset: str = DEFAULT_PRESET, threads: int = 1) -> dict[str, Any]:
    """The preset (and the SHA-256 of its file for ``"tuned"`` and ``"fast"``) and the thread
    count."""
    check_options(preset, threads)
    values: dict[str, Any] = {"preset": preset, "threads": threads}
    source = PRESETS[preset]
    if isinstance(source, Path):
        digest = hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else "missing"
        values["preset_sha256"] = digest[:16]
    return values


def _worker_command(
    input_path: Path,
    output_path: Path,
    num_parts: int,
    epsilon: float,
    seed: int,
    preset: str = DEFAULT_PRESET,
    threads: int = 1,
) -> list[str]:
    """The child's command line (a separate function so tests can substitute a failing child)."""
    return worker_command(
        "mtkahypar",
        input_path,
        output_path,
        num_parts,
        repr(float(epsilon)),
        seed,
        _SOURCES[preset],
        threads,
    )


def partition_hypergraph(
    hg: ColumnNetHypergraph,
    num_parts: int,
    epsilon: float,
    seed: int,
    *,
    timeout: float | None = None,
    preset: str = DEFAULT_PRESET,
    threads: int = 1,
) -> np.ndarray:
    """Partition ``hg`` into ``num_parts`` parts minimising connectivity−1, in a child process.

    Args:
        hg (ColumnNetHypergraph): the hypergraph; vertex weights are ``hg.vertex_weights``, net
            weights ``hg.net_weights`` (unit when ``None``).
        num_parts (int): number of parts, ``2 <= num_parts <= hg.num_vertices``.
        epsilon (float): allowed imbalance of part weights.
        seed (int): Mt-KaHyPar's seed (mapped by :func:`native_seed`).
        timeout (float, optional): seconds the child may run before it is killed; ``None``
            waits for it. (default: ``None``)
        preset (str): a key of :data:`PRESETS`. (default: ``"tuned"``)
        threads (int): Mt-KaHyPar's threads; above 1 the result may differ between calls.
            (default: ``1``)

    Returns:
        ``[num_vertices] int64`` part ids in ``[0, num_parts)``; some parts may be empty when
        ``num_parts`` is close to the number of vertices.

    Raises:
        ValueError: unknown preset or bad thread count.
        RuntimeError: Mt-KaHyPar rejected the input or the configuration, crashed, or ran past
            ``timeout``.
    """
    check_options(preset, threads)
    if preset in SKEW_PRESETS and not is_skewed(hg):
        preset = "plain"
    return partition_in_child(
        "Mt-KaHyPar",
        hg,
        lambda input_path, output_path: _worker_command(
            input_path,
            output_path,
            int(num_parts),
            epsilon,
            native_seed(seed),
            preset,
            threads,
        ),
        timeout,
        "raise the timeout, or try preset='default', backend='kahypar' or method='metis'",
    )
