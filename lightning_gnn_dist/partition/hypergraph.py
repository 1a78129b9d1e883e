"""Hypergraph partitioning (HP) of the column-net model of ``Â`` (paper 000 §4.3.2).

The model itself is :mod:`~lightning_gnn_dist.partition.column_net`; this module runs a
hypergraph backend on it and refines the result for the busiest rank's send volume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.partition.backends import (
    backend_options,
    backend_settings,
    check_backend,
    get_backend,
)
from lightning_gnn_dist.partition.base import Partitioner, estimate_seconds, register_partitioner
from lightning_gnn_dist.partition.column_net import ColumnNetHypergraph, column_net_hypergraph
from lightning_gnn_dist.partition.refine import RefineResult, refine_max_send_volume
from lightning_gnn_dist.partition.weights import (
    DEFAULT_VERTEX_WEIGHT,
    check_vertex_weight,
    check_widths,
    vertex_weights,
    weight_settings,
)
from lightning_gnn_dist.utils.checks import check_bool
from lightning_gnn_dist.utils.progress import status


@register_partitioner("hypergraph")
class HypergraphPartitioner(Partitioner):
    r"""Hypergraph partitioning (HP) of the column-net model (paper 000 §4.3.2).

    Minimises the connectivity−1 metric :math:`\sum_j (\lambda(n_j) - 1)` of
    :func:`column_net_hypergraph` with unit net weights and the vertex weights ``vertex_weight``
    names; every part weighs at most ``(1 + epsilon) * ceil(W / num_parts)`` (``W``: total
    weight, the bound both tools enforce), so the assignment minimises the rows the halo
    exchange moves while balancing the layer work. Connectivity−1 bounds only the *total*; by
    default a greedy refinement then lowers the busiest part's send volume
    (:func:`~lightning_gnn_dist.partition.refine.refine_max_send_volume`, on the same weights
    and bound), letting the total grow by at most ``volume_slack``. The km1 step then
    balances to ``epsilon / 2`` and leaves the rest of the bound as room for the refinement.

    Args:
        seed (int): seed of the partitioner; equal seeds give equal assignments. (default: ``0``)
        epsilon (float): allowed load imbalance. (default: ``0.03``)
        backend (str): ``"mtkahypar"`` (Mt-KaHyPar, our ``"tuned"`` preset, one thread) or
            ``"kahypar"`` (KaHyPar with our ``kahypar_km1.ini``); either runs in an isolated
            child process per call. (default: ``"mtkahypar"``)
        preset (str, optional): Mt-KaHyPar preset: ``"tuned"`` (``configs/mtkahypar_tuned.ini``
            on power-law hypergraphs, Mt-KaHyPar's default preset on others), ``"fast"`` (the
            same with ``configs/mtkahypar_fast.ini``: about 1 % more volume, 40 % quicker),
            ``"default"``, ``"quality"``, ``"highest_quality"``, ``"large_k"``,
            ``"deterministic"``, ``"deterministic_quality"``; ``None`` is ``"tuned"``.
            (default: ``None``)
        threads (int): Mt-KaHyPar threads. Above 1 the partition is faster but may differ between
            calls with the same seed (except for the ``deterministic*`` presets). (default: ``1``)
        max_net_size (int, optional): leave nets with more pins than this out of the
            partitioner's input (power-law graphs: the columns of hubs, which are cut almost
            always). The left-out nets still count: the refinement and every metric use the
            whole hypergraph. ``None`` keeps every net. Nets of one pin, which never count, are
            always left out. (default: ``None``)
        timeout (float, optional): seconds the partitioner's child process may run before it
            is killed and a ``RuntimeError`` is raised; ``None`` waits. (default: ``None``)
        balance_send_volume (bool): refine the partition for the busiest part's send volume.
            (default: ``True``)
        volume_slack (float): fraction by which that refinement may increase the total volume.
            (default: ``0.05``)
        vertex_weight (str): what every part balances, and the refinement with it: ``"work"``
            (row non-zeros and per-row dense work of a GCN of ``widths``, see
            :mod:`~lightning_gnn_dist.partition.weights`), ``"nnz"`` (row non-zeros, paper 000)
            or ``"rows"``. (default: ``"work"``, chosen by ``python -m benchmarks.full_batch``)
        widths (Sequence[int], optional): GCN widths ``[d_0, ..., d_L]`` of ``"work"``; ``None``
            reads ``(num_features, 16, num_classes)`` from the graph. (default: ``None``)

    After :meth:`partition`, :attr:`last_refinement` holds the refinement's
    :class:`~lightning_gnn_dist.partition.refine.RefineResult` (volumes before and after, moves),
    or ``None`` when it was off or ``num_parts == 1``.

    .. code-block:: python

        from lightning_gnn_dist.partition.base import get_partitioner

        assignment = get_partitioner("hypergraph", seed=0, epsilon=0.03).partition(data, 8)
    """

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.03,
        backend: str = "mtkahypar",
        timeout: float | None = None,
        balance_send_volume: bool = True,
        volume_slack: float = 0.05,
        preset: str | None = None,
        threads: int = 1,
        max_net_size: int | None = None,
        vertex_weight: str = DEFAULT_VERTEX_WEIGHT,
        widths: Sequence[int] | None = None,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon)
        self.backend = check_backend(backend)
        self.backend_options = backend_options(self.backend, preset=preset, threads=threads)
        if max_net_size is not None and (
            not isinstance(max_net_size, int) or isinstance(max_net_size, bool) or max_net_size < 2
        ):
            raise ValueError(
                f"max_net_size must be an integer >= 2 or None (got {max_net_size!r}); nets with "
                "more pins than this are left out of the partitioner's input"
            )
        self.max_net_size = max_net_size
        self.vertex_weight = check_vertex_weight(vertex_weight, multi_constraint=False)
        self.widths = check_widths(widths)
        valid = isinstance(volume_slack, int | float) and not isinstance(volume_slack, bool)
        if not valid or not 0.0 <= volume_slack <= 10.0:  # nan fails too
            raise ValueError(
                f"volume_slack must be in [0, 10] (got {volume_slack!r}); 0.05 lets the "
                "send-volume refinement raise the total volume by at most 5%"
            )
        self.balance_send_volume = check_bool("balance_send_volume", balance_send_volume)
        self.volume_slack = float(volume_slack)
        self.last_refinement: RefineResult | None = None
        valid = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if timeout is not None and (not valid or not 0 < timeout < float("inf")):
            raise ValueError(
                f"timeout must be a positive number of seconds or None (got {timeout!r})"
            )
        self.timeout = timeout

    def partition(self, data: Data, num_parts: int) -> np.ndarray:
        self.last_refinement = None
        return super().partition(data, num_parts)

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        return self.partition_hypergraph(self.hypergraph(data), num_parts)

    def hypergraph(self, data: Data) -> ColumnNetHypergraph:
        """The column-net hypergraph of ``data`` with this partitioner's vertex weights (what
        :meth:`partition` cuts; :func:`~lightning_gnn_dist.partition.placement.two_level_assignment`
        cuts it twice)."""
        return replace(
            column_net_hypergraph(data),
            vertex_weights=vertex_weights(data, self.vertex_weight, self.widths),
        )

    def partition_hypergraph(
        self, hypergraph: ColumnNetHypergraph, num_parts: int, refine: bool = True
    ) -> np.ndarray:
        """Partition ``hypergraph`` (its vertex weights as given) into ``num_parts`` parts with
        this partitioner's backend, and its send-volume refinement when ``refine`` and
        ``balance_send_volume`` are set (the refinement needs net ``j`` owned by vertex ``j``,
        the column-net model; a sub-hypergraph of
        :meth:`~lightning_gnn_dist.partition.column_net.ColumnNetHypergraph.restrict` is not).

        Returns:
            ``[num_vertices] int64`` part of each vertex.
        """
        refine = refine and self.balance_send_volume
        if num_parts == 1:
            return np.zeros(hypergraph.num_vertices, dtype=np.int64)
        partition_hypergraph = get_backend(self.backend)
        sizes = hypergraph.net_sizes()
        keep = sizes >= 2
        if self.max_net_size is not None:
            keep &= sizes <= self.max_net_size
        # With the refinement on, km1 gets half the imbalance budget and the other half is room
        # for the refinement's moves: when the km1 partition fills every part but the busiest
        # to the bound, no vertex can leave the busiest part (measured on R-MAT, P = 4).
        backend_epsilon = self.epsilon / 2 if refine else self.epsilon
        estimate = estimate_seconds(f"hypergraph-{self.backend}", hypergraph.num_pins)
        with status(
            f"{self.backend}: {hypergraph.num_vertices:,} vertices, {hypergraph.num_pins:,} pins "
            f"into {num_parts} parts",
            estimate,
        ):
            assignment = partition_hypergraph(
                hypergraph.keep_nets(keep),
                num_parts,
                backend_epsilon,
                self.seed,
                timeout=self.timeout,
                **self.backend_options,
            )
        if not refine:
            return assignment
        self.last_refinement = refine_max_send_volume(
            hypergraph.net_offsets,
            hypergraph.pins,
            hypergraph.vertex_weights,
            assignment,
            num_parts,
            self.epsilon,
            volume_slack=self.volume_slack,
        )
        return self.last_refinement.assignment

    def settings(self) -> dict[str, Any]:
        """Method, seed, epsilon, the backend and the backend's own settings (Mt-KaHyPar's preset
        and threads, or KaHyPar's configuration file hash), the refinement, ``max_net_size`` and
        the vertex weight. The timeout never changes an assignment and is left out."""
        return {
            **super().settings(),
            "backend": self.backend,
            **backend_settings(self.backend, **self.backend_options),
            "balance_send_volume": self.balance_send_volume,
            "volume_slack": self.volume_slack,
            "max_net_size": self.max_net_size,
            **weight_settings(self.vertex_weight, self.widths),
        }


def _fixed_backend(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    if "backend" in options:
        raise ValueError(
            f"'hypergraph-{backend}' always uses backend={backend!r} (got "
            f"backend={options['backend']!r}); use method 'hypergraph' to choose the backend"
        )
    return {**options, "backend": backend}


@register_partitioner("hypergraph-mtkahypar")
class MtKaHyParPartitioner(HypergraphPartitioner):
    """:class:`HypergraphPartitioner` fixed to the Mt-KaHyPar backend (for comparisons); the
    keyword arguments are :class:`HypergraphPartitioner`'s."""

    fixed_options = frozenset({"backend"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**_fixed_backend("mtkahypar", options))


@register_partitioner("hypergraph-kahypar")
class KaHyParPartitioner(HypergraphPartitioner):
    """:class:`HypergraphPartitioner` fixed to the KaHyPar backend (for comparisons); the
    keyword arguments are :class:`HypergraphPartitioner`'s."""

    fixed_options = frozenset({"backend"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**_fixed_backend("kahypar", options))
