"""The partitioner interface and registry.

A partitioner maps a graph to a vertex→part assignment. Everything downstream (metrics, the
store, ``LocalPartition``) only sees that assignment, so a new method is one subclass plus a
``@register_partitioner("name")`` line.
"""

from __future__ import annotations

import inspect
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.hetero import is_typed
from lightning_gnn_dist.partition.types import balance_types
from lightning_gnn_dist.utils.checks import check_int

PARTITIONERS: dict[str, type[Partitioner]] = {}


class Partitioner(ABC):
    """Base class of vertex partitioners.

    Args:
        seed (int): seed of every random choice; equal seeds give equal assignments.
            (default: ``0``)
        epsilon (float): allowed load imbalance; a part may weigh up to ``(1 + epsilon)`` times the
            average. (default: ``0.03``)

    Output contract: :meth:`partition` returns ``assignment``, an ``int64`` array of shape
    ``[num_nodes]`` with values in ``[0, num_parts)``. It must be deterministic for a given seed
    and must never end the calling process (native libraries are isolated where they might).
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "vertex"
    """``"vertex"`` (vertex → part) or ``"vertex-cut"`` (edge → part); picks the store's layout."""

    def __init__(self, seed: int = 0, epsilon: float = 0.03) -> None:
        valid = isinstance(epsilon, int | float) and not isinstance(epsilon, bool)
        if not valid or not 0.0 <= epsilon <= 10.0:
            raise ValueError(
                f"epsilon must be in [0, 10] (got {epsilon}); 0.03 allows 3% imbalance"
            )
        self.seed = check_int("seed", seed, 0)
        self.epsilon = float(epsilon)

    def partition(self, data: Data, num_parts: int) -> np.ndarray:
        """Assign each vertex of ``data`` (canonical, see ``data.graph.canonicalize``) to a part.

        A typed graph (:func:`~lightning_gnn_dist.data.hetero.typed_graph`) is partitioned as its
        homogeneous view, all types at once, and then balanced per type
        (:func:`~lightning_gnn_dist.partition.types.balance_types`).

        Returns:
            ``[num_nodes] int64`` array of part ids in ``[0, num_parts)``.
        """
        check_num_parts(num_parts, data.num_nodes)
        if num_parts == 1:
            return np.zeros(data.num_nodes, dtype=np.int64)
        self._announce(data, num_parts)
        assignment = np.asarray(self._partition(data, num_parts), dtype=np.int64)
        if (
            assignment.shape != (data.num_nodes,)
            or assignment.min() < 0
            or assignment.max() >= num_parts
        ):
            raise RuntimeError(f"{self.name} partitioner returned an invalid assignment")
        if is_typed(data):  # every node type (and the target's training vertices) balanced
            assignment = balance_types(data, assignment, num_parts, self.epsilon)
        empty = np.flatnonzero(np.bincount(assignment, minlength=num_parts) == 0)
        if empty.size:
            # Training still works (the rank only relays its share of collectives), but the
            # user asked for P workers and gets fewer doing graph work.
            warnings.warn(
                f"the {self.name!r} partitioner ({self!r}) left part(s) {empty.tolist()} of "
                f"{num_parts} empty on a graph of {data.num_nodes} vertices; those ranks own no "
                "vertex. Use fewer parts or another method (e.g. 'hypergraph' or 'random').",
                UserWarning,
                stacklevel=2,
            )
        return assignment

    def _announce(self, data: Data, num_parts: int) -> None:
        """Check the partition step's memory estimate against what the machine has (a one-line
        ``MemoryError`` saying what to do when it does not fit) and print it with a time
        estimate (when progress is shown)."""
        from lightning_gnn_dist.data.limits import check_partition_fits, describe_bytes
        from lightning_gnn_dist.utils.progress import format_seconds, note

        num_edges = 0 if data.edge_index is None else int(data.edge_index.size(1))
        needed = check_partition_fits(
            self.name, data.num_nodes, num_edges, num_parts, **self.memory_options()
        )
        seconds = estimate_seconds(self.name, num_edges)
        note(
            f"partitioning {data.num_nodes:,} vertices / {num_edges:,} edges into {num_parts} "
            f"parts with {self.name!r}: about {describe_bytes(needed)} of memory besides the "
            f"graph" + ("" if seconds is None else f", about {format_seconds(seconds)}")
        )

    def memory_options(self) -> dict[str, Any]:
        """Options of this partitioner that change the partition step's memory estimate
        (keyword arguments of :func:`~lightning_gnn_dist.data.limits.check_partition_fits`);
        none by default."""
        return {}

    @abstractmethod
    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        """Method-specific work; ``2 <= num_parts <= num_nodes`` holds."""

    def metrics(self, data: Data, assignment: np.ndarray, num_parts: int):
        """Exact metrics of an assignment this partitioner returned
        (:class:`~lightning_gnn_dist.partition.metrics.PartitionMetrics` for vertex partitions)."""
        from lightning_gnn_dist.partition.metrics import partition_metrics

        return partition_metrics(data, assignment, num_parts)

    def build_parts(self, data: Data, assignment: np.ndarray, num_parts: int):
        """The per-rank parts of an assignment, in part order (``LocalPartition`` here)."""
        from lightning_gnn_dist.data.local import build_local_partitions

        if is_typed(data):  # per-type ranges, per-relation plans (data.hetero_local)
            from lightning_gnn_dist.data.hetero_local import build_typed_partitions

            return build_typed_partitions(data, assignment, num_parts)
        return build_local_partitions(data, assignment, num_parts)

    def label_owner(self, data: Data, assignment: np.ndarray, num_parts: int) -> np.ndarray:
        """``[num_nodes] int64`` part that holds each vertex's label and masks."""
        return np.asarray(assignment, dtype=np.int64)

    def settings(self) -> dict[str, Any]:
        """Everything that determines the assignment besides the graph (goes into the store's
        fingerprint)."""
        return {"method": self.name, "seed": self.seed, "epsilon": self.epsilon}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings().items() if k != "method")
        return f"{type(self).__name__}({args})"


