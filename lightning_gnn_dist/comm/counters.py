"""Byte and message counters of the halo exchange, per layer and direction."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Traffic:
    """What one rank moved for one (layer, direction) since the last reset.

    ``rows_*`` are feature rows, ``bytes_*`` the bytes on the wire (the encoded rows: payload
    plus the codec's zero points and scales), ``messages_*`` point-to-point messages (one per
    peer and exchange), ``seconds`` the time spent waiting for completion. ``bytes_sent_to``
    splits ``bytes_sent`` by receiving rank (``[P]``) when the exchange mode reports it (``None``
    otherwise). ``codec`` names the :mod:`~lightning_gnn_dist.comm.codec` of the last record
    (``""`` for records without one, such as control flags).
    """

    rows_sent: int = 0
    rows_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    calls: int = 0
    width: int = 0
    seconds: float = 0.0
    bytes_sent_to: list[int] | None = None
    codec: str = ""


class CommCounter:
    """Accumulates :class:`Traffic` keyed by ``(layer, direction)``; ``direction`` is
    ``"forward"`` (layer inputs) or ``"backward"`` (their gradients)."""

    def __init__(self) -> None:
        self._traffic: dict[tuple[str, str], Traffic] = defaultdict(Traffic)
        self._predicted: dict[tuple[str, str], np.ndarray] = {}

    def record(
        self,
        layer: str,
        direction: str,
        *,
        rows_sent: int,
        rows_received: int,
        width: int,
        element_size: int,
        messages_sent: int,
        messages_received: int,
        rows_sent_to: Sequence[int] | None = None,
        row_bytes: int | None = None,
        codec: str = "",
    ) -> None:
        """Add one exchange: ``rows_*`` rows of ``width`` elements of ``element_size`` bytes, on
        the wire ``row_bytes`` bytes per row (default ``width · element_size``: no codec)."""
        t = self._traffic[(layer, direction)]
        per_row = width * element_size if row_bytes is None else row_bytes
        if rows_sent_to is not None:
            sent_to = [r * per_row for r in rows_sent_to]
            previous = t.bytes_sent_to or [0] * len(sent_to)
            t.bytes_sent_to = [a + b for a, b in zip(previous, sent_to, strict=True)]
        t.rows_sent += rows_sent
        t.rows_received += rows_received
        t.bytes_sent += rows_sent * per_row
        t.bytes_received += rows_received * per_row
        t.messages_sent += messages_sent
        t.messages_received += messages_received
        t.calls += 1
        t.width = width
        t.codec = codec

    def record_rows(
        self,
        layer: str,
        direction: str,
        sent: Sequence[int],
        received: Sequence[int],
        *,
        width: int,
        element_size: int,
        own: int | None = None,
        row_bytes: int | None = None,
        codec: str = "",
    ) -> None:
        """:meth:`record` one exchange from its per-peer row counts (``sent[q]`` rows to rank
        ``q``, ``received[q]`` from it): one message per peer with rows. ``own``: this rank,
        whose block stays local and is not counted."""
        if own is not None:
            sent = [c if q != own else 0 for q, c in enumerate(sent)]
            received = [c if q != own else 0 for q, c in enumerate(received)]
        self.record(
            layer,
            direction,
            rows_sent=sum(sent),
            rows_received=sum(received),
            width=width,
            element_size=element_size,
            messages_sent=sum(1 for c in sent if c),
            messages_received=sum(1 for c in received if c),
            rows_sent_to=list(sent),
            row_bytes=row_bytes,
            codec=codec,
        )

    def add_predicted(self, layer: str, direction: str, peer_bytes: np.ndarray) -> None:
        """Add a prediction made as the work runs, for modes whose traffic depends on more than
        the partition (``rdm``: the order in use): ``peer_bytes[p, q]`` bytes rank ``p`` sends
        rank ``q`` (``[P, P]``, the same on every rank)."""
        key = (layer, direction)
        previous = self._predicted.get(key)
        self._predicted[key] = peer_bytes if previous is None else previous + peer_bytes

    def predicted_peer_bytes(self, layer: str, direction: str) -> np.ndarray | None:
        """``[P, P]`` bytes predicted by :meth:`add_predicted` since the last reset (``None``:
        no prediction was recorded for this layer and direction)."""
        return self._predicted.get((layer, direction))

    def predicted_items(self) -> list[tuple[str, str, np.ndarray]]:
        """``(layer, direction, [P, P] bytes)`` of every recorded prediction, sorted."""
        return [(layer, d, b) for (layer, d), b in sorted(self._predicted.items())]

    def add_seconds(self, layer: str, direction: str, seconds: float) -> None:
        self._traffic[(layer, direction)].seconds += seconds

    def items(self) -> list[tuple[str, str, Traffic]]:
        """``(layer, direction, traffic)`` sorted by layer then direction."""
        return [(layer, d, t) for (layer, d), t in sorted(self._traffic.items())]

    def total(self, field: str) -> float:
        return sum(getattr(t, field) for t in self._traffic.values())

    def as_dicts(self) -> list[dict]:
        return [{"layer": layer, "direction": d, **asdict(t)} for layer, d, t in self.items()]

    def reset(self) -> None:
        self._traffic.clear()
        self._predicted.clear()
