"""Hypergraph partitioning backends of :class:`~lightning_gnn_dist.partition.HypergraphPartitioner`.

A backend is a module with one function::

    partition_hypergraph(hg: ColumnNetHypergraph, num_parts: int, epsilon: float, seed: int,
                         *, timeout: float | None = None)
        -> np.ndarray  # [num_vertices] int64 in [0, num_parts)

that minimises connectivity−1 (km1) with vertex weights ``hg.vertex_weights``, unit net weights
and imbalance ``epsilon``, deterministically for a given ``seed``, and a function
``settings() -> dict`` naming whatever besides the arguments determines its result.

========== ================================================ ======================================
backend    library                                          where it runs
========== ================================================ ======================================
mtkahypar  Mt-KaHyPar (MIT), ``tuned`` preset, one thread    a child process per call (``_worker``)
kahypar    KaHyPar (GPLv3), our ``configs/kahypar_km1``     a child process per call (``_worker``)
========== ================================================ ======================================

Backends are imported on first use, so an optional library that is not installed only fails when
it is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

HYPERGRAPH_BACKENDS: tuple[str, ...] = ("mtkahypar", "kahypar")


def check_backend(backend: str) -> str:
    """Return ``backend`` if it is a known backend, else raise ``ValueError`` listing the choices."""
    if backend not in HYPERGRAPH_BACKENDS:
        raise ValueError(
            f"unknown hypergraph backend {backend!r}; choose one of: {', '.join(HYPERGRAPH_BACKENDS)}"
        )
    return backend


def get_backend(backend: str) -> Callable[..., np.ndarray]:
    """The ``partition_hypergraph`` function of ``backend``."""
    module = importlib.import_module(f"{__name__}.{check_backend(backend)}")
    return module.partition_hypergraph


def backend_settings(backend: str, **options: Any) -> dict[str, Any]:
    """What besides the graph, parts, epsilon and seed determines ``backend``'s assignment,
    given its ``options`` (:func:`backend_options`)."""
    module = importlib.import_module(f"{__name__}.{check_backend(backend)}")
    return module.settings(**options)


def backend_options(backend: str, preset: str | None = None, threads: int = 1) -> dict[str, Any]:
    """The keyword arguments ``backend``'s ``partition_hypergraph`` takes for these options.

    Only Mt-KaHyPar has presets and threads; KaHyPar is sequential and reads our configuration.

    Raises:
        ValueError: an unknown preset, a bad thread count, or either one given to ``kahypar``.
    """
    if check_backend(backend) == "kahypar":
        if preset is not None or threads != 1:
            raise ValueError(
                f"backend='kahypar' takes no preset or threads (got preset={preset!r}, "
                f"threads={threads!r}); use backend='mtkahypar' for them"
            )
        return {}
    from lightning_gnn_dist.partition.backends import mtkahypar

    options = {"preset": mtkahypar.DEFAULT_PRESET if preset is None else preset, "threads": threads}
    mtkahypar.check_options(**options)
    return options


__all__ = [
    "HYPERGRAPH_BACKENDS",
    "backend_options",
    "backend_settings",
    "check_backend",
    "get_backend",
]
