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

import io
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from lightning_gnn_dist.comm.codec import CODEC_NAMES
from lightning_gnn_dist.comm.rdm import check_order_option
from lightning_gnn_dist.costmodel.epoch import predict_epoch, rdm_pick
from lightning_gnn_dist.costmodel.network import NETWORKS, Network, TwoLevelNetwork
from lightning_gnn_dist.partition.metrics import FLOAT32_BYTES, PartitionMetrics
from lightning_gnn_dist.partition.placement import (
    PLACEMENTS,
    Topology,
    partition_label,
    places_parts,
)
from lightning_gnn_dist.partition.work import ComputeCosts, gcn_layers

AUTO_METHODS = ("hypergraph", "metis", "random")
"""Partitioners ``method="auto"`` tries by default (those of a vertex partition for full-batch
training; a method whose library is not installed is left out)."""
EXACT_EXCHANGES = ("p2p", "rdm", "broadcast")
"""Exact exchange modes, in the plan's tie-break order."""
MULTI_NODE_EXCHANGES = ("hierarchical",)
"""Exact modes that are candidates only on several nodes of several ranks each."""
STALE_EXCHANGES = ("cached",)
"""Approximate modes, candidates only with ``allow_stale=True``."""
LOSSY_CODECS = ("bf16", "int8")
"""Codecs tried with ``allow_stale=True`` on ``p2p``, ``broadcast`` and ``hierarchical``
(``rdm`` refuses them)."""
CACHED_STALENESS_BOUND = 1.0
"""The ``cached`` candidate's epoch-fixed bound: a halo row is re-sent every other epoch."""
PLAN_FORMAT = 1


def split_label(label: str) -> tuple[str, str]:
    """Inverse of :func:`partition_label`: ``(method, placement)``.

    Raises:
        ValueError: a placement that is not one of :data:`PLACEMENTS`.
    """
    method, _, placement = label.partition("/")
    placement = placement or "naive"
    if placement not in PLACEMENTS:
        raise ValueError(
            f"partition {label!r}: unknown placement {placement!r}; choose one of "
            f"{', '.join(PLACEMENTS)}"
        )
    return method, placement


def store_folder(label: str) -> str:
    """The folder of a candidate partition's store in the plan's folder (``metis``,
    ``hypergraph-two-level``)."""
    return label.replace("/", "-")


