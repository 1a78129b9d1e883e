"""KaMinPar graph partitioning, refined toward the communication volume: the method for large
graphs (issue 34).

KaMinPar (``pip install kaminpar``, MIT) is a multilevel graph partitioner that scales to
billions of edges on one machine. On R-MAT scale 20 (1 M vertices, 16 M edges) it partitioned
into two parts in 5 CPU seconds with 0.2 GiB, where METIS (pymetis) took 17 s and 4.2 GiB; its
edge cut is METIS's within 2 %. The column-net refinement of :mod:`~lightning_gnn_dist.partition.volume`
then lowers the rows the halo exchange moves below METIS's, in time linear in the edges
(``python -m benchmarks.partition_speed --scales 16,18,20`` has the numbers).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.partition import volume
from lightning_gnn_dist.partition.arrays import EdgeView
from lightning_gnn_dist.partition.backends import kaminpar as backend
from lightning_gnn_dist.partition.base import Partitioner, estimate_seconds, register_partitioner
from lightning_gnn_dist.partition.column_net import column_net_hypergraph
from lightning_gnn_dist.partition.refine import RefineResult, refine_max_send_volume
from lightning_gnn_dist.partition.volume import VolumeRefineResult, refine_volume
from lightning_gnn_dist.partition.weights import (
    DEFAULT_VERTEX_WEIGHT,
    check_vertex_weight,
    check_widths,
    vertex_weights,
    weight_settings,
)
from lightning_gnn_dist.utils.checks import check_bool, check_int

#: ``balance_send_volume=None`` lowers the busiest part's send volume from this many parts on.
SEND_BALANCE_PARTS = 8


@register_partitioner("kaminpar")
class KaMinParPartitioner(Partitioner):
    r"""KaMinPar k-way partitioning of the undirected graph :math:`A + A^\top`, then a
    refinement toward the column-net communication volume.

    KaMinPar minimises the edge cut of :math:`A + A^\top` (self loops dropped, unit edge
    costs) with every part weighing at most ``(1 + epsilon)`` times the average
    ``vertex_weight``, like :class:`~lightning_gnn_dist.partition.metis.MetisPartitioner`. With
    ``refine=True`` :func:`~lightning_gnn_dist.partition.volume.refine_volume` then moves
    vertices while that lowers connectivity−1 of the column-net hypergraph (the rows the halo
    exchange moves, which :class:`~lightning_gnn_dist.partition.hypergraph.HypergraphPartitioner`
    minimises directly but slowly), within the same weight bound ``(1 + ε)·⌈W / P⌉``; KaMinPar
    then balances to ``epsilon / 2``, leaving the rest of the bound as room for the moves.

    KaMinPar runs in a child process (it reads its graph from a file this process writes, and
    its readers may end the process on bad input), one thread by default: equal seeds give equal
    assignments.

    Args:
        seed (int): KaMinPar's seed and the refinement's. (default: ``0``)
        epsilon (float): allowed load imbalance. (default: ``0.03``)
        context (str): KaMinPar's configuration: ``"default"``, ``"fast"``, ``"eco"``,
            ``"strong"``, ``"terapart"`` (less memory) or ``"largek"`` (many parts).
            (default: ``"default"``)
        threads (int): KaMinPar's threads; above 1 the assignment may change between calls.
            (default: ``1``)
        refine (bool): refine toward the communication volume. (default: ``True``)
        balance_send_volume (bool, optional): then lower the busiest part's send volume
            (:func:`~lightning_gnn_dist.partition.refine.refine_max_send_volume`, as
            ``hypergraph`` does), letting the total grow by at most ``volume_slack``; ``None``:
            from :data:`SEND_BALANCE_PARTS` parts on (R-MAT, 1 M edges, P = 64: the busiest part
            sends 0.91x METIS's rows instead of 1.26x, for 0.5 % more total volume; at P = 2 and
            4 it changes little and needs about 50 bytes per edge). (default: ``None``)
        volume_slack (float): fraction by which that step may increase the total volume.
            (default: ``0.05``)
        vertex_weight (str): ``"work"``, ``"nnz"`` or ``"rows"`` (one constraint; see
            :mod:`~lightning_gnn_dist.partition.weights`). (default: ``"work"``)
        widths (Sequence[int], optional): GCN widths of ``"work"``; ``None`` reads
            ``(num_features, 16, num_classes)`` from the graph. (default: ``None``)
        timeout (float, optional): seconds KaMinPar's child process may run before it is killed
            and a ``RuntimeError`` is raised; ``None`` waits. (default: ``None``)

    After :meth:`partition`, :attr:`last_refinement` holds the refinement's
    :class:`~lightning_gnn_dist.partition.volume.VolumeRefineResult` and
    :attr:`last_send_refinement` the send-volume step's
    :class:`~lightning_gnn_dist.partition.refine.RefineResult` (``None`` when off).

    .. code-block:: python

        from lightning_gnn_dist.partition import get_partitioner

        assignment = get_partitioner("kaminpar", seed=0).partition(data, 4)
    """

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.03,
        context: str = "default",
        threads: int = 1,
        refine: bool = True,
        balance_send_volume: bool | None = None,
        volume_slack: float = 0.05,
        vertex_weight: str = DEFAULT_VERTEX_WEIGHT,
        widths: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon)
        if context not in backend.CONTEXTS:
            raise ValueError(
                f"unknown KaMinPar context {context!r}; choose one of: {', '.join(backend.CONTEXTS)}"
            )
        self.context = context
        self.threads = check_int("threads", threads, 1)
        self.refine = check_bool("refine", refine)
        self.balance_send_volume = (
            None
            if balance_send_volume is None
            else check_bool("balance_send_volume", balance_send_volume)
        )
        valid = isinstance(volume_slack, int | float) and not isinstance(volume_slack, bool)
        if not valid or not 0.0 <= volume_slack <= 10.0:  # nan fails too
            raise ValueError(
                f"volume_slack must be in [0, 10] (got {volume_slack!r}); 0.05 lets the "
                "send-volume refinement raise the total volume by at most 5%"
            )
        self.volume_slack = float(volume_slack)
        self.vertex_weight = check_vertex_weight(vertex_weight, multi_constraint=False)
        self.widths = check_widths(widths)
        valid = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if timeout is not None and (not valid or not 0 < timeout < float("inf")):
            raise ValueError(
                f"timeout must be a positive number of seconds or None (got {timeout!r})"
            )
        self.timeout = timeout
        self.last_refinement: VolumeRefineResult | None = None
        self.last_send_refinement: RefineResult | None = None

    def partition(self, data: Data, num_parts: int) -> np.ndarray:
        self.last_refinement = self.last_send_refinement = None
        return super().partition(data, num_parts)

    def _partition(self, data: Data, num_parts: int) -> np.ndarray:
        from lightning_gnn_dist.utils.progress import status

        num_nodes = data.num_nodes
        weights = vertex_weights(data, self.vertex_weight, self.widths)
        view = EdgeView(data.edge_index, num_nodes)
        if view.num_edges == 0:  # nothing to cut: deal the vertices by weight
            order = np.argsort(-weights, kind="stable")
            assignment = np.empty(num_nodes, dtype=np.int64)
            assignment[order] = np.arange(num_nodes) % num_parts
            return assignment
        num_edges = int(data.edge_index.size(1))
        with status(
            f"KaMinPar ({self.context}): {num_nodes:,} vertices into {num_parts} parts",
            estimate_seconds("kaminpar", num_edges) * 0.6,
        ):
            # With the refinement, KaMinPar balances to epsilon / 2 and leaves the rest of the
            # bound as room for the refinement's moves (into a part filled to the bound nothing
            # can move): R-MAT scale 20, P = 4: 0.946x METIS's volume instead of 0.966x.
            assignment = backend.partition_graph(
                view,
                weights,
                num_parts,
                self.epsilon / 2 if self.refine else self.epsilon,
                self.seed,
                context=self.context,
                threads=self.threads,
                timeout=self.timeout,
            )
        if self.refine:
            assignment = self._refine_volume(view, weights, assignment, num_parts, num_edges)
        del view
        balance = self.balance_send_volume
        if balance or (balance is None and num_parts >= SEND_BALANCE_PARTS):
            hypergraph = column_net_hypergraph(data)
            with status("lowering the busiest part's send volume"):
                self.last_send_refinement = refine_max_send_volume(
                    hypergraph.net_offsets,
                    hypergraph.pins,
                    weights,
                    assignment,
                    num_parts,
                    self.epsilon,
                    volume_slack=self.volume_slack,
                )
            assignment = self.last_send_refinement.assignment
        return assignment

    def _refine_volume(
        self,
        view: EdgeView,
        weights: np.ndarray,
        assignment: np.ndarray,
        num_parts: int,
        num_edges: int,
    ) -> np.ndarray:
        from lightning_gnn_dist.utils.progress import status

        if view.num_nodes * num_parts > volume.MAX_TABLE_ENTRIES:
            warnings.warn(
                f"the volume refinement of {view.num_nodes} vertices into {num_parts} parts "
                f"would need a table of more than {volume.MAX_TABLE_ENTRIES} entries; returning "
                "KaMinPar's partition unrefined (refine=False silences this)",
                UserWarning,
                stacklevel=4,
            )
            return assignment
        with status(
            "refining toward the communication volume",
            estimate_seconds("kaminpar", num_edges) * 0.4,
        ):
            self.last_refinement = refine_volume(
                view, weights, assignment, num_parts, self.epsilon, seed=self.seed
            )
        return self.last_refinement.assignment

    def settings(self) -> dict[str, Any]:
        """Method, seed, epsilon, KaMinPar's context and threads, the refinement and the vertex
        weight (the timeout never changes an assignment)."""
        return {
            **super().settings(),
            "context": self.context,
            "threads": self.threads,
            "refine": self.refine,
            "balance_send_volume": self.balance_send_volume,
            "volume_slack": self.volume_slack,
            **weight_settings(self.vertex_weight, self.widths),
        }
