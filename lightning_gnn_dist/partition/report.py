"""Human-readable tables of partition metrics (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.table import Table

from lightning_gnn_dist.partition.placement import partition_label


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def comparison_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    """Paper 000 Table 2 layout: volume and messages per rank (avg/max, absolute and ÷ random),
    edge cut, load imbalance (non-zeros, and rows: owned vertices), partitioning seconds, and
    with ``predicted_epoch_seconds`` in the rows (``partition-compare --widths``) the cost
    model's epoch time (and, from ``predicted_epoch_seconds_by_exchange``, the other modes'
    beside it, with ``rdm``'s order), and with ``inter_node_rows`` (``partition-compare
    --nodes``) the rows crossing nodes, those staying inside one, and the crossing rows of the
    ``hierarchical`` exchange; a row with a ``placement`` other than ``"naive"`` (a placed
    variant of its method's partition) is named ``method/placement``. Volumes are rows one
    layer moves per direction (halo rows; for a vertex cut, partial-aggregate rows), and ``RF``
    is a vertex cut's replication factor (paper 002 Table 4)."""
    table = Table(title=title)
    for header in (
        "method",
        "vol avg",
        "vol max",
        "msgs avg",
        "msgs max",
        "total vol",
        "RF",
        "vol avg/RP",
        "vol max/RP",
        "msgs avg/RP",
        "msgs max/RP",
        "edge cut",
        "imbalance",
        "rows imb.",
        "seconds",
    ):
        table.add_column(header, justify="left" if header == "method" else "right")
    predicted = any("predicted_epoch_seconds" in r for r in rows)
    if predicted:  # partition-compare --widths: the cost model's epoch time
        table.add_column("pred. epoch ms", justify="right")
    # the other exchange modes' predictions (p2p, broadcast, rdm), beside the selected one
    by_mode = next(
        (
            r["predicted_epoch_seconds_by_exchange"]
            for r in rows
            if r.get("predicted_epoch_seconds_by_exchange")
        ),
        {},
    )
    others = list(by_mode)[1:]  # the first is the selected mode, shown as "pred. epoch ms"
    for mode in others:
        table.add_column(f"pred. {mode} ms", justify="right")
    if any(r.get("rdm_order") for r in rows):
        table.add_column("rdm order", justify="right")
    levels = ("inter_node_rows", "intra_node_rows", "hierarchical_inter_node_rows")
    split = any("inter_node_rows" in r for r in rows)  # partition-compare --nodes
    if split:
        for header in ("inter-node rows", "intra-node rows", "hier. inter rows"):
            table.add_column(header, justify="right")
    for r in rows:
        extra = []
        if predicted:
            value = r.get("predicted_epoch_seconds")
            extra = ["–" if value is None else f"{value * 1e3:.3g}"]
            seconds = r.get("predicted_epoch_seconds_by_exchange") or {}
            extra += ["–" if seconds.get(m) is None else f"{seconds[m] * 1e3:.3g}" for m in others]
            if any(x.get("rdm_order") for x in rows):
                extra.append(r.get("rdm_order") or "–")
        if split:
            extra += ["–" if r.get(k) is None else str(r[k]) for k in levels]
        table.add_row(
            partition_label(r["method"], r.get("placement", "naive")),
            f"{r['avg_send_rows']:.1f}",
            str(r["max_send_rows"]),
            f"{r['avg_messages']:.2f}",
            str(r["max_messages"]),
            str(r["total_volume_rows"]),
            _ratio(r.get("replication_factor")),
            _ratio(r["avg_send_rows_vs_random"]),
            _ratio(r["max_send_rows_vs_random"]),
            _ratio(r["avg_messages_vs_random"]),
            _ratio(r["max_messages_vs_random"]),
            str(r["edge_cut"]),
            f"{r['imbalance']:.3f}",
            "–" if r.get("rows_imbalance") is None else f"{r['rows_imbalance']:.3f}",
            f"{r['seconds']:.2f}",
            *extra,
        )
    return table


def metrics_table(summary: dict[str, Any], title: str) -> Table:
    """Two-column table of one partition's summary. The table is at least as wide as the
    longest line of ``title`` (two narrow columns would otherwise wrap it mid-phrase); only a
    console narrower than that wraps it, between words."""
    widest = max(cell_len(line) for line in title.splitlines() or [""])
    table = Table(title=title, min_width=widest + 4)  # + the borders and cell padding
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    return table
