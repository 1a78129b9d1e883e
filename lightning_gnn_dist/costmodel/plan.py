"""The automatic plan (issue 23): pick the partitioner and exchange mode of a full-batch run.

Every candidate (partitioner × exchange mode, and with ``allow_stale=True`` also the approximate
``cached`` mode and the lossy codecs) is predicted with :func:`~.epoch.predict_epoch` on the
graph's partition metrics, the model's widths and the measured machine (compute costs from
:func:`~.calibrate.calibrate`, the network from ``python -m lightning_gnn_dist probe`` or a
preset); optionally the ``top_k`` best predictions are timed for a few steps. The plan is the
fastest candidate, ties broken by a fixed order (exchanges ``p2p``, ``rdm``, ``broadcast``,
``cached``; then the methods in the order given; then codecs ``fp32``, ``bf16``, ``int8``), so the
same inputs always give the same plan. :class:`Plan` holds every candidate's prediction, the pick
and why, and renders them as one table (rich, or plain text for logs).

On several nodes of several ranks each (a ``topology``, e.g. ``Trainer(num_nodes=2,
devices=2)``), the ``hierarchical`` exchange and the placements of
:mod:`~lightning_gnn_dist.partition.placement` are candidates too: every method's partition
also ``"mapped"`` onto the nodes (when that moves a part), and the hypergraph partitioner's
``"two-level"`` partition; they are predicted with the two levels of the network
(:class:`~.network.TwoLevelNetwork`: a ``probe --json`` file that measured both, or one network
for both levels) on metrics that split the halo rows by node. A candidate's partition is named
``method`` (naive placement) or ``method/placement`` (``"hypergraph/two-level + hierarchical"``);
``hierarchical`` ties after ``broadcast``, the placements after the methods' naive partitions.

Not candidates: the vertex-cut modes (``cd-0``, ``cd-r``, ``0c``), which run on another partition
kind that the cost model does not predict, and ``codec="adaptive"``, whose bit-widths are chosen
while training.

    from lightning_gnn_dist.costmodel.plan import plan_from_metrics
    plan = plan_from_metrics({"metis": m1, "random": m2}, [64, 16, 8], costs, "loopback")
    print(plan.text())
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from lightning_gnn_dist.costmodel.epoch import predict_epoch, rdm_pick
from lightning_gnn_dist.costmodel.network import NETWORKS, Network, TwoLevelNetwork
from lightning_gnn_dist.costmodel.plan_record import (
    AUTO_METHODS,
    CACHED_STALENESS_BOUND,
    EXACT_EXCHANGES,
    LOSSY_CODECS,
    MULTI_NODE_EXCHANGES,
    STALE_EXCHANGES,
    Candidate,
    Plan,
    PlanRow,
    split_label,
    store_folder,
)
from lightning_gnn_dist.partition.metrics import FLOAT32_BYTES, PartitionMetrics
from lightning_gnn_dist.partition.placement import (
    Topology,
    partition_label,
    places_parts,
)
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers


def resolve_network(
    network: Network | TwoLevelNetwork | str | Mapping[str, Any], topology: Topology | None = None
) -> Network | TwoLevelNetwork:
    """The network to predict on, from a preset name, a dictionary, a ``probe --json`` file or
    itself.

    On several nodes (``topology.num_nodes > 1``) a :class:`TwoLevelNetwork` (or its
    ``{"intra_node": ..., "inter_node": ...}`` dictionary) is kept, and a probe file that
    measured both levels gives one; a preset, a :class:`Network` or a probe of one level serves
    both levels. On one node (or ``topology=None``) a :class:`Network`: a two-level network's
    ``intra_node`` level (every rank pair shares the node), a probe file's ``inter_node`` level
    (:meth:`Network.from_json`).

    Raises:
        ValueError: an unknown preset that is not a file either.
    """
    several = topology is not None and topology.num_nodes > 1
    if isinstance(network, Mapping) and "inter_node" in network:
        network = TwoLevelNetwork(
            Network.from_dict(network["intra_node"]), Network.from_dict(network["inter_node"])
        )
    if isinstance(network, TwoLevelNetwork):
        return network if several else network.intra_node
    if isinstance(network, Network):
        return network
    if isinstance(network, Mapping):
        return Network.from_dict(network)  # keeps a probe's duplex bandwidth
    if network in NETWORKS:
        return NETWORKS[network]
    if Path(network).is_file():
        if several:
            try:
                return TwoLevelNetwork.from_json(network)
            except ValueError:  # a probe of one level: that level for both
                pass
        return Network.from_json(network)
    raise ValueError(
        f"network {network!r} is neither a preset ({', '.join(sorted(NETWORKS))}) nor a file "
        "written by `python -m lightning_gnn_dist probe --json FILE`"
    )


def _one_level(network: Network | TwoLevelNetwork) -> Network:
    """The network of the all-reduce and ``rdm`` (their bottleneck: the inter-node link)."""
    return network.inter_node if isinstance(network, TwoLevelNetwork) else network


def memory_per_rank(
    metrics: PartitionMetrics, dims: Sequence[int], exchange: str, dtype_bytes: int = FLOAT32_BYTES
) -> np.ndarray:
    """``[P]`` bytes a rank holds for the graph and one epoch's activations (a model).

    Halo modes: the local CSR of ``Â`` and its transpose (12 bytes per non-zero, 8 per row
    pointer), and per layer the input rows of ``[owned | halo]`` and the output rows kept for
    backward; ``cached`` also its cache of halo rows per layer; ``broadcast`` gathers all ``N``
    rows of each layer's exchanged width; ``rdm`` holds its panel of ``Â`` (every non-zero when
    not replicated by panels) with global row pointers, and per layer the owned rows plus the
    column slice ``N · d / P`` of the redistributed matrix.
    """
    layers = gcn_layers(dims)
    P, N = metrics.num_parts, metrics.num_nodes
    rows = metrics.part_sizes.astype(float)
    halo = metrics.halo_rows.astype(float)
    nnz = metrics.part_nnz.astype(float)
    if exchange == "rdm":
        structure = 2 * (12 * float(metrics.part_nnz.sum()) + 8 * N) * np.ones(P)
        dense = sum(rows * (L.d_in + L.d_out) + N * L.d_in / P for L in layers)
        return structure + dense * dtype_bytes
    structure = 2 * (12 * nnz + 8 * rows)
    dense = sum((rows + halo) * L.forward_width + rows * (L.d_in + L.d_out) for L in layers)
    if exchange == "cached":
        dense = dense + sum(halo * (L.forward_width + L.backward_width) for L in layers)
    if exchange == "broadcast":
        dense = dense + N * max(L.forward_width for L in layers)
    return structure + dense * dtype_bytes


def candidates(
    methods: Sequence[str],
    allow_stale: bool = False,
    exchanges: Sequence[str] | None = None,
    codecs: Sequence[str] | None = None,
    topology: Topology | None = None,
) -> list[Candidate]:
    """The menu in tie-break order (exchange, then partition, then codec); ``rdm``'s order is
    filled in by :func:`evaluate`. ``methods`` are partition labels (``"metis"``,
    ``"hypergraph/two-level"``, :func:`partition_label`); ``codecs`` narrows the codecs tried
    (``["fp32"]``: none lossy); ``hierarchical`` is a candidate when the ``topology`` has parts
    to place (:func:`places_parts`).

    Raises:
        ValueError: ``exchanges`` names ``hierarchical`` on a launch with nothing to place.
    """
    several = places_parts(topology)
    if exchanges is not None and "hierarchical" in exchanges and not several:
        raise ValueError(
            "exchange 'hierarchical' is a candidate on several nodes of several ranks each "
            "(Trainer(num_nodes=N, devices=R) with N, R > 1; partition-compare --nodes N); "
            "drop it from the exchanges"
        )
    modes = list(EXACT_EXCHANGES + (MULTI_NODE_EXCHANGES if several else ()))
    modes += STALE_EXCHANGES if allow_stale else ()
    if exchanges is not None:
        modes = [m for m in modes if m in exchanges]
    allowed = ("fp32", *LOSSY_CODECS) if allow_stale else ("fp32",)
    codecs = [c for c in allowed if codecs is None or c in codecs]
    partitions = [split_label(label) for label in methods]
    menu = []
    for exchange in modes:
        for method, placement in partitions:
            for codec in codecs if exchange in ("p2p", "broadcast", "hierarchical") else codecs[:1]:
                menu.append(Candidate(method, exchange, codec, placement=placement))
    return menu


def evaluate(
    metrics: Mapping[str, PartitionMetrics],
    dims: Sequence[int],
    costs: ComputeCosts,
    network: Network | str = "loopback",
    allow_stale: bool = False,
    exchanges: Sequence[str] | None = None,
    cores: int | None = None,
    sources: Mapping[str, str] | None = None,
    codecs: Sequence[str] | None = None,
    topology: Topology | None = None,
) -> list[PlanRow]:
    """Predict every candidate on the partitions ``metrics`` (partition label → metrics, in tie
    order; a label is a method, or ``method/placement``, :func:`partition_label`).

    ``cached`` is predicted as ``p2p`` whose halo rows travel every other epoch (its epoch-fixed
    bound :data:`CACHED_STALENESS_BOUND`): the halo part of the communication is divided by 2.
    ``sources`` says per partition where it came from (the table's ``partition``). With a
    ``topology`` of several nodes the halo rows are priced per level
    (``predict_epoch(..., topology=...)``; ``hierarchical`` needs metrics computed with
    ``ranks_per_node``, as :func:`partition_candidates` makes them).
    """
    several = topology is not None and topology.num_nodes > 1
    network = resolve_network(network, topology)
    placed = {"topology": topology} if several else {}
    sources = sources or {}
    rows = []
    for candidate in candidates(list(metrics), allow_stale, exchanges, codecs, topology):
        m = metrics[candidate.partition]
        if candidate.exchange == "rdm":
            order = rdm_pick(m, dims, costs, _one_level(network))
            candidate = replace(candidate, rdm_order=order)
        estimate = predict_epoch(
            m,
            dims,
            costs,
            network,
            candidate.exchange,
            cores=cores,
            codec=candidate.codec,
            rdm_order=candidate.rdm_order,
            **placed,
        )
        compute, comm = estimate.compute_seconds, estimate.comm_seconds
        sent = estimate.bytes_sent
        if candidate.exchange == "cached":
            reduce = _allreduce_seconds(m.num_parts, dims, _one_level(network))
            comm = reduce + (comm - reduce) / (CACHED_STALENESS_BOUND + 1)
            sent = sent / (CACHED_STALENESS_BOUND + 1)
        memory = memory_per_rank(m, dims, candidate.exchange)
        rows.append(
            PlanRow(
                candidate,
                float((compute + comm).max()),
                float(compute.max()),
                float(comm.max()),
                float(sent.max()),
                float(memory.max()),
                sources.get(candidate.partition, "given"),
            )
        )
    return rows


def _allreduce_seconds(P: int, dims: Sequence[int], network: Network) -> float:
    if P == 1:
        return 0.0
    parameters = sum(L.d_in * L.d_out + L.d_out for L in gcn_layers(dims))
    return float(network.seconds(2 * (P - 1) / P * parameters * FLOAT32_BYTES, 2 * (P - 1)))


def select(
    rows: Sequence[PlanRow],
    measure: Callable[[Candidate], float] | None = None,
    top_k: int = 0,
    settings: Mapping[str, Any] | None = None,
    per_mode: bool = False,
) -> Plan:
    """Rank ``rows`` by predicted epoch (ties: their order, the fixed menu order) and pick.

    With ``measure`` (seconds of one epoch of a candidate, e.g. the median of a few timed
    steps) and ``top_k > 0`` the ``top_k`` best predictions are timed and the fastest measured
    wins (ties: the better prediction). With ``per_mode`` the timed ones are the best prediction
    of each of the ``top_k`` best exchange modes (mode and codec) instead: the model's bytes are
    exact, so it ranks the partitions of one mode well, while what a mode costs beyond its bytes
    (copies, collectives, scheduling) is what timing tells.

    Raises:
        ValueError: no candidate.
    """
    if not rows:
        raise ValueError("no candidate plan: give at least one method and one exchange mode")
    ordered = sorted(enumerate(rows), key=lambda item: (_key(item[1].epoch_seconds), item[0]))
    ranked = [row for _, row in ordered]
    chosen = 0
    timed = timed_indices(ranked, top_k, per_mode) if measure is not None else []
    for i in timed:
        ranked[i] = replace(ranked[i], measured_seconds=float(measure(ranked[i].candidate)))
    if timed:
        chosen = min(timed, key=lambda i: (_key(ranked[i].measured_seconds), i))
    pick = ranked[chosen]
    if timed:
        what = "exchange modes' best predictions" if per_mode else "best predictions"
        reason = (
            f"{pick.candidate.name}: fastest of the {len(timed)} {what} when timed "
            f"({pick.measured_seconds * 1e3:.3g} ms per epoch; predicted "
            f"{pick.epoch_seconds * 1e3:.3g} ms)"
        )
    else:
        reason = (
            f"{pick.candidate.name}: fastest predicted epoch ({pick.epoch_seconds * 1e3:.3g} ms"
        )
        if len(ranked) > 1:
            runner = ranked[1]
            reason += (
                f"; next {runner.candidate.name} {runner.epoch_seconds * 1e3:.3g} ms, "
                f"{runner.epoch_seconds / max(pick.epoch_seconds, 1e-300):.2f}×"
            )
        reason += ")"
    reason += "" if pick.candidate.exact else "; approximate (allow_stale=True)"
    return Plan(tuple(ranked), chosen, reason, dict(settings or {}))


NEAR_TIE = 0.05
"""With ``per_mode`` timing, a mode's second-best partition is timed too when its prediction is
within this fraction of the mode's best: the model prices bytes and balance, not how a partition
lays its vertices out in memory. Measured on 2 ranks of a 110 × 110 mesh: ``broadcast`` on METIS's
parts and on random parts, predicted equal, stepped in 9.8 and 11.1 ms (contiguous neighbours
against scattered ones)."""


def timed_indices(ranked: Sequence[PlanRow], top_k: int, per_mode: bool) -> list[int]:
    """Indices into ``ranked`` (best prediction first) of the candidates :func:`select` times:
    the ``top_k`` best, or with ``per_mode`` the best prediction of each of the ``top_k`` best
    modes (exchange and codec) and, per mode, the next one within :data:`NEAR_TIE` of it."""
    if not per_mode:
        return list(range(min(max(top_k, 0), len(ranked))))
    best: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(ranked):
        mode = (row.candidate.exchange, row.candidate.codec)
        if mode not in best and len(best) < top_k:
            best[mode] = [i]
        elif mode in best and len(best[mode]) == 1:
            first = ranked[best[mode][0]].epoch_seconds
            if row.epoch_seconds <= first * (1 + NEAR_TIE):
                best[mode].append(i)
    return sorted(i for indices in best.values() for i in indices)


def _key(seconds: float) -> float:
    """Predictions equal to 12 significant digits tie (then the fixed order decides), so
    round-off between equal partitions never flips a plan."""
    if seconds == 0 or not math.isfinite(seconds):
        return seconds
    return round(seconds, 11 - int(math.floor(math.log10(abs(seconds)))))


def plan_from_metrics(
    metrics: Mapping[str, PartitionMetrics],
    dims: Sequence[int],
    costs: ComputeCosts,
    network: Network | str = "loopback",
    allow_stale: bool = False,
    exchanges: Sequence[str] | None = None,
    cores: int | None = None,
    sources: Mapping[str, str] | None = None,
    measure: Callable[[Candidate], float] | None = None,
    top_k: int = 0,
    codecs: Sequence[str] | None = None,
    topology: Topology | None = None,
) -> Plan:
    """:func:`evaluate` then :func:`select`; the plan's ``settings`` record the inputs (with a
    ``topology`` of several nodes also ``settings["topology"]``)."""
    network = resolve_network(network, topology)
    rows = evaluate(
        metrics, dims, costs, network, allow_stale, exchanges, cores, sources, codecs, topology
    )
    parts = {m.num_parts for m in metrics.values()}
    settings = {
        "widths": [int(d) for d in dims],
        "num_parts": parts.pop() if len(parts) == 1 else sorted(parts),
        "network": network.to_dict(),
        "costs": asdict(costs),
        "allow_stale": bool(allow_stale),
        "methods": list(metrics),
        "exchanges": list(exchanges) if exchanges is not None else None,
        "codecs": list(codecs) if codecs is not None else None,
        "cores": cores,
    }
    if topology is not None and topology.num_nodes > 1:
        settings["topology"] = {
            "num_nodes": topology.num_nodes,
            "ranks_per_node": topology.ranks_per_node,
        }
    return select(rows, measure, top_k, settings)


def partition_candidates(
    data,
    num_parts: int,
    methods: Sequence[str] = AUTO_METHODS,
    root: str | Path | None = None,
    dataset: str | None = None,
    seed: int = 0,
    epsilon: float = 0.03,
    force: bool = False,
    topology: Topology | None = None,
) -> tuple[dict[str, PartitionMetrics], dict[str, str]]:
    """Partition ``data`` with every method; returns (partition label → metrics, label →
    source), labels as :func:`partition_label` names them.

    With ``root`` each partition is a store ``root/<label>`` (:func:`store_folder`; reused when
    it exists and matches: source ``"store"``; else partitioned and written: ``"computed"``), so
    a second plan, a resumed run or every rank reading the pick costs no partitioning. A method
    whose library is not installed is left out (source ``"unavailable: ..."``, no metrics).

    With a ``topology`` of several nodes the stores record it (naive placement: part ``p`` on
    rank ``p``) and the metrics hold ``hierarchical``'s rows; when it has parts to place
    (:func:`places_parts`) every method's partition is also ``"mapped"`` onto the nodes (left
    out when the mapping keeps each node's parts together: the naive partition, or its nodes
    swapped), and a method with the hypergraph model also partitions ``"two-level"``
    (:func:`~lightning_gnn_dist.partition.store.placed_variants`). The mapped partition
    renumbers the naive one's parts (its assignment, or its store's): the graph is partitioned
    once per method and placement that cuts it (naive, two-level), not for ``"mapped"``.

    Raises:
        ValueError: no method could partition the graph, or a ``topology`` whose world size is
            not ``num_parts``.
    """
    from lightning_gnn_dist.partition.base import get_partitioner
    from lightning_gnn_dist.partition.metrics import partition_metrics
    from lightning_gnn_dist.partition.store import (
        partition_to_store,
        placed_assignment,
        placed_variants,
    )
    from lightning_gnn_dist.utils.progress import track

    several = topology is not None and topology.num_nodes > 1
    if several:
        topology.check_parts(num_parts)
    per_node = topology.ranks_per_node if several else None

    def build(
        partitioner, method: str, placement: str, naive: np.ndarray | None = None
    ) -> tuple[PartitionMetrics, str, Callable[[], np.ndarray]]:
        """(metrics, source, a function returning the assignment) of one partition."""
        label = partition_label(method, placement)
        if root is None:
            start = time.perf_counter()
            assignment, _ = placed_assignment(
                data, partitioner, num_parts, topology, placement, naive
            )
            metrics = partition_metrics(data, assignment, num_parts, per_node)
            return metrics, f"computed {time.perf_counter() - start:.1f} s", lambda: assignment
        path = Path(root) / store_folder(label)
        existed = (path / "meta.json").is_file() and not force
        store = partition_to_store(
            data,
            partitioner,
            num_parts,
            path,
            dataset=dataset,
            force=force,
            verify=False,
            topology=topology if several else None,
            placement=placement,
            naive=naive,
        )
        source = "store" if existed else f"computed {store.meta['seconds']:.1f} s"
        return store.metrics, source, store.assignment

    metrics: dict[str, PartitionMetrics] = {}
    placed: dict[str, PartitionMetrics] = {}  # after every naive partition (the tie order)
    sources: dict[str, str] = {}
    for method in track(list(methods), f"partitioning candidates into {num_parts} parts"):
        partitioner = get_partitioner(method, seed=seed, epsilon=epsilon)
        if partitioner.kind != "vertex":
            raise ValueError(
                f"method {method!r} makes a {partitioner.kind} partition; the plan's candidates "
                f"are vertex partitions ({', '.join(AUTO_METHODS)}, ...)"
            )
        label = method
        try:
            metrics[method], sources[method], assignment = build(partitioner, method, "naive")
            for placement in placed_variants(partitioner, topology, metrics[method].peer_rows):
                label = partition_label(method, placement)
                naive = assignment() if placement == "mapped" else None
                placed[label], sources[label], _ = build(partitioner, method, placement, naive)
        except ImportError as error:
            sources[label] = f"unavailable: {error}"
            continue
    if not metrics:
        raise ValueError(f"none of the methods {list(methods)} could partition: {sources}")
    return {**metrics, **placed}, sources
