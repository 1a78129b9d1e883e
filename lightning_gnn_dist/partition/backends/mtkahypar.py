"""Mt-KaHyPar backend: in-process, multi-threaded, deterministic.

Mt-KaHyPar is initialised once per process with ``min(2, os.cpu_count())`` threads (a second
``mtkahypar.initialize`` only prints a warning and keeps the first thread pool, so the process
keeps one initializer). Every call uses the ``DETERMINISTIC`` preset with the km1 objective: for a
given input it returns the same assignment on every run and for any number of threads (checked
with 1 and 2 threads), so the thread count is not part of :func:`settings`.

Seeding: the deterministic algorithms draw from the context's own seed, which the Python API
(1.7) does not expose; ``mtkahypar.set_seed`` only seeds the non-deterministic presets, and
under ``DETERMINISTIC`` every seed gave the same partition. So the seed here picks a random
relabelling of the vertices and the order of the nets (``numpy.random.default_rng``); the
partitioner runs on the relabelled hypergraph and the result is mapped back. Equal seeds give
equal inputs and so equal assignments; different seeds explore different (equally valid)
partitions.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import mtkahypar
import numpy as np

from lightning_gnn_dist.partition.backends import native_seed

if TYPE_CHECKING:
    from lightning_gnn_dist.partition.hypergraph import ColumnNetHypergraph

PRESET = "deterministic"

_lock = threading.Lock()
_initializer: mtkahypar.Initializer | None = None


def num_threads() -> int:
    """Threads Mt-KaHyPar runs with: ``min(2, os.cpu_count())``."""
    return max(1, min(2, os.cpu_count() or 1))


def _get_initializer() -> mtkahypar.Initializer:
    global _initializer
    if _initializer is None:
        _initializer = mtkahypar.initialize(num_threads())
    return _initializer


def settings() -> dict[str, Any]:
    return {"preset": PRESET}


def partition_hypergraph(
    hg: ColumnNetHypergraph, num_parts: int, epsilon: float, seed: int
) -> np.ndarray:
    """Partition ``hg`` into ``num_parts`` parts minimising connectivity−1.

    Args:
        hg (ColumnNetHypergraph): the hypergraph; vertex weights are ``hg.vertex_weights``, every
            net has weight 1.
        num_parts (int): number of parts, ``2 <= num_parts <= hg.num_vertices``.
        epsilon (float): allowed imbalance of part weights.
        seed (int): selects the random relabelling of vertices and nets (see the module notes).

    Returns:
        ``[num_vertices] int64`` part ids in ``[0, num_parts)``; some parts may be empty when
        ``num_parts`` is close to the number of vertices.

    Raises:
        mtkahypar.InvalidInputError: Mt-KaHyPar rejected the input (a ``ValueError``).
    """
    rng = np.random.default_rng(native_seed(seed))
    old_of_new = rng.permutation(hg.num_vertices)  # vertex relabelling chosen by the seed
    new_of_old = np.empty_like(old_of_new)
    new_of_old[old_of_new] = np.arange(hg.num_vertices)
    net_order = rng.permutation(hg.num_nets).tolist()
    flat_pins = new_of_old[hg.pins].tolist()
    offsets = hg.net_offsets.tolist()
    nets = [flat_pins[offsets[j] : offsets[j + 1]] for j in net_order]
    with _lock:  # the seed is global to the library: set it and partition as one step
        initializer = _get_initializer()
        context = initializer.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
        context.set_partitioning_parameters(int(num_parts), float(epsilon), mtkahypar.Objective.KM1)
        context.logging = False
        hypergraph = initializer.create_hypergraph(
            context,
            hg.num_vertices,
            hg.num_nets,
            nets,
            hg.vertex_weights[old_of_new].tolist(),
            [1] * hg.num_nets,
        )
        mtkahypar.set_seed(native_seed(seed))
        partitioned = hypergraph.partition(context)
        assignment = np.asarray(partitioned.get_partition(), dtype=np.int64)
    return assignment[new_of_old]