def check_num_parts(num_parts: int, num_nodes: int) -> None:
    """Raise ``ValueError`` unless ``1 <= num_parts <= num_nodes``."""
    if not isinstance(num_parts, int | np.integer) or num_parts < 1:
        raise ValueError(f"the number of parts must be an integer >= 1 (got {num_parts!r})")
    if num_parts > num_nodes:
        raise ValueError(
            f"the number of parts ({num_parts}) exceeds the number of vertices ({num_nodes}); "
            "use at most one part per vertex"
        )


def register_partitioner(name: str) -> Callable[[type[Partitioner]], type[Partitioner]]:
    """Class decorator adding a partitioner to :data:`PARTITIONERS` under ``name``."""

    def decorator(cls: type[Partitioner]) -> type[Partitioner]:
        cls.name = name
        PARTITIONERS[name] = cls
        return cls

    return decorator


def partitioner_options(method: str) -> list[str]:
    """Keyword arguments the partitioner registered as ``method`` accepts, in signature order
    (through the ``**options`` of subclasses that fix one, such as ``hypergraph-kahypar``).

    Raises:
        ValueError: unknown method (the message lists the known ones).
    """
    try:
        cls = PARTITIONERS[method]
    except KeyError:
        known = ", ".join(sorted(PARTITIONERS))
        raise ValueError(f"unknown partition method {method!r}; choose one of: {known}") from None
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]
        names += [
            p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in names
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return [name for name in names if name not in getattr(cls, "fixed_options", ())]


def get_partitioner(method: str, **options: Any) -> Partitioner:
    """Instantiate the partitioner registered as ``method`` with ``options``.

    Raises:
        ValueError: unknown method (the message lists the known ones), or an option the method
            does not take (the message lists the ones it takes).
    """
    accepted = partitioner_options(method)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"the {method!r} partitioner has no option {unknown[0]!r}; its options are: "
            f"{', '.join(accepted)}"
        )
    return PARTITIONERS[method](**options)


#: CPU seconds per directed edge of each method's partition call on one core (R-MAT scales
#: 16-20 with P = 2 and 4, ``python -m benchmarks.partition_speed --scales``); a rough guide for
#: the progress display, not a bound.
SECONDS_PER_EDGE: dict[str, float] = {
    "metis": 1.3e-6,
    "kaminpar": 0.8e-6,
    "random": 2e-8,
    "hypergraph": 2e-5,
    "hypergraph-mtkahypar": 2e-5,
    "hypergraph-kahypar": 1e-4,
}


def estimate_seconds(method: str, num_edges: int) -> float | None:
    """Rough CPU seconds of ``method`` on a graph of ``num_edges`` edges (``None``: unknown)."""
    rate = SECONDS_PER_EDGE.get(method)
    return None if rate is None else rate * num_edges


def native_seed(seed: int) -> int:
    """Map any Python ``int`` seed onto ``[1, 2**31 - 1]``, which native ``int`` seeds accept.

    Zero is avoided because METIS gives seeds 0 and 1 the same stream (``srand(0)`` is
    ``srand(1)``): ``seed=0`` and ``seed=1`` would otherwise return the same partition.
    """
    return int(seed) % (2**31 - 1) + 1
