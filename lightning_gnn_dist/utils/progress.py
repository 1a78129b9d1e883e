"""Progress display for long offline work (partitioning, writing parts).

One decision for the whole package: rich progress on an interactive stderr, nothing otherwise
(CI logs and worker processes stay clean). ``LGD_PROGRESS=0`` turns it off, ``=1`` forces it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")


def progress_enabled() -> bool:
    forced = os.environ.get("LGD_PROGRESS")
    if forced is not None:
        return forced not in ("0", "false", "")
    return sys.stderr.isatty()


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a progress bar on stderr when progress is enabled."""
    if not progress_enabled():
        yield from items
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


def status(message: str, estimate_seconds: float | None = None) -> AbstractContextManager:
    """A spinner context manager for a step with no measurable progress; ``estimate_seconds``
    (a rough duration, e.g. from the graph's size) is shown with the message."""
    if not progress_enabled():
        return nullcontext()
    if estimate_seconds is not None:
        message = f"{message} (about {format_seconds(estimate_seconds)})"
    return Console(stderr=True).status(message)


def note(message: str) -> None:
    """Print one line on stderr when progress is enabled (an estimate before a long step)."""
    if progress_enabled():
        Console(stderr=True).print(message, highlight=False)


def format_seconds(seconds: float) -> str:
    """``"40 s"``, ``"3 min"``, ``"1.5 h"``."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
