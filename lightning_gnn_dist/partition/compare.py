"""Run several partitioners on one graph and tabulate them like paper 000 Table 2."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from torch_geometric.data import Data

from lightning_gnn_dist.partition.base import (
    check_num_parts,
    get_partitioner,
    partitioner_options,
)
from lightning_gnn_dist.partition.metrics import PartitionMetrics
from lightning_gnn_dist.partition.placement import (
    Topology,
    hierarchical_peer_rows,
    node_rows_summary,
)
from lightning_gnn_dist.partition.store import placed_assignment, placed_variants
from lightning_gnn_dist.utils.progress import track

DEFAULT_METHODS = ("hypergraph-mtkahypar", "hypergraph-kahypar", "metis", "random")
_NORMALISED = (
    "avg_send_rows",
    "max_send_rows",
    "avg_messages",
    "max_messages",
    "total_volume_rows",
)


def compare_partitioners(
    data: Data,
    num_parts: int,
    methods: Sequence[str] = DEFAULT_METHODS,
    seed: int = 0,
    epsilon: float = 0.03,
    keep_metrics: bool = False,
    options: dict[str, Any] | None = None,
    ranks_per_node: int | None = None,
) -> list[dict[str, Any]]:
    """Partition ``data`` with each method and return one summary row per method.

    Each row has the keys of ``PartitionMetrics.summary()`` plus ``method``, ``seconds`` and, for
    the volume and message columns, ``<key>_vs_random`` (ratio to random partitioning, computed
    even when ``random`` is not among ``methods``). Rows of a method that refined its partition
    for the busiest part's send volume also have ``refine_moves`` and the volumes before that
    step, ``unrefined_total_volume_rows`` and ``unrefined_max_send_rows``. A ``vertex-cut`` row
    counts the partial-aggregate rows of one synchronisation (what one layer moves per direction,
    like a vertex partition's halo rows) and adds ``replication_factor`` and ``num_split``. With
    ``keep_metrics=True`` every row also holds its metrics object under ``"metrics"`` (for
    per-rank plots; not JSON-serialisable).

    ``options`` (e.g. ``{"vertex_weight": "work"}``) go to every method that takes them, so
    ``random`` stays the baseline; an option that no method takes is a ``ValueError``.

    With ``ranks_per_node`` (several nodes of that many ranks, part ``p`` on rank ``p``) every
    vertex-partition row also has ``placement`` (``"naive"``), ``inter_node_rows`` and
    ``intra_node_rows`` (``p2p``'s halo rows per SpMM that cross nodes and that stay inside one)
    and ``hierarchical_inter_node_rows`` (the ``hierarchical`` exchange's), and its metrics hold
    the hierarchical rows. With several ranks per node each such row is followed by one row per
    placed variant of that partition (:func:`~lightning_gnn_dist.partition.store.placed_variants`:
    ``"mapped"``, its parts renumbered onto the nodes, unless that keeps each node's parts
    together; ``"two-level"`` for the hypergraph model), the same keys with its ``placement``; its
    ``seconds`` are the placement's own (``mapped``: the renumbering of the naive partition,
    which is not partitioned again; ``two-level``: both levels' partitioning). The rows are what
    ``method="auto"`` weighs (:func:`~lightning_gnn_dist.costmodel.plan.partition_candidates`
    builds the same partitions).
    """
    check_num_parts(num_parts, data.num_nodes)
    topology = None
    if ranks_per_node is not None:
        if num_parts % ranks_per_node:
            raise ValueError(f"ranks_per_node={ranks_per_node} does not divide P = {num_parts}")
        topology = Topology(num_parts // ranks_per_node, ranks_per_node)
    options = dict(options or {})
    accepted = {m: partitioner_options(m) for m in methods}
    unused = sorted(k for k in options if not any(k in names for names in accepted.values()))
    if unused:
        known = sorted({name for names in accepted.values() for name in names})
        raise ValueError(
            f"no method among {', '.join(methods)} takes the option {unused[0]!r}; "
            f"their options are: {', '.join(known)}"
        )
    partitioners = [
        get_partitioner(
            m,
            seed=seed,
            epsilon=epsilon,
            **{k: v for k, v in options.items() if k in accepted[m]},
        )
        for m in methods
    ]

    def summary_row(method, partitioner, assignment, seconds, placement="naive"):
        metrics = partitioner.metrics(data, assignment, num_parts)
        row = {"method": method, **metrics.summary(), "seconds": seconds}
        if topology is not None and isinstance(metrics, PartitionMetrics):
            hierarchical = hierarchical_peer_rows(data, assignment, topology)
            metrics = replace(
                metrics,
                ranks_per_node=topology.ranks_per_node,
                hierarchical_peer_rows=hierarchical,
            )
            row["placement"] = placement
            row.update(node_rows_summary(metrics.peer_rows, hierarchical, topology))
        if keep_metrics:
            row["metrics"] = metrics
        return row, metrics

    rows = []
    pairs = list(zip(methods, partitioners, strict=True))
    for method, partitioner in track(
        pairs, f"partitioning into {num_parts} parts", total=len(pairs)
    ):
        start = time.perf_counter()
        assignment = partitioner.partition(data, num_parts)
        row, metrics = summary_row(method, partitioner, assignment, time.perf_counter() - start)
        refinement = getattr(partitioner, "last_refinement", None)
        if refinement is not None:
            row.update(refinement.summary())
        rows.append(row)
        variants = placed_variants(partitioner, topology, getattr(metrics, "peer_rows", None))
        for placement in variants:
            start = time.perf_counter()
            naive = assignment if placement == "mapped" else None
            placed, _ = placed_assignment(data, partitioner, num_parts, topology, placement, naive)
            seconds = time.perf_counter() - start
            rows.append(summary_row(method, partitioner, placed, seconds, placement)[0])
    baseline = next((r for r in rows if r["method"] == "random"), None)
    if baseline is None:
        assignment = get_partitioner("random", seed=seed).partition(data, num_parts)
        baseline = get_partitioner("random", seed=seed).metrics(data, assignment, num_parts)
        baseline = baseline.summary()
    for row in rows:
        for key in _NORMALISED:
            row[f"{key}_vs_random"] = row[key] / baseline[key] if baseline[key] else None
    return rows
