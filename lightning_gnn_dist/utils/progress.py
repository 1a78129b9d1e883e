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
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


def status(message: str) -> AbstractContextManager:
    """A spinner context manager for a step with no measurable progress."""
    if not progress_enabled():
        return nullcontext()
    return Console(stderr=True).status(message)
