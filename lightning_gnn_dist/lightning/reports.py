"""Why a rank stopped, as a file that whoever reports for the job reads: rank 0 of Lightning's
subprocess launcher (:mod:`.launcher`), or ``python -m lightning_gnn_dist emulate`` above one
``torchrun`` per node (:mod:`lightning_gnn_dist.cli.emulate`).

Nothing here imports torch or Lightning: ``emulate`` reads the reports in a light process.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, fields
from pathlib import Path

ENV_JOB_REPORT_DIR = "LIGHTNING_GNN_DIST_JOB_REPORT_DIR"
"""Set by a launcher above torchrun (``emulate``): ranks started externally write their report
into this folder and print nothing; the launcher prints the job's line."""
TERMINATED = "terminated by SIGTERM"
_PEER_FAILURE_TEXT = ("gloo", "nccl", "connection closed by peer", "connection reset by peer")
# gloo closes a pair whose wait timed out; later sends or receives on it raise "Application
# timeout caused pair closure", which names neither gloo nor "timed out".
_TIMEOUT_TEXT = ("timed out", "application timeout")


def _tells_timeout(text: str) -> bool:
    text = text.lower()
    return any(part in text for part in _TIMEOUT_TEXT)


@dataclass(frozen=True)
class FailureReport:
    """Why one rank stopped.

    Args:
        rank: global rank.
        summary: ``"ExcType: message"`` (or what happened to the process).
        traceback: the rank's formatted traceback (``""`` when it has none, e.g. killed).
        peer_failure: the error is a communication error, most likely a symptom of another rank's
            failure (or of the network: a collective that timed out).
        time: ``time.time()`` when the rank caught it.
        timeout_s: the collective timeout the rank ran with, seconds (``None``: not known).
    """

    rank: int
    summary: str
    traceback: str = ""
    peer_failure: bool = False
    time: float = 0.0
    timeout_s: float | None = None

    @property
    def line(self) -> str:
        return f"rank {self.rank} failed: {self.summary}"

    @property
    def timed_out(self) -> bool:
        """The rank's wait (a collective, a store) ran out of time."""
        return _tells_timeout(self.summary)

    @classmethod
    def from_exception(
        cls, rank: int, error: BaseException, timeout_s: float | None = None
    ) -> FailureReport:
        message = str(error).strip().splitlines()
        summary = type(error).__name__ + (f": {message[0]}" if message else "")
        return cls(
            rank,
            summary,
            "".join(traceback.format_exception(error)),
            is_peer_failure(error),
            time.time(),
            timeout_s,
        )

    def write(self, folder: Path) -> None:
        tmp = folder / f".rank-{self.rank}.json.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, folder / f"rank-{self.rank}.json")  # a reader never sees half a report

    def print(self) -> None:
        sys.stderr.write(self.line + "\n" + self.traceback)
        sys.stderr.flush()

    @classmethod
    def read_all(cls, folder: Path) -> list[FailureReport]:
        """The reports in ``folder`` (none when it is gone; unreadable ones skipped)."""
        try:  # the folder may be removed meanwhile (rank 0's watcher ends the job)
            files = list(folder.glob("rank-*.json"))
        except FileNotFoundError:  # Python 3.11's glob raises where 3.12's yields nothing
            files = []
        known = {f.name for f in fields(cls)}
        reports = []
        for file in files:
            with contextlib.suppress(OSError, ValueError, TypeError):
                data = json.loads(file.read_text())
                reports.append(cls(**{k: v for k, v in data.items() if k in known}))
        return reports


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` is a communication error (a peer died, froze or closed its sockets, or
    the network stopped carrying its bytes) rather than the cause of the failure."""
    distributed = sys.modules.get("torch.distributed")  # not imported: no DistError to be
    if distributed is not None and isinstance(error, distributed.DistError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and (
        any(part in text for part in _PEER_FAILURE_TEXT) or _tells_timeout(text)
    )
