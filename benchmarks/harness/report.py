"""Report files: atomic JSON, markdown tables and the provenance paragraph every table starts with."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.machine import describe_machine


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` to ``path`` atomically (a ``.json.tmp`` file renamed over it), so a run
    killed while writing never leaves a truncated report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    """A report written by :func:`write_json`, with a message naming the file when it is absent."""
    if not path.is_file():
        raise FileNotFoundError(f"no report at {path}; run the benchmark first (or pass --out)")
    return json.loads(path.read_text())


def write_text(path: Path, text: str) -> None:
    """Write a markdown file atomically (same rule as :func:`write_json`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def figure_path(stem: Path, name: str) -> Path:
    """Where a report's figure goes: ``results/cost_model`` + ``scale`` →
    ``results/cost_model_scale.png``; a ``--quick`` stem keeps ``_quick`` last
    (``cost_model_scale_quick.png``), so git ignores it like the other quick outputs."""
    base, quick = (
        (stem.name[: -len("_quick")], "_quick") if stem.name.endswith("_quick") else (stem.name, "")
    )
    return stem.with_name(f"{base}_{name}{quick}.png")


def fmt(value: Any) -> str:
    """Default cell format: ``–`` for ``None``, floats to 3 significant digits (thousands with
    separators, no decimals from 1000 on), anything else as ``str``."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def markdown_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    formats: dict[str, Callable[[Any], str]] | None = None,
    align: str = "",
) -> str:
    """A GitHub markdown table of ``columns`` taken from ``rows`` (missing keys print ``–``).

    Args:
        rows: one dict per table row.
        columns: keys, in order; also the header.
        formats: column → formatter, overriding :func:`fmt`.
        align: one character per column, ``l`` or ``r`` (default: no alignment marks).
    """
    formats = formats or {}
    marks = [":" if a == "r" else "" for a in align] or [""] * len(columns)
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "".join(f"---{m}|" for m in marks),
    ]
    for row in rows:
        cells = [formats.get(c, fmt)(row.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _load(values: Sequence[float] | None) -> str | None:
    return None if not values else f"{values[0]:.1f}"


def provenance(report: dict[str, Any]) -> str:
    """The paragraph under every table's title: the command, when, how long, the machine and how
    busy it was; then one bullet per section that another command ran (``--sections``)."""
    run = "".join(
        part
        for part, present in (
            (f" by `{report.get('command')}`", report.get("command")),
            (f" on {report.get('date')}", report.get("date")),
            (f" ({report.get('wall_seconds') or 0:.0f} s wall)", report.get("wall_seconds")),
        )
        if present
    )
    load = report.get("load_average") or {}
    start, end = _load(load.get("start")), _load(load.get("end"))
    busy = " and ".join(
        f"{value} at the {when}" for value, when in ((start, "start"), (end, "end")) if value
    )
    parts = [
        f"Generated{run}." if run else "",
        describe_machine(report.get("machine") or {}),
        f"1-minute load average {busy}." if busy else "",
        f"({report['harness_note'].capitalize()}.)" if report.get("harness_note") else "",
    ]
    text = " ".join(p for p in parts if p) + "\n"
    bullets = []
    for name, section in (report.get("section_runs") or {}).items():
        if section.get("command") == report.get("command"):
            continue
        loads = section.get("load_average") or {}
        start, end = _load(loads.get("start")), _load(loads.get("end"))
        busy = f" → {end}" if end else " at its start"
        bullets.append(
            f"* section {name}: `{section['command']}` on {section['date']} "
            f"({section['wall_seconds']:.0f} s"
            + (f", load average {start}{busy})" if start else ")")
        )
    return text + ("\n" + "\n".join(bullets) + "\n" if bullets else "")
