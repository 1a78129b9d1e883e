"""The plan file of the automatic plan (:mod:`~lightning_gnn_dist.costmodel.plan`): its
candidates (partition × exchange × codec), one row of predictions per candidate, the pick and
why, rendered as one table and stored as ``plan.json`` — read back with every field validated
(the pick is what runs: one source of truth)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from lightning_gnn_dist.comm.codec import CODEC_NAMES
from lightning_gnn_dist.comm.rdm import check_order_option
from lightning_gnn_dist.partition.placement import (
    PLACEMENTS,
    Topology,
    partition_label,
)

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