@dataclass(frozen=True)
class Candidate:
    """One plan: a partitioner, its placement, an exchange mode and its options.

    Attributes:
        method: partitioner name (``metis``, ``hypergraph``, ...).
        exchange: ``p2p``, ``rdm``, ``broadcast``, ``hierarchical`` or ``cached``.
        codec: the exchange's codec (``fp32`` = exact).
        rdm_order: ``rdm``'s SpMM/GEMM order, the cost model's pick (``None`` otherwise).
        placement: which parts share a node (``naive``, ``mapped``, ``two-level``; see
            :mod:`~lightning_gnn_dist.partition.placement`). (default: ``"naive"``)
    """

    method: str
    exchange: str
    codec: str = "fp32"
    rdm_order: str | None = None
    placement: str = "naive"

    @property
    def exact(self) -> bool:
        """Reproduces single-process training (no stale rows, no lossy codec)."""
        return self.exchange in EXACT_EXCHANGES + MULTI_NODE_EXCHANGES and self.codec == "fp32"

    @property
    def partition(self) -> str:
        """The partition's label (:func:`partition_label`)."""
        return partition_label(self.method, self.placement)

    @property
    def name(self) -> str:
        """``"metis + p2p"``, ``"random + rdm dsds"``, ``"metis + p2p int8"``,
        ``"hypergraph/two-level + hierarchical"``."""
        mode = self.exchange + (f" {self.rdm_order}" if self.rdm_order else "")
        return f"{self.partition} + {mode}" + ("" if self.codec == "fp32" else f" {self.codec}")

    def strategy_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~lightning_gnn_dist.GNNStrategy` that run this plan."""
        options: dict[str, Any] = {"exchange": self.exchange, "codec": self.codec}
        if self.rdm_order:
            options["rdm_order"] = self.rdm_order
        if self.exchange == "cached":
            options |= {"staleness": "epoch-fixed", "staleness_bound": CACHED_STALENESS_BOUND}
        return options


@dataclass(frozen=True)
class PlanRow:
    """A candidate's prediction (seconds per epoch, bytes per rank and epoch).

    Attributes:
        candidate: the plan.
        epoch_seconds: predicted epoch (the slowest rank).
        compute_seconds: the slowest rank's predicted local work.
        comm_seconds: the slowest rank's predicted exchange and gradient all-reduce.
        bytes_per_rank: the most bytes one rank sends per epoch.
        memory_bytes: the most bytes one rank holds for the graph and activations (model).
        partition: where the partition came from: ``"computed"`` (partitioned now),
            ``"store"`` (read from a partition store) or ``"given"`` (metrics passed in).
        measured_seconds: timed epoch (``top_k``), else ``None``.
    """

    candidate: Candidate
    epoch_seconds: float
    compute_seconds: float
    comm_seconds: float
    bytes_per_rank: float
    memory_bytes: float
    partition: str = "given"
    measured_seconds: float | None = None


@dataclass(frozen=True)
class Plan:
    """Every candidate's prediction, in rank order (best first), and the pick.

    Attributes:
        rows: candidates, fastest predicted (or measured, for the timed ones) first.
        chosen: index of the pick in ``rows`` (``0`` unless a timed candidate won).
        reason: one sentence saying why.
        settings: the inputs (widths, network, parts, costs, ...), so a stored plan says what
            it was made for.
    """

    rows: tuple[PlanRow, ...]
    chosen: int
    reason: str
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def pick(self) -> Candidate:
        return self.rows[self.chosen].candidate

    @property
    def topology(self) -> Topology | None:
        """The nodes × ranks per node the plan was made for (``None``: one node)."""
        placed = self.settings.get("topology")
        if placed is None:
            return None
        return Topology(int(placed["num_nodes"]), int(placed["ranks_per_node"]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (``plan.json``). The pick is stored once, as ``pick`` (what runs:
        edit it to run another of the ``rows``' candidates); the row it is follows from it."""
        return {
            "format": PLAN_FORMAT,
            "pick": asdict(self.pick),
            "reason": self.reason,
            "settings": self.settings,
            "rows": [{**asdict(row), "candidate": asdict(row.candidate)} for row in self.rows],
        }

    @classmethod
    def from_dict(cls, content: Mapping[str, Any]) -> Plan:
        """Inverse of :meth:`to_dict`, validated: ``pick`` decides what runs and must be one of
        the ``rows``' candidates (fields left out take :class:`Candidate`'s defaults; an ``rdm``
        pick without ``rdm_order`` takes its row's). A ``chosen`` row index (written by earlier
        versions) must be the pick's row. A pick edited by hand keeps the planner's reason
        after a note saying so.

        Raises:
            ValueError: not a plan of this format, a field of the wrong type or value (named,
                e.g. ``rows[2].candidate.exchange``), or a ``pick`` that is none of the rows.
        """
        if not isinstance(content, Mapping):
            raise ValueError(f"a plan is a JSON object (got {type(content).__name__})")
        missing = [k for k in ("format", "pick", "reason", "settings", "rows") if k not in content]
        if missing:
            raise ValueError(f"not a stored plan: no field {missing[0]!r}")
        if content["format"] != PLAN_FORMAT:
            raise ValueError(f"plan format {content['format']!r}, this version reads {PLAN_FORMAT}")
        if not isinstance(content["rows"], list) or not content["rows"]:
            raise ValueError("field 'rows' must be a non-empty list of the candidates' predictions")
        if not isinstance(content["settings"], Mapping):
            raise ValueError("field 'settings' must be an object")
        rows = tuple(_stored_row(row, f"rows[{i}]") for i, row in enumerate(content["rows"]))
        pick = _stored_candidate(content["pick"], "pick", partial=True)
        matches = [i for i, row in enumerate(rows) if _names_candidate(pick, row.candidate)]
        if not matches:
            names = ", ".join(row.candidate.name for row in rows)
            raise ValueError(
                f"field 'pick' ({_describe(content['pick'])}) is none of the plan's candidates; "
                f"set it to one of the rows' candidates ({names})"
            )
        chosen = matches[0]
        if "chosen" in content and content["chosen"] != chosen:
            raise ValueError(
                f"field 'chosen'={content['chosen']!r} is not the row of field 'pick' "
                f"({rows[chosen].candidate.name}, row {chosen}): 'pick' decides what runs; "
                "delete 'chosen'"
            )
        reason = content["reason"]
        if not isinstance(reason, str):
            raise ValueError(f"field 'reason' must be a string (got {reason!r})")
        name = rows[chosen].candidate.name
        if not reason.startswith(f"{name}:"):
            reason = f"{name}: picked in the plan file (the planner's reason: {reason})"
        return cls(rows, chosen, reason, dict(content["settings"]))

    def table(self, title: str | None = None):
        """A rich ``Table``: one row per candidate, the pick marked ``◀``."""
        from rich.table import Table

        measured = any(row.measured_seconds is not None for row in self.rows)
        table = Table(title=title or "automatic plan", caption=self.reason)
        for header in (
            "",
            "plan",
            "exact",
            "pred. epoch ms",
            "compute ms",
            "comm ms",
            "MB sent/rank",
            "memory MB/rank",
            "partition",
            *(["measured ms"] if measured else []),
        ):
            table.add_column(header, justify="left" if header in ("plan", "partition") else "right")
        for i, row in enumerate(self.rows):
            cells = [
                "◀" if i == self.chosen else str(i + 1),
                row.candidate.name,
                "yes" if row.candidate.exact else "no",
                f"{row.epoch_seconds * 1e3:.3g}",
                f"{row.compute_seconds * 1e3:.3g}",
                f"{row.comm_seconds * 1e3:.3g}",
                f"{row.bytes_per_rank / 1e6:.3g}",
                f"{row.memory_bytes / 1e6:.3g}",
                row.partition,
            ]
            if measured:
                ms = row.measured_seconds
                cells.append("–" if ms is None else f"{ms * 1e3:.3g}")
            table.add_row(*cells, style="bold" if i == self.chosen else None)
        return table

    def text(self, title: str | None = None) -> str:
        """:meth:`table` as plain text (no colours, never truncated), for logs and files."""
        from rich.console import Console

        buffer = io.StringIO()
        Console(file=buffer, width=200, color_system=None, force_terminal=False).print(
            self.table(title)
        )
        return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


_CANDIDATE_FIELDS = ("method", "exchange", "codec", "rdm_order", "placement")


def _describe(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, Mapping) else repr(value)


def _stored_candidate(content: Any, where: str, partial: bool = False) -> Candidate:
    """A stored :class:`Candidate`, validated field by field (``where`` names it in errors).
    With ``partial`` an ``rdm`` candidate may leave out its ``rdm_order``."""
    if not isinstance(content, Mapping):
        raise ValueError(
            f"field {where!r} must be an object like {{'method': 'metis', "
            f"'exchange': 'p2p'}} (got {_describe(content)})"
        )
    unknown = sorted(set(content) - set(_CANDIDATE_FIELDS))
    if unknown:
        raise ValueError(
            f"field {where!r}: unknown key {unknown[0]!r}; a candidate has "
            f"{', '.join(_CANDIDATE_FIELDS)}"
        )
    for key in ("method", "exchange"):
        if not isinstance(content.get(key), str):
            raise ValueError(f"field '{where}.{key}' must be a string (got {content.get(key)!r})")
    modes = EXACT_EXCHANGES + MULTI_NODE_EXCHANGES + STALE_EXCHANGES
    if content["exchange"] not in modes:
        raise ValueError(
            f"field '{where}.exchange'={content['exchange']!r}: a plan runs {', '.join(modes)}"
        )
    codec = content.get("codec", "fp32")
    if codec not in CODEC_NAMES:
        raise ValueError(f"field '{where}.codec'={codec!r}: choose one of {', '.join(CODEC_NAMES)}")
    placement = content.get("placement", "naive")
    if placement not in PLACEMENTS:
        raise ValueError(
            f"field '{where}.placement'={placement!r}: choose one of {', '.join(PLACEMENTS)}"
        )
    order = content.get("rdm_order")
    if content["exchange"] == "rdm":
        if order is None and not partial:
            raise ValueError(f"field '{where}.rdm_order' is missing (an rdm candidate's order)")
        if order is not None:
            try:
                check_order_option(order)
            except ValueError as error:
                raise ValueError(f"field '{where}.rdm_order': {error}") from None
    elif order is not None:
        raise ValueError(
            f"field '{where}.rdm_order'={order!r} applies to exchange 'rdm' only; delete it"
        )
    return Candidate(content["method"], content["exchange"], codec, order, placement)


def _names_candidate(pick: Candidate, candidate: Candidate) -> bool:
    """``pick`` names ``candidate`` (an ``rdm`` pick without order: whatever order it has)."""
    if pick.rdm_order is None:
        candidate = replace(candidate, rdm_order=None)
    return pick == candidate


def _stored_row(content: Any, where: str) -> PlanRow:
    """A stored :class:`PlanRow`, validated."""
    if not isinstance(content, Mapping):
        raise ValueError(f"field {where!r} must be an object (got {_describe(content)})")
    names = [f.name for f in fields(PlanRow)]
    unknown = sorted(set(content) - set(names))
    if unknown:
        raise ValueError(
            f"field {where!r}: unknown key {unknown[0]!r}; a row has {', '.join(names)}"
        )
    values: dict[str, Any] = {
        "candidate": _stored_candidate(content.get("candidate"), f"{where}.candidate")
    }
    for name in (
        "epoch_seconds",
        "compute_seconds",
        "comm_seconds",
        "bytes_per_rank",
        "memory_bytes",
    ):
        value = content.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"field '{where}.{name}' must be a number (got {value!r})")
        values[name] = float(value)
    measured = content.get("measured_seconds")
    if measured is not None and (
        not isinstance(measured, int | float) or isinstance(measured, bool)
    ):
        raise ValueError(
            f"field '{where}.measured_seconds' must be a number or null (got {measured!r})"
        )
    values["measured_seconds"] = None if measured is None else float(measured)
    values["partition"] = str(content.get("partition", "given"))
    return PlanRow(**values)


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
